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

// The presence item of a user lives in the Inbox table, sk "presence":
//
//	status     the chosen display state (absent: online)
//	statusAt   when API Gateway received the frame that chose it (Unix ms):
//	           a frame received earlier whose invocation runs later (a
//	           cold start, a copy the SDK wrote before a newer one) changes
//	           nothing
//	pending    when a debounced presence push was scheduled (absent or 0: none pending)
//	pushed     the visible state last pushed to peers

// skPresence is the sort key of a user's presence item in the Inbox table.
const skPresence = "presence"

// SetStatus records u's chosen display state, chosen by a frame API
// Gateway received at at, and returns the previous one. applied is false,
// and nothing changes, when the state stored was chosen by a frame received
// after at: the later frame stands.
func (st *Store) SetStatus(ctx context.Context, u im.UserID, status im.Status, at time.Time) (old im.Status, applied bool, err error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPresence),
		UpdateExpression:          aws.String("SET #s = :s, statusAt = :at"),
		ConditionExpression:       aws.String("attribute_not_exists(statusAt) OR statusAt <= :at"),
		ExpressionAttributeNames:  map[string]string{"#s": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": s(string(status)), ":at": n(at.UnixMilli())},
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if isConditionFailed(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("presence of %s: %w", u, err)
	}
	return im.Status(getS(out.Attributes, "status")), true, nil
}

// Presences returns the presence of each user: the chosen state (one
// BatchGetItem per 100 users) and liveness from the connection records (one
// Query per user).
func (st *Store) Presences(ctx context.Context, users []im.UserID, now time.Time, stale time.Duration) ([]im.Presence, error) {
	chosen := map[im.UserID]im.Status{}
	keys := make([]map[string]types.AttributeValue, len(users))
	for i, u := range users {
		keys[i] = inboxKey(u, skPresence)
	}
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		chosen[im.UserID(getS(it, attrUser))] = im.Status(getS(it, "status"))
	})
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	out := make([]im.Presence, 0, len(users))
	for _, u := range users {
		conns, err := st.Connections(ctx, u)
		if err != nil {
			return nil, err
		}
		out = append(out, im.LivePresence(u, chosen[u], conns, now, stale))
	}
	return out, nil
}

// SchedulePresence claims the one pending presence push of u: it reports
// true when no push was pending (or the pending one is older than
// stuckAfter, so a lost job cannot silence a user forever), and the caller
// then schedules the push.
func (st *Store) SchedulePresence(ctx context.Context, u im.UserID, now time.Time, stuckAfter time.Duration) (bool, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPresence),
		UpdateExpression:          aws.String("SET pending = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(pending) OR pending < :stuck"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.UnixMilli()), ":stuck": n(now.Add(-stuckAfter).UnixMilli())},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schedule presence of %s: %w", u, err)
	}
	return true, nil
}

// ClearPresencePending ends u's pending presence push; changes after this
// schedule a new one.
func (st *Store) ClearPresencePending(ctx context.Context, u im.UserID) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		// pending = 0 rather than REMOVE: minidyn's REMOVE leaves the
		// attribute behind (attribute_not_exists stays false).
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPresence), UpdateExpression: aws.String("SET pending = :zero"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0)},
	})
	if err != nil {
		return fmt.Errorf("presence of %s: %w", u, err)
	}
	return nil
}

// MarkPresencePushed records that peers were told visible, and reports
// whether that is news (it differs from what was pushed last).
func (st *Store) MarkPresencePushed(ctx context.Context, u im.UserID, visible im.Status, now time.Time) (bool, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPresence),
		UpdateExpression:          aws.String("SET pushed = :v, pushedAt = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(pushed) OR pushed <> :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": s(string(visible)), ":now": n(now.UnixMilli())},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("presence of %s: %w", u, err)
	}
	return true, nil
}

// DirectPeers returns the other users of u's 1:1 conversations, from u's
// conversation index.
func (st *Store) DirectPeers(ctx context.Context, u im.UserID) ([]im.UserID, error) {
	var out []im.UserID
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :v)"),
		ProjectionExpression:      aws.String("#sk"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":v": s("v#d:")},
	}, func(it map[string]types.AttributeValue) {
		if peer, err := im.ConversationID(strings.TrimPrefix(getS(it, attrSK), "v#")).Peer(u); err == nil && peer != u {
			out = append(out, peer)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("peers of %s: %w", u, err)
	}
	return out, nil
}
