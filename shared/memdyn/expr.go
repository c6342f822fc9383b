package memdyn

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// token is one lexeme of an expression.
type token struct {
	kind string // "id", "name" (#x), "value" (:x), "num", or the punctuation itself
	text string
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#' || c == ':' || c == '_' || unicode.IsLetter(c):
			j := i + 1
			for j < len(s) && (s[j] == '_' || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			kind := "id"
			if c == '#' {
				kind = "name"
			} else if c == ':' {
				kind = "value"
			}
			if j == i+1 && kind != "id" {
				return nil, fmt.Errorf("invalid token %q", s[i:j])
			}
			out = append(out, token{kind, s[i:j]})
			i = j
		case unicode.IsDigit(c):
			j := i
			for j < len(s) && unicode.IsDigit(rune(s[j])) {
				j++
			}
			out = append(out, token{"num", s[i:j]})
			i = j
		default:
			for _, p := range []string{"<>", "<=", ">=", "(", ")", ",", ".", "[", "]", "=", "<", ">", "+", "-"} {
				if strings.HasPrefix(s[i:], p) {
					out = append(out, token{p, p})
					i += len(p)
					goto next
				}
			}
			return nil, fmt.Errorf("invalid character %q", s[i])
		next:
		}
	}
	return out, nil
}

// parser reads one expression.
type parser struct {
	toks []token
	pos  int
	env  *env
}

// env resolves #names and :values, and records which were used
// (DynamoDB refuses unused ones).
type env struct {
	names  map[string]string
	values map[string]*Value
	used   map[string]bool
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) keyword(k string) bool {
	t := p.peek()
	if t.kind == "id" && strings.EqualFold(t.text, k) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) accept(kind string) bool {
	if p.peek().kind == kind {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(kind string) error {
	if !p.accept(kind) {
		return fmt.Errorf("syntax error: expected %q near %q", kind, p.peek().text)
	}
	return nil
}

// pathElem is one step of a document path: a name, or a list index.
type pathElem struct {
	name  string
	index int
	isIdx bool
}

type path []pathElem

func (pa path) String() string {
	var b strings.Builder
	for i, e := range pa {
		switch {
		case e.isIdx:
			fmt.Fprintf(&b, "[%d]", e.index)
		case i > 0:
			b.WriteString("." + e.name)
		default:
			b.WriteString(e.name)
		}
	}
	return b.String()
}

var reserved = map[string]bool{"and": true, "or": true, "not": true, "between": true, "in": true, "set": true, "remove": true, "add": true, "delete": true}

func (p *parser) name() (string, error) {
	t := p.peek()
	switch t.kind {
	case "name":
		p.pos++
		n, ok := p.env.names[t.text]
		if !ok {
			return "", fmt.Errorf("an expression attribute name used in the document path is not defined; attribute name: %s", t.text)
		}
		p.env.used[t.text] = true
		return n, nil
	case "id":
		if reserved[strings.ToLower(t.text)] {
			return "", fmt.Errorf("syntax error; token: %q", t.text)
		}
		p.pos++
		return t.text, nil
	}
	return "", fmt.Errorf("syntax error: expected an attribute name near %q", t.text)
}

func (p *parser) path() (path, error) {
	n, err := p.name()
	if err != nil {
		return nil, err
	}
	out := path{{name: n}}
	for {
		switch {
		case p.accept("."):
			n, err := p.name()
			if err != nil {
				return nil, err
			}
			out = append(out, pathElem{name: n})
		case p.accept("["):
			t := p.peek()
			if !p.accept("num") {
				return nil, fmt.Errorf("syntax error: expected a list index")
			}
			i, _ := strconv.Atoi(t.text)
			if err := p.expect("]"); err != nil {
				return nil, err
			}
			out = append(out, pathElem{index: i, isIdx: true})
		default:
			return out, nil
		}
	}
}

// get resolves a path in an item (nil if absent).
func (pa path) get(it Item) *Value {
	var cur *Value
	for i, e := range pa {
		switch {
		case i == 0:
			cur = it[e.name]
		case e.isIdx:
			if cur == nil || cur.typ() != "L" || e.index >= len(cur.L) {
				return nil
			}
			cur = cur.L[e.index]
		default:
			if cur == nil || cur.typ() != "M" {
				return nil
			}
			cur = cur.M[e.name]
		}
		if cur == nil {
			return nil
		}
	}
	return cur
}

// set writes v at the path (the parent must exist for nested paths).
func (pa path) set(it Item, v *Value) error {
	if len(pa) == 1 {
		it[pa[0].name] = v
		return nil
	}
	parent := pa[:len(pa)-1].get(it)
	last := pa[len(pa)-1]
	switch {
	case parent == nil:
		return fmt.Errorf("the document path provided in the update expression is invalid for update")
	case last.isIdx && parent.typ() == "L":
		if last.index >= len(parent.L) {
			parent.L = append(parent.L, v)
		} else {
			parent.L[last.index] = v
		}
	case !last.isIdx && parent.typ() == "M":
		if parent.M == nil {
			parent.M = map[string]*Value{}
		}
		parent.M[last.name] = v
	default:
		return fmt.Errorf("the document path provided in the update expression is invalid for update")
	}
	return nil
}

func (pa path) remove(it Item) {
	if len(pa) == 1 {
		delete(it, pa[0].name)
		return
	}
	parent := pa[:len(pa)-1].get(it)
	last := pa[len(pa)-1]
	switch {
	case parent == nil:
	case last.isIdx && parent.typ() == "L" && last.index < len(parent.L):
		parent.L = append(parent.L[:last.index], parent.L[last.index+1:]...)
	case !last.isIdx && parent.typ() == "M":
		delete(parent.M, last.name)
	}
}

// operand is a value in a condition: a path, a :value or size(path).
type operand struct {
	path  path
	value *Value
	size  bool
}

func (p *parser) operand() (operand, error) {
	t := p.peek()
	if t.kind == "value" {
		p.pos++
		v, ok := p.env.values[t.text]
		if !ok {
			return operand{}, fmt.Errorf("an expression attribute value used in expression is not defined; attribute value: %s", t.text)
		}
		p.env.used[t.text] = true
		return operand{value: v}, nil
	}
	if t.kind == "id" && strings.EqualFold(t.text, "size") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == "(" {
		p.pos += 2
		pa, err := p.path()
		if err != nil {
			return operand{}, err
		}
		return operand{path: pa, size: true}, p.expect(")")
	}
	pa, err := p.path()
	return operand{path: pa}, err
}

func (o operand) eval(it Item) *Value {
	if o.value != nil {
		return o.value
	}
	v := o.path.get(it)
	if !o.size {
		return v
	}
	switch v.typ() {
	case "S":
		return num(strconv.Itoa(len(*v.S)))
	case "B":
		return num(strconv.Itoa(len(v.B)))
	case "L":
		return num(strconv.Itoa(len(v.L)))
	case "M":
		return num(strconv.Itoa(len(v.M)))
	case "SS", "NS", "BS":
		return num(strconv.Itoa(len(v.SS) + len(v.NS) + len(v.BS)))
	}
	return nil
}

// cond is a parsed condition.
type cond func(Item) bool

func (p *parser) condition() (cond, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.keyword("OR") {
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(it Item) bool { return l(it) || right(it) }
	}
	return left, nil
}

func (p *parser) and() (cond, error) {
	left, err := p.not()
	if err != nil {
		return nil, err
	}
	for p.keyword("AND") {
		right, err := p.not()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(it Item) bool { return l(it) && right(it) }
	}
	return left, nil
}

func (p *parser) not() (cond, error) {
	if p.keyword("NOT") {
		c, err := p.not()
		if err != nil {
			return nil, err
		}
		return func(it Item) bool { return !c(it) }, nil
	}
	return p.primary()
}

func (p *parser) primary() (cond, error) {
	if p.accept("(") {
		c, err := p.condition()
		if err != nil {
			return nil, err
		}
		return c, p.expect(")")
	}
	t := p.peek()
	if t.kind == "id" && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == "(" && !strings.EqualFold(t.text, "size") {
		return p.function(strings.ToLower(t.text))
	}
	left, err := p.operand()
	if err != nil {
		return nil, err
	}
	switch op := p.peek(); {
	case p.keyword("BETWEEN"):
		lo, err := p.operand()
		if err != nil {
			return nil, err
		}
		if !p.keyword("AND") {
			return nil, fmt.Errorf("syntax error: BETWEEN needs AND")
		}
		hi, err := p.operand()
		if err != nil {
			return nil, err
		}
		return func(it Item) bool {
			v := left.eval(it)
			a, ok1 := compare(v, lo.eval(it))
			b, ok2 := compare(v, hi.eval(it))
			return ok1 && ok2 && a >= 0 && b <= 0
		}, nil
	case p.keyword("IN"):
		if err := p.expect("("); err != nil {
			return nil, err
		}
		var set []operand
		for {
			o, err := p.operand()
			if err != nil {
				return nil, err
			}
			set = append(set, o)
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return func(it Item) bool {
			v := left.eval(it)
			for _, o := range set {
				if equal(v, o.eval(it)) {
					return true
				}
			}
			return false
		}, nil
	case op.kind == "=" || op.kind == "<>" || op.kind == "<" || op.kind == "<=" || op.kind == ">" || op.kind == ">=":
		p.pos++
		right, err := p.operand()
		if err != nil {
			return nil, err
		}
		return comparison(op.kind, left, right), nil
	}
	return nil, fmt.Errorf("syntax error near %q", p.peek().text)
}

func comparison(op string, l, r operand) cond {
	return func(it Item) bool {
		a, b := l.eval(it), r.eval(it)
		switch op {
		case "=":
			return equal(a, b)
		case "<>":
			return a != nil && b != nil && !equal(a, b) || (a == nil) != (b == nil)
		}
		c, ok := compare(a, b)
		if !ok {
			return false
		}
		switch op {
		case "<":
			return c < 0
		case "<=":
			return c <= 0
		case ">":
			return c > 0
		}
		return c >= 0
	}
}

func (p *parser) function(fn string) (cond, error) {
	p.pos += 2 // name and "("
	var c cond
	switch fn {
	case "attribute_exists", "attribute_not_exists":
		pa, err := p.path()
		if err != nil {
			return nil, err
		}
		exists := fn == "attribute_exists"
		c = func(it Item) bool { return (pa.get(it) != nil) == exists }
	case "begins_with", "contains", "attribute_type":
		a, err := p.operand()
		if err != nil {
			return nil, err
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		b, err := p.operand()
		if err != nil {
			return nil, err
		}
		switch fn {
		case "begins_with":
			c = func(it Item) bool {
				x, y := a.eval(it), b.eval(it)
				switch {
				case x.typ() == "S" && y.typ() == "S":
					return strings.HasPrefix(*x.S, *y.S)
				case x.typ() == "B" && y.typ() == "B":
					return strings.HasPrefix(string(x.B), string(y.B))
				}
				return false
			}
		case "contains":
			c = func(it Item) bool { return contains(a.eval(it), b.eval(it)) }
		default:
			c = func(it Item) bool {
				x, y := a.eval(it), b.eval(it)
				return x != nil && y.typ() == "S" && x.typ() == *y.S
			}
		}
	default:
		return nil, fmt.Errorf("invalid function name; function: %s", fn)
	}
	return c, p.expect(")")
}

func contains(x, y *Value) bool {
	if x == nil || y == nil {
		return false
	}
	switch x.typ() {
	case "S":
		return y.typ() == "S" && strings.Contains(*x.S, *y.S)
	case "SS":
		return y.typ() == "S" && containsStr(x.SS, *y.S)
	case "NS":
		for _, n := range x.NS {
			if equal(num(n), y) {
				return true
			}
		}
	case "L":
		for _, e := range x.L {
			if equal(e, y) {
				return true
			}
		}
	}
	return false
}

func containsStr(in []string, s string) bool {
	for _, x := range in {
		if x == s {
			return true
		}
	}
	return false
}

// parseCondition parses a condition, key condition or filter expression.
func parseCondition(expr string, e *env) (cond, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, env: e}
	c, err := p.condition()
	if err != nil {
		return nil, err
	}
	if p.pos != len(toks) {
		return nil, fmt.Errorf("syntax error: unexpected %q", p.peek().text)
	}
	return c, nil
}

// parseProjection parses "a, #b, c.d".
func parseProjection(expr string, e *env) ([]path, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, env: e}
	var out []path
	for {
		pa, err := p.path()
		if err != nil {
			return nil, err
		}
		out = append(out, pa)
		if !p.accept(",") {
			break
		}
	}
	if p.pos != len(toks) {
		return nil, fmt.Errorf("syntax error: unexpected %q", p.peek().text)
	}
	return out, nil
}

// project keeps only the projected top-level attributes (nested paths
// keep their whole top-level attribute: Signet projects top-level names).
func project(it Item, paths []path) Item {
	if paths == nil || it == nil {
		return it
	}
	out := Item{}
	for _, pa := range paths {
		if v, ok := it[pa[0].name]; ok {
			out[pa[0].name] = v
		}
	}
	return out
}

// update is a parsed update expression applied to an item in place.
type update func(Item) error

// parseUpdate parses SET, REMOVE, ADD and DELETE clauses; touched lists
// the top-level attributes they change (for ReturnValues UPDATED_*). As in
// DynamoDB, every operand reads the item as it was before the update (SET
// a = b, b = a swaps them), and REMOVE a[0], a[1] removes the first two
// elements of a, not the first and the third.
func parseUpdate(expr string, e *env) (up update, touched []string, err error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, nil, err
	}
	p := &parser{toks: toks, env: e}
	var steps []func(it, before Item) error
	var removes []path
	seen := map[string]bool{}
	for p.pos < len(toks) {
		var clause string
		for _, k := range []string{"SET", "REMOVE", "ADD", "DELETE"} {
			if p.keyword(k) {
				clause = k
			}
		}
		if clause == "" {
			return nil, nil, fmt.Errorf("syntax error; token: %q", p.peek().text)
		}
		if seen[clause] {
			return nil, nil, fmt.Errorf("the %s section can only be used once in an update expression", clause)
		}
		seen[clause] = true
		for {
			pa, err := p.path()
			if err != nil {
				return nil, nil, err
			}
			if !containsStr(touched, pa[0].name) {
				touched = append(touched, pa[0].name)
			}
			switch clause {
			case "SET":
				if err := p.expect("="); err != nil {
					return nil, nil, err
				}
				val, err := p.setValue()
				if err != nil {
					return nil, nil, err
				}
				steps = append(steps, func(it, before Item) error {
					v, err := val(before)
					if err != nil {
						return err
					}
					return pa.set(it, v.clone())
				})
			case "REMOVE":
				removes = append(removes, pa)
			case "ADD", "DELETE":
				o, err := p.operand()
				if err != nil || o.value == nil {
					return nil, nil, fmt.Errorf("syntax error: %s needs a value", clause)
				}
				add := addOrDelete(clause, pa, o.value)
				steps = append(steps, func(it, _ Item) error { return add(it) })
			}
			if !p.accept(",") {
				break
			}
		}
	}
	// Later list elements first, so that each index names an element of
	// the list as it was.
	sort.SliceStable(removes, func(i, j int) bool { return laterElement(removes[i], removes[j]) })
	return func(it Item) error {
		before := it.clone()
		for _, s := range steps {
			if err := s(it, before); err != nil {
				return err
			}
		}
		for _, pa := range removes {
			pa.remove(it)
		}
		return nil
	}, touched, nil
}

// laterElement reports whether a and b name elements of the same list (at
// the first step where they differ) and a's index is the higher.
func laterElement(a, b path) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		return a[i].isIdx && b[i].isIdx && a[i].index > b[i].index
	}
	return false
}

type valueFn func(Item) (*Value, error)

// setValue is operand [+|- operand] where operands may be functions.
func (p *parser) setValue() (valueFn, error) {
	left, err := p.setTerm()
	if err != nil {
		return nil, err
	}
	for _, op := range []string{"+", "-"} {
		if p.accept(op) {
			right, err := p.setTerm()
			if err != nil {
				return nil, err
			}
			return func(it Item) (*Value, error) {
				a, err := left(it)
				if err != nil {
					return nil, err
				}
				b, err := right(it)
				if err != nil {
					return nil, err
				}
				if a.typ() != "N" || b.typ() != "N" {
					return nil, fmt.Errorf("an operand in the update expression has an incorrect data type")
				}
				x, _ := rat(*a.N)
				y, _ := rat(*b.N)
				if op == "+" {
					return num(formatRat(x.Add(x, y))), nil
				}
				return num(formatRat(x.Sub(x, y))), nil
			}, nil
		}
	}
	return left, nil
}

func (p *parser) setTerm() (valueFn, error) {
	t := p.peek()
	if t.kind == "id" && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == "(" {
		switch fn := strings.ToLower(t.text); fn {
		case "if_not_exists":
			p.pos += 2
			pa, err := p.path()
			if err != nil {
				return nil, err
			}
			if err := p.expect(","); err != nil {
				return nil, err
			}
			def, err := p.setValue()
			if err != nil {
				return nil, err
			}
			return func(it Item) (*Value, error) {
				if v := pa.get(it); v != nil {
					return v, nil
				}
				return def(it)
			}, p.expect(")")
		case "list_append":
			p.pos += 2
			a, err := p.setValue()
			if err != nil {
				return nil, err
			}
			if err := p.expect(","); err != nil {
				return nil, err
			}
			b, err := p.setValue()
			if err != nil {
				return nil, err
			}
			return func(it Item) (*Value, error) {
				x, err := a(it)
				if err != nil {
					return nil, err
				}
				y, err := b(it)
				if err != nil {
					return nil, err
				}
				if x.typ() != "L" || y.typ() != "L" {
					return nil, fmt.Errorf("an operand in the update expression has an incorrect data type")
				}
				return &Value{L: append(append([]*Value{}, x.L...), y.L...), isL: true}, nil
			}, p.expect(")")
		}
	}
	o, err := p.operand()
	if err != nil {
		return nil, err
	}
	return func(it Item) (*Value, error) {
		v := o.eval(it)
		if v == nil {
			return nil, fmt.Errorf("the provided expression refers to an attribute that does not exist in the item")
		}
		return v, nil
	}, nil
}

func addOrDelete(clause string, pa path, v *Value) update {
	return func(it Item) error {
		cur := pa.get(it)
		switch {
		case clause == "ADD" && v.typ() == "N":
			if cur == nil {
				return pa.set(it, v.clone())
			}
			if cur.typ() != "N" {
				return fmt.Errorf("an operand in the update expression has an incorrect data type")
			}
			x, _ := rat(*cur.N)
			y, _ := rat(*v.N)
			return pa.set(it, num(formatRat(x.Add(x, y))))
		case v.typ() == "SS" || v.typ() == "NS":
			var have []string
			if cur != nil {
				if cur.typ() != v.typ() {
					return fmt.Errorf("an operand in the update expression has an incorrect data type")
				}
				have = append(have, cur.SS...)
				have = append(have, cur.NS...)
			}
			add := append(append([]string{}, v.SS...), v.NS...)
			var out []string
			if clause == "ADD" {
				out = have
				for _, s := range add {
					if !containsStr(out, s) {
						out = append(out, s)
					}
				}
			} else {
				for _, s := range have {
					if !containsStr(add, s) {
						out = append(out, s)
					}
				}
			}
			if len(out) == 0 {
				pa.remove(it)
				return nil
			}
			nv := &Value{}
			if v.typ() == "SS" {
				nv.SS = out
			} else {
				nv.NS = out
			}
			return pa.set(it, nv)
		}
		return fmt.Errorf("an operand in the update expression has an incorrect data type")
	}
}
