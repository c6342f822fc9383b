package im

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// A group position proof says, in 22 characters, that group c's log
// reaches convSeq n: the server puts one on each message it pushes or
// pages of a group under read diffusion (docs/protocol.md), and an ack
// that brings it back is known not to be beyond the group's head without
// a read of the log (half a read unit per member and message). It is
// HMAC-SHA256 over the group and convSeq with a key only the server has,
// cut to 128 bits. It proves nothing about the acking user: membership and
// range stay in the ack's write condition.

// GroupProofKeySize is the size of the key of group position proofs.
const GroupProofKeySize = 32

// GroupProof is the proof that group c's log reaches convSeq n, under key.
func GroupProof(key []byte, c ConversationID, n int64) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(c))
	mac.Write([]byte{0})
	mac.Write([]byte(strconv.FormatInt(n, 10)))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
}

// ValidGroupProof reports whether proof is GroupProof(key, c, n). An empty
// key or proof is never valid.
func ValidGroupProof(key []byte, c ConversationID, n int64, proof string) bool {
	if len(key) == 0 || proof == "" {
		return false
	}
	return hmac.Equal([]byte(GroupProof(key, c, n)), []byte(proof))
}
