package memsqs

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
)

// attrValue is one message attribute (SQS's MessageAttributeValue): a
// String, Number or Binary data type (with an optional ".custom" suffix)
// and its value.
type attrValue struct {
	DataType    string
	StringValue string `json:",omitempty"`
	BinaryValue []byte `json:",omitempty"` // base64 in JSON, as the SDK sends it
}

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// attrName is what a message attribute's name may be: up to 256 of
// [A-Za-z0-9_.-], not starting with "AWS." or "Amazon.", no "..", not
// starting or ending with ".".
var attrName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// checkAttributes validates a send's message attributes, as SQS does.
func checkAttributes(in map[string]attrValue) *apiError {
	if len(in) > maxAttributes {
		return invalidParameter("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(in), maxAttributes)
	}
	for name, v := range in {
		lower := strings.ToLower(name)
		if !attrName.MatchString(name) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
			strings.Contains(name, "..") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
			return invalidParameter("Message attribute name '%s' is invalid.", name)
		}
		base, _, _ := strings.Cut(v.DataType, ".")
		switch base {
		case "String", "Number":
			if v.StringValue == "" {
				return invalidParameter("Message attribute '%s' must contain a non-empty message attribute value for message attribute type '%s'.", name, v.DataType)
			}
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return invalidParameter("Message attribute '%s' must contain a non-empty message attribute value for message attribute type '%s'.", name, v.DataType)
			}
		default:
			return invalidParameter("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
	}
	return nil
}

// attributesSize is what the attributes count toward the message size:
// each name, data type and value.
func attributesSize(in map[string]attrValue) int {
	n := 0
	for name, v := range in {
		n += len(name) + len(v.DataType) + len(v.StringValue) + len(v.BinaryValue)
	}
	return n
}

// attributesMD5 is SQS's MD5OfMessageAttributes: over the attributes
// sorted by name, each as its name, data type, a transport byte (1 string
// or number, 2 binary) and value, every field but the byte prefixed with
// its 4-byte big-endian length ("" when there are none).
func attributesMD5(in map[string]attrValue) string {
	if len(in) == 0 {
		return ""
	}
	names := make([]string, 0, len(in))
	for n := range in {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New()
	field := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		h.Write(l[:])
		h.Write(b)
	}
	for _, n := range names {
		v := in[n]
		field([]byte(n))
		field([]byte(v.DataType))
		if strings.HasPrefix(v.DataType, "Binary") {
			h.Write([]byte{2})
			field(v.BinaryValue)
		} else {
			h.Write([]byte{1})
			field([]byte(v.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// selectAttributes is what of a message's attributes a receive asked for
// (MessageAttributeNames: names, "All" or ".*", or "prefix.*").
func selectAttributes(all map[string]attrValue, names []string) map[string]attrValue {
	if len(all) == 0 || len(names) == 0 {
		return nil
	}
	out := map[string]attrValue{}
	for _, want := range names {
		for name, v := range all {
			prefix, wild := strings.CutSuffix(want, ".*")
			if want == "All" || want == ".*" || name == want || (wild && strings.HasPrefix(name, prefix+".")) {
				out[name] = v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
