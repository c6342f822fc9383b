package dynamo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// MarkRead moves u's read watermark of conversation c forward to upTo (a
// convSeq no greater than the conversation head). It returns the previous
// watermark and whether it moved; lower or equal values change nothing.
// Group conversations are open to their members (current or removed).
// It costs one read (the conversation head, with the membership for a
// group) and one write, whatever the number of messages covered.
func (st *Store) MarkRead(ctx context.Context, u im.UserID, c im.ConversationID, upTo int64, now time.Time) (int64, bool, error) {
	var head int64
	var member im.Member
	var err error
	if c.AppConversation() {
		// An app's log numbers every recipient's alerts: a user may read
		// only up to the last alert they received, and only if they
		// received one (the shared head would tell how many the app sent).
		head, err = st.lastReceived(ctx, u, c)
		if err == nil && head == 0 {
			err = fmt.Errorf("read %s in %s: not a recipient: %w", u, c, im.ErrNotMember)
		}
	} else {
		head, member, err = st.headAndMember(ctx, c, u)
		if err == nil && c.IsGroup() && !member.Role.Valid() {
			err = fmt.Errorf("read %s in %s: %w", u, c, im.ErrNotMember)
		}
	}
	if err != nil {
		return 0, false, err
	}
	if upTo > head {
		return 0, false, fmt.Errorf("read %s in %s up to %d (head %d): %w", u, c, upTo, head, im.ErrReadBeyondHead)
	}
	old, moved, err := st.advance(ctx, inboxKey(u, convIndexSK(c)), attrRead, "readAt", upTo, now)
	if err != nil {
		return 0, false, fmt.Errorf("read %s in %s: %w", u, c, err)
	}
	if moved && c.AppConversation() {
		// Alert convSeqs also number other users' alerts: the unread
		// counter is cleared when the read covers the latest alert.
		_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)),
			UpdateExpression:          aws.String("SET #unread = :zero"),
			ConditionExpression:       aws.String("#last <= :n"),
			ExpressionAttributeNames:  map[string]string{"#unread": attrUnread, "#last": attrLast},
			ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0), ":n": n(upTo)},
		})
		if err != nil && !isConditionFailed(err) {
			return 0, false, fmt.Errorf("read %s in %s: %w", u, c, err)
		}
	}
	return old, moved, nil
}

// ReadWatermark returns u's read watermark of c and when it last moved.
func (st *Store) ReadWatermark(ctx context.Context, u im.UserID, c im.ConversationID) (int64, time.Time, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read watermark %s in %s: %w", u, c, err)
	}
	return getN(out.Item, attrRead), time.UnixMilli(getN(out.Item, "readAt")).UTC(), nil
}

// ConversationIDs returns the message ids of c with convSeq in (after, upTo],
// at most limit, by convSeq.
func (st *Store) ConversationIDs(ctx context.Context, c im.ConversationID, after, upTo int64, limit int) (map[int64]im.MessageID, error) {
	out := map[int64]im.MessageID{}
	if upTo <= after {
		return out, nil
	}
	q := project(st.logSpan(c, after+1, upTo), attrCSeq, attrMID)
	q.Limit = aws.Int32(int32(limit))
	res, err := st.db.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("conversation ids %s (%d, %d]: %w", c, after, upTo, err)
	}
	for _, it := range res.Items {
		out[getN(it, attrCSeq)] = im.MessageID(getS(it, attrMID))
	}
	return out, nil
}

// lastReceived returns the convSeq of the last message of c in u's inbox
// (0 when none), from u's conversation index item.
func (st *Store) lastReceived(ctx context.Context, u im.UserID, c im.ConversationID) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("last of %s for %s: %w", c, u, err)
	}
	return getN(out.Item, attrLast), nil
}

// Received reports which of ids are in u's inbox, in BatchGetItem calls of
// 100 keys.
func (st *Store) Received(ctx context.Context, u im.UserID, ids []im.MessageID) (map[im.MessageID]bool, error) {
	got := map[im.MessageID]bool{}
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = inboxKey(u, dedupSK(id))
	}
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		got[im.MessageID(strings.TrimPrefix(getS(it, attrSK), "m#"))] = true
	})
	if err != nil {
		return nil, fmt.Errorf("received by %s: %w", u, err)
	}
	return got, nil
}
