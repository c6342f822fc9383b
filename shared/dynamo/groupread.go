package dynamo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Group read diffusion, the store's part (docs/proposal-group-read-diffusion.md,
// step 1 of its order of work; no handler uses it yet). Under read diffusion
// a group message is written once, to the group's log; a member's devices
// pull the log within the member's range and ack it with a cursor per
// device and group. The cursors are attributes of the member's index item
// of the group (Inbox table, userId / v#<group>):
//
//	gc:<deviceId>    the highest convSeq the device acked (forward-only)
//	gt:<deviceId>    when it last moved, Unix ms
//
// so that one conditional write moves a cursor only for a member, only
// within the member's range and only forward — the membership fields are on
// the same item (base, left, removed: joinIndexUpdate and ChangeMembers
// keep them) — and one read of the item gives every device's cursor.
const (
	attrGroupCursor   = "gc:"
	attrGroupCursorAt = "gt:"
)

// AckGroup moves the cursor of a.User's device a.Device in group c forward
// to a.UpTo (stamped a.At). A lower or equal ack changes nothing
// (AckResult.Moved false); an ack above the last convSeq due to the member
// (the group's head, or where they left) is refused with a HeadError
// (im.ErrAckBeyondHead), and one by a user who was never a member with
// im.ErrNotMember — neither writes anything. It costs one write (and,
// unless a.Proven, a read of half a unit: the log item at a.UpTo, which
// proves the head is at least there; the head itself only when that item
// is not found).
func (st *Store) AckGroup(ctx context.Context, c im.ConversationID, a im.AckRange) (im.AckResult, error) {
	if !c.ValidGroup() {
		return im.AckResult{}, fmt.Errorf("group ack in %s: %w", c, im.ErrMalformedConversation)
	}
	// A proven ack brought the proof the server gave with the message at
	// a.UpTo (im.GroupProof): the log reaches it, no read says so.
	if !a.Proven {
		if err := st.logReaches(ctx, c, a.UpTo); err != nil {
			if _, beyond := errors.AsType[*im.HeadError](err); beyond {
				// Only a member learns where the head is.
				if it, rerr := st.indexItem(ctx, a.User, c); rerr == nil && (it == nil || it[attrBase] == nil) {
					err = im.ErrNotMember
				}
			}
			return im.AckResult{}, fmt.Errorf("group ack %s/%s in %s: %w", a.User, a.Device, c, err)
		}
	}
	cur, at := attrGroupCursor+string(a.Device), attrGroupCursorAt+string(a.Device)
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(st.tables.Inbox),
		Key:              inboxKey(a.User, convIndexSK(c)),
		UpdateExpression: aws.String("SET #c = :n, #t = :now"),
		ConditionExpression: aws.String("attribute_exists(#base) AND (attribute_not_exists(#removed) OR #removed = :zero OR #left >= :n)" +
			" AND (attribute_not_exists(#c) OR #c < :n)"),
		ExpressionAttributeNames: map[string]string{"#c": cur, "#t": at, "#base": attrBase, "#removed": attrRemoved, "#left": attrLeft},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": n(a.UpTo), ":now": n(a.At.UnixMilli()), ":zero": n(0),
		},
		ReturnValues: types.ReturnValueUpdatedOld,
	})
	if err == nil {
		return im.AckResult{Old: getN(out.Attributes, cur), Moved: true}, nil
	}
	if !isConditionFailed(err) {
		return im.AckResult{}, fmt.Errorf("group ack %s/%s in %s up to %d: %w", a.User, a.Device, c, a.UpTo, err)
	}
	// Not moved: say why (one read, on this path only).
	it, err := st.indexItem(ctx, a.User, c)
	if err != nil {
		return im.AckResult{}, fmt.Errorf("group ack %s/%s in %s: %w", a.User, a.Device, c, err)
	}
	if it == nil || it[attrBase] == nil {
		return im.AckResult{}, fmt.Errorf("group ack %s/%s in %s: %w", a.User, a.Device, c, im.ErrNotMember)
	}
	if m := indexMember(a.User, it); m.Removed && a.UpTo > m.Left {
		return im.AckResult{}, fmt.Errorf("group ack %s/%s in %s: %w", a.User, a.Device, c,
			&im.HeadError{Err: im.ErrAckBeyondHead, Position: a.UpTo, Head: m.Left})
	}
	return im.AckResult{Old: getN(it, cur)}, nil
}

// logReaches returns nil when group c's log has reached convSeq upTo (a
// HeadError when it has not): the log item at upTo, read eventually
// consistent, proves it; only when that is not found (just written, or
// expired) is the head read, strongly consistent.
func (st *Store) logReaches(ctx context.Context, c im.ConversationID, upTo int64) error {
	if upTo <= 0 {
		return nil
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(st.tables.Messages),
		Key:                      convKey(c, convSK(upTo)),
		ProjectionExpression:     aws.String("#sk"),
		ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	})
	if err != nil {
		return err
	}
	if out.Item != nil {
		return nil
	}
	h, err := st.readHead(ctx, c)
	if err != nil {
		return err
	}
	if upTo > h.seq {
		return &im.HeadError{Err: im.ErrAckBeyondHead, Position: upTo, Head: h.seq}
	}
	return nil
}

// indexItem reads u's index item of conversation c (nil when none),
// strongly consistent.
func (st *Store) indexItem(ctx context.Context, u im.UserID, c im.ConversationID) (map[string]types.AttributeValue, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// indexMember reads the membership fields of u's index item of a group.
func indexMember(u im.UserID, it map[string]types.AttributeValue) im.Member {
	return im.Member{User: u, Role: im.RoleMember, Joined: getN(it, attrBase), Removed: getN(it, attrRemoved) == 1, Left: getN(it, attrLeft), Past: pastFrom(it)}
}

// groupCursorsOf reads the group cursors an index item holds, by device
// (a forgotten device's retired one under its retired name, d~registered;
// none that is 0: a cursor starts at a convSeq, and a retired device id
// holds 0 until a device takes the id again).
func groupCursorsOf(it map[string]types.AttributeValue) map[im.DeviceID]im.DeviceCursor {
	out := map[im.DeviceID]im.DeviceCursor{}
	for name := range it {
		d, ok := strings.CutPrefix(name, attrGroupCursor)
		if !ok || getN(it, name) == 0 {
			continue
		}
		out[im.DeviceID(d)] = im.DeviceCursor{Acked: getN(it, name), AckedAt: time.UnixMilli(getN(it, attrGroupCursorAt+d)).UTC()}
	}
	return out
}

// retiredSep separates a forgotten device's id from when it was
// registered in the name its group cursors are retired under; a device id
// never holds it (im.DeviceID.Valid).
const retiredSep = "~"

// retiredDevice returns the device id a group cursor name stands for, and
// whether it is a forgotten device's retired cursor (d~registered).
func retiredDevice(d im.DeviceID) (im.DeviceID, bool) {
	id, _, retired := strings.Cut(string(d), retiredSep)
	return im.DeviceID(id), retired
}

// retireGroupCursors moves forgotten device d's cursor in each of u's
// read-diffused groups to the retired name d~registered and sets d's own
// to 0: the delivered watermark (the user's highest cursor) and the
// derived trace keep reading it, and a new device that later connects
// with the id d stands at the member's start, as every new device does,
// instead of where the forgotten one stood (which would hide from it
// what it never pulled until the group's next message). One strongly
// consistent Query of u's group index items and one write per group the
// device acked in, conditional on its cursor not having moved since it
// was read (an ack meanwhile: im.ErrContention). A retry after a partial
// failure finds the groups done at 0 and moves on.
func (st *Store) retireGroupCursors(ctx context.Context, u im.UserID, d im.DeviceID, registered int64) error {
	cur, at := attrGroupCursor+string(d), attrGroupCursorAt+string(d)
	retired := string(d) + retiredSep + strconv.FormatInt(registered, 10)
	q := st.groupIndexQuery(u)
	q.ConsistentRead = aws.Bool(true)
	var held []map[string]types.AttributeValue
	if err := st.queryAll(ctx, q, func(it map[string]types.AttributeValue) {
		if getN(it, cur) > 0 {
			held = append(held, it)
		}
	}); err != nil {
		return fmt.Errorf("group cursors of %s/%s: %w", u, d, err)
	}
	for _, it := range held {
		c := strings.TrimPrefix(getS(it, attrSK), convIndexSK(""))
		_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:        aws.String(st.tables.Inbox),
			Key:              inboxKey(u, getS(it, attrSK)),
			UpdateExpression: aws.String("SET #rc = :acked, #rt = :at, #c = :zero, #t = :zero"),
			// Not REMOVE: minidyn's REMOVE leaves the attribute behind.
			ConditionExpression: aws.String("#c = :acked"),
			ExpressionAttributeNames: map[string]string{
				"#c": cur, "#t": at, "#rc": attrGroupCursor + retired, "#rt": attrGroupCursorAt + retired,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":acked": n(getN(it, cur)), ":at": n(getN(it, at)), ":zero": n(0),
			},
		})
		if isConditionFailed(err) {
			return fmt.Errorf("device %s/%s acked in %s while being forgotten: %w", u, d, c, im.ErrContention)
		}
		if err != nil {
			return fmt.Errorf("group cursor of %s/%s in %s: %w", u, d, c, err)
		}
	}
	return nil
}

// GroupCursors returns the cursors in group c of the given members'
// devices (BatchGetItem of their index items, eventually consistent: the
// redelivery check reads them seconds after the push, and a cursor read a
// moment stale costs one push again, never a message); a device that
// never acked in c has none.
func (st *Store) GroupCursors(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.DeviceKey]im.DeviceCursor, error) {
	return st.groupCursors(ctx, c, users, false)
}

// GroupCursorsNow is GroupCursors read strongly consistent: for tools and
// tests that read a cursor right after an ack moved it (an eventually
// consistent read may be answered by a replica a moment behind, and a
// second read by one further behind than the first).
func (st *Store) GroupCursorsNow(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.DeviceKey]im.DeviceCursor, error) {
	return st.groupCursors(ctx, c, users, true)
}

func (st *Store) groupCursors(ctx context.Context, c im.ConversationID, users []im.UserID, consistent bool) (map[im.DeviceKey]im.DeviceCursor, error) {
	keys := make([]map[string]types.AttributeValue, len(users))
	for i, u := range users {
		keys[i] = inboxKey(u, convIndexSK(c))
	}
	out := map[im.DeviceKey]im.DeviceCursor{}
	err := st.batchGet(ctx, st.tables.Inbox, keys, consistent, func(it map[string]types.AttributeValue) {
		u := im.UserID(getS(it, attrUser))
		for d, cur := range groupCursorsOf(it) {
			out[im.DeviceKey{User: u, Device: d}] = cur
		}
	})
	if err != nil {
		return nil, fmt.Errorf("group cursors in %s: %w", c, err)
	}
	return out, nil
}

// GroupPage pulls the messages of group c above cursor that are due to
// member u (im.Member.Range), oldest first: at most limit (≤
// im.MaxPageEntries) whose sizes sum to at most im.MaxPageBytes, at least
// one. A user who was never a member gets im.ErrNotMember; a cursor above
// the last convSeq due to them a HeadError (im.ErrCursorBeyondHead).
// Messages past the history retention are gone: the page then starts
// later (Truncated, FirstSeq).
func (st *Store) GroupPage(ctx context.Context, c im.ConversationID, u im.UserID, cursor int64, limit int, size func(im.Message) int) (im.GroupPage, error) {
	h, members, err := st.groupState(ctx, c, []im.UserID{u})
	if err != nil {
		return im.GroupPage{}, err
	}
	m := members[u]
	if !h.live() || !m.Role.Valid() {
		return im.GroupPage{}, fmt.Errorf("group page of %s in %s: %w", u, c, im.ErrNotMember)
	}
	end := m.End(h.seq)
	if cursor > end {
		return im.GroupPage{}, fmt.Errorf("group page of %s in %s: %w", u, c, &im.HeadError{Err: im.ErrCursorBeyondHead, Position: cursor, Head: end})
	}
	limit = min(max(limit, 1), im.MaxPageEntries)
	p := im.GroupPage{Next: cursor, Head: end}
	// The next run due above the cursor: of an earlier membership (a
	// member added again), else of the current one.
	from, due := m.Range(cursor, h.seq)
	if from >= due {
		// Nothing due above the cursor: continue from the end (the
		// member's start, when the cursor is below it and nothing was sent
		// since).
		p.Next = end
		return p, nil
	}
	q := st.logSpan(c, from+1, due)
	q.ConsistentRead = aws.Bool(true)
	q.Limit = aws.Int32(int32(limit))
	var bad error
	err = st.queryUntil(ctx, q, func(it map[string]types.AttributeValue) bool {
		msg, err := messageFrom(c, it)
		if err != nil {
			bad = err
			return false
		}
		p.Messages = append(p.Messages, msg)
		return len(p.Messages) < limit
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return im.GroupPage{}, fmt.Errorf("group page of %s in %s after %d: %w", u, c, cursor, err)
	}
	p.Messages = im.Fit(p.Messages, limit, im.MaxPageBytes, size)
	if k := len(p.Messages); k > 0 {
		p.Next = p.Messages[k-1].ConvSeq
		if first := p.Messages[0].ConvSeq; first > from+1 {
			p.Truncated, p.FirstSeq = true, first
		}
	} else {
		// Every message due after from has expired.
		p.Truncated, p.FirstSeq, p.Next = true, due+1, due
	}
	p.More = p.Next < end
	return p, nil
}

// ReadGroups lists u's read-diffused groups with where device d stands in
// each: the last convSeq due to u and the device's cursor (a device that
// never acked in a group stands at the member's start) — what a device
// pulls when it connects (im.GroupPosition.Behind). One Query of u's group
// index items and one BatchGetItem of the read-diffused ones' heads (their
// index items are marked reads), both strongly consistent: a sync's last
// page and a pong promise the device everything up to these heads, and
// nothing else tells it of a message sent a moment before it connected
// (the fan-out read the group's online index before the connection was in
// it) or of a group it was added to a moment before — an eventually
// consistent read a second behind, as memdyn-stale answers one in two,
// left such a device behind until the group's next message (the chaos run
// on memdyn-stale, forty-fifth session). A user of written groups only
// pays the Query, a read unit per 4 KB of index items, per sync.
func (st *Store) ReadGroups(ctx context.Context, u im.UserID, d im.DeviceID) ([]im.GroupPosition, error) {
	q := st.groupIndexQuery(u)
	q.ConsistentRead = aws.Bool(true)
	type mine struct {
		m     im.Member
		acked int64
	}
	groups := map[im.ConversationID]mine{}
	var keys []map[string]types.AttributeValue
	err := st.queryAll(ctx, q, func(it map[string]types.AttributeValue) {
		c := im.ConversationID(strings.TrimPrefix(getS(it, attrSK), convIndexSK("")))
		if it[attrBase] == nil || getN(it, attrReads) != 1 {
			return // a written group's head is not read: it is synced in the inbox
		}
		groups[c] = mine{indexMember(u, it), getN(it, attrGroupCursor+string(d))}
		keys = append(keys, convKey(c, skHead))
	})
	if err != nil {
		return nil, fmt.Errorf("groups of %s: %w", u, err)
	}
	var out []im.GroupPosition
	err = st.batchGet(ctx, st.tables.Messages, keys, true, func(it map[string]types.AttributeValue) {
		c := im.ConversationID(getS(it, attrConv))
		g, h := groups[c], headFrom(it)
		if !h.reads {
			return
		}
		// The device stands before the first message due to it (of an
		// earlier membership, when it had not pulled that before the
		// member was added again), or at the end when none is.
		end := g.m.End(h.seq)
		acked := end
		if from, to := g.m.Range(g.acked, h.seq); from < to {
			acked = from
		}
		out = append(out, im.GroupPosition{Conversation: c, Head: end, Acked: acked})
	})
	if err != nil {
		return nil, fmt.Errorf("group heads of %s: %w", u, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Conversation < out[j].Conversation })
	return out, nil
}

// groupIndexQuery is the Query of u's group index items (one per group
// u was ever a member of).
func (st *Store) groupIndexQuery(u im.UserID) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :g)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":g": s(convIndexSK("g:"))},
	}
}

// withGroupHeads fills in the last message of the read-diffused groups
// among states (index items, whose last such a group does not move): the
// group's head as due to the user (where they left, if removed) and that
// message's sender, time and preview. Two BatchGetItem calls of the
// Messages table, strongly consistent (until the forty-fifth session
// eventually: the store suite on memdyn-stale found a summary asked for
// right after group messages counting none of them unread).
func (st *Store) withGroupHeads(ctx context.Context, states []im.ConversationState) error {
	at := map[im.ConversationID]int{}
	var keys []map[string]types.AttributeValue
	for i, s := range states {
		if s.ReadDiffused {
			at[s.Conversation] = i
			keys = append(keys, convKey(s.Conversation, skHead))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	var logKeys []map[string]types.AttributeValue
	// Strongly consistent, as ReadGroups: a summary asked for right after a
	// group message counts it unread.
	err := st.batchGet(ctx, st.tables.Messages, keys, true, func(it map[string]types.AttributeValue) {
		i := at[im.ConversationID(getS(it, attrConv))]
		s := &states[i]
		m := im.Member{Role: im.RoleMember, Joined: s.Base, Removed: s.Removed, Left: s.Left, Past: s.Past}
		if due := m.LastDue(headFrom(it).seq); due > 0 {
			s.Last = due
			logKeys = append(logKeys, convKey(s.Conversation, convSK(due)))
		}
	})
	if err == nil && len(logKeys) > 0 {
		err = st.batchGet(ctx, st.tables.Messages, logKeys, true, func(it map[string]types.AttributeValue) {
			i := at[im.ConversationID(getS(it, attrConv))]
			m, merr := messageFrom(states[i].Conversation, it)
			if merr != nil {
				return // the preview is left out; last stands
			}
			states[i].LastFrom, states[i].LastAt, states[i].Preview = m.From, m.SentAt, im.Preview(m.Body)
		})
	}
	if err != nil {
		return fmt.Errorf("heads of read-diffused groups: %w", err)
	}
	return nil
}
