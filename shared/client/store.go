package client

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

var (
	bucketMeta   = []byte("meta")
	bucketInbox  = []byte("inbox")  // seq (8 bytes BE) → wire.Entry JSON
	bucketOutbox = []byte("outbox") // order (8 bytes BE) → outboxItem JSON
	bucketSent   = []byte("sent")   // clientMsgId → wire.Sent JSON
	bucketKnown  = []byte("known")  // messageId → empty: messages held before a resync
	bucketConvs  = []byte("convs")  // conversationId → newest convSeq held (8 bytes BE)
	keyCursor    = []byte("cursor")
	keyEpoch     = []byte("epoch")
	keySkipped   = []byte("skipped")
	keyMe        = []byte("me") // this device's user, learned from a 1:1 ACK (the sender of its message)
)

// ErrStoreInUse means another client (another process) has this device's
// store open: one client per user and device at a time.
var ErrStoreInUse = errors.New("device store in use")

// store is the device's local state in one bbolt file.
type store struct{ db *bolt.DB }

// outboxItem is a send waiting for the server's ACK.
type outboxItem struct {
	Key   uint64    `json:"-"`
	ID    string    `json:"clientMsgId"`
	Frame string    `json:"frame"`
	At    time.Time `json:"at"`
	// Fp is the draft's fingerprint (draftFingerprint; "" in stores
	// written before it was kept): a later send reusing the clientMsgId
	// for other content is refused by comparing it.
	Fp string `json:"fp,omitempty"`
}

// sentRecord is a send's ACK as stored, with its draft's fingerprint.
type sentRecord struct {
	wire.Sent
	Fp string `json:"fp,omitempty"`
}

// conversation names the conversation the send goes to, as the frame names
// it (a recipient or a conversation id): the unit of send order.
func (it outboxItem) conversation() string {
	var f struct {
		To             string `json:"to"`
		ConversationID string `json:"conversationId"`
	}
	_ = json.Unmarshal([]byte(it.Frame), &f)
	if f.ConversationID != "" {
		return "c:" + f.ConversationID
	}
	return "to:" + f.To
}

func openStore(path string) (*store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("client store dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		// bbolt locks the file: another client holds this device's store.
		return nil, fmt.Errorf("open client store %s: it is in use by another client of the same user and device (one process per device; give this one another --device): %w", path, ErrStoreInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("open client store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketInbox, bucketOutbox, bucketSent, bucketKnown} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if tx.Bucket(bucketConvs) != nil {
			return nil
		}
		// A store written before conversations were indexed: index what
		// it holds.
		convs, err := tx.CreateBucket(bucketConvs)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketInbox).ForEach(func(_, v []byte) error {
			var e wire.Entry
			if json.Unmarshal(v, &e) != nil {
				return nil
			}
			return noteConv(convs, e)
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init client store: %w", err)
	}
	return &store{db: db}, nil
}

func (s *store) close() error { return s.db.Close() }

func u64(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// position returns the stored cursor and epoch.
func (s *store) position() (cursor int64, epoch string, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if v := m.Get(keyCursor); len(v) == 8 {
			cursor = int64(binary.BigEndian.Uint64(v))
		}
		epoch = string(m.Get(keyEpoch))
		return nil
	})
	return cursor, epoch, err
}

// apply stores entry e and moves the cursor to its seq in one transaction,
// only if e.Seq is exactly cursor+1. It reports whether it applied, and
// whether the message was already held before a resync (then it must not
// be shown again).
func (s *store) apply(e wire.Entry) (applied, known bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		cursor := int64(0)
		if v := m.Get(keyCursor); len(v) == 8 {
			cursor = int64(binary.BigEndian.Uint64(v))
		}
		if e.Seq != cursor+1 {
			return nil
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketInbox).Put(u64(uint64(e.Seq)), b); err != nil {
			return err
		}
		applied = true
		known = tx.Bucket(bucketKnown).Get([]byte(e.Message.MessageID)) != nil
		if err := noteConv(tx.Bucket(bucketConvs), e); err != nil {
			return err
		}
		return m.Put(keyCursor, u64(uint64(e.Seq)))
	})
	return applied, known, err
}

// skip moves the cursor from `from` over expired entries to `to`, and
// records the skipped range.
func (s *store) skip(from, to int64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if err := m.Put(keyCursor, u64(uint64(to))); err != nil {
			return err
		}
		return m.Put(keySkipped, fmt.Appendf(nil, "%d-%d", from+1, to))
	})
}

// skipped returns the last range of seqs that expired before this device
// synced them ("" if none).
func (s *store) skipped() (string, error) {
	var out string
	err := s.db.View(func(tx *bolt.Tx) error {
		out = string(tx.Bucket(bucketMeta).Get(keySkipped))
		return nil
	})
	return out, err
}

// reset forgets the inbox position after the server's sequence restarted
// (new epoch, cursor beyond head). The messages held so far are remembered
// by id, so pulling the new sequence from 0 does not show them twice when
// the server kept them (a restore, an inbox re-created around old
// messages).
func (s *store) reset(epoch string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		known := tx.Bucket(bucketKnown)
		err := tx.Bucket(bucketInbox).ForEach(func(_, v []byte) error {
			var e wire.Entry
			if json.Unmarshal(v, &e) != nil || e.Message.MessageID == "" {
				return nil
			}
			return known.Put([]byte(e.Message.MessageID), []byte{1})
		})
		if err != nil {
			return err
		}
		// The conversations' newest convSeqs go too: the server may have
		// restarted them, and a send's seen must not be above its head.
		for _, b := range [][]byte{bucketInbox, bucketConvs} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(keyCursor, u64(0)); err != nil {
			return err
		}
		return m.Put(keyEpoch, []byte(epoch))
	})
}

// noteConv records e's convSeq as its conversation's newest held, if it is.
func noteConv(convs *bolt.Bucket, e wire.Entry) error {
	k := []byte(e.Message.ConversationID)
	if len(k) == 0 {
		return nil
	}
	if v := convs.Get(k); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= e.Message.ConvSeq {
		return nil
	}
	return convs.Put(k, u64(uint64(e.Message.ConvSeq)))
}

// seen returns the newest convSeq this device holds of the 1:1 conversation
// a draft goes to — conversationId "d:…", or the one with user `to` — for
// the send frame's "seen" (0 when it holds none). ok is false when the frame
// says nothing: a group, or a draft by recipient before the device knows its
// own user (a 1:1 ACK tells it), since convSeqs of other conversations say
// nothing about this one (a note to oneself, "d:me:me", included).
func (s *store) seen(to, conversationID string) (seen int64, ok bool, err error) {
	if conversationID != "" && !strings.HasPrefix(conversationID, "d:") {
		return 0, false, nil
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if conversationID == "" {
			me := string(tx.Bucket(bucketMeta).Get(keyMe))
			if me == "" {
				return nil
			}
			conversationID = string(im.Direct(im.UserID(me), im.UserID(to)))
		}
		ok = true
		if v := tx.Bucket(bucketConvs).Get([]byte(conversationID)); len(v) == 8 {
			seen = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return seen, ok, err
}

func (s *store) setEpoch(epoch string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyEpoch, []byte(epoch)) })
}

// entries returns stored entries with seq > after, ascending, at most limit (0: all).
func (s *store) entries(after int64, limit int) ([]wire.Entry, error) {
	var out []wire.Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketInbox).Cursor()
		for k, v := c.Seek(u64(uint64(after + 1))); k != nil; k, v = c.Next() {
			var e wire.Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			out = append(out, e)
			if limit > 0 && len(out) == limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// enqueue writes a send to the outbox (before it is sent), unless the
// clientMsgId is there already or was ACKed: then it returns what it found
// (the caller compares fingerprints) and writes nothing.
func (s *store) enqueue(it outboxItem) (prev *sentRecord, pending *outboxItem, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketSent).Get([]byte(it.ID)); v != nil {
			prev = &sentRecord{}
			return json.Unmarshal(v, prev)
		}
		b := tx.Bucket(bucketOutbox)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var o outboxItem
			if json.Unmarshal(v, &o) == nil && o.ID == it.ID {
				pending = &o
				return nil
			}
		}
		n, _ := b.NextSequence()
		v, _ := json.Marshal(it)
		return b.Put(u64(n), v)
	})
	return prev, pending, err
}

// outbox returns the pending sends in the order they were made.
func (s *store) outbox() ([]outboxItem, error) {
	var out []outboxItem
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOutbox).ForEach(func(k, v []byte) error {
			var it outboxItem
			if err := json.Unmarshal(v, &it); err != nil {
				return err
			}
			it.Key = binary.BigEndian.Uint64(k)
			out = append(out, it)
			return nil
		})
	})
	return out, err
}

// settle removes a send from the outbox and records its ACK (nil: dropped).
func (s *store) settle(id string, ack *wire.Sent) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOutbox)
		c := b.Cursor()
		var fp string
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var it outboxItem
			if json.Unmarshal(v, &it) == nil && it.ID == id {
				if err := b.Delete(k); err != nil {
					return err
				}
				fp = it.Fp
				break
			}
		}
		if ack == nil {
			return nil
		}
		if m := ack.Message; m != nil && m.From != "" && strings.HasPrefix(m.ConversationID, "d:") {
			if err := tx.Bucket(bucketMeta).Put(keyMe, []byte(m.From)); err != nil {
				return err
			}
		}
		v, _ := json.Marshal(sentRecord{Sent: *ack, Fp: fp})
		return tx.Bucket(bucketSent).Put([]byte(id), v)
	})
}

// sent returns the recorded server ACK of a clientMsgId, if any.
func (s *store) sent(id string) (*wire.Sent, error) {
	var out *wire.Sent
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketSent).Get([]byte(id)); v != nil {
			var r sentRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = &r.Sent
		}
		return nil
	})
	return out, err
}

// Journal is what a device store holds, for reconciliation.
type Journal struct {
	// Cursor and Epoch are the device's position.
	Cursor int64
	Epoch  string
	// Entries are the persisted inbox entries, ascending by seq.
	Entries []wire.Entry
}

// ReadJournal opens the store file at path read-only (a running client
// holds it locked: stop it first, or wait up to timeout) and returns its
// position and entries.
func ReadJournal(path string, timeout time.Duration) (Journal, error) {
	if _, err := os.Stat(path); err != nil {
		return Journal{}, fmt.Errorf("client store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return Journal{}, fmt.Errorf("open client store %s (is a client still running on it?): %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil || tx.Bucket(bucketInbox) == nil {
			return fmt.Errorf("%s is not a Signet client store", path)
		}
		return nil
	})
	if err != nil {
		return Journal{}, err
	}
	s := &store{db: db}
	var j Journal
	if j.Cursor, j.Epoch, err = s.position(); err != nil {
		return Journal{}, err
	}
	if j.Entries, err = s.entries(0, 0); err != nil {
		return Journal{}, err
	}
	return j, nil
}
