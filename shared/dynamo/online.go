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

// The online index of groups under read diffusion
// (docs/proposal-group-read-diffusion.md): one item per connection of a
// member in the Connections table, in the partition "g#<group>" (a user
// id cannot hold '#', so no user's connection records share it), sort key
// "<user>#<connectionId>". A group message's fan-out reads who is online
// with one Query of that partition instead of one Query per member — at
// 30 % online, 140 of 200 lookups found nothing.
//
//	member, deviceId, connectedAt   the connection
//	ttl                             connectedAt + im.ConnectionTTL (API Gateway closes any connection after 2 h)
//
// Like the connection records it is a routing hint: the fan-out pushes
// only to members the group's membership says are due the message, and an
// item outlives its connection at most until its TTL. A connection record
// lists the groups it is indexed in (groups, a string set), so removing
// the record removes its index items too.

// attrGroups is the string set, on a connection record, of the groups the
// connection is in the online index of.
const attrGroups = "groups"

// onlinePK is the partition of group c's online index.
func onlinePK(c im.ConversationID) string { return "g#" + string(c) }

// onlineKey is the key of connection id of user u in group c's online index.
func onlineKey(c im.ConversationID, u im.UserID, id im.ConnectionID) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrUser: s(onlinePK(c)), attrConn: s(string(u) + "#" + string(id))}
}

// ReadGroupsOf lists the read-diffused groups u is a member of now, from
// u's group index items (one Query, strongly consistent: a group u was
// added to before this call is in it — what lets $connect and a group's
// add leave no connection unindexed between them).
func (st *Store) ReadGroupsOf(ctx context.Context, u im.UserID) ([]im.ConversationID, error) {
	var out []im.ConversationID
	q := st.groupIndexQuery(u)
	q.ConsistentRead = aws.Bool(true)
	err := st.queryAll(ctx, q, func(it map[string]types.AttributeValue) {
		if it[attrBase] != nil && getN(it, attrReads) == 1 && getN(it, attrRemoved) != 1 {
			out = append(out, im.ConversationID(strings.TrimPrefix(getS(it, attrSK), convIndexSK(""))))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read-diffused groups of %s: %w", u, err)
	}
	return out, nil
}

// IndexOnline puts connection conn in the online index of groups and adds
// them to its record's groups. A connection whose record is gone (it closed
// meanwhile) is not indexed: false.
func (st *Store) IndexOnline(ctx context.Context, conn im.Connection, groups []im.ConversationID) (bool, error) {
	if len(groups) == 0 {
		return true, nil
	}
	set := make([]string, len(groups))
	for i, c := range groups {
		set[i] = string(c)
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Connections),
		Key:                       connKey(conn.User, conn.ID),
		UpdateExpression:          aws.String("ADD #g :g"),
		ConditionExpression:       aws.String("attribute_exists(#c)"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroups, "#c": attrConn},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberSS{Value: set}},
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("index connection %s/%s: %w", conn.User, conn.ID, err)
	}
	items := make([]map[string]types.AttributeValue, len(groups))
	for i, c := range groups {
		it := onlineKey(c, conn.User, conn.ID)
		it["member"], it["deviceId"] = s(string(conn.User)), s(string(conn.Device))
		it["connectedAt"], it[attrTTL] = n(conn.ConnectedAt.UnixMilli()), n(conn.ConnectedAt.Add(im.ConnectionTTL).Unix())
		items[i] = it
	}
	if err := st.batchPut(ctx, st.tables.Connections, items); err != nil {
		return false, fmt.Errorf("index connection %s/%s: %w", conn.User, conn.ID, err)
	}
	return true, nil
}

// OnlineIn lists the connections in group c's online index (one Query,
// strongly consistent: a connection indexed before a message was stored is
// found by that message's fan-out), without those past their TTL (which
// DynamoDB deletes late).
func (st *Store) OnlineIn(ctx context.Context, c im.ConversationID, now time.Time) ([]im.Connection, error) {
	var out []im.Connection
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Connections),
		KeyConditionExpression:    aws.String("#u = :g"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": s(onlinePK(c))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		if getN(it, attrTTL) <= now.Unix() {
			return
		}
		u := getS(it, "member")
		out = append(out, im.Connection{
			User: im.UserID(u), ID: im.ConnectionID(strings.TrimPrefix(getS(it, attrConn), u+"#")),
			Device: im.DeviceID(getS(it, "deviceId")), ConnectedAt: time.UnixMilli(getN(it, "connectedAt")).UTC(),
		})
	})
	if err != nil {
		return nil, fmt.Errorf("online members of %s: %w", c, err)
	}
	return out, nil
}

// unindexOnline deletes connection id's items of the online index of the
// groups its removed record listed (old: the record's last attributes),
// one DeleteItem each (a connection is in few read-diffused groups).
func (st *Store) unindexOnline(ctx context.Context, u im.UserID, id im.ConnectionID, old map[string]types.AttributeValue) error {
	set, _ := old[attrGroups].(*types.AttributeValueMemberSS)
	if set == nil {
		return nil
	}
	for _, c := range set.Value {
		_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.tables.Connections), Key: onlineKey(im.ConversationID(c), u, id)})
		if err != nil {
			return fmt.Errorf("unindex connection %s/%s: %w", u, id, err)
		}
	}
	return nil
}

// GroupReadDiffused reports whether group c is read-diffused (its head item
// says so; strongly consistent).
func (st *Store) GroupReadDiffused(ctx context.Context, c im.ConversationID) (bool, error) {
	h, err := st.readHead(ctx, c)
	return h.reads, err
}
