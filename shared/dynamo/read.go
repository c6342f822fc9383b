package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

func readSK(c im.ConversationID) string { return "r#" + string(c) }

// MarkRead moves u's read watermark of conversation c forward to upTo (a
// convSeq no greater than the conversation head). It returns the previous
// watermark and whether it moved; lower or equal values change nothing.
func (st *Store) MarkRead(ctx context.Context, u im.UserID, c im.ConversationID, upTo int64, now time.Time) (int64, bool, error) {
	h, err := st.readHeads(ctx, c, nil)
	if err != nil {
		return 0, false, err
	}
	if upTo > h.conv {
		return 0, false, fmt.Errorf("read %s in %s up to %d (head %d): %w", u, c, upTo, h.conv, im.ErrReadBeyondHead)
	}
	old, moved, err := st.advance(ctx, inboxKey(u, readSK(c)), "upTo", "readAt", upTo, now)
	if err != nil {
		return 0, false, fmt.Errorf("read %s in %s: %w", u, c, err)
	}
	return old, moved, nil
}

// ReadWatermark returns u's read watermark of c and when it last moved.
func (st *Store) ReadWatermark(ctx context.Context, u im.UserID, c im.ConversationID) (int64, time.Time, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, readSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read watermark %s in %s: %w", u, c, err)
	}
	return getN(out.Item, "upTo"), time.UnixMilli(getN(out.Item, "readAt")).UTC(), nil
}

// ConversationIDs returns the message ids of c with convSeq in (after, upTo],
// at most limit, by convSeq.
func (st *Store) ConversationIDs(ctx context.Context, c im.ConversationID, after, upTo int64, limit int) (map[int64]im.MessageID, error) {
	out := map[int64]im.MessageID{}
	if upTo <= after {
		return out, nil
	}
	res, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Messages),
		KeyConditionExpression:    aws.String("#c = :c AND #sk BETWEEN :from AND :to"),
		ProjectionExpression:      aws.String("cseq, mid"),
		ExpressionAttributeNames:  map[string]string{"#c": attrConv, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(string(c)), ":from": s(convSK(after + 1)), ":to": s(convSK(upTo))},
		Limit:                     aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("conversation ids %s (%d, %d]: %w", c, after, upTo, err)
	}
	for _, it := range res.Items {
		out[getN(it, "cseq")] = im.MessageID(getS(it, "mid"))
	}
	return out, nil
}
