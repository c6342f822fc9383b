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
// (sender, clientMsgId): the log entry, the sender's idempotency item and a
// check that the sender is a current member, in one transaction. Member
// inboxes are filled later by the fan-out (AppendGroup). A retry returns
// the stored result with Replayed set. A sender who is not a current member
// gets im.ErrNotMember, except for a retry of a send accepted before they
// left, which is answered with its stored result.
func (st *Store) SendGroup(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	stored, err := st.groupSend(ctx, d, now)
	if errors.Is(err, im.ErrNotMember) {
		// A retry of a send accepted before the sender left is still answered.
		if replayed, rerr := st.replay(ctx, d); rerr == nil {
			return replayed, nil
		}
	}
	return stored, err
}

func (st *Store) groupSend(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	return st.transactSend(ctx, d, func() ([]types.TransactWriteItem, im.Stored, error) {
		head, member, err := st.headAndMember(ctx, d.Conversation, d.From)
		if err != nil {
			return nil, im.Stored{}, err
		}
		if !member.Active() {
			return nil, im.Stored{}, fmt.Errorf("%s in %s: %w", d.From, d.Conversation, im.ErrNotMember)
		}
		msg := im.Message{ID: im.NewMessageID(now), Conversation: d.Conversation, ConvSeq: head + 1, From: d.From, Body: d.Body, SentAt: now}
		items := append(st.sendItems(d, msg, heads{conv: head}, nil, now),
			types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
				TableName: aws.String(st.tables.Messages), Key: convKey(d.Conversation, memberSK(d.From)),
				ConditionExpression:       aws.String("attribute_exists(#role) AND (attribute_not_exists(#removed) OR #removed = :zero)"),
				ExpressionAttributeNames:  map[string]string{"#role": "role", "#removed": attrRemoved},
				ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0)},
			}},
			// What you write you have read (see senderIndexUpdate).
			types.TransactWriteItem{Update: &types.Update{
				TableName: aws.String(st.tables.Inbox), Key: inboxKey(d.From, convIndexSK(d.Conversation)),
				UpdateExpression:          aws.String("SET #read = :c"),
				ExpressionAttributeNames:  map[string]string{"#read": attrRead},
				ExpressionAttributeValues: map[string]types.AttributeValue{":c": n(msg.ConvSeq)},
			}},
		)
		return items, im.Stored{Message: msg, Inboxed: map[im.UserID]int64{}}, nil
	})
}

// FanoutMark returns group c's head and how far fan-out has been taken
// care of: every message up to it is in member inboxes or covered by fan-out
// jobs already enqueued (which SQS retries until they succeed).
func (st *Store) FanoutMark(ctx context.Context, c im.ConversationID) (head, marked int64, err error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, 0, fmt.Errorf("fan-out mark of %s: %w", c, err)
	}
	return getN(out.Item, attrSeq), getN(out.Item, "fanned"), nil
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
	last := map[im.UserID]int64{}
	heads, err := st.inboxHeads(ctx, users, keys, func(it map[string]types.AttributeValue) {
		last[im.UserID(getS(it, attrUser))] = getN(it, attrLast)
	})
	if err != nil {
		return nil, fmt.Errorf("fan-out positions in %s: %w", c, err)
	}
	for _, u := range users {
		out[u] = im.InboxPosition{Head: heads[u].top, Last: last[u], Epoch: heads[u].epoch}
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
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Messages),
		KeyConditionExpression:    aws.String("#c = :c AND #sk BETWEEN :from AND :to"),
		ExpressionAttributeNames:  map[string]string{"#c": attrConv, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(string(c)), ":from": s(convSK(after + 1)), ":to": s(convSK(upTo))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		m, err := messageFrom(c, it)
		bad = cmp.Or(bad, err)
		out = append(out, m)
	})
	if err = cmp.Or(err, bad); err != nil {
		return nil, fmt.Errorf("log %s (%d, %d]: %w", c, after, upTo, err)
	}
	return out, nil
}

func messageFrom(c im.ConversationID, it map[string]types.AttributeValue) (im.Message, error) {
	m := im.Message{
		ID: im.MessageID(getS(it, "mid")), Conversation: c, ConvSeq: getN(it, "cseq"), From: im.UserID(getS(it, "from")),
		SentAt: time.UnixMilli(getN(it, "at")).UTC(),
	}
	body, err := bodyOf(it)
	if err != nil {
		return im.Message{}, fmt.Errorf("message %s#%d: %w", c, m.ConvSeq, err)
	}
	m.Body = body
	return m, nil
}

// maxAppendPerTransaction bounds the messages one fan-out transaction
// appends to one inbox (one more item: the conversation index).
const maxAppendPerTransaction = 90

// AppendGroup appends msgs (ascending convSeqs of one group, all after
// pos.Last) to u's inbox, in transactions that put the entries at
// pos.Head+1… on condition that those seqs are free (entries are their own
// heads, see inboxHead) and advance the user's group position
// conditionally on it being below the first appended convSeq. That
// condition is what makes
// fan-out exactly once and in order per inbox however often it is retried
// or run concurrently: a message is appended only after everything before
// it and never twice. It returns the new entries (none when another run
// appended them first).
func (st *Store) AppendGroup(ctx context.Context, u im.UserID, pos im.InboxPosition, msgs []im.Message, now time.Time) ([]im.Entry, error) {
	var out []im.Entry
	created := false // this call gave the inbox its epoch
	for attempt := 0; len(msgs) > 0; {
		for len(msgs) > 0 && msgs[0].ConvSeq <= pos.Last {
			msgs = msgs[1:]
		}
		if len(msgs) == 0 {
			break
		}
		batch := msgs[:min(len(msgs), maxAppendPerTransaction)]
		ttl := st.ttlAt(now)
		var items []types.TransactWriteItem
		entries := make([]im.Entry, len(batch))
		for i, m := range batch {
			entries[i] = im.Entry{Seq: pos.Head + int64(i) + 1, Message: m}
			items = append(items, types.TransactWriteItem{Put: st.entryPut(u, entries[i], ttl)})
		}
		if pos.Epoch == "" && !created {
			items = append(items, types.TransactWriteItem{Update: epochCreate(st.tables.Inbox, u, now)})
		}
		last := batch[len(batch)-1]
		items = append(items, types.TransactWriteItem{Update: indexUpdate(st.tables.Inbox, u, last, entries[len(entries)-1].Seq).lastBelow(batch[0].ConvSeq).Update})
		_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			out = append(out, entries...)
			pos = im.InboxPosition{Head: pos.Head + int64(len(batch)), Last: last.ConvSeq, Epoch: pos.Epoch}
			created = true
			msgs = msgs[len(batch):]
			continue
		}
		if classifyTx(err, -1) != txRace {
			return out, fmt.Errorf("fan-out %s to %s: %w", last.Conversation, u, err)
		}
		// The inbox head moved (another message arrived) or another run
		// appended some of these: read the position again and go on.
		attempt++
		if attempt >= st.MaxAttempts {
			return out, fmt.Errorf("fan-out %s to %s: %w", last.Conversation, u, im.ErrContention)
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return out, err
		}
		p, err := st.Positions(ctx, last.Conversation, []im.UserID{u})
		if err != nil {
			return out, err
		}
		pos = p[u]
	}
	return out, nil
}
