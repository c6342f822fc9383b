package im

// Sync paging limits (DESIGN invariant 8).
const (
	// MaxPageEntries is the most entries one sync page carries.
	MaxPageEntries = 100
	// MaxPageBytes bounds the encoded entries of one page so that the whole
	// frame stays under API Gateway's 128 KiB message limit.
	MaxPageBytes = 120 << 10
)

// Page is one cursor pull from an inbox.
type Page struct {
	Entries []Entry
	// Next is the cursor to continue from: the last returned seq, or the
	// request's cursor when nothing was returned.
	Next int64
	// More reports whether entries with seq > Next exist.
	More bool
	// Head is the inbox's last allocated seq.
	Head int64
	// Epoch identifies the inbox's sequence; it changes only if it restarts.
	Epoch string
	// Truncated is set when entries after the cursor have expired
	// (retention): the page starts at FirstSeq, not at cursor+1.
	Truncated bool
	// FirstSeq is the oldest retained seq after the cursor (with Truncated).
	FirstSeq int64
}

// Fit cuts entries (ascending, contiguous from cursor+1: inbox entries or
// group log messages) to at most limit entries whose sizes sum to at most
// maxBytes; it always keeps at least one entry so a single large message
// cannot stall a cursor.
func Fit[T any](entries []T, limit, maxBytes int, size func(T) int) []T {
	if limit > 0 && len(entries) > limit {
		entries = entries[:limit]
	}
	total := 0
	for i, e := range entries {
		total += size(e)
		if total > maxBytes && i > 0 {
			return entries[:i]
		}
	}
	return entries
}

// FitNewest keeps the newest messages (the end of msgs, which ascend) whose
// sizes sum to at most maxBytes, at least one; cut reports whether older
// ones were left for the next page back. History pages use it: a page of
// large messages must fit the gateway's limit like a sync page.
func FitNewest(msgs []Message, maxBytes int, size func(Message) int) (kept []Message, cut bool) {
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		total += size(msgs[i])
		if total > maxBytes && i < len(msgs)-1 {
			return msgs[i+1:], true
		}
	}
	return msgs, false
}

// NewPage assembles a page answering a pull after cursor from entries that
// the store read up to head. When the first entry is beyond cursor+1, the
// entries in between expired: the page says so (Truncated, FirstSeq). When
// none is left at all below a higher head, every one of them expired: the
// page is Truncated with FirstSeq head+1 and the cursor may move to head.
func NewPage(cursor int64, entries []Entry, head int64, epoch string) Page {
	next := cursor
	p := Page{Entries: entries, Head: head, Epoch: epoch}
	if n := len(entries); n > 0 {
		next = entries[n-1].Seq
		if entries[0].Seq > cursor+1 {
			p.Truncated, p.FirstSeq = true, entries[0].Seq
		}
	} else if cursor < head {
		p.Truncated, p.FirstSeq, next = true, head+1, head
	}
	p.Next, p.More = next, next < head
	return p
}
