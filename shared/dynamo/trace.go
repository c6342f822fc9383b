package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// TraceRetention is how long trace events are kept (DynamoDB TTL).
const TraceRetention = 30 * 24 * time.Hour

// AppendEvents appends events to their messages' traces (Trace table:
// messageId / "<unix ms>#<random>"), 25 per BatchWriteItem.
func (st *Store) AppendEvents(ctx context.Context, events []im.Event) error {
	if st.tables.Trace == "" || len(events) == 0 {
		return nil
	}
	for start := 0; start < len(events); start += 25 {
		chunk := events[start:min(start+25, len(events))]
		reqs := make([]types.WriteRequest, len(chunk))
		for i, e := range chunk {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: eventItem(e, start+i)}}
		}
		pending := map[string][]types.WriteRequest{st.tables.Trace: reqs}
		for attempt := 0; len(pending) > 0; attempt++ {
			out, err := st.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return fmt.Errorf("append trace events: %w", err)
			}
			pending = out.UnprocessedItems
			if len(pending) > 0 {
				if attempt >= 5 {
					return fmt.Errorf("append trace events: %d left unprocessed", len(pending[st.tables.Trace]))
				}
				if err := sleepJitter(ctx, attempt+3); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// eventItem renders an event; the sort key orders events by time, then by
// their position in the batch that recorded them, so the steps of one
// invocation keep their order within a millisecond.
func eventItem(e im.Event, index int) map[string]types.AttributeValue {
	var r [4]byte
	_, _ = rand.Read(r[:])
	item := map[string]types.AttributeValue{
		"messageId": s(string(e.Message)),
		attrSK:      s(fmt.Sprintf("%013d#%04d#%s", e.At.UnixMilli(), index, hex.EncodeToString(r[:]))),
		"type":      s(string(e.Type)),
		"at":        n(e.At.UnixMilli()),
		attrTTL:     n(e.At.Add(TraceRetention).Unix()),
	}
	put := func(name, v string) {
		if v != "" {
			item[name] = s(v)
		}
	}
	put("fn", e.Function)
	put("requestId", e.RequestID)
	put(attrUser, string(e.User))
	put("deviceId", string(e.Device))
	put(attrConn, string(e.Connection))
	put("detail", e.Detail)
	if e.Seq > 0 {
		item[attrSeq] = n(e.Seq)
	}
	if e.Attempt > 0 {
		item["attempt"] = n(int64(e.Attempt))
	}
	if e.Delay > 0 {
		item["delayMs"] = n(e.Delay.Milliseconds())
	}
	return item
}

// Events returns a message's trace, oldest first.
func (st *Store) Events(ctx context.Context, id im.MessageID) ([]im.Event, error) {
	var out []im.Event
	p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Trace),
		KeyConditionExpression:    aws.String("#m = :m"),
		ExpressionAttributeNames:  map[string]string{"#m": "messageId"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": s(string(id))},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace of %s: %w", id, err)
		}
		for _, it := range page.Items {
			out = append(out, im.Event{
				Message: id, Type: im.EventType(getS(it, "type")), At: time.UnixMilli(getN(it, "at")).UTC(),
				Function: getS(it, "fn"), RequestID: getS(it, "requestId"), User: im.UserID(getS(it, attrUser)),
				Device: im.DeviceID(getS(it, "deviceId")), Connection: im.ConnectionID(getS(it, attrConn)),
				Seq: getN(it, attrSeq), Attempt: int(getN(it, "attempt")), Delay: time.Duration(getN(it, "delayMs")) * time.Millisecond,
				Detail: getS(it, "detail"),
			})
		}
	}
	return out, nil
}

// EntryRefs returns references to a user's inbox entries with seq in
// (after, upTo], at most limit of them, ascending.
func (st *Store) EntryRefs(ctx context.Context, u im.UserID, after, upTo int64, limit int) ([]im.EntryRef, error) {
	var out []im.EntryRef
	if upTo <= after {
		return out, nil
	}
	res, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND #sk BETWEEN :from AND :to"),
		ProjectionExpression:      aws.String("#seq, mid, #conv, cseq, #from"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK, "#seq": attrSeq, "#conv": attrConv, "#from": "from"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":from": s(entrySK(after + 1)), ":to": s(entrySK(upTo))},
		Limit:                     aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("entry ids %s (%d, %d]: %w", u, after, upTo, err)
	}
	for _, it := range res.Items {
		out = append(out, im.EntryRef{Seq: getN(it, attrSeq), ID: im.MessageID(getS(it, "mid")),
			Conversation: im.ConversationID(getS(it, attrConv)), ConvSeq: getN(it, "cseq"), From: im.UserID(getS(it, "from"))})
	}
	return out, nil
}
