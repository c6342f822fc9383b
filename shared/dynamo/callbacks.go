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

// Status callbacks (issue 16) live in the alerts table beside the app:
//
//	app#<id>  / app           + webhook {url, secret, setAt, queue} (an empty map: none)
//	app#<id>  / ev#<eventId>  one state change of one of the app's alerts and
//	                          its delivery (state, attempts, nextAt; TTL)
//
// An event id starts with its message id (im.CallbackEventID), so the
// events of one alert are one key range and an app's are in the order its
// alerts were posted.

// CallbackRetention is how long a callback event is kept (and replayable)
// after it happened.
const CallbackRetention = 30 * 24 * time.Hour

// SetWebhook sets (or replaces) an app's webhook. im.ErrNotFound for an
// app that does not exist or is revoked.
func (st *Store) SetWebhook(ctx context.Context, appID string, w im.Webhook) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+appID, skApp),
		UpdateExpression:         aws.String("SET webhook = :w"),
		ConditionExpression:      aws.String("attribute_exists(#sk) AND attribute_not_exists(revokedAt)"),
		ExpressionAttributeNames: map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"url": s(w.URL), "secret": s(w.Secret), "setAt": n(w.SetAt.UnixMilli()), "queue": flag(w.Queue)}}},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("set webhook of app %s: %w", appID, im.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("set webhook of app %s: %w", appID, err)
	}
	return nil
}

// RemoveWebhook removes an app's webhook: no more callbacks are recorded
// (those recorded stay replayable). im.ErrNotFound for no app.
func (st *Store) RemoveWebhook(ctx context.Context, appID string) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+appID, skApp),
		UpdateExpression:         aws.String("SET webhook = :none"),
		ConditionExpression:      aws.String("attribute_exists(#sk)"),
		ExpressionAttributeNames: map[string]string{"#sk": attrSK},
		// An empty map rather than REMOVE (minidyn's REMOVE leaves the
		// attribute behind); the secret goes with it.
		ExpressionAttributeValues: map[string]types.AttributeValue{":none": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("remove webhook of app %s: %w", appID, im.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("remove webhook of app %s: %w", appID, err)
	}
	return nil
}

// webhookOf decodes an app item's webhook (nil: none).
func webhookOf(it map[string]types.AttributeValue) *im.Webhook {
	m, _ := it["webhook"].(*types.AttributeValueMemberM)
	if m == nil || getS(m.Value, "url") == "" {
		return nil
	}
	return &im.Webhook{URL: getS(m.Value, "url"), Secret: getS(m.Value, "secret"), SetAt: time.UnixMilli(getN(m.Value, "setAt")).UTC(), Queue: getBool(m.Value, "queue")}
}

// skEvent is the sort key of callback event id.
func skEvent(id string) string { return "ev#" + id }

// callbackItem is the item of callback event e.
func callbackItem(e im.CallbackEvent) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		"pk": s("app#" + e.App), attrSK: s(skEvent(e.ID)), "type": s(string(e.Type)), attrMID: s(string(e.Message)),
		attrAt: n(e.At.UnixMilli()), "state": s(e.State), "attempts": n(int64(e.Attempts)), "nextAt": n(e.NextAt.UnixMilli()),
		"createdAt": n(e.CreatedAt.UnixMilli()), attrTTL: n(e.CreatedAt.Add(CallbackRetention).Unix()),
	}
	if e.User != "" {
		it[attrUser] = s(string(e.User))
	}
	if e.Answer != "" {
		it["answer"] = s(e.Answer)
	}
	if e.Detail != "" {
		it["detail"] = s(e.Detail)
	}
	return it
}

// callbackFrom decodes a callback event item.
func callbackFrom(app string, it map[string]types.AttributeValue) im.CallbackEvent {
	e := im.CallbackEvent{
		ID: getS(it, attrSK)[len("ev#"):], App: app, Type: im.CallbackType(getS(it, "type")), Message: im.MessageID(getS(it, attrMID)),
		User: im.UserID(getS(it, attrUser)), At: time.UnixMilli(getN(it, attrAt)).UTC(), Answer: getS(it, "answer"), Detail: getS(it, "detail"),
		State: getS(it, "state"), Attempts: int(getN(it, "attempts")), NextAt: time.UnixMilli(getN(it, "nextAt")).UTC(),
		LastError: getS(it, "lastError"), CreatedAt: time.UnixMilli(getN(it, "createdAt")).UTC(),
	}
	if v := getN(it, "deliveredAt"); v > 0 {
		e.DeliveredAt = time.UnixMilli(v).UTC()
	}
	return e
}

// RecordCallbackEvent stores e unless an event with its id exists (a
// conditional put: the same change recorded twice is one event); it
// reports whether e is new.
func (st *Store) RecordCallbackEvent(ctx context.Context, e im.CallbackEvent) (bool, error) {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.tables.Alerts), Item: callbackItem(e),
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record callback event %s: %w", e.ID, err)
	}
	return true, nil
}

// AlertCallbackEvents lists the callback events recorded for alert id of
// app, by id.
func (st *Store) AlertCallbackEvents(ctx context.Context, app string, id im.MessageID) ([]im.CallbackEvent, error) {
	var out []im.CallbackEvent
	err := st.queryUntil(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Alerts),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(#sk, :ev)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("app#" + app), ":ev": s(skEvent(string(id) + ":"))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		out = append(out, callbackFrom(app, it))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("callback events of %s: %w", id, err)
	}
	return out, nil
}

// CallbackEvents lists up to limit of app's callback events after event
// id after ("" from the first), oldest alert first, those in one of
// states only (none: all); next is the id to continue after ("" at the
// end). The filter runs after the read: a page of few matches among many
// delivered events still reads them (about 1 RRU per 8 KB).
func (st *Store) CallbackEvents(ctx context.Context, app, after string, limit int, states ...string) ([]im.CallbackEvent, string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Alerts),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(#sk, :ev)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("app#" + app), ":ev": s("ev#")},
		ConsistentRead:            aws.Bool(true),
	}
	if after != "" {
		in.ExclusiveStartKey = alertKey("app#"+app, skEvent(after))
	}
	if len(states) > 0 {
		in.ExpressionAttributeNames["#st"] = "state"
		expr := ""
		for i, x := range states {
			k := fmt.Sprintf(":s%d", i)
			in.ExpressionAttributeValues[k] = s(x)
			if i > 0 {
				expr += " OR "
			}
			expr += "#st = " + k
		}
		in.FilterExpression = aws.String(expr)
	}
	var out []im.CallbackEvent
	next := ""
	err := st.queryUntil(ctx, in, func(it map[string]types.AttributeValue) bool {
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		out = append(out, callbackFrom(app, it))
		return true
	})
	if err != nil {
		return nil, "", fmt.Errorf("callback events of app %s: %w", app, err)
	}
	return out, next, nil
}

// UpdateCallbackEvent records a try of event e: its new State, Attempts,
// NextAt, LastError and DeliveredAt, on condition that it is still
// pending with the attempts it had when read (prevAttempts). false:
// another run tried it meanwhile, or it is no longer pending.
func (st *Store) UpdateCallbackEvent(ctx context.Context, e im.CallbackEvent, prevAttempts int) (bool, error) {
	vals := map[string]types.AttributeValue{":st": s(e.State), ":n": n(int64(e.Attempts)), ":next": n(e.NextAt.UnixMilli()),
		":err": s(e.LastError), ":prev": n(int64(prevAttempts)), ":pending": s(im.CallbackPending), ":done": n(0)}
	if !e.DeliveredAt.IsZero() {
		vals[":done"] = n(e.DeliveredAt.UnixMilli())
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+e.App, skEvent(e.ID)),
		UpdateExpression:          aws.String("SET #st = :st, attempts = :n, nextAt = :next, lastError = :err, deliveredAt = :done"),
		ConditionExpression:       aws.String("#st = :pending AND attempts = :prev"),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: vals,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("update callback event %s: %w", e.ID, err)
	}
	return true, nil
}

// RetryCallbackEvent makes a dead event of app pending again, due at now
// with its tries counted afresh (the app's replay). false: no such dead
// event.
func (st *Store) RetryCallbackEvent(ctx context.Context, app, id string, now time.Time) (im.CallbackEvent, bool, error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+app, skEvent(id)),
		UpdateExpression:          aws.String("SET #st = :pending, attempts = :zero, nextAt = :now"),
		ConditionExpression:       aws.String("#st = :dead"),
		ExpressionAttributeNames:  map[string]string{"#st": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pending": s(im.CallbackPending), ":dead": s(im.CallbackDead), ":zero": n(0), ":now": n(now.UnixMilli())},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return im.CallbackEvent{}, false, nil
	}
	if err != nil {
		return im.CallbackEvent{}, false, fmt.Errorf("retry callback event %s: %w", id, err)
	}
	return callbackFrom(app, out.Attributes), true, nil
}

// ScheduleCallbackRun records that a callback job of alert id will run at
// at, unless one is already due by then (a job is only enqueued when this
// says true): on condition that none is scheduled, or the one scheduled
// is later, or its time has come (the job running now, or one lost).
func (st *Store) ScheduleCallbackRun(ctx context.Context, id im.MessageID, at, now time.Time) (bool, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("msg#"+string(id), "alert"),
		UpdateExpression:          aws.String("SET cbNext = :at"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND (attribute_not_exists(cbNext) OR cbNext > :at OR cbNext <= :now)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": n(at.UnixMilli()), ":now": n(now.UnixMilli())},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schedule callbacks of %s: %w", id, err)
	}
	return true, nil
}
