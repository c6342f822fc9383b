package client

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/signet-im/signet/shared/wire"
)

// Groups under read diffusion (docs/proposal-group-read-diffusion.md): a
// group's messages are pushed as "groupMessage" frames without an inbox
// seq; the device keeps a cursor per group (the highest convSeq it has
// persisted), pulls what it misses with group syncs and acks each group
// cumulatively, in the same ack window as the inbox.

var (
	bucketGroupCursors = []byte("gcursors") // conversationId → cursor (8 bytes BE)
	bucketGroupLog     = []byte("glog")     // conversationId 0x00 convSeq (8 bytes BE) → wire.Message JSON
)

// groupSyncRetry is how long a group sync may go unanswered (refused, or
// lost with its connection's frames) before the device asks again.
const groupSyncRetry = 10 * time.Second

// groupState is one group's position in a session.
type groupState struct {
	cursor, lastAck, needAck int64
	// behind is the highest convSeq known to exist (a push not applied,
	// a head a sync page or notify named): a sync that ends below it is
	// followed by another.
	behind int64
	// own is the highest convSeq of this device's own messages that came
	// in "sent" and could not be applied yet (ownFromSent: no push or
	// redelivery brings them): syncs go on until the cursor reaches it,
	// whatever head a page answered before it was stored.
	own      int64
	forceAck bool
	// ackedAt is when an ack of this group was last written.
	ackedAt  time.Time
	syncing  bool
	syncSent time.Time
	syncRef  string // the ref of the sync in flight
	// proof is the server's proof of convSeq proofAt (a push's or a page's
	// last message's): an ack up to proofAt brings it back.
	proof   string
	proofAt int64
}

// groupCursor reads a group's stored cursor (known false: never pulled).
func (s *store) groupCursor(conv string) (cursor int64, known bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketGroupCursors); b != nil {
			if v := b.Get([]byte(conv)); len(v) == 8 {
				cursor, known = int64(beUint64(v)), true
			}
		}
		return nil
	})
	return cursor, known, err
}

func beUint64(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}

// applyGroup stores message m of its group and moves the group's cursor to
// it, in one transaction, if it comes next: a pushed one only at cursor+1
// of a known cursor; a synced one anywhere above the cursor (a group sync
// page holds every message due above it, from where the member joined).
func (s *store) applyGroup(m wire.Message, synced bool) (applied bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		cursors, err := tx.CreateBucketIfNotExists(bucketGroupCursors)
		if err != nil {
			return err
		}
		log, err := tx.CreateBucketIfNotExists(bucketGroupLog)
		if err != nil {
			return err
		}
		v := cursors.Get([]byte(m.ConversationID))
		cursor, known := int64(0), len(v) == 8
		if known {
			cursor = int64(beUint64(v))
		}
		if m.ConvSeq <= cursor || !synced && (!known || m.ConvSeq != cursor+1) {
			return nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		key := append(append([]byte(m.ConversationID), 0), u64(uint64(m.ConvSeq))...)
		if err := log.Put(key, b); err != nil {
			return err
		}
		applied = true
		return cursors.Put([]byte(m.ConversationID), u64(uint64(m.ConvSeq)))
	})
	return applied, err
}

// groupMessagesAfter lists the stored messages of each group with convSeq
// above shown[group] (0 for a group not named), by group and convSeq.
func (s *store) groupMessagesAfter(shown map[string]int64) ([]wire.Message, error) {
	var out []wire.Message
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGroupLog)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			// conversationId 0x00 convSeq (8 bytes BE)
			i := len(k) - 9
			if i < 1 || k[i] != 0 || int64(beUint64(k[i+1:])) <= shown[string(k[:i])] {
				return nil
			}
			var m wire.Message
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

// markGroupKnown records an empty group's cursor (a sync found nothing due).
func (s *store) markGroupKnown(conv string, cursor int64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketGroupCursors)
		if err != nil {
			return err
		}
		if v := b.Get([]byte(conv)); len(v) == 8 && int64(beUint64(v)) >= cursor {
			return nil
		}
		return b.Put([]byte(conv), u64(uint64(cursor)))
	})
}

// GroupCursor returns the highest convSeq of read-diffused group conv this
// device has persisted (0 when none).
func (c *Client) GroupCursor(conv string) (int64, error) {
	cursor, _, err := c.store.groupCursor(conv)
	return cursor, err
}

// group returns the session's state of conv, loading its stored cursor.
func (s *session) group(conv string) (*groupState, bool, error) {
	if s.groups == nil {
		s.groups = map[string]*groupState{}
	}
	if g, ok := s.groups[conv]; ok {
		return g, true, nil
	}
	cursor, known, err := s.c.store.groupCursor(conv)
	if err != nil {
		return nil, false, err
	}
	g := &groupState{cursor: cursor, lastAck: cursor}
	if known {
		s.groups[conv] = g
	}
	return g, known, nil
}

// requestGroupSync pulls conv above the group's cursor (once at a time).
// While group syncs are held (holdGroupSyncs) it only marks the group as
// syncing, to be asked when the hold ends.
func (s *session) requestGroupSync(ctx context.Context, conv string, g *groupState) error {
	if g.syncing && time.Since(g.syncSent) < groupSyncRetry {
		return nil
	}
	if s.groups == nil {
		s.groups = map[string]*groupState{}
	}
	s.groups[conv] = g
	if hold := s.c.holdUntil(kindQuery); time.Now().Before(hold) {
		g.syncing, g.syncSent = true, hold.Add(-groupSyncRetry)
		return nil
	}
	ref := s.c.syncRef(groupSyncRef)
	g.syncing, g.syncSent, g.syncRef = true, time.Now(), ref.Ref
	cursor := g.cursor
	return s.write(ctx, wire.Sync{Action: wire.ActionSync, ConversationID: conv, Cursor: &cursor, Limit: 100, Query: ref})
}

// groupPush applies a pushed group message next in line; a gap, or a group
// this device has never pulled, is pulled first (the push is taken from
// the sync); a duplicate asks for an ack (the server may have missed it).
func (s *session) groupPush(ctx context.Context, m wire.Message, proof string) error {
	g, known, err := s.group(m.ConversationID)
	if err != nil {
		return err
	}
	switch {
	case known && m.ConvSeq <= g.cursor:
		g.forceAck = true
		return nil
	case !known || m.ConvSeq > g.cursor+1 || g.syncing:
		g.behind = max(g.behind, m.ConvSeq)
		return s.requestGroupSync(ctx, m.ConversationID, g)
	}
	if err := s.applyGroupMessage(m, g, false); err != nil {
		return err
	}
	if proof != "" && g.cursor == m.ConvSeq {
		g.proof, g.proofAt = proof, m.ConvSeq
	}
	if !s.pushWaiting {
		s.pushWaiting, s.pushedAt = true, time.Now()
	}
	if s.unacked++; s.unacked >= s.c.opts.AckBatch {
		return s.ack(ctx)
	}
	return nil
}

// groupOwn applies this device's own message m of a group under read
// diffusion, which came in "sent" (the send's ownFromSent) instead of as a
// push: as a push would be, but with no ack of its own (the group's next
// ack, cumulative, covers it), as the inbox's own entry in 1:1 needs none.
// Out of order (a gap before it, or the group never pulled) it is pulled;
// the group's first message needs no pull (nothing is before it: the
// group's creator sending into it before anything else).
func (s *session) groupOwn(ctx context.Context, m wire.Message, proof string) error {
	g, known, err := s.group(m.ConversationID)
	if err != nil {
		return err
	}
	first := !known && m.ConvSeq == 1 && !g.syncing
	switch {
	case known && m.ConvSeq <= g.cursor:
		return nil
	case !first && (!known || m.ConvSeq > g.cursor+1 || g.syncing):
		g.behind, g.own = max(g.behind, m.ConvSeq), max(g.own, m.ConvSeq)
		return s.requestGroupSync(ctx, m.ConversationID, g)
	}
	if first {
		s.groups[m.ConversationID] = g
	}
	needAck := g.needAck
	if err := s.applyGroupMessage(m, g, first); err != nil {
		return err
	}
	g.needAck = needAck
	if proof != "" && g.cursor == m.ConvSeq {
		g.proof, g.proofAt = proof, m.ConvSeq
	}
	return nil
}

// applyGroupMessage persists m and hands it to the application.
func (s *session) applyGroupMessage(m wire.Message, g *groupState, synced bool) error {
	applied, err := s.c.store.applyGroup(m, synced)
	if err != nil || !applied {
		return err
	}
	g.cursor, g.needAck = m.ConvSeq, m.ConvSeq
	select {
	case s.c.msgs <- toMessage(wire.Entry{Message: m}):
		return nil
	case <-s.c.done:
		return errors.New("closed")
	}
}

// groupPage applies one page of a group sync; the last one is acked.
func (s *session) groupPage(ctx context.Context, p wire.GroupSyncPage) error {
	g, _, err := s.group(p.ConversationID)
	if err != nil {
		return err
	}
	for _, m := range p.Messages {
		if err := s.applyGroupMessage(m, g, true); err != nil {
			return err
		}
	}
	if len(p.Messages) == 0 {
		// Nothing due above the cursor (or it all expired): the group is
		// known from here.
		if err := s.c.store.markGroupKnown(p.ConversationID, max(g.cursor, p.NextCursor)); err != nil {
			return err
		}
		g.cursor = max(g.cursor, p.NextCursor)
	}
	if p.Proof != "" && len(p.Messages) > 0 && g.cursor == p.NextCursor {
		g.proof, g.proofAt = p.Proof, p.NextCursor
	}
	s.groups[p.ConversationID] = g
	g.syncing = false
	if p.HasMore || g.cursor < max(min(g.behind, p.Head), g.own) {
		return s.requestGroupSync(ctx, p.ConversationID, g)
	}
	if !s.syncing && !s.groupsSyncing() {
		s.c.synced.Store(true)
	}
	return s.ack(ctx)
}

// groupsSyncing reports whether a group sync is under way.
func (s *session) groupsSyncing() bool {
	return slices.ContainsFunc(slices.Collect(maps.Values(s.groups)), func(g *groupState) bool { return g.syncing })
}

// pullGroups pulls the groups a sync page or notify names that this
// device is behind in or has never pulled. Until they are pulled the
// client does not count as synced.
func (s *session) pullGroups(ctx context.Context, heads []wire.GroupHead) error {
	for _, h := range heads {
		g, known, err := s.group(h.ConversationID)
		if err != nil {
			return err
		}
		if !known || h.Head > g.cursor {
			s.c.synced.Store(false)
			g.behind = max(g.behind, h.Head)
			if err := s.requestGroupSync(ctx, h.ConversationID, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// ackGroups acks every group with something applied since its last ack
// (or a duplicate push).
func (s *session) ackGroups(ctx context.Context) error {
	for conv, g := range s.groups {
		if g.needAck <= g.lastAck && !g.forceAck {
			continue
		}
		upTo := g.cursor
		ack := wire.Ack{Action: wire.ActionAck, ConversationID: conv, UpTo: &upTo}
		if g.proofAt == upTo {
			ack.Proof = g.proof
		}
		if err := s.write(ctx, ack); err != nil {
			return err
		}
		g.lastAck, g.forceAck, g.ackedAt = upTo, false, time.Now()
	}
	return nil
}

// holdGroupSyncs holds the client's queries, group syncs among them, for
// wait after a group sync was refused rate_limited (hold): the
// unanswered ones are asked again when the hold ends, as are those asked
// for meanwhile.
func (s *session) holdGroupSyncs(wait time.Duration) {
	s.c.hold(kindQuery, time.Now().Add(wait))
	hold := s.c.holdUntil(kindQuery)
	for _, g := range s.groups {
		if g.syncing {
			g.syncSent = hold.Add(-groupSyncRetry)
		}
	}
}

// retryGroupSyncs asks again for group syncs unanswered for groupSyncRetry.
func (s *session) retryGroupSyncs(ctx context.Context) error {
	for conv, g := range s.groups {
		if g.syncing && time.Since(g.syncSent) >= groupSyncRetry {
			if err := s.requestGroupSync(ctx, conv, g); err != nil {
				return err
			}
		}
	}
	return nil
}
