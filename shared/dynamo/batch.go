package dynamo

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// The store's batch loops, once each: a paginated Query, a BatchGetItem
// over any number of keys and a BatchWriteItem of any number of puts.

// logSpan is a Query of conversation c's log items from convSeq lo to hi
// (both included), ascending; inboxSpan of user u's inbox entries from seq
// lo to hi. Callers add consistency, limits, order and a projection.
func (st *Store) logSpan(c im.ConversationID, lo, hi int64) *dynamodb.QueryInput {
	return span(st.tables.Messages, attrConv, string(c), convSK(lo), convSK(hi))
}

// inboxSpan is the Query of user u's inbox entries with lo ≤ seq ≤ hi.
func (st *Store) inboxSpan(u im.UserID, lo, hi int64) *dynamodb.QueryInput {
	return span(st.tables.Inbox, attrUser, string(u), entrySK(lo), entrySK(hi))
}

// span is a Query of the items of partition pk (attribute pkName) whose
// sort key lies in [from, to].
func span(table, pkName, pk, from, to string) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :from AND :to"),
		ExpressionAttributeNames:  map[string]string{"#pk": pkName, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk), ":from": s(from), ":to": s(to)},
	}
}

// project makes q return only attrs (named through placeholders, so a
// reserved word such as "from" is no problem).
func project(q *dynamodb.QueryInput, attrs ...string) *dynamodb.QueryInput {
	names := make([]string, len(attrs))
	for i, a := range attrs {
		names[i] = "#p" + strconv.Itoa(i)
		q.ExpressionAttributeNames[names[i]] = a
	}
	q.ProjectionExpression = aws.String(strings.Join(names, ", "))
	return q
}

// queryAll runs in page after page and hands every item to visit.
func (st *Store) queryAll(ctx context.Context, in *dynamodb.QueryInput, visit func(map[string]types.AttributeValue)) error {
	return st.queryUntil(ctx, in, func(it map[string]types.AttributeValue) bool {
		visit(it)
		return true
	})
}

// queryFirst returns the first limit items of a query, following pages
// (a page ends at 1 MB as well as at its Limit).
func (st *Store) queryFirst(ctx context.Context, in *dynamodb.QueryInput, limit int) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	err := st.queryUntil(ctx, in, func(it map[string]types.AttributeValue) bool {
		out = append(out, it)
		return len(out) < limit
	})
	return out, err
}

// queryUntil is queryAll that stops when visit returns false.
func (st *Store) queryUntil(ctx context.Context, in *dynamodb.QueryInput, visit func(map[string]types.AttributeValue) bool) error {
	p := dynamodb.NewQueryPaginator(st.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			if !visit(it) {
				return nil
			}
		}
	}
	return nil
}

// batchGet reads items of table by key in BatchGetItem calls of 100 keys
// (DynamoDB's limit), strongly consistent if consistent, retrying
// unprocessed keys, and hands each item found to visit (in no particular
// order). Duplicate keys, which BatchGetItem refuses, are dropped.
func (st *Store) batchGet(ctx context.Context, table string, keys []map[string]types.AttributeValue, consistent bool, visit func(map[string]types.AttributeValue)) error {
	seen := make(map[string]bool, len(keys))
	unique := keys[:0:0]
	for _, k := range keys {
		if id := keyID(k); !seen[id] {
			seen[id] = true
			unique = append(unique, k)
		}
	}
	for start := 0; start < len(unique); start += 100 {
		req := map[string]types.KeysAndAttributes{table: {Keys: unique[start:min(start+100, len(unique))], ConsistentRead: aws.Bool(consistent)}}
		for len(req) > 0 {
			out, err := st.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return err
			}
			for _, it := range out.Responses[table] {
				visit(it)
			}
			req = out.UnprocessedKeys
		}
	}
	return nil
}

// batchPut puts items into table in BatchWriteItem calls of 25 (DynamoDB's
// limit), retrying the items a call leaves unprocessed (throttling) with
// jitter, at most six rounds per call.
func (st *Store) batchPut(ctx context.Context, table string, items []map[string]types.AttributeValue) error {
	for start := 0; start < len(items); start += 25 {
		chunk := items[start:min(start+25, len(items))]
		reqs := make([]types.WriteRequest, len(chunk))
		for i, it := range chunk {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
		}
		pending := map[string][]types.WriteRequest{table: reqs}
		for attempt := 0; len(pending) > 0; attempt++ {
			out, err := st.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return err
			}
			pending = out.UnprocessedItems
			if len(pending) > 0 {
				if attempt >= 5 {
					return fmt.Errorf("%d items left unprocessed", len(pending[table]))
				}
				if err := sleepJitter(ctx, attempt+3); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// keyID renders a key (string and number attributes) as one comparable
// string.
func keyID(k map[string]types.AttributeValue) string {
	names := make([]string, 0, len(k))
	for name := range k {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name)
		b.WriteByte(0)
		switch v := k[name].(type) {
		case *types.AttributeValueMemberS:
			b.WriteString(v.Value)
		case *types.AttributeValueMemberN:
			b.WriteString(v.Value)
		}
		b.WriteByte(0)
	}
	return b.String()
}
