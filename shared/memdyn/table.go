package memdyn

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/google/btree"
)

// keyDef is one key attribute of a table.
type keyDef struct {
	name, typ string // typ: S, N or B
}

// table is one table: its items in a B-tree by (partition, sort key).
type table struct {
	name     string
	hash     keyDef
	rng      *keyDef
	attrDefs []map[string]string
	created  time.Time
	ttlAttr  string
	ttlOn    bool
	items    *btree.BTreeG[*entry]
	// def is the CreateTable request (a journal's snapshot replays it);
	// record, when set, journals every put and delete (see Open).
	def    json.RawMessage
	record func(record)
	// replica, when set (Server.StaleReads), is the table as it was lag
	// ago: every put and delete reaches it lag after it was made (ops
	// holds those on the way), as a DynamoDB replica that has not caught
	// up; eventually consistent reads may be answered from it.
	replica *btree.BTreeG[*entry]
	lag     time.Duration
	ops     []replicaOp
}

// replicaOp is a put (e with its raw item) or a delete (del) made at at,
// on its way to the replica.
type replicaOp struct {
	at  time.Time
	e   *entry
	del bool
}

// replicate queues a change for the replica (with one).
func (t *table) replicate(e *entry, del bool) {
	if t.replica == nil {
		return
	}
	c := *e
	t.ops = append(t.ops, replicaOp{at: time.Now(), e: &c, del: del})
}

// view returns the items a read sees: the table, or — for an eventually
// consistent read that stale says to answer from the replica — the
// replica, caught up to lag ago.
func (t *table) view(stale bool) *btree.BTreeG[*entry] {
	if t.replica == nil || !stale {
		return t.items
	}
	cut := time.Now().Add(-t.lag)
	n := 0
	for _, op := range t.ops {
		if op.at.After(cut) {
			break
		}
		if op.del {
			t.replica.Delete(op.e)
		} else {
			t.replica.ReplaceOrInsert(op.e)
		}
		n++
	}
	t.ops = t.ops[n:]
	return t.replica
}

// entry is one stored item with its decoded key. The item itself is kept
// in its JSON wire form: a decoded item costs several times the memory,
// and a 100,000-message run holds millions of items.
type entry struct {
	pk     string   // partition key, canonical
	skS    string   // sort key (S or B)
	skN    *big.Rat // sort key (N)
	min    bool     // a pivot before every sort key of its partition
	skType string   // S, N or B ("" without a range key)
	skText string   // the sort key's value as written (N: its text)
	raw    []byte   // the item, JSON
}

// keyValue rebuilds a key attribute from its type and text.
func keyValue(typ, text string) *Value {
	switch typ {
	case "S":
		return &Value{S: &text}
	case "N":
		return num(text)
	case "B":
		return &Value{B: []byte(text)}
	}
	return nil
}

// item decodes the stored item (a fresh copy the caller may change).
func (e *entry) item() Item {
	var it Item
	if err := json.Unmarshal(e.raw, &it); err != nil {
		panic("memdyn: stored item does not decode: " + err.Error())
	}
	return it
}

// id is the entry's key as one string (for duplicate checks).
func (e *entry) id() string {
	if e.skN != nil {
		return e.pk + "\x00N" + e.skN.RatString()
	}
	return e.pk + "\x00" + e.skS
}

func less(a, b *entry) bool {
	if a.pk != b.pk {
		return a.pk < b.pk
	}
	if a.min || b.min {
		return a.min && !b.min
	}
	if a.skN != nil && b.skN != nil {
		return a.skN.Cmp(b.skN) < 0
	}
	return a.skS < b.skS
}

func newTable(name string, hash keyDef, rng *keyDef, defs []map[string]string) *table {
	return &table{name: name, hash: hash, rng: rng, attrDefs: defs, created: time.Now(), items: btree.NewG(32, less)}
}

func canonical(v *Value) string {
	switch v.typ() {
	case "S":
		return "S" + *v.S
	case "B":
		return "B" + string(v.B)
	case "N":
		r, _ := rat(*v.N)
		return "N" + formatRat(r)
	}
	return ""
}

// keyOf builds the entry key of an item or key, checking it against the
// schema.
func (t *table) keyOf(it Item, exact bool) (*entry, error) {
	bad := fmt.Errorf("the provided key element does not match the schema")
	n := 1
	hv := it[t.hash.name]
	if hv == nil || hv.typ() != t.hash.typ {
		return nil, bad
	}
	e := &entry{pk: canonical(hv)}
	if t.rng != nil {
		n++
		rv := it[t.rng.name]
		if rv == nil || rv.typ() != t.rng.typ {
			return nil, bad
		}
		if err := e.setSort(rv); err != nil {
			return nil, err
		}
	}
	if exact && len(it) != n {
		return nil, bad
	}
	if (hv.S != nil && *hv.S == "") || len(hv.B) == 0 && hv.B != nil {
		return nil, fmt.Errorf("one or more parameter values are not valid: the AttributeValue for a key attribute cannot contain an empty string value")
	}
	return e, nil
}

func (e *entry) setSort(v *Value) error {
	e.skType = v.typ()
	switch e.skType {
	case "S":
		e.skS, e.skText = *v.S, *v.S
	case "B":
		e.skS = string(v.B)
		e.skText = e.skS
	case "N":
		r, err := rat(*v.N)
		if err != nil {
			return err
		}
		e.skN, e.skText = r, *v.N
	}
	return nil
}

// get returns a decoded copy of the item at k (nil if none).
func (t *table) get(k *entry) Item { return t.getFrom(t.items, k) }

// getFrom returns a decoded copy of the item at k in items (nil if none).
func (t *table) getFrom(items *btree.BTreeG[*entry], k *entry) Item {
	if e, ok := items.Get(k); ok {
		return e.item()
	}
	return nil
}

func (t *table) put(k *entry, it Item) error {
	raw, err := json.Marshal(it)
	if err != nil {
		return err
	}
	if len(raw) > 400<<10 {
		return validation("Item size has exceeded the maximum allowed size")
	}
	k.raw = raw
	t.items.ReplaceOrInsert(k)
	t.replicate(k, false)
	if t.record != nil {
		t.record(record{Op: "put", Table: t.name, Item: raw})
	}
	return nil
}

func (t *table) remove(k *entry) {
	if _, ok := t.items.Delete(k); ok {
		t.replicate(k, true)
		if t.record != nil {
			t.record(record{Op: "del", Table: t.name, Key: t.entryKey(k)})
		}
	}
}

// entryKey returns the key attributes of a stored entry.
func (t *table) entryKey(e *entry) Item {
	out := Item{t.hash.name: keyValue(e.pk[:1], e.pk[1:])}
	if t.rng != nil {
		out[t.rng.name] = keyValue(e.skType, e.skText)
	}
	return out
}

// keyAttrs returns the key attributes of an item.
func (t *table) keyAttrs(it Item) Item {
	out := Item{t.hash.name: it[t.hash.name]}
	if t.rng != nil {
		out[t.rng.name] = it[t.rng.name]
	}
	return out
}

// keyCond is a parsed KeyConditionExpression: the partition and an
// optional sort-key condition.
type keyCond struct {
	pk     string
	op     string // "", =, <, <=, >, >=, between, begins_with
	v1, v2 *Value
}

// parseKeyCondition reads "hash = :v [AND range op …]" (either order).
func (t *table) parseKeyCondition(expr string, e *env) (*keyCond, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, env: e}
	kc := &keyCond{}
	hashSeen := false
	for {
		if err := t.keyTerm(p, kc, &hashSeen); err != nil {
			return nil, err
		}
		if !p.keyword("AND") {
			break
		}
	}
	if p.pos != len(toks) {
		return nil, fmt.Errorf("invalid KeyConditionExpression: syntax error near %q", p.peek().text)
	}
	if !hashSeen {
		return nil, fmt.Errorf("query condition missed key schema element: %s", t.hash.name)
	}
	return kc, nil
}

func (t *table) keyTerm(p *parser, kc *keyCond, hashSeen *bool) error {
	if p.accept("(") {
		if err := t.keyTerm(p, kc, hashSeen); err != nil {
			return err
		}
		return p.expect(")")
	}
	value := func() (*Value, error) {
		o, err := p.operand()
		if err != nil {
			return nil, err
		}
		if o.value == nil {
			return nil, fmt.Errorf("invalid KeyConditionExpression: a key condition compares with a value")
		}
		return o.value, nil
	}
	if tk := p.peek(); tk.kind == "id" && strings.EqualFold(tk.text, "begins_with") {
		p.pos++
		if err := p.expect("("); err != nil {
			return err
		}
		name, err := p.name()
		if err != nil {
			return err
		}
		if t.rng == nil || name != t.rng.name {
			return fmt.Errorf("invalid KeyConditionExpression: begins_with applies to the sort key")
		}
		if err := p.expect(","); err != nil {
			return err
		}
		v, err := value()
		if err != nil {
			return err
		}
		kc.op, kc.v1 = "begins_with", v
		return p.expect(")")
	}
	name, err := p.name()
	if err != nil {
		return err
	}
	if name == t.hash.name {
		if err := p.expect("="); err != nil {
			return fmt.Errorf("invalid KeyConditionExpression: the partition key takes only =")
		}
		v, err := value()
		if err != nil {
			return err
		}
		if v.typ() != t.hash.typ {
			return fmt.Errorf("one or more parameter values were invalid: condition parameter type does not match schema type")
		}
		kc.pk, *hashSeen = canonical(v), true
		return nil
	}
	if t.rng == nil || name != t.rng.name {
		return fmt.Errorf("query key condition not supported: %s is not a key attribute", name)
	}
	if p.keyword("BETWEEN") {
		lo, err := value()
		if err != nil {
			return err
		}
		if !p.keyword("AND") {
			return fmt.Errorf("invalid KeyConditionExpression: BETWEEN needs AND")
		}
		hi, err := value()
		if err != nil {
			return err
		}
		if c, ok := compare(lo, hi); !ok || c > 0 {
			return fmt.Errorf("invalid KeyConditionExpression: the BETWEEN operator requires upper bound to be greater than or equal to lower bound")
		}
		kc.op, kc.v1, kc.v2 = "between", lo, hi
		return nil
	}
	op := p.peek().kind
	switch op {
	case "=", "<", "<=", ">", ">=":
		p.pos++
	default:
		return fmt.Errorf("invalid KeyConditionExpression: unsupported operator near %q", p.peek().text)
	}
	v, err := value()
	if err != nil {
		return err
	}
	kc.op, kc.v1 = op, v
	return nil
}

// matches reports whether a sort key value satisfies the condition, and
// past whether iteration (ascending) has gone beyond every match.
func (kc *keyCond) matches(sk *Value) (ok, past bool) {
	if kc.op == "" {
		return true, false
	}
	c1, _ := compare(sk, kc.v1)
	switch kc.op {
	case "=":
		return c1 == 0, c1 > 0
	case "<":
		return c1 < 0, c1 >= 0
	case "<=":
		return c1 <= 0, c1 > 0
	case ">":
		return c1 > 0, false
	case ">=":
		return c1 >= 0, false
	case "between":
		c2, _ := compare(sk, kc.v2)
		return c1 >= 0 && c2 <= 0, c2 > 0
	case "begins_with":
		var s, pre string
		switch sk.typ() {
		case "S":
			s, pre = *sk.S, *kc.v1.S
		case "B":
			s, pre = string(sk.B), string(kc.v1.B)
		}
		return strings.HasPrefix(s, pre), s > pre && !strings.HasPrefix(s, pre)
	}
	return false, false
}

// scanPartition visits the partition's entries in sort-key order (or
// reverse), starting after `after` when it is set, until visit returns
// false.
func (t *table) scanPartition(items *btree.BTreeG[*entry], kc *keyCond, forward bool, after *entry, visit func(*entry) bool) {
	pivot := &entry{pk: kc.pk, min: true}
	if forward {
		start := pivot
		if after != nil {
			start = after
		} else if t.rng != nil && kc.v1 != nil && kc.op != "<" && kc.op != "<=" {
			// Start at the lower bound of the sort-key range.
			lo := &entry{pk: kc.pk}
			if lo.setSort(kc.v1) == nil {
				start = lo
			}
		}
		items.AscendGreaterOrEqual(start, func(e *entry) bool {
			if e.pk != kc.pk {
				return false
			}
			if after != nil && !less(after, e) {
				return true // the exclusive start key itself
			}
			ok, past := kc.matches(t.sortValue(e))
			if past {
				return false
			}
			if !ok {
				return true
			}
			return visit(e)
		})
		return
	}
	// Descending: from the end of the partition (or before `after`).
	var matched []*entry
	items.AscendGreaterOrEqual(pivot, func(e *entry) bool {
		if e.pk != kc.pk {
			return false
		}
		ok, past := kc.matches(t.sortValue(e))
		if past {
			return false
		}
		if ok && (after == nil || less(e, after)) {
			matched = append(matched, e)
		}
		return true
	})
	for i := len(matched) - 1; i >= 0; i-- {
		if !visit(matched[i]) {
			return
		}
	}
}

func (t *table) sortValue(e *entry) *Value { return keyValue(e.skType, e.skText) }

// describe is the table's TableDescription.
func (t *table) describe() map[string]any {
	keys := []map[string]string{{"AttributeName": t.hash.name, "KeyType": "HASH"}}
	if t.rng != nil {
		keys = append(keys, map[string]string{"AttributeName": t.rng.name, "KeyType": "RANGE"})
	}
	return map[string]any{
		"TableName": t.name, "TableStatus": "ACTIVE", "KeySchema": keys, "AttributeDefinitions": t.attrDefs,
		"CreationDateTime": float64(t.created.UnixMilli()) / 1000, "ItemCount": t.items.Len(), "TableSizeBytes": 0,
		"TableArn":              "arn:aws:dynamodb:local:000000000000:table/" + t.name,
		"BillingModeSummary":    map[string]string{"BillingMode": "PAY_PER_REQUEST"},
		"ProvisionedThroughput": map[string]int{"ReadCapacityUnits": 0, "WriteCapacityUnits": 0, "NumberOfDecreasesToday": 0},
	}
}
