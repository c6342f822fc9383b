package im

import (
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"
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

// locSep separates a located message id's parts.
const locSep = "~"

// NewLocatedMessageID returns the id of message convSeq of conversation c:
// NewMessageID's 27 characters, then "~<convSeq>~<conversation>". Such an id
// says where the message is stored, so its trace can be derived from the
// conversation log, the inbox entries and the devices' ack ranges instead
// of written for every message (issue 12). 1:1 and group sends use it
// (group messages stored before group ids were located keep plain ids, as
// alerts do).
func NewLocatedMessageID(now time.Time, c ConversationID, convSeq int64) MessageID {
	return MessageID(string(NewMessageID(now)) + locSep + strconv.FormatInt(convSeq, 10) + locSep + string(c))
}

// Locate returns the conversation and convSeq a located message id names;
// ok is false for a plain id or one that does not parse.
func (id MessageID) Locate() (c ConversationID, convSeq int64, ok bool) {
	const plain = 27 // len(NewMessageID(…))
	s := string(id)
	if len(s) <= plain || s[0] != 'm' || s[plain:plain+len(locSep)] != locSep {
		return "", 0, false
	}
	seq, conv, found := strings.Cut(s[plain+len(locSep):], locSep)
	n, err := strconv.ParseInt(seq, 10, 64)
	if !found || err != nil || n < 1 || strconv.FormatInt(n, 10) != seq || conv == "" {
		return "", 0, false
	}
	return ConversationID(conv), n, true
}

// Sampled reports whether id falls in the one-in-n share of messages whose
// trace is written in full even when everything went as expected (n ≤ 1:
// every message). Every function decides alike: the share is a hash of id.
func (id MessageID) Sampled(n int) bool {
	if n <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%uint32(n) == 0
}
