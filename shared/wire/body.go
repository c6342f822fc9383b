package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxBodyDepth is the deepest nesting of arrays and objects a message body
// may have.
const MaxBodyDepth = 32

// CanonicalBody checks that raw is one JSON value every client reads the
// same way and returns its canonical encoding, which is what Signet stores
// and pushes (so a pushed copy and a synced copy are the same bytes). It
// refuses:
//   - invalid UTF-8, and \u escapes that are lone UTF-16 surrogates (a
//     browser closes a WebSocket with 1007 on the first, and decoders
//     disagree on the second);
//   - an object with the same key twice (decoders keep the first or the last);
//   - a number that does not survive a trip through an IEEE 754 double,
//     the only number type JavaScript has (1e309, 12345678901234567890,
//     1e-400): a client would show a different value than was sent;
//   - nesting deeper than MaxBodyDepth, and anything after the value.
//
// The canonical encoding has no insignificant white space, keeps keys in
// the order given, writes strings with the fewest escapes that leave the
// text safe to embed in HTML and JavaScript (", \, control characters,
// <, >, &, U+2028 and U+2029 are escaped, as encoding/json escapes them, so
// the server's frames carry these bytes unchanged; other non-ASCII
// characters are written as themselves) and numbers in their shortest form
// that reads back as the same double (1.0 → 1, 1E3 → 1000, 0.10 → 0.1).
func CanonicalBody(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("body is not valid UTF-8")
	}
	p := canonParser{in: raw, out: make([]byte, 0, len(raw))}
	p.space()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.in) {
		return nil, p.errorf("unexpected data after the value")
	}
	return p.out, nil
}

type canonParser struct {
	in  []byte
	i   int
	out []byte
}

func (p *canonParser) errorf(format string, a ...any) error {
	return fmt.Errorf("body is not valid JSON at offset %d: %s", p.i, fmt.Sprintf(format, a...))
}

func (p *canonParser) space() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canonParser) literal(word string) error {
	if !strings.HasPrefix(string(p.in[p.i:]), word) {
		return p.errorf("invalid value")
	}
	p.i += len(word)
	p.out = append(p.out, word...)
	return nil
}

func (p *canonParser) value(depth int) error {
	if p.i == len(p.in) {
		return p.errorf("unexpected end")
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		p.out = appendString(p.out, s)
		return nil
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return p.errorf("invalid character %q", c)
	}
}

func (p *canonParser) object(depth int) error {
	if depth > MaxBodyDepth {
		return p.errorf("nested deeper than %d", MaxBodyDepth)
	}
	if p.open('{', '}') {
		return nil
	}
	seen := map[string]bool{}
	for {
		if p.i == len(p.in) || p.in[p.i] != '"' {
			return p.errorf("expected a string key")
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if seen[key] {
			return p.errorf("key %q appears twice", key)
		}
		seen[key] = true
		p.out = appendString(p.out, key)
		p.space()
		if p.i == len(p.in) || p.in[p.i] != ':' {
			return p.errorf("expected ':'")
		}
		p.i++
		p.out = append(p.out, ':')
		p.space()
		if err := p.value(depth); err != nil {
			return err
		}
		if end, err := p.next('}'); end || err != nil {
			return err
		}
	}
}

// open consumes an opening bracket and reports whether its closing one
// follows at once (an empty object or array, written out).
func (p *canonParser) open(open, close byte) (empty bool) {
	p.i++
	p.out = append(p.out, open)
	p.space()
	if p.i < len(p.in) && p.in[p.i] == close {
		p.i++
		p.out = append(p.out, close)
		return true
	}
	return false
}

// next consumes what follows a member or element: a comma (more follow) or
// the closing bracket (end).
func (p *canonParser) next(close byte) (end bool, err error) {
	p.space()
	if p.i == len(p.in) {
		return false, p.errorf("unexpected end")
	}
	switch p.in[p.i] {
	case ',':
		p.i++
		p.out = append(p.out, ',')
		p.space()
		return false, nil
	case close:
		p.i++
		p.out = append(p.out, close)
		return true, nil
	}
	return false, p.errorf("expected ',' or '%c'", close)
}

func (p *canonParser) array(depth int) error {
	if depth > MaxBodyDepth {
		return p.errorf("nested deeper than %d", MaxBodyDepth)
	}
	if p.open('[', ']') {
		return nil
	}
	for {
		if err := p.value(depth); err != nil {
			return err
		}
		if end, err := p.next(']'); end || err != nil {
			return err
		}
	}
}

// str reads a string literal and returns its decoded text.
func (p *canonParser) str() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for {
		if p.i == len(p.in) {
			return "", p.errorf("unterminated string")
		}
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < ' ':
			return "", p.errorf("control character in a string")
		case c != '\\':
			b.WriteByte(c) // the input is valid UTF-8, so bytes copy as they are
			p.i++
			continue
		}
		if p.i+1 == len(p.in) {
			return "", p.errorf("unterminated string")
		}
		esc := p.in[p.i+1]
		p.i += 2
		switch esc {
		case '"', '\\', '/':
			b.WriteByte(esc)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// Only a high surrogate followed by a low one is a character.
				if r >= 0xdc00 || p.i+1 >= len(p.in) || p.in[p.i] != '\\' || p.in[p.i+1] != 'u' {
					return "", p.errorf("lone UTF-16 surrogate \\u%04x", r)
				}
				p.i += 2
				low, err := p.hex4()
				if err != nil {
					return "", err
				}
				if r = utf16.DecodeRune(r, low); r == utf8.RuneError {
					return "", p.errorf("lone UTF-16 surrogate")
				}
			}
			b.WriteRune(r)
		default:
			return "", p.errorf("invalid escape \\%c", esc)
		}
	}
}

func (p *canonParser) hex4() (rune, error) {
	if p.i+4 > len(p.in) {
		return 0, p.errorf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(p.in[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, p.errorf("invalid \\u escape")
	}
	p.i += 4
	return rune(v), nil
}

// number reads a number, checks that a double holds it exactly as written
// (to the shortest decimal that reads back as that double) and writes that
// shortest form.
func (p *canonParser) number() error {
	start := p.i
	if p.in[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.in) && p.in[p.i] >= '0' && p.in[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	switch {
	case p.i < len(p.in) && p.in[p.i] == '0':
		p.i++
	case digits() == 0:
		return p.errorf("invalid number")
	}
	if p.i < len(p.in) && p.in[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	if p.i < len(p.in) && (p.in[p.i] == 'e' || p.in[p.i] == 'E') {
		p.i++
		if p.i < len(p.in) && (p.in[p.i] == '+' || p.in[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	text := string(p.in[start:p.i])
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return p.errorf("number %s is out of range of a double", clip(text))
	}
	shortest := strconv.FormatFloat(f, 'e', -1, 64)
	if decimal(text) != decimal(shortest) {
		return p.errorf("number %s is not exactly representable as a double (it would read as %s)", clip(text), strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f == math.Trunc(f) && f > -1e21 && f < 1e21 {
		p.out = strconv.AppendFloat(p.out, f, 'f', -1, 64)
	} else {
		p.out = strconv.AppendFloat(p.out, f, 'g', -1, 64)
	}
	return nil
}

// decimal returns a normal form of a JSON number's value: sign, significant
// digits without leading or trailing zeros, and the exponent of the first
// digit, so equal values give equal strings ("1.50e1" and "15" both give
// "+15e1"; every zero gives "0").
func decimal(text string) string {
	sign := "+"
	if t, ok := strings.CutPrefix(text, "-"); ok {
		sign, text = "-", t
	}
	mant, exp := text, 0
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		mant = text[:i]
		e, err := strconv.Atoi(text[i+1:])
		if err != nil {
			return "invalid"
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	exp += len(intPart)
	trimmed := strings.TrimLeft(all, "0")
	exp -= len(all) - len(trimmed)
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return "0"
	}
	return sign + trimmed + "e" + strconv.Itoa(exp)
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// appendString writes s as a JSON string with the escapes CanonicalBody names.
func appendString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c == '\t':
			out = append(out, '\\', 't')
		case c == '\b':
			out = append(out, '\\', 'b')
		case c == '\f':
			out = append(out, '\\', 'f')
		case c < ' ', c == '<', c == '>', c == '&':
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9):
			// U+2028 and U+2029 end a line in JavaScript source.
			out = append(out, '\\', 'u', '2', '0', '2', hex[s[i+2]-0xa0])
			i += 2
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}
