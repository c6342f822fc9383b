package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Issue 11 finding 1 and 12: bodies are stored and pushed verbatim, so
// invalid UTF-8 knocked browsers offline (1007) and duplicate keys or
// unrepresentable numbers made clients disagree about a message.
func TestCanonicalBody(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string // want "" means refused
	}{
		{"object compacted, key order kept", `{ "b" : 1 , "a" : [ true , null ] }`, `{"b":1,"a":[true,null]}`},
		{"string escapes minimised", `"\u0041\/\u00e9"`, `"A/é"`},
		{"HTML and line separators escaped as encoding/json does", "\"<&>\u2028\u2029\"", `"\u003c\u0026\u003e\u2028\u2029"`},
		{"control characters escaped", `"a\u0001\n\t"`, `"a\u0001\n\t"`},
		{"surrogate pair decoded", `"\ud83d\ude00"`, `"😀"`},
		{"number shortest form", `[1.0, 1E3, 0.10, -0, 1e21, 123456789012345680e3, 5e-324]`, `[1,1000,0.1,-0,1e+21,123456789012345680000,5e-324]`},
		{"nested depth at the limit", strings.Repeat("[", MaxBodyDepth) + strings.Repeat("]", MaxBodyDepth), strings.Repeat("[", MaxBodyDepth) + strings.Repeat("]", MaxBodyDepth)},
		{"invalid UTF-8 in a string", "\"a\xff\"", ""},
		{"invalid UTF-8 outside a string", "[1]\xc3", ""},
		{"lone high surrogate", `"\ud800"`, ""},
		{"lone low surrogate", `"\udc00x"`, ""},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`, ""},
		{"duplicate key", `{"a":1,"a":2}`, ""},
		{"duplicate key after escape", `{"a":1,"\u0061":2}`, ""},
		{"number out of range", `1e309`, ""},
		{"integer a double cannot hold", `12345678901234567890`, ""},
		{"underflow to zero", `1e-400`, ""},
		{"too many digits", `0.1000000000000000055511151231257827`, ""},
		{"nested too deep", strings.Repeat("[", MaxBodyDepth+1) + strings.Repeat("]", MaxBodyDepth+1), ""},
		{"trailing data", `1 2`, ""},
		{"leading zero", `01`, ""},
		{"raw control character", "\"a\x01\"", ""},
		{"bad escape", `"\x"`, ""},
		{"unterminated", `{"a":`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CanonicalBody([]byte(tc.in))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("CanonicalBody(%q) = %s, want refused", tc.in, got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("CanonicalBody(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzCanonicalBody: whatever is accepted is valid UTF-8 JSON with the same
// value, canonical (encoding it again changes nothing), and passes through
// encoding/json, which builds the server's frames, unchanged.
func FuzzCanonicalBody(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x"]}`, `"\ud83d\ude00"`, "\"\xff\"", `{"a":1,"a":2}`, `1e309`, `12345678901234567890`, `-0.0e-0`, `[[[{}]]]`, "\"\u2028<>&\"", `"\u2029"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalBody(in)
		if err != nil {
			return
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("CanonicalBody(%q) = %q: not valid UTF-8 JSON", in, out)
		}
		if framed, _ := json.Marshal(json.RawMessage(out)); string(framed) != string(out) {
			t.Fatalf("encoding/json changes the canonical %q to %q", out, framed)
		}
		again, err := CanonicalBody(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not canonical: %q → %q → %q, %v", in, out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %q → %q", in, out)
		}
	})
}
