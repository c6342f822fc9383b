package dynamo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Group items live in the Messages table beside the group's log:
//
//	g:<id> / head      seq (conversation head), name, count (active members), owners, createdAt
//	g:<id> / u#<user>  role, joined (head when added), left (head when removed; absent while a member),
//	                   past (earlier memberships, when re-added: see attrPast),
//	                   change (the change that last wrote it: see attrChange)
//	g:<id> / o#<n>#<actor> <opId>  users (whom part n of that change changed; absent: nobody), ttl
//	                   (see opSK)
//
// Every membership change updates the head item conditionally on the head
// seq it read, in the same transaction as the member items: a change and a
// send never interleave, so "member when message N was sent" is exact.

// memberSK is the sort key of user u's member item in a group.
func memberSK(u im.UserID) string { return "u#" + string(u) }

// attrRemoved is 1 on the member and index items of a removed member (a
// number, not REMOVE-d attributes: minidyn's REMOVE leaves them behind).
const attrRemoved = "removed"

// maxMembersPerChange bounds the members one transaction changes (each
// costs two items; a transaction holds 100).
const maxMembersPerChange = 45

// memberFrom reads a member item.
func memberFrom(it map[string]types.AttributeValue) im.Member {
	return im.Member{User: im.UserID(getS(it, attrSK)[2:]), Role: im.Role(getS(it, "role")), Joined: getN(it, "joined"),
		Removed: getN(it, attrRemoved) == 1, Left: getN(it, attrLeft), Past: pastFrom(it)}
}

// memberRecord is a member item as a change reads it: the member and the
// change that last wrote it (attrChange).
type memberRecord struct {
	im.Member
	change string
}

// attrOpUsers lists on an op item the users its change changed (a string
// set; absent when it changed nobody).
const attrOpUsers = "users"

// changedBefore is the answer of a change of targets sent again: the
// members its op item names, as they are now, in the order of targets (as
// the first answer had them).
func changedBefore(opItem map[string]types.AttributeValue, targets []im.UserID, members map[im.UserID]memberRecord) []im.Member {
	ss, _ := opItem[attrOpUsers].(*types.AttributeValueMemberSS)
	if ss == nil {
		return nil
	}
	var out []im.Member
	for _, u := range targets {
		if slices.Contains(ss.Value, string(u)) {
			m := members[u].Member
			m.User = u
			out = append(out, m)
		}
	}
	return out
}

// markChange makes member item update u record change key (attrChange):
// set to the key, or to "" when the change has none, so that the record
// no longer names an earlier change (an empty string, not a REMOVE:
// minidyn's REMOVE leaves top-level attributes behind).
func markChange(u *types.Update, key string) {
	u.UpdateExpression = aws.String(*u.UpdateExpression + ", #change = :change")
	u.ExpressionAttributeNames["#change"] = attrChange
	u.ExpressionAttributeValues[":change"] = s(key)
}

// opSK is the sort key of the op item a change with an op id leaves in
// its group's partition, one per transaction of it (part: the first is 0),
// written in the transaction (or, when the part changed nobody, alone),
// kept IdempotencyRetention: the same change sent again within it is
// answered from the item as the first time and changes nothing, also after
// later changes of the same members — a copy that arrives after them (the
// SDKs ask an unanswered change again after a gateway error or on a new
// connection, while the first copy's invocation may still run) must not
// undo them. "o#" sorts apart from the log's "s#" items and the members'
// "u#".
func opSK(key string, part int) string { return "o#" + strconv.Itoa(part) + "#" + key }

// attrChange is the im.MemberChange.Key of the change that last wrote a
// member item ("" when that change had no op id).
const attrChange = "change"

// attrPast holds a re-added member's earlier memberships (im.Member.Past)
// on their member item and their index item of the group:
// "joined:left,joined:left", oldest first. Absent until a re-add.
const attrPast = "past"

// pastValue is the attrPast value of spans.
func pastValue(spans []im.Span) types.AttributeValue {
	parts := make([]string, len(spans))
	for i, p := range spans {
		parts[i] = strconv.FormatInt(p.Joined, 10) + ":" + strconv.FormatInt(p.Left, 10)
	}
	return s(strings.Join(parts, ","))
}

// pastFrom reads the earlier memberships an item holds (none when absent
// or unreadable: a damaged value loses only what it would have added).
func pastFrom(it map[string]types.AttributeValue) []im.Span {
	v := getS(it, attrPast)
	if v == "" {
		return nil
	}
	var out []im.Span
	for part := range strings.SplitSeq(v, ",") {
		j, l, ok := strings.Cut(part, ":")
		joined, err1 := strconv.ParseInt(j, 10, 64)
		left, err2 := strconv.ParseInt(l, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil
		}
		out = append(out, im.Span{Joined: joined, Left: left})
	}
	return out
}

// groupHead is the head item of a group.
type groupHead struct {
	exists        bool
	seq           int64
	name          string
	count, owners int64
	// pending is the token of a create still staging its members (see
	// createStaged): until it commits, the group does not exist for anyone.
	pending string
	// reads: the group is read-diffused (Store.GroupReads when created).
	reads bool
	// creator is the user who created the group.
	creator im.UserID
}

// attrReads is 1 on the head item of a read-diffused group.
const attrReads = "reads"

// live reports whether the head is a created group's.
func (h groupHead) live() bool { return h.exists && h.name != "" && h.pending == "" }

// headCond is the condition that the head item's seq is still old.
func headCond(old int64, values map[string]types.AttributeValue) string {
	if old == 0 {
		return "attribute_not_exists(#seq)"
	}
	values[":old"] = n(old)
	return "#seq = :old"
}

// joinIndexUpdate starts (or restarts) u's view of group c at head,
// keeping u's earlier memberships past (none on a first join).
func joinIndexUpdate(table string, u im.UserID, c im.ConversationID, name string, head int64, reads bool, past []im.Span) *types.Update {
	up := &types.Update{
		TableName:                 aws.String(table),
		Key:                       inboxKey(u, convIndexSK(c)),
		UpdateExpression:          aws.String("SET #base = :h, #last = if_not_exists(#last, :h), title = :name, #left = :zero, #removed = :zero"),
		ExpressionAttributeNames:  map[string]string{"#base": attrBase, "#last": attrLast, "#left": attrLeft, "#removed": attrRemoved},
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": n(head), ":name": s(name), ":zero": n(0)},
	}
	if len(past) > 0 {
		*up.UpdateExpression += ", #past = :past"
		up.ExpressionAttributeNames["#past"] = attrPast
		up.ExpressionAttributeValues[":past"] = pastValue(past)
	}
	if reads {
		// A read-diffused group: readers of the item take last and
		// delivered from the group's head and the device cursors on it.
		*up.UpdateExpression += ", #reads = :one"
		up.ExpressionAttributeNames["#reads"] = attrReads
		up.ExpressionAttributeValues[":one"] = n(1)
	}
	return up
}

// groupState reads the head item and the member items of users, strongly
// consistent (batchGet).
func (st *Store) groupState(ctx context.Context, c im.ConversationID, users []im.UserID) (groupHead, map[im.UserID]memberRecord, error) {
	h, members, _, err := st.groupStateAndOp(ctx, c, users, "")
	return h, members, err
}

// groupStateAndOp is groupState that also reads the op item with sort key
// op ("" for none; opSK): nil when there is none.
func (st *Store) groupStateAndOp(ctx context.Context, c im.ConversationID, users []im.UserID, op string) (groupHead, map[im.UserID]memberRecord, map[string]types.AttributeValue, error) {
	keys := []map[string]types.AttributeValue{convKey(c, skHead)}
	for _, u := range users {
		keys = append(keys, convKey(c, memberSK(u)))
	}
	if op != "" {
		keys = append(keys, convKey(c, op))
	}
	var h groupHead
	var opItem map[string]types.AttributeValue
	members := map[im.UserID]memberRecord{}
	err := st.batchGet(ctx, st.tables.Messages, keys, true, func(it map[string]types.AttributeValue) {
		switch sk := getS(it, attrSK); {
		case sk == skHead:
			h = headFrom(it)
			return
		case op != "" && sk == op:
			opItem = it
			return
		}
		m := memberFrom(it)
		members[m.User] = memberRecord{Member: m, change: getS(it, attrChange)}
	})
	if err != nil {
		return groupHead{}, nil, nil, fmt.Errorf("group %s: %w", c, err)
	}
	return h, members, opItem, nil
}

// headFrom reads a group head item.
func headFrom(it map[string]types.AttributeValue) groupHead {
	h := groupHead{exists: true, seq: getN(it, attrSeq), name: getS(it, "name"), count: getN(it, "count"), owners: getN(it, "owners"), reads: getN(it, attrReads) == 1,
		creator: im.UserID(getS(it, "createdBy"))}
	if p := getS(it, attrPending); p != stageCommitted {
		h.pending = p
	}
	return h
}

// readHead reads group c's head item alone (strongly consistent).
func (st *Store) readHead(ctx context.Context, c im.ConversationID) (groupHead, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return groupHead{}, fmt.Errorf("group %s head: %w", c, err)
	}
	if out.Item == nil {
		return groupHead{}, nil
	}
	return headFrom(out.Item), nil
}

// headAndMember returns c's head and, for a group, u's membership.
func (st *Store) headAndMember(ctx context.Context, c im.ConversationID, u im.UserID) (int64, im.Member, error) {
	if !c.IsGroup() {
		// A 1:1 conversation's head is each participant's index (see
		// readDirectHeads).
		head, err := st.lastReceived(ctx, u, c)
		return head, im.Member{}, err
	}
	h, members, err := st.groupState(ctx, c, []im.UserID{u})
	if err != nil {
		return 0, im.Member{}, err
	}
	if h.pending != "" {
		return 0, im.Member{}, nil // staged members are nobody's yet
	}
	return h.seq, members[u].Member, nil
}

// GroupInfo returns a group's name, head and active member count;
// im.ErrNoSuchGroup when there is no such group.
func (st *Store) GroupInfo(ctx context.Context, c im.ConversationID) (name string, head, count int64, err error) {
	h, _, err := st.groupState(ctx, c, nil)
	if err != nil {
		return "", 0, 0, err
	}
	if !h.live() {
		return "", 0, 0, fmt.Errorf("group %s: %w", c, im.ErrNoSuchGroup)
	}
	return h.name, h.seq, h.count, nil
}

// Member returns u's membership of c (zero Role when never a member).
func (st *Store) Member(ctx context.Context, c im.ConversationID, u im.UserID) (im.Member, error) {
	_, m, err := st.headAndMember(ctx, c, u)
	return m, err
}

// Members returns every member record of group c, removed members included,
// and none of a group whose create has not committed (member items written
// by a staged create carry its token; only then is the head read).
func (st *Store) Members(ctx context.Context, c im.ConversationID) ([]im.Member, error) {
	var out []im.Member
	staged := false
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Messages),
		KeyConditionExpression:    aws.String("#c = :c AND begins_with(#sk, :u)"),
		ExpressionAttributeNames:  map[string]string{"#c": attrConv, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(string(c)), ":u": s("u#")},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		out = append(out, memberFrom(it))
		staged = staged || getS(it, attrStage) != ""
	})
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", c, err)
	}
	if staged {
		h, err := st.readHead(ctx, c)
		if err != nil {
			return nil, err
		}
		if !h.live() {
			return []im.Member{}, nil
		}
	}
	return out, nil
}

// ChangeMembers applies ch's op (add, remove or role) by its actor to its
// targets, giving them its role (add, role). Each transaction moves at most
// 45 members and is conditional on the conversation head, so it is ordered
// against every send. The limit bounds active members. It returns the
// members whose record changed; targets already in the wanted state are
// skipped (a retry changes nothing). A change with an op id leaves an op
// item per transaction (opSK) naming whom it changed, and the same change
// sent again within IdempotencyRetention returns those members as changed,
// writing nothing and not asking again whether the actor may: its first
// invocation may have stored it and failed before answering, the actor who
// left the group by it is no member any more, and a later change of the
// same members stays as it is. (The member records a change writes also
// name it, im.MemberChange.Key: how a change stored before op items is
// found again.)
func (st *Store) ChangeMembers(ctx context.Context, ch im.MemberChange) ([]im.Member, error) {
	// A transaction may not touch an item twice: a target named twice is one.
	seen := make(map[im.UserID]bool, len(ch.Targets))
	targets := slices.DeleteFunc(slices.Clone(ch.Targets), func(u im.UserID) bool {
		dup := seen[u]
		seen[u] = true
		return dup
	})
	var changed []im.Member
	for start := 0; start < len(targets); start += maxMembersPerChange {
		chunk := ch
		chunk.Targets = targets[start:min(start+maxMembersPerChange, len(targets))]
		done, err := st.changeChunk(ctx, chunk, start/maxMembersPerChange)
		changed = append(changed, done...)
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// changeChunk applies one membership change (part part of it) to at most
// maxMembersPerChange targets in one transaction ordered against the
// group's messages (the head advanced on its value read), retrying a
// lost race with the state read again.
func (st *Store) changeChunk(ctx context.Context, ch im.MemberChange, part int) ([]im.Member, error) {
	c, actor, op, targets, role, key := ch.Group, ch.Actor, ch.Op, ch.Targets, ch.Role, ch.Key()
	opKey := ""
	if key != "" {
		opKey = opSK(key, part)
	}
	for attempt := range st.MaxAttempts {
		h, members, opItem, err := st.groupStateAndOp(ctx, c, append([]im.UserID{actor}, targets...), opKey)
		if err != nil {
			return nil, err
		}
		if !h.live() {
			return nil, fmt.Errorf("group %s: %w", c, im.ErrNoSuchGroup)
		}
		if opItem != nil {
			return changedBefore(opItem, targets, members), nil // sent again: answered as the first time
		}
		by := members[actor].Member
		var items []types.TransactWriteItem
		actorItem := -1 // index of the item that changes the actor's own record
		var changed []im.Member
		countDelta, ownersDelta := int64(0), int64(0)
		for _, u := range targets {
			t := members[u].Member
			t.User = u
			if key != "" && members[u].change == key {
				changed = append(changed, t) // by this change, sent before
				continue
			}
			if err := im.Authorize(by, op, t, role); err != nil {
				return nil, err
			}
			switch op {
			case im.OpAdd:
				if t.Active() {
					continue
				}
				// Added again, a removed member keeps what was sent to them
				// before (im.Member.Rejoined).
				t = t.Rejoined(h.seq, role)
				countDelta++
				if role == im.RoleOwner {
					ownersDelta++
				}
				item := map[string]types.AttributeValue{
					attrConv: s(string(c)), attrSK: s(memberSK(u)), "role": s(string(role)), "joined": n(h.seq), "at": n(ch.At.UnixMilli()), "by": s(string(actor)),
				}
				if len(t.Past) > 0 {
					item[attrPast] = pastValue(t.Past)
				}
				if key != "" {
					item[attrChange] = s(key)
				}
				items = append(items,
					types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.tables.Messages), Item: item}},
					types.TransactWriteItem{Update: joinIndexUpdate(st.tables.Inbox, u, c, h.name, h.seq, h.reads, t.Past)})
			case im.OpRemove:
				if !t.Active() {
					continue
				}
				countDelta--
				if t.Role == im.RoleOwner {
					ownersDelta--
				}
				t.Removed, t.Left = true, h.seq
				if u == actor {
					actorItem = len(items)
				}
				removed := func(table string, key map[string]types.AttributeValue) types.TransactWriteItem {
					return types.TransactWriteItem{Update: &types.Update{
						TableName: aws.String(table), Key: key,
						UpdateExpression:          aws.String("SET #left = :h, #removed = :one, removedBy = :by"),
						ExpressionAttributeNames:  map[string]string{"#left": attrLeft, "#removed": attrRemoved},
						ExpressionAttributeValues: map[string]types.AttributeValue{":h": n(h.seq), ":one": n(1), ":by": s(string(actor))},
					}}
				}
				member := removed(st.tables.Messages, convKey(c, memberSK(u)))
				markChange(member.Update, key)
				items = append(items, member, removed(st.tables.Inbox, inboxKey(u, convIndexSK(c))))
			case im.OpRole:
				if t.Role == role {
					continue
				}
				if t.Role == im.RoleOwner {
					ownersDelta--
				}
				if role == im.RoleOwner {
					ownersDelta++
				}
				t.Role = role
				if u == actor {
					actorItem = len(items)
				}
				member := types.TransactWriteItem{Update: &types.Update{
					TableName: aws.String(st.tables.Messages), Key: convKey(c, memberSK(u)),
					UpdateExpression:          aws.String("SET #role = :r"),
					ExpressionAttributeNames:  map[string]string{"#role": "role"},
					ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(string(role))},
				}}
				markChange(member.Update, key)
				items = append(items, member)
			}
			changed = append(changed, t)
		}
		var opPut *types.Put
		if opKey != "" {
			item := map[string]types.AttributeValue{attrConv: s(string(c)), attrSK: s(opKey), attrTTL: n(ch.At.Add(IdempotencyRetention).Unix())}
			if len(changed) > 0 {
				users := make([]string, len(changed))
				for i, m := range changed {
					users[i] = string(m.User)
				}
				item[attrOpUsers] = &types.AttributeValueMemberSS{Value: users}
			}
			opPut = &types.Put{TableName: aws.String(st.tables.Messages), Item: item,
				ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK}}
		}
		if len(items) == 0 {
			// Nothing to write, or only what this change did before it had
			// op items: a change that changed nobody is remembered too, or
			// sent again after a later change it would apply then.
			if opPut == nil {
				return changed, nil
			}
			_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: opPut.TableName, Item: opPut.Item,
				ConditionExpression: opPut.ConditionExpression, ExpressionAttributeNames: opPut.ExpressionAttributeNames})
			if err == nil {
				return changed, nil
			}
			if !isConditionFailed(err) {
				return nil, fmt.Errorf("group %s %s: %w", c, op, err)
			}
			continue // another copy of this change was first: read what it did
		}
		if opPut != nil {
			items = append(items, types.TransactWriteItem{Put: opPut})
		}
		if h.count+countDelta > int64(ch.Limit) {
			return nil, fmt.Errorf("group %s: %d members + %d > limit %d: %w", c, h.count, countDelta, ch.Limit, im.ErrGroupFull)
		}
		if h.owners+ownersDelta < 1 {
			return nil, fmt.Errorf("group %s: %w", c, im.ErrLastOwner)
		}
		// The actor's role is checked in the same transaction as the change:
		// an admin being demoted (or removed) at this moment cannot still add.
		actorCond := "#arole = :arole AND (attribute_not_exists(#aremoved) OR #aremoved = :azero)"
		actorNames := map[string]string{"#arole": "role", "#aremoved": attrRemoved}
		actorValues := map[string]types.AttributeValue{":arole": s(string(by.Role)), ":azero": n(0)}
		if actorItem >= 0 {
			u := items[actorItem].Update
			u.ConditionExpression = aws.String(actorCond)
			maps.Copy(u.ExpressionAttributeNames, actorNames)
			if u.ExpressionAttributeValues == nil {
				u.ExpressionAttributeValues = map[string]types.AttributeValue{}
			}
			maps.Copy(u.ExpressionAttributeValues, actorValues)
		} else {
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
				TableName: aws.String(st.tables.Messages), Key: convKey(c, memberSK(actor)),
				ConditionExpression: aws.String(actorCond), ExpressionAttributeNames: actorNames, ExpressionAttributeValues: actorValues,
			}})
		}
		values := map[string]types.AttributeValue{":dc": n(countDelta), ":do": n(ownersDelta), ":count": n(h.count), ":owners": n(h.owners)}
		cond := headCond(h.seq, values) + " AND #count = :count AND #owners = :owners"
		head := types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead),
			UpdateExpression:          aws.String("ADD #count :dc, #owners :do"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#seq": attrSeq, "#count": "count", "#owners": "owners"},
			ExpressionAttributeValues: values,
		}}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: append([]types.TransactWriteItem{head}, items...)})
		if err == nil {
			return changed, nil
		}
		// A failed condition of the op item is a race too: another copy of
		// this change was first, and the state read again finds its item.
		if classifyTx(err, -1) != txRace {
			return nil, fmt.Errorf("group %s %s: %w", c, op, err)
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("group %s %s: %w", c, op, im.ErrContention)
}
