package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Send stores a 1:1 draft exactly once per (sender, clientMsgId): the
// conversation log entry, every recipient's inbox entry (a reference to
// it) and conversation index, and the sender's idempotency item, in one
// transaction (sendItems). A retry returns the stored result with Replayed
// set; a retry with other content fails with im.ErrClientMsgIDReused.
func (st *Store) Send(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	recipients, err := d.Recipients()
	if err != nil {
		return im.Stored{}, err
	}
	if st.SendMode == SendClaim {
		if d.Seen != nil {
			return st.sendSeen(ctx, d, recipients, now)
		}
		return st.sendClaimed(ctx, d, recipients, now)
	}
	return st.transactSend(ctx, d, func(error) ([]types.TransactWriteItem, im.Stored, error) {
		heads, err := st.readDirectHeads(ctx, d.From, d.Conversation, recipients)
		if err != nil {
			return nil, im.Stored{}, err
		}
		msg := im.Message{ID: im.NewLocatedMessageID(now, d.Conversation, heads.conv+1), Conversation: d.Conversation, ConvSeq: heads.conv + 1, From: d.From, Body: d.Body, SentAt: now}
		seqs := make(map[im.UserID]int64, len(recipients))
		for _, r := range recipients {
			seqs[r] = heads.inbox[r].top + 1
		}
		return st.sendItems(d, msg, heads, seqs, now), im.Stored{Message: msg, Inboxed: seqs}, nil
	})
}

// transactSend runs the optimistic send loop shared by 1:1 and group sends:
// attempt reads the heads and builds one transaction (laid out as sendItems
// does) and the result it stores, told how the previous attempt's
// transaction failed (nil the first time); a lost race retries with jitter,
// a duplicate idempotency item turns into a replay of the stored result.
func (st *Store) transactSend(ctx context.Context, d im.Draft, attempt func(prev error) ([]types.TransactWriteItem, im.Stored, error)) (im.Stored, error) {
	var prev error
	for n := range st.MaxAttempts {
		items, stored, err := attempt(prev)
		if err != nil {
			return im.Stored{}, fmt.Errorf("send %s/%s: %w", d.From, d.ClientMsgID, err)
		}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return stored, nil
		}
		prev = err
		switch classifyTx(err, posIdem) {
		case txCondition:
			stored, err := st.replay(ctx, d)
			if !errors.Is(err, im.ErrNotFound) {
				return stored, err
			}
			// The condition saw an idempotency item that is not there: a
			// store whose transactions are not isolated (moto) showed a
			// concurrent send's write that then rolled back (DynamoDB only
			// shows committed items; there the item could only have
			// expired). Either way nothing is stored for this id: retry.
			if err := sleepJitter(ctx, n); err != nil {
				return im.Stored{}, err
			}
			continue
		case txRace:
			if err := sleepJitter(ctx, n); err != nil {
				return im.Stored{}, err
			}
			continue
		}
		return im.Stored{}, fmt.Errorf("send %s/%s: %w", d.From, d.ClientMsgID, err)
	}
	return im.Stored{}, fmt.Errorf("send %s/%s after %d attempts: %w", d.From, d.ClientMsgID, st.MaxAttempts, im.ErrContention)
}

// heads are the sequence heads a send reads before its transaction.
type heads struct {
	conv  int64
	inbox map[im.UserID]inboxHead
}

// readHeads reads the head item of a conversation with one (a group's,
// an app's alert conversation), strongly consistent.
func (st *Store) readHeads(ctx context.Context, c im.ConversationID) (heads, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return heads{}, fmt.Errorf("read head of %s: %w", c, err)
	}
	return heads{conv: getN(out.Item, attrSeq)}, nil
}

// readDirectHeads reads the heads of a 1:1 send: every recipient's inbox
// head (inboxHeads) and the conversation head, which is the sender's
// conversation index (its last convSeq: every 1:1 send moves both
// participants' index to the message it writes, in its transaction, so the
// index is the head; a 1:1 conversation keeps no head item of its own),
// read in the same BatchGetItem as the inbox head items.
func (st *Store) readDirectHeads(ctx context.Context, from im.UserID, c im.ConversationID, users []im.UserID) (heads, error) {
	var h heads
	inboxes, err := st.inboxHeads(ctx, users, []map[string]types.AttributeValue{inboxKey(from, convIndexSK(c))}, func(it map[string]types.AttributeValue) {
		h.conv = getN(it, attrLast)
	})
	if err != nil {
		return heads{}, fmt.Errorf("read heads: %w", err)
	}
	h.inbox = inboxes
	return h, nil
}

// posIdem is the position of the sender's idempotency item in a send
// transaction: its failed condition means the send is a retry.
const posIdem = 0

// sendItems builds the transaction of one send attempt. The order matters:
// classifyTx reads cancellation reasons by position.
//
// A 1:1 message is in each inbox at most once without a per-inbox dedup
// item keyed by message id (issue 12: two items nothing read, four write
// units): its entries are written only in the transaction that also puts
// the sender's idempotency item conditionally, so a retry — any attempt
// after one that committed — is refused as a duplicate and writes no entry.
// Group fan-out and alerts, which fill inboxes outside that transaction,
// keep their dedup items.
//
// A 1:1 conversation has no head item (issue 12: two write units per
// send): the sender's conversation index, updated on condition that its
// last convSeq is still h.conv, and the log item, put on condition that
// its convSeq is free, order concurrent sends as the head did — of two
// sends that read the same head only one commits. A group send (seqs nil:
// its inboxes are filled by the fan-out) advances the group's head item,
// which also carries its membership counts.
func (st *Store) sendItems(d im.Draft, m im.Message, h heads, seqs map[im.UserID]int64, now time.Time) []types.TransactWriteItem {
	ttl := st.ttlAt(now)
	at := n(m.SentAt.UnixMilli())
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName:                aws.String(st.tables.Inbox),
			Item:                     idemItem(d, m, seqs, at, ttl),
			ConditionExpression:      aws.String("attribute_not_exists(#sk)"),
			ExpressionAttributeNames: map[string]string{"#sk": attrSK},
		}},
		{Put: st.logPut(m, d.ClientMsgID, now)},
	}
	if len(seqs) == 0 {
		items = append(items, types.TransactWriteItem{Update: headUpdate(st.tables.Messages, convKey(m.Conversation, skHead), h.conv, newEpoch(now))})
	}
	for u, seq := range seqs {
		items = append(items,
			types.TransactWriteItem{Put: st.entryPut(u, im.Entry{Seq: seq, Message: m}, ttl)},
			types.TransactWriteItem{Update: senderIndexUpdate(st.tables.Inbox, u, d.From, m, h.conv, seq)},
		)
		if h.inbox[u].epoch == "" {
			items = append(items, types.TransactWriteItem{Update: epochCreate(st.tables.Inbox, u, now)})
		}
	}
	return items
}

// senderIndexUpdate updates u's conversation index for m, the entry at
// inbox seq in u's inbox (attrInboxSeq: what the inbox head is read from
// once the entries expired). The sender's index is the conversation's head
// (readDirectHeads): it is updated only if its last convSeq is still the
// head the send read, and it also moves the sender's read watermark to m (a
// message you wrote is read; m's convSeq is the highest yet, so the
// unconditional SET never moves the watermark back).
func senderIndexUpdate(table string, u, sender im.UserID, m im.Message, head, seq int64) *types.Update {
	if u != sender {
		return indexUpdate(table, u, m, seq).Update
	}
	return indexUpdate(table, u, m, seq).read().lastIs(head).Update
}

// idemItem is the sender's idempotency item of a send: what a retry returns.
func idemItem(d im.Draft, m im.Message, seqs map[im.UserID]int64, at, ttl types.AttributeValue) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrUser: s(string(d.From)), attrSK: s(idemSK(d.ClientMsgID)),
		attrMID: s(string(m.ID)), attrConv: s(string(m.Conversation)), attrCSeq: n(m.ConvSeq),
		"fp": s(d.Fingerprint()), attrAt: at, attrTTL: ttl,
	}
	if len(seqs) > 0 {
		// (A group send has none: its inboxes are filled by the fan-out.
		// Some emulators cannot store an empty map.)
		item["seqs"] = seqMap(seqs)
	}
	return item
}

// seqMap stores per-user inbox seqs as a map attribute.
func seqMap(seqs map[im.UserID]int64) types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(seqs))
	for u, seq := range seqs {
		m[string(u)] = n(seq)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// replay loads the stored result of an earlier send with the same clientMsgId.
func (st *Store) replay(ctx context.Context, d im.Draft) (im.Stored, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(d.From, idemSK(d.ClientMsgID)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return im.Stored{}, fmt.Errorf("replay %s/%s: %w", d.From, d.ClientMsgID, err)
	}
	if out.Item == nil {
		return im.Stored{}, fmt.Errorf("replay %s/%s: idempotency item vanished: %w", d.From, d.ClientMsgID, im.ErrNotFound)
	}
	if getS(out.Item, "fp") != d.Fingerprint() {
		return im.Stored{}, fmt.Errorf("replay %s/%s: %w", d.From, d.ClientMsgID, im.ErrClientMsgIDReused)
	}
	conv := im.ConversationID(getS(out.Item, attrConv))
	msg, err := st.Message(ctx, conv, getN(out.Item, attrCSeq))
	if err != nil {
		return im.Stored{}, fmt.Errorf("replay %s/%s: %w", d.From, d.ClientMsgID, err)
	}
	if _, ok := out.Item["seqs"]; !ok && !conv.IsGroup() {
		// Stored by sendClaimed: the log item and this item are all its
		// transaction wrote; the inboxes may still lack it (the sending
		// run crashed): place it (nothing if it is there) and say where.
		recipients, err := d.Recipients()
		if err != nil {
			return im.Stored{}, err
		}
		return st.replayPlaced(ctx, d, msg, recipients)
	}
	seqs := map[im.UserID]int64{}
	if m, ok := out.Item["seqs"].(*types.AttributeValueMemberM); ok {
		for u := range m.Value {
			seqs[im.UserID(u)] = getN(m.Value, u)
		}
	}
	return im.Stored{Message: msg, Inboxed: seqs, Replayed: true}, nil
}

// Message reads one message of a conversation log.
func (st *Store) Message(ctx context.Context, c im.ConversationID, convSeq int64) (im.Message, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Messages), Key: convKey(c, convSK(convSeq)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return im.Message{}, fmt.Errorf("message %s#%d: %w", c, convSeq, err)
	}
	if out.Item == nil {
		return im.Message{}, fmt.Errorf("message %s#%d: %w", c, convSeq, im.ErrNotFound)
	}
	return messageFrom(c, out.Item)
}
