package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// SendGroup stores a group draft in the conversation log exactly once per
// (sender, clientMsgId): the log entry, the sender's idempotency item and
// their read watermark, conditional on their being a current member, in
// one transaction. Member inboxes are filled later by the fan-out
// (AppendGroup). A retry returns the stored result with Replayed set. A
// sender who is not a current member gets im.ErrNotMember, except for a
// retry of a send accepted before they left, which is answered with its
// stored result.
func (st *Store) SendGroup(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	stored, err := st.groupSend(ctx, d, now)
	if errors.Is(err, im.ErrNotMember) {
		// A retry of a send accepted before the sender left is still
		// answered; one whose look-up failed is that failure (asked again,
		// it may find the send), never "not a member" for a message the
		// sender's device may hold an ACK of.
		replayed, rerr := st.replay(ctx, d)
		switch {
		case rerr == nil:
			return replayed, nil
		case !errors.Is(rerr, im.ErrNotFound):
			return im.Stored{}, rerr
		}
	}
	return stored, err
}

// groupSend is SendGroup's transaction: the log item and idempotency item,
// the group head advanced, and the sender's read watermark moved to the
// message on condition of their membership. A read-diffused group's log
// item records the draft's OwnConnection (Message.TakenBy).
func (st *Store) groupSend(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	checkMember := false
	return st.transactSend(ctx, d, func(prev error) ([]types.TransactWriteItem, im.Stored, error) {
		h, members, err := st.groupState(ctx, d.Conversation, []im.UserID{d.From})
		if err != nil {
			return nil, im.Stored{}, err
		}
		head, member := h.seq, members[d.From]
		if !member.Active() || h.pending != "" { // staged members are nobody's yet
			return nil, im.Stored{}, fmt.Errorf("%s in %s: %w", d.From, d.Conversation, im.ErrNotMember)
		}
		msg := im.Message{ID: im.NewLocatedMessageID(now, d.Conversation, head+1), Conversation: d.Conversation, ConvSeq: head + 1, From: d.From, Body: d.Body, SentAt: now}
		if h.reads {
			msg.TakenBy = d.OwnConnection
		}
		// What you write you have read (see senderIndexUpdate): the
		// sender's read watermark moves to the message, on condition that
		// they are still a member. Their index item says so as their member
		// item does (base from the join, removed: joinIndexUpdate and
		// changeChunk write both in one transaction), so a removal that
		// commits between groupState's read and this transaction fails it
		// here, and the next attempt's read refuses the send: no
		// ConditionCheck of the member item (two write units a message).
		items := st.sendItems(d, msg, heads{conv: head}, nil, now)
		// If the index item failed the condition though the member item
		// (just read) says member — a staged create's members before their
		// index items are written (createStaged writes them after its
		// commit), or items from outside Signet — the member item decides,
		// as it did before the index carried membership.
		if checkMember = checkMember || failedAt(prev, len(items)); checkMember {
			items = append(items, memberCheck(st.tables.Messages, d))
		}
		items = append(items, readWatermark(st.tables.Inbox, d, msg.ConvSeq, !checkMember))
		return items, im.Stored{Message: msg, Inboxed: map[im.UserID]int64{}, ReadDiffused: h.reads}, nil
	})
}

// memberCheck is a transaction's check that d's sender is a current
// member of its group (their member item).
func memberCheck(table string, d im.Draft) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(table), Key: convKey(d.Conversation, memberSK(d.From)),
		ConditionExpression:       aws.String("attribute_exists(#role) AND (attribute_not_exists(#removed) OR #removed = :zero)"),
		ExpressionAttributeNames:  map[string]string{"#role": "role", "#removed": attrRemoved},
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0)},
	}}
}

// readWatermark moves d's sender's read watermark in its group to convSeq;
// with member, on condition that their index item says they are a member.
func readWatermark(table string, d im.Draft, convSeq int64, member bool) types.TransactWriteItem {
	up := &types.Update{
		TableName: aws.String(table), Key: inboxKey(d.From, convIndexSK(d.Conversation)),
		UpdateExpression:          aws.String("SET #read = :c"),
		ExpressionAttributeNames:  map[string]string{"#read": attrRead},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": n(convSeq)},
	}
	if member {
		up.ConditionExpression = aws.String("attribute_exists(#base) AND (attribute_not_exists(#removed) OR #removed = :zero)")
		up.ExpressionAttributeNames["#base"], up.ExpressionAttributeNames["#removed"] = attrBase, attrRemoved
		up.ExpressionAttributeValues[":zero"] = n(0)
	}
	return types.TransactWriteItem{Update: up}
}

// FanoutMark returns group c's head and how far fan-out has been taken
// care of: every message up to it is in member inboxes (pushed to online
// members, for a read-diffused group: reads) or covered by fan-out jobs
// already enqueued (which SQS retries until they succeed).
func (st *Store) FanoutMark(ctx context.Context, c im.ConversationID) (head, marked int64, reads bool, err error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, 0, false, fmt.Errorf("fan-out mark of %s: %w", c, err)
	}
	return getN(out.Item, attrSeq), getN(out.Item, "fanned"), getN(out.Item, attrReads) == 1, nil
}

// SetFanoutMark raises group c's fan-out mark to upTo (never lowers it).
func (st *Store) SetFanoutMark(ctx context.Context, c im.ConversationID, upTo int64) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead),
		UpdateExpression:          aws.String("SET fanned = :u"),
		ConditionExpression:       aws.String("attribute_exists(#sk) AND (attribute_not_exists(fanned) OR fanned < :u)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": n(upTo)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("fan-out mark of %s: %w", c, err)
	}
	return nil
}

// Positions reads, for each user, the inbox head (inboxHeads) and how far
// the user's inbox holds group c (its conversation index item, read in the
// same BatchGetItem calls as the head items).
func (st *Store) Positions(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.UserID]im.InboxPosition, error) {
	out := make(map[im.UserID]im.InboxPosition, len(users))
	keys := make([]map[string]types.AttributeValue, 0, len(users))
	for _, u := range users {
		keys = append(keys, inboxKey(u, convIndexSK(c)))
	}
	last, lastSeq := map[im.UserID]int64{}, map[im.UserID]int64{}
	heads, err := st.inboxHeads(ctx, users, keys, func(it map[string]types.AttributeValue) {
		u := im.UserID(getS(it, attrUser))
		last[u], lastSeq[u] = getN(it, attrLast), getN(it, attrInboxSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("fan-out positions in %s: %w", c, err)
	}
	for _, u := range users {
		h := heads[u]
		out[u] = im.InboxPosition{Head: h.top, Last: last[u], LastSeq: lastSeq[u], Epoch: h.epoch,
			// No seq recorded: nothing claimed yet (a join's start), or
			// written with its entry in one transaction (before claims).
			LastInPlace: last[u] == 0 || lastSeq[u] == 0 || (lastSeq[u] == h.top && h.newest == logRef{c, last[u]})}
	}
	return out, nil
}

// Log returns the messages of conversation c with convSeq in (after, upTo], ascending.
func (st *Store) Log(ctx context.Context, c im.ConversationID, after, upTo int64) ([]im.Message, error) {
	var out []im.Message
	if upTo <= after {
		return out, nil
	}
	var bad error
	q := st.logSpan(c, after+1, upTo)
	q.ConsistentRead = aws.Bool(true)
	err := st.queryAll(ctx, q, func(it map[string]types.AttributeValue) {
		m, err := messageFrom(c, it)
		bad = cmp.Or(bad, err)
		out = append(out, m)
	})
	if err = cmp.Or(err, bad); err != nil {
		return nil, fmt.Errorf("log %s (%d, %d]: %w", c, after, upTo, err)
	}
	return out, nil
}

// messageFrom reads a conversation log item of c (its body inflated).
func messageFrom(c im.ConversationID, it map[string]types.AttributeValue) (im.Message, error) {
	m := im.Message{
		ID: im.MessageID(getS(it, attrMID)), Conversation: c, ConvSeq: getN(it, attrCSeq), From: im.UserID(getS(it, attrFrom)),
		SentAt: time.UnixMilli(getN(it, attrAt)).UTC(), TakenBy: im.ConnectionID(getS(it, attrTakenBy)),
	}
	body, err := bodyOf(it)
	if err != nil {
		return im.Message{}, fmt.Errorf("message %s#%d: %w", c, m.ConvSeq, err)
	}
	m.Body = body
	return m, nil
}

// AppendGroup appends msgs (ascending convSeqs of group c, all after
// pos.Last; none to only complete a claim not in place) to u's inbox, exactly once and in order however often it is
// retried or run concurrently, without a transaction (issue 12: two write
// units per member and message instead of four). Each message is first
// *claimed* — the user's conversation index moves its last convSeq from
// the predecessor to the message and records the inbox seq it will take
// (head + 1), on condition that last is still the predecessor — and then
// its entry is put at that seq, on condition that the seq is free. Only
// the run whose claim succeeded puts a message's entry, and only at the
// claimed seq, so no message is in an inbox twice; a message is claimed
// only after its predecessor's entry is known to be in place (checked, and
// put if a crashed run left it missing: SQS retries the fan-out job), so
// none is skipped or out of order. When another append took the claimed
// seq first (a 1:1 send), the claim moves to the new head + 1. The index
// may briefly be ahead of the entries (a summary may count a message whose
// entry is a moment away), never behind. It returns the entries this call
// put.
func (st *Store) AppendGroup(ctx context.Context, c im.ConversationID, u im.UserID, pos im.InboxPosition, msgs []im.Message, now time.Time) ([]im.Entry, error) {
	if len(msgs) == 0 && pos.LastInPlace {
		return nil, nil
	}
	var out []im.Entry
	if pos.Epoch == "" {
		// The inbox's first entry may be among these: give it its epoch
		// first, so that no reader sees an entry without one.
		if _, _, err := st.EnsureHead(ctx, u, now); err != nil {
			return nil, fmt.Errorf("fan-out %s to %s: %w", c, u, err)
		}
	}
	ttl := st.ttlAt(now)
	for attempt := 0; ; attempt++ {
		if attempt >= st.MaxAttempts {
			return out, fmt.Errorf("fan-out %s to %s: %w", c, u, im.ErrContention)
		}
		if attempt > 0 {
			if err := sleepJitter(ctx, attempt); err != nil {
				return out, err
			}
			p, err := st.Positions(ctx, c, []im.UserID{u})
			if err != nil {
				return out, err
			}
			pos = p[u]
		}
		if !pos.LastInPlace {
			e, err := st.placeClaimed(ctx, u, c, pos, ttl)
			if err != nil {
				if errors.Is(err, errMoved) {
					continue
				}
				return out, fmt.Errorf("fan-out %s to %s: %w", c, u, err)
			}
			if e != nil {
				out = append(out, *e)
				pos.LastSeq = e.Seq // where it went: the claimed seq, or above it
			}
			pos.Head, pos.LastInPlace = max(pos.Head, pos.LastSeq), true
		}
		for len(msgs) > 0 && msgs[0].ConvSeq <= pos.Last {
			msgs = msgs[1:]
		}
		if len(msgs) == 0 {
			return out, nil
		}
		if len(msgs) > 1 {
			// A backlog (a member behind, a burst): one transaction puts a
			// run of entries and claims the last of them together — on
			// condition that the claim is still the one read — instead of
			// two round trips per message.
			appended, err := st.appendRun(ctx, u, pos, msgs, ttl)
			if isTxRace(err) {
				continue
			}
			if err != nil {
				return out, fmt.Errorf("fan-out %s to %s: %w", c, u, err)
			}
			out = append(out, appended...)
			last := appended[len(appended)-1]
			pos = im.InboxPosition{Head: last.Seq, Last: last.Message.ConvSeq, LastSeq: last.Seq, Epoch: pos.Epoch, LastInPlace: true}
			attempt = -1
			continue
		}
		m := msgs[0]
		e := im.Entry{Seq: pos.Head + 1, Message: m}
		_, err := st.db.UpdateItem(ctx, claim(st.tables.Inbox, u, m, e.Seq, pos.Last))
		if isConditionFailed(err) {
			continue // another run claimed it (or something after it): read again
		}
		if err != nil {
			return out, fmt.Errorf("fan-out %s to %s: claim #%d: %w", c, u, m.ConvSeq, err)
		}
		pos = im.InboxPosition{Head: pos.Head, Last: m.ConvSeq, LastSeq: e.Seq, Epoch: pos.Epoch}
		put, err := st.putEntry(ctx, u, e, ttl)
		if err != nil {
			return out, fmt.Errorf("fan-out %s to %s: %w", c, u, err)
		}
		if !put {
			// Another append took the seq: follow it up.
			seq, ours, err := st.placeAbove(ctx, u, e, ttl)
			if err != nil {
				return out, fmt.Errorf("fan-out %s to %s: %w", c, u, err)
			}
			if seq == 0 {
				continue // the claim moved under this run: read again
			}
			e.Seq, put = seq, ours
			pos.LastSeq, pos.Head, pos.LastInPlace = seq, max(pos.Head, seq), true
		}
		if put {
			out = append(out, e)
			pos.Head, pos.LastInPlace = e.Seq, true
		}
		attempt = -1 // progress: the attempts count again
	}
}

// moveClaim moves u's claim of convSeq last in c from inbox seq was to
// to, on condition that the claim is still that (moved false: it changed).
func (st *Store) moveClaim(ctx context.Context, u im.UserID, c im.ConversationID, last, was, to int64) (moved bool, err error) {
	_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)),
		UpdateExpression:          aws.String("SET #iseq = :seq"),
		ConditionExpression:       aws.String("#last = :last AND #iseq = :was"),
		ExpressionAttributeNames:  map[string]string{"#iseq": attrInboxSeq, "#last": attrLast},
		ExpressionAttributeValues: map[string]types.AttributeValue{":seq": n(to), ":last": n(last), ":was": n(was)},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("move the claim of #%d: %w", last, err)
	}
	return true, nil
}

// maxProbes bounds how many seqs placeAbove follows up before it leaves
// the claim to the next round (which reads the head).
const maxProbes = 8

// placeAbove places e — claimed at e.Seq, which another append took — at
// the next free seq above it, moving the claim along, instead of reading
// the head again (under contention a lost race then costs a write and a
// read, not a round of head Queries). Each step reads the entry at the
// taken seq: if it is this very message, another run of this placement
// put it there and it is in place (ours false); else the claim moves one
// up, on condition that it still names this message at the seq found
// taken — so of two runs placing the same message only one moves it — and
// the entry is put there: the seq below is committed, so the inbox stays
// gap-free. It returns where the message is, and whether this call put it;
// seq 0 when the claim moved under it or the probes ran out (the caller
// reads the position again).
func (st *Store) placeAbove(ctx context.Context, u im.UserID, e im.Entry, ttl types.AttributeValue) (seq int64, ours bool, err error) {
	c := e.Message.Conversation
	for range maxProbes {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(e.Seq)), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, false, fmt.Errorf("entry #%d: %w", e.Seq, err)
		}
		if it := out.Item; it == nil {
			return 0, false, nil // reaped or never there: let placeClaimed judge
		} else if im.ConversationID(getS(it, attrConv)) == c && getN(it, attrCSeq) == e.Message.ConvSeq {
			return e.Seq, false, nil
		}
		if moved, err := st.moveClaim(ctx, u, c, e.Message.ConvSeq, e.Seq, e.Seq+1); err != nil || !moved {
			return 0, false, err
		}
		e.Seq++
		put, err := st.putEntry(ctx, u, e, ttl)
		if err != nil || put {
			return e.Seq, put, err
		}
	}
	return 0, false, nil
}

// maxAppendPerTransaction bounds the entries one fan-out transaction puts
// (one more item: the conversation index).
const maxAppendPerTransaction = 90

// appendRun puts the first maxAppendPerTransaction of msgs into u's inbox
// at pos.Head+1… and claims the last of them, in one transaction: each
// entry on condition that its seq is free, the claim on condition that
// the index's last convSeq is still pos.Last (a claim in flight elsewhere
// makes it fail, and the caller reads the position again).
func (st *Store) appendRun(ctx context.Context, u im.UserID, pos im.InboxPosition, msgs []im.Message, ttl types.AttributeValue) ([]im.Entry, error) {
	batch := msgs[:min(len(msgs), maxAppendPerTransaction)]
	entries := make([]im.Entry, len(batch))
	items := make([]types.TransactWriteItem, 0, len(batch)+1)
	for i, m := range batch {
		entries[i] = im.Entry{Seq: pos.Head + int64(i) + 1, Message: m}
		items = append(items, types.TransactWriteItem{Put: st.entryPut(u, entries[i], ttl)})
	}
	last := entries[len(entries)-1]
	items = append(items, types.TransactWriteItem{Update: claimUpdate(st.tables.Inbox, u, batch, last.Seq).lastIs(pos.Last).Update})
	if _, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
		return nil, err
	}
	return entries, nil
}

// isTxRace reports a transaction cancelled by a condition or a conflict:
// read again and retry.
func isTxRace(err error) bool { return err != nil && classifyTx(err, -1) == txRace }

// errMoved reports that a claim changed under the run: read the position
// again.
var errMoved = errors.New("claim moved")

// claim is the update that claims message m for u's inbox at seq: u's
// conversation index moves its last convSeq from prev to m (see
// AppendGroup).
func claim(table string, u im.UserID, m im.Message, seq, prev int64) *dynamodb.UpdateItemInput {
	up := claimUpdate(table, u, []im.Message{m}, seq).lastIs(prev).Update
	return &dynamodb.UpdateItemInput{
		TableName: up.TableName, Key: up.Key, UpdateExpression: up.UpdateExpression, ConditionExpression: up.ConditionExpression,
		ExpressionAttributeNames: up.ExpressionAttributeNames, ExpressionAttributeValues: up.ExpressionAttributeValues,
	}
}

// claimUpdate is the index update of a claim of msgs (ascending; the last
// is the one claimed at seq): in a 1:1 conversation the newest message
// among them that the user wrote also moves their read watermark (what you
// wrote you have read, as the send transaction's senderIndexUpdate does).
func claimUpdate(table string, u im.UserID, msgs []im.Message, seq int64) indexChange {
	last := msgs[len(msgs)-1]
	up := indexUpdate(table, u, last, seq)
	if last.Conversation.IsGroup() || last.Conversation.AppConversation() {
		return up
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].From == u {
			return up.readUpTo(msgs[i].ConvSeq)
		}
	}
	return up
}

// putEntry puts e into u's inbox if its seq is free, and reports whether
// it did.
func (st *Store) putEntry(ctx context.Context, u im.UserID, e im.Entry, ttl types.AttributeValue) (bool, error) {
	p := st.entryPut(u, e, ttl)
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression, ExpressionAttributeNames: p.ExpressionAttributeNames,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("entry #%d: %w", e.Seq, err)
	}
	return true, nil
}

// placeClaimed makes sure the message pos claims in group c (pos.Last at
// pos.LastSeq) is in u's inbox: it is when the entry at the claimed seq is
// that message; a free seq gets it (a run that claimed it crashed or is
// still on its way: the conditional put makes one of them win); a seq
// another message took moves the claim to the head + 1 and puts the entry
// there (putClaimed: under contention a lost placement then costs a Query
// and three writes, not a new round of position reads; errMoved when the
// claim moved under it: the caller reads the position again and comes
// back here). It returns the entry it put, if any.
func (st *Store) placeClaimed(ctx context.Context, u im.UserID, c im.ConversationID, pos im.InboxPosition, ttl types.AttributeValue) (*im.Entry, error) {
	if pos.Last == 0 || pos.LastSeq == 0 {
		// Nothing claimed, or claimed before claims recorded their seq
		// (index and entry were then written in one transaction).
		return nil, nil
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(pos.LastSeq)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("claimed entry #%d: %w", pos.LastSeq, err)
	}
	if it := out.Item; it != nil {
		if im.ConversationID(getS(it, attrConv)) == c && getN(it, attrCSeq) == pos.Last {
			return nil, nil // in place
		}
		// Another message took the seq: claim the head + 1 instead.
		head, _, err := st.Head(ctx, u)
		if err != nil {
			return nil, err
		}
		moved, err := st.moveClaim(ctx, u, c, pos.Last, pos.LastSeq, head+1)
		if err != nil {
			return nil, err
		}
		if !moved {
			return nil, errMoved
		}
		return st.putClaimed(ctx, u, c, pos.Last, head+1, ttl)
	}
	if pos.Head > pos.LastSeq {
		// Appends went above the claimed seq, and none takes a seq above
		// a claim still on its way (it would have taken that seq): the
		// entry was there and is gone — reaped. Never put it back.
		return nil, nil
	}
	return st.putClaimed(ctx, u, c, pos.Last, pos.LastSeq, ttl)
}

// putClaimed puts the message of c at convSeq last, which u's index
// claims at inbox seq, into u's inbox there, following the seq up if
// another append takes it first (placeAbove). A message about the
// retention old is not put: its entry was reaped, not left unplaced (a
// claim is put a moment after it). It returns the entry it put, if any.
func (st *Store) putClaimed(ctx context.Context, u im.UserID, c im.ConversationID, last, seq int64, ttl types.AttributeValue) (*im.Entry, error) {
	m, err := st.Message(ctx, c, last)
	if err != nil {
		return nil, fmt.Errorf("claimed message: %w", err)
	}
	if m.SentAt.Before(st.now().Add(-(st.Retention - st.warmMargin()))) {
		return nil, nil
	}
	e := im.Entry{Seq: seq, Message: m}
	put, err := st.putEntry(ctx, u, e, ttl)
	if err != nil {
		return nil, err
	}
	if put {
		return &e, nil
	}
	at, ours, err := st.placeAbove(ctx, u, e, ttl)
	switch {
	case err != nil:
		return nil, err
	case at == 0:
		return nil, errMoved // the claim moved under it, or the probes ran out: look again
	case !ours:
		return nil, nil // another run of this placement put it
	}
	e.Seq = at
	return &e, nil
}
