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

// errorsAsCCF finds a failed condition in err, with the item it saw.
func errorsAsCCF(err error) (*types.ConditionalCheckFailedException, bool) {
	return errors.AsType[*types.ConditionalCheckFailedException](err)
}

// connKey is the key of user u's connection record id.
func connKey(u im.UserID, id im.ConnectionID) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrUser: s(string(u)), attrConn: s(string(id))}
}

// SaveConnection records a connection (routing hint with a TTL).
func (st *Store) SaveConnection(ctx context.Context, c im.Connection) error {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.tables.Connections),
		Item: map[string]types.AttributeValue{
			attrUser: s(string(c.User)), attrConn: s(string(c.ID)), "deviceId": s(string(c.Device)),
			"connectedAt": n(c.ConnectedAt.UnixMilli()), "lastSeenAt": n(c.LastSeenAt.UnixMilli()),
			attrTTL: n(c.LastSeenAt.Add(im.ConnectionTTL).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("save connection %s/%s: %w", c.User, c.ID, err)
	}
	return nil
}

// RemoveConnection deletes a connection record, and its items of groups'
// online index; removing a missing one is not an error.
func (st *Store) RemoveConnection(ctx context.Context, u im.UserID, id im.ConnectionID) error {
	out, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.tables.Connections), Key: connKey(u, id), ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return fmt.Errorf("remove connection %s/%s: %w", u, id, err)
	}
	return st.unindexOnline(ctx, u, id, out.Attributes)
}

// RemoveStaleConnection deletes a connection record only if the connection
// was opened before cutoff, and reports whether it did. A push can meet a
// 410 while a brand-new connection is still in its $connect handshake; its
// record must survive that.
func (st *Store) RemoveStaleConnection(ctx context.Context, u im.UserID, id im.ConnectionID, cutoff time.Time) (bool, error) {
	out, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(st.tables.Connections),
		Key:                       connKey(u, id),
		ConditionExpression:       aws.String("#at < :cutoff"),
		ExpressionAttributeNames:  map[string]string{"#at": "connectedAt"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":cutoff": n(cutoff.UnixMilli())},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove stale connection %s/%s: %w", u, id, err)
	}
	return true, st.unindexOnline(ctx, u, id, out.Attributes)
}

// attrPull, on a connection record, says that redelivery to the connection
// gave up on a read-diffused group's message (MarkPull): its next pong
// names the groups its device is behind in, should the notify that said so
// have been lost. The ping that reads it sets it to 0 (not REMOVE: minidyn's
// REMOVE leaves the attribute behind).
const attrPull = "pull"

// MarkPull records on connection id's record that redelivery to it gave
// up on a read-diffused group's message (attrPull). A record that is gone
// is not written again.
func (st *Store) MarkPull(ctx context.Context, u im.UserID, id im.ConnectionID) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Connections),
		Key:                       connKey(u, id),
		UpdateExpression:          aws.String("SET #pull = :one"),
		ConditionExpression:       aws.String("attribute_exists(#conn)"),
		ExpressionAttributeNames:  map[string]string{"#pull": attrPull, "#conn": attrConn},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("mark %s/%s for a group pull: %w", u, id, err)
	}
	return nil
}

// TouchConnection refreshes a connection's lastSeenAt and TTL and reports
// whether redelivery to it gave up on a group message since the last
// touch (MarkPull), clearing that. It returns
// im.ErrNotFound when the record is gone.
func (st *Store) TouchConnection(ctx context.Context, u im.UserID, id im.ConnectionID, now time.Time) (bool, error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Connections),
		Key:                       connKey(u, id),
		UpdateExpression:          aws.String("SET #seen = :now, #ttl = :ttl, #pull = :zero"),
		ConditionExpression:       aws.String("attribute_exists(#conn)"),
		ExpressionAttributeNames:  map[string]string{"#seen": "lastSeenAt", "#ttl": attrTTL, "#conn": attrConn, "#pull": attrPull},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.UnixMilli()), ":ttl": n(now.Add(im.ConnectionTTL).Unix()), ":zero": n(0)},
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if isConditionFailed(err) {
		return false, fmt.Errorf("touch connection %s/%s: %w", u, id, im.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("touch connection %s/%s: %w", u, id, err)
	}
	return getN(out.Attributes, attrPull) == 1, nil
}

// Connections lists a user's connection records.
func (st *Store) Connections(ctx context.Context, u im.UserID) ([]im.Connection, error) {
	var conns []im.Connection
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Connections),
		KeyConditionExpression:    aws.String("#u = :u"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u))},
		ConsistentRead:            aws.Bool(true),
	}, func(item map[string]types.AttributeValue) {
		conns = append(conns, im.Connection{
			User:        u,
			ID:          im.ConnectionID(getS(item, attrConn)),
			Device:      im.DeviceID(getS(item, "deviceId")),
			ConnectedAt: time.UnixMilli(getN(item, "connectedAt")).UTC(),
			LastSeenAt:  time.UnixMilli(getN(item, "lastSeenAt")).UTC(),
		})
	})
	if err != nil {
		return nil, fmt.Errorf("connections of %s: %w", u, err)
	}
	return conns, nil
}
