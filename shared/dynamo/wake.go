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

// A device's registration for wake-ups lives in the Inbox table beside
// the user's other items, sk "push#<deviceId>": platform, token, the SNS
// endpoint ARN, when it was last woken (wokeAt, Unix ms; 0: never) and when
// API Gateway received the register frame that wrote it (receivedAt, Unix
// ms: a frame received earlier whose invocation runs later changes nothing).

// skPush is the sort key of device d's push registration.
func skPush(d im.DeviceID) string { return "push#" + string(d) }

// SetPushEndpoint records device p.Device's registration (replacing an
// earlier one: a new token, another platform, or "" after sign-out),
// written by a frame API Gateway received at at, and returns the
// registration that stands. applied is false, and nothing changes, when
// the registration stored was written by a frame received after at: the
// later frame stands (read from the refused write: no request more).
func (st *Store) SetPushEndpoint(ctx context.Context, u im.UserID, p im.PushEndpoint, at time.Time) (stands im.PushEndpoint, applied bool, err error) {
	// An update that sets every attribute of the item: minidyn returns the
	// stored item of a refused write (ALL_OLD) for updates only, AWS for
	// puts too.
	_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPush(p.Device)),
		UpdateExpression:         aws.String("SET #p = :p, #t = :t, endpoint = :e, wokeAt = :never, receivedAt = :at"),
		ConditionExpression:      aws.String("attribute_not_exists(receivedAt) OR receivedAt <= :at"),
		ExpressionAttributeNames: map[string]string{"#p": "platform", "#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": s(p.Platform), ":t": s(p.Token), ":e": s(p.Endpoint), ":never": n(0), ":at": n(at.UnixMilli()),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := errorsAsCCF(err); ok {
		return im.PushEndpoint{Device: p.Device, Platform: getS(ccf.Item, "platform"), Token: getS(ccf.Item, "token"), Endpoint: getS(ccf.Item, "endpoint")}, false, nil
	}
	if err != nil {
		return im.PushEndpoint{}, false, fmt.Errorf("push registration of %s/%s: %w", u, p.Device, err)
	}
	return p, true, nil
}

// PushEndpoints lists u's devices registered for wake-ups (Endpoint ""
// for a device not woken yet: the wake function makes its SNS endpoint),
// strongly consistent: a device that registered a moment before it went
// offline is woken.
func (st *Store) PushEndpoints(ctx context.Context, u im.UserID) ([]im.PushEndpoint, error) {
	var out []im.PushEndpoint
	err := st.queryUntil(ctx, &dynamodb.QueryInput{
		ConsistentRead:            aws.Bool(true),
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :p)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":p": s("push#")},
	}, func(it map[string]types.AttributeValue) bool {
		p := im.PushEndpoint{Device: im.DeviceID(getS(it, attrSK)[len("push#"):]), Platform: getS(it, "platform"), Token: getS(it, "token"), Endpoint: getS(it, "endpoint")}
		if v := getN(it, "wokeAt"); v > 0 {
			p.WokeAt = time.UnixMilli(v).UTC()
		}
		if p.Token != "" {
			out = append(out, p)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("push registrations of %s: %w", u, err)
	}
	return out, nil
}

// SetEndpointARN records the SNS endpoint made for device d's token, if
// the device still has that token.
func (st *Store) SetEndpointARN(ctx context.Context, u im.UserID, d im.DeviceID, token, endpoint string) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPush(d)),
		UpdateExpression:          aws.String("SET endpoint = :e"),
		ConditionExpression:       aws.String("#t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": s(endpoint), ":t": s(token)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("push endpoint of %s/%s: %w", u, d, err)
	}
	return nil
}

// RemovePushEndpoint forgets device d's registration if it still names
// endpoint (APNs or FCM refused its token; a newer registration stays):
// token and endpoint emptied rather than the item deleted (minidyn's
// REMOVE leaves attributes; the write stays conditional).
func (st *Store) RemovePushEndpoint(ctx context.Context, u im.UserID, d im.DeviceID, endpoint string) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPush(d)),
		UpdateExpression:          aws.String("SET endpoint = :none, #t = :none"),
		ConditionExpression:       aws.String("endpoint = :e"),
		ExpressionAttributeNames:  map[string]string{"#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":none": s(""), ":e": s(endpoint)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("remove push registration of %s/%s: %w", u, d, err)
	}
	return nil
}

// ClaimWake claims the wake-up of device d of u at now: true when the
// device was not woken within window before (one wake-up per device per
// window, however many messages and functions want one).
func (st *Store) ClaimWake(ctx context.Context, u im.UserID, d im.DeviceID, now time.Time, window time.Duration) (bool, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPush(d)),
		UpdateExpression:          aws.String("SET wokeAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(#t) AND #t <> :none AND wokeAt <= :cutoff"),
		ExpressionAttributeNames:  map[string]string{"#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.UnixMilli()), ":cutoff": n(now.Add(-window).UnixMilli()), ":none": s("")},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim wake-up of %s/%s: %w", u, d, err)
	}
	return true, nil
}

// ChosenStatus returns the display state u chose (online when none),
// strongly consistent: do-not-disturb chosen a moment before a message
// holds its wake-up.
func (st *Store) ChosenStatus(ctx context.Context, u im.UserID) (im.Status, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPresence), ProjectionExpression: aws.String("#s"),
		ExpressionAttributeNames: map[string]string{"#s": "status"}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return "", fmt.Errorf("presence of %s: %w", u, err)
	}
	if st := im.Status(getS(out.Item, "status")); st != "" {
		return st, nil
	}
	return im.StatusOnline, nil
}
