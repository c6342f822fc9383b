package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// A group too large for one transaction (100 items) is created in stages,
// and still all at once for everyone else:
//
//  1. the head item is put with pending = <token> (and no seq), with the
//     owner and the first members, in one transaction conditional on the
//     group not existing;
//  2. the other members are put in transactions that each check the head is
//     still pending with this token; every staged member item carries
//     stage = <token>;
//  3. one conditional update sets pending to stageCommitted: the commit
//     (not REMOVE: minidyn's REMOVE leaves the attribute behind);
//  4. then each member's conversation index item is written.
//
// Until the commit a pending head makes the group nonexistent to every
// reader (GroupInfo, Member, Members, sends, reads, changes), so a create
// that fails stores nothing anyone can see; it also deletes what it staged.
// A create that crashed before its commit leaves a pending head: after
// stagedCreateAbandoned another create of the same id deletes its staged
// items (conditional on their token) and takes the id. No index item
// exists before the commit, so no member's conversation list shows a group
// that does not exist.
const (
	attrPending = "pending"
	attrStage   = "stage"
	// stageCommitted is pending's value once the create committed.
	stageCommitted = "committed"
	// stagedCreateAbandoned is how old a pending head is before a new create
	// of its id may replace it: far beyond any function's timeout.
	stagedCreateAbandoned = 15 * time.Minute
	// itemsPerTransaction is DynamoDB's limit on one TransactWriteItems.
	itemsPerTransaction = 100
)

// CreateGroup creates group c named name with owner as its owner and
// members (deduplicated, without the owner; the caller checks the member
// limit) as members, and returns the members it added. It is atomic for
// every size: a create that fails stores nothing anyone can see.
// im.ErrGroupExists when the id is taken.
func (st *Store) CreateGroup(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, now time.Time) ([]im.Member, error) {
	create := st.createInOne
	if len(members) > maxMembersPerChange {
		create = st.createStaged
	}
	added, err := create(ctx, c, name, owner, members, now)
	if errors.Is(err, im.ErrGroupExists) {
		// Perhaps only a staged create that crashed long ago holds the id.
		if cleared, cerr := st.clearAbandonedCreate(ctx, c, now); cerr != nil {
			return nil, cerr
		} else if cleared {
			added, err = create(ctx, c, name, owner, members, now)
		}
	}
	if errors.Is(err, im.ErrGroupExists) {
		return st.createdBefore(ctx, c, name, owner, members, err)
	}
	return added, err
}

// createdBefore answers a create of an id that is taken: when owner
// created the group under that name (a create sent again because its
// answer was lost), the group's current members among those it named and
// im.ErrAlreadyCreated; otherwise exists (im.ErrGroupExists).
func (st *Store) createdBefore(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, exists error) ([]im.Member, error) {
	h, err := st.readHead(ctx, c)
	if err != nil {
		return nil, err
	}
	if !h.live() || h.creator != owner || h.name != name {
		return nil, exists
	}
	all, err := st.Members(ctx, c)
	if err != nil {
		return nil, err
	}
	named := append([]im.UserID{owner}, members...)
	var out []im.Member
	for _, m := range all {
		if m.Active() && slices.Contains(named, m.User) {
			out = append(out, m)
		}
	}
	return out, fmt.Errorf("create group %s: %w", c, im.ErrAlreadyCreated)
}

// createInOne creates a group that fits one transaction.
func (st *Store) createInOne(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, now time.Time) ([]im.Member, error) {
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName:           aws.String(st.tables.Messages),
			Item:                st.groupHeadItem(c, name, owner, len(members), now),
			ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
		}},
		{Update: joinIndexUpdate(st.tables.Inbox, owner, c, name, 0, st.GroupReads, nil)},
	}
	added := []im.Member{{User: owner, Role: im.RoleOwner}}
	for _, u := range members {
		added = append(added, im.Member{User: u, Role: im.RoleMember})
	}
	for _, m := range added {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.tables.Messages), Item: memberItem(c, m, owner, now, "")}})
		if m.User != owner {
			items = append(items, types.TransactWriteItem{Update: joinIndexUpdate(st.tables.Inbox, m.User, c, name, 0, st.GroupReads, nil)})
		}
	}
	_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if classifyTx(err, 0) == txCondition {
		return nil, fmt.Errorf("create group %s: %w", c, im.ErrGroupExists)
	}
	if err != nil {
		return nil, fmt.Errorf("create group %s: %w", c, err)
	}
	return added, nil
}

// groupHeadItem is the head item of a new group of owner and members others.
func (st *Store) groupHeadItem(c im.ConversationID, name string, owner im.UserID, members int, now time.Time) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{
		attrConv: s(string(c)), attrSK: s(skHead), "name": s(name), "count": n(int64(1 + members)), "owners": n(1),
		"createdAt": n(now.UnixMilli()), "createdBy": s(string(owner)),
	}
	if st.GroupReads {
		it[attrReads] = n(1)
	}
	return it
}

// memberItem is the member item of m in a new group created by owner;
// stage is the staged create's token ("" in one transaction).
func memberItem(c im.ConversationID, m im.Member, owner im.UserID, now time.Time, stage string) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{attrConv: s(string(c)), attrSK: s(memberSK(m.User)), "role": s(string(m.Role)), "joined": n(0), "at": n(now.UnixMilli())}
	if m.User != owner {
		it["by"] = s(string(owner))
	}
	if stage != "" {
		it[attrStage] = s(stage)
	}
	return it
}

// createStaged creates a group too large for one transaction (see the
// comment at the top of this file).
func (st *Store) createStaged(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, now time.Time) ([]im.Member, error) {
	token := newStageToken()
	added := []im.Member{{User: owner, Role: im.RoleOwner}}
	for _, u := range members {
		added = append(added, im.Member{User: u, Role: im.RoleMember})
	}
	head := st.groupHeadItem(c, name, owner, len(members), now)
	head[attrPending] = s(token)
	first := min(len(added), itemsPerTransaction-1)
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(st.tables.Messages), Item: head,
		ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	}}}
	for _, m := range added[:first] {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.tables.Messages), Item: memberItem(c, m, owner, now, token)}})
	}
	_, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if classifyTx(err, 0) == txCondition {
		return nil, fmt.Errorf("create group %s: %w", c, im.ErrGroupExists)
	}
	if err != nil {
		return nil, fmt.Errorf("create group %s: stage the head: %w", c, err)
	}
	if err := st.stageAndCommit(ctx, c, owner, token, added[first:], now); err != nil {
		if uerr := st.unstage(context.WithoutCancel(ctx), c, token); uerr != nil {
			err = errors.Join(err, fmt.Errorf("and deleting what it staged: %w (the group stays invisible; a create after %s replaces it)", uerr, stagedCreateAbandoned))
		}
		return nil, fmt.Errorf("create group %s: %w", c, err)
	}
	// Committed: the group exists. Each member's conversation index item
	// follows (the owner's too); a failure here is an error for the caller
	// to see, though the group and its members stand.
	for start := 0; start < len(added); start += itemsPerTransaction {
		var idx []types.TransactWriteItem
		for _, m := range added[start:min(start+itemsPerTransaction, len(added))] {
			idx = append(idx, types.TransactWriteItem{Update: joinIndexUpdate(st.tables.Inbox, m.User, c, name, 0, st.GroupReads, nil)})
		}
		if _, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: idx}); err != nil {
			return added, fmt.Errorf("create group %s: created, but writing its members' conversation index failed: %w", c, err)
		}
	}
	return added, nil
}

// stageAndCommit puts the remaining member items, each transaction checking
// the head is still pending with token, then commits.
func (st *Store) stageAndCommit(ctx context.Context, c im.ConversationID, owner im.UserID, token string, rest []im.Member, now time.Time) error {
	check := types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead),
		ConditionExpression:       aws.String("#p = :t"),
		ExpressionAttributeNames:  map[string]string{"#p": attrPending},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": s(token)},
	}}
	for start := 0; start < len(rest); start += itemsPerTransaction - 1 {
		items := []types.TransactWriteItem{check}
		for _, m := range rest[start:min(start+itemsPerTransaction-1, len(rest))] {
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.tables.Messages), Item: memberItem(c, m, owner, now, token)}})
		}
		if _, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
			return fmt.Errorf("stage members: %w", err)
		}
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead),
		UpdateExpression:          aws.String("SET #p = :done"),
		ConditionExpression:       aws.String("#p = :t"),
		ExpressionAttributeNames:  map[string]string{"#p": attrPending},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": s(token), ":done": s(stageCommitted)},
	})
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// unstage deletes what a staged create with token wrote: its member items,
// then its head (each delete conditional on the token, so nothing another
// create wrote is touched).
func (st *Store) unstage(ctx context.Context, c im.ConversationID, token string) error {
	p := dynamodb.NewQueryPaginator(st.db, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Messages),
		KeyConditionExpression:    aws.String("#c = :c AND begins_with(#sk, :u)"),
		FilterExpression:          aws.String("#stage = :t"),
		ExpressionAttributeNames:  map[string]string{"#c": attrConv, "#sk": attrSK, "#stage": attrStage},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(string(c)), ":u": s("u#"), ":t": s(token)},
		ProjectionExpression:      aws.String("#c, #sk"),
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list staged members: %w", err)
		}
		for start := 0; start < len(page.Items); start += itemsPerTransaction {
			var dels []types.TransactWriteItem
			for _, it := range page.Items[start:min(start+itemsPerTransaction, len(page.Items))] {
				dels = append(dels, types.TransactWriteItem{Delete: &types.Delete{
					TableName: aws.String(st.tables.Messages), Key: convKey(c, getS(it, attrSK)),
					ConditionExpression:       aws.String("#stage = :t"),
					ExpressionAttributeNames:  map[string]string{"#stage": attrStage},
					ExpressionAttributeValues: map[string]types.AttributeValue{":t": s(token)},
				}})
			}
			if _, err := st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: dels}); err != nil {
				return fmt.Errorf("delete staged members: %w", err)
			}
		}
	}
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead),
		ConditionExpression:       aws.String("#p = :t"),
		ExpressionAttributeNames:  map[string]string{"#p": attrPending},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": s(token)},
	})
	if _, gone := errors.AsType[*types.ConditionalCheckFailedException](err); err != nil && !gone {
		return fmt.Errorf("delete staged head: %w", err)
	}
	return nil
}

// clearAbandonedCreate deletes what a staged create of c left behind if its
// head has been pending for longer than stagedCreateAbandoned, and reports
// whether it did.
func (st *Store) clearAbandonedCreate(ctx context.Context, c im.ConversationID, now time.Time) (bool, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, fmt.Errorf("create group %s: %w", c, err)
	}
	token := headFrom(out.Item).pending
	if token == "" || now.Sub(time.UnixMilli(getN(out.Item, "createdAt"))) < stagedCreateAbandoned {
		return false, nil // no head, a live group, or a create still under way
	}
	if err := st.unstage(ctx, c, token); err != nil {
		return false, fmt.Errorf("create group %s: clearing an abandoned create: %w", c, err)
	}
	return true, nil
}

// newStageToken names one staged create (random, 16 hex digits).
func newStageToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
