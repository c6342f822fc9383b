package dynamo

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A message body is stored as attrBody (a string: the bytes as sent) or,
// when deflate makes it at least compressMinSaving smaller, as attrBodyZ
// (binary: raw DEFLATE, RFC 1951). A conversation log item lives a year on
// a table billed mostly for storage, and a 1 KB body is most of its item:
// written compressed, a 1 KB body of prose fits the log item in one write
// unit instead of two and stores in about half the bytes (issue 12). Reads
// accept either form, so items written before compression stay readable.
const (
	attrBody  = "body"
	attrBodyZ = "bz"
)

// compressMin is the smallest body worth compressing: below it a log item
// fits one write unit anyway and deflate saves a few bytes at best.
const compressMin = 256

// compressMinSaving is the share of its size a compressed body must save
// to be stored compressed (one eighth).
const compressMinSaving = 8

// maxInflated bounds what a stored compressed body may inflate to: the
// item limit of DynamoDB (bodies are far smaller; see im.MaxBodyBytes).
const maxInflated = 400 << 10

// setBody stores body in item, compressed when that pays (see attrBodyZ)
// and compress allows it.
func setBody(item map[string]types.AttributeValue, body []byte, compress bool) {
	if compress && len(body) >= compressMin {
		if z := deflate(body); len(z) <= len(body)-len(body)/compressMinSaving {
			item[attrBodyZ] = &types.AttributeValueMemberB{Value: z}
			return
		}
	}
	item[attrBody] = s(string(body))
}

// bodyOf returns the body stored in item (empty when it has none),
// inflating a compressed one.
func bodyOf(item map[string]types.AttributeValue) ([]byte, error) {
	if z, ok := item[attrBodyZ].(*types.AttributeValueMemberB); ok {
		body, err := inflate(z.Value)
		if err != nil {
			return nil, fmt.Errorf("compressed body: %w", err)
		}
		return body, nil
	}
	return []byte(getS(item, attrBody)), nil
}

// hasBody reports whether item stores a body in either form.
func hasBody(item map[string]types.AttributeValue) bool {
	_, plain := item[attrBody]
	_, z := item[attrBodyZ]
	return plain || z
}

// deflate compresses body with raw DEFLATE at the default level.
func deflate(body []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression) // only a bad level errors
	_, _ = w.Write(body)                                    // a bytes.Buffer does not fail
	_ = w.Close()
	return buf.Bytes()
}

// inflate decompresses z, refusing more than maxInflated bytes.
func inflate(z []byte) ([]byte, error) {
	r := flate.NewReader(bytes.NewReader(z))
	defer r.Close()
	body, err := io.ReadAll(io.LimitReader(r, maxInflated+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxInflated {
		return nil, fmt.Errorf("inflates past %d bytes", maxInflated)
	}
	return body, nil
}
