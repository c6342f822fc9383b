package im

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewMessageID returns a 26-character, time-ordered, random message id
// (48-bit milliseconds then 80 random bits, Crockford base32), prefixed "m".
func NewMessageID(now time.Time) MessageID {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	// Encode 128 bits as 26 base32 digits (the first digit carries 3 bits).
	out := make([]byte, 27)
	out[0] = 'm'
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 26; i >= 1; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return MessageID(out)
}
