package dynamo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// The conversation index: one item per (user, conversation) in the Inbox
// table, sk "v#<conversationId>". It holds what a login summary shows and
// the user's watermarks of the conversation:
//
//	last, lastFrom, lastAt, preview   the last message in the user's inbox (convSeq);
//	                                  for a group, the last one claimed (AppendGroup)
//	iseq                              the inbox seq of that message (heads.go)
//	base, left, removed               group view: joined after base; removed (1) at left
//	read, readAt                      read watermark (forward-only)
//	delivered, deliveredAt            highest convSeq one of the user's devices acked,
//	                                  as the ack route wrote it until the fifteenth
//	                                  (1:1) and sixteenth (groups) sessions; now
//	                                  derived from the device cursors when read
//	                                  (withDerivedDelivered), a stored value counting
//	                                  where it is higher
//	unread                            alert conversations only: alerts not yet read
//	rseq, late                        alert conversations only: the inbox seq up to
//	                                  which alerts are read, alerts that came late
//	                                  (read.go)
//
// Writers: every inbox append (in a 1:1 send's transaction; a group
// fan-out claims the message just before putting its entry), membership
// changes and read. The item has no TTL: it outlives the inbox entries,
// so a user back after the inbox retention still gets a true summary.
const (
	attrLast      = "last"
	attrRead      = "read"
	attrDelivered = "delivered"
	attrBase      = "base"
	attrLeft      = "left"
	attrUnread    = "unread"
)

// convIndexSK is the sort key of a user's index item of conversation c.
func convIndexSK(c im.ConversationID) string { return "v#" + string(c) }

// indexUpdate sets the last-message fields of u's index item of m's
// conversation, and the inbox seq of m's entry in u's inbox (attrInboxSeq);
// the methods of indexChange add to it.
func indexUpdate(table string, u im.UserID, m im.Message, seq int64) indexChange {
	return indexChange{&types.Update{
		TableName:                aws.String(table),
		Key:                      inboxKey(u, convIndexSK(m.Conversation)),
		UpdateExpression:         aws.String("SET #last = :last, lastFrom = :from, lastAt = :at, preview = :p, #iseq = :iseq"),
		ExpressionAttributeNames: map[string]string{"#last": attrLast, "#iseq": attrInboxSeq},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":last": n(m.ConvSeq), ":from": s(string(m.From)), ":at": n(m.SentAt.UnixMilli()), ":p": s(im.Preview(m.Body)), ":iseq": n(seq),
		},
	}}
}

// indexChange is an index item update being built: each method names the
// attributes and values its clause uses.
type indexChange struct{ *types.Update }

// read also moves the read watermark to the message (its convSeq).
func (c indexChange) read() indexChange {
	c.UpdateExpression = aws.String(aws.ToString(c.UpdateExpression) + ", #read = :last")
	c.ExpressionAttributeNames["#read"] = attrRead
	return c
}

// readUpTo also moves the read watermark to convSeq (a message the user
// wrote: forward, since convSeq is above the last the update replaces).
func (c indexChange) readUpTo(convSeq int64) indexChange {
	c.UpdateExpression = aws.String(aws.ToString(c.UpdateExpression) + ", #read = :own")
	c.ExpressionAttributeNames["#read"] = attrRead
	c.ExpressionAttributeValues[":own"] = n(convSeq)
	return c
}

// add also adds delta to the counter attr.
func (c indexChange) add(attr string, delta int64) indexChange {
	c.UpdateExpression = aws.String(aws.ToString(c.UpdateExpression) + " ADD #add :delta")
	c.ExpressionAttributeNames["#add"] = attr
	c.ExpressionAttributeValues[":delta"] = n(delta)
	return c
}

// lastIs makes the update conditional on the item's last convSeq being
// last (on the item not existing yet, when last is 0).
func (c indexChange) lastIs(last int64) indexChange {
	cond := "#last = :was"
	if last == 0 {
		cond = "attribute_not_exists(#last) OR #last = :was"
	}
	c.ConditionExpression = aws.String(cond)
	c.ExpressionAttributeValues[":was"] = n(last)
	return c
}

// stateFrom reads a conversation index item. A read-diffused group's
// delivered watermark is its devices' highest cursor in the group
// (groupread.go); its last message is the group's (withGroupHeads).
func stateFrom(item map[string]types.AttributeValue) im.ConversationState {
	s := stateFields(item)
	if s.ReadDiffused = getN(item, attrReads) == 1; s.ReadDiffused {
		for _, c := range groupCursorsOf(item) {
			s.Delivered = max(s.Delivered, c.Acked)
		}
	}
	return s
}

// stateFields reads the fields every index item has.
func stateFields(item map[string]types.AttributeValue) im.ConversationState {
	return im.ConversationState{
		Conversation: im.ConversationID(strings.TrimPrefix(getS(item, attrSK), "v#")),
		Last:         getN(item, attrLast),
		Base:         getN(item, attrBase),
		Read:         getN(item, attrRead),
		Delivered:    getN(item, attrDelivered),
		Left:         getN(item, attrLeft),
		Past:         pastFrom(item),
		Removed:      getN(item, attrRemoved) == 1,
		LastFrom:     im.UserID(getS(item, "lastFrom")),
		LastAt:       time.UnixMilli(getN(item, "lastAt")).UTC(),
		Preview:      getS(item, "preview"),
		Title:        getS(item, "title"),
		UnreadAlerts: getN(item, attrUnread),
		ReadSeq:      getN(item, attrReadSeq),
	}
}

// Conversations returns one page of u's conversation index, ordered by
// conversation id, starting after the conversation id `after` ("" for the
// first page), at most limit entries, and the id to continue after ("" when
// this was the last page).
func (st *Store) Conversations(ctx context.Context, u im.UserID, after im.ConversationID, limit int) ([]im.ConversationState, im.ConversationID, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :v)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":v": s("v#")},
		Limit:                     aws.Int32(int32(limit)),
		// A conversation whose first message the caller was just pushed is
		// listed (eventually consistent, the end-to-end suite on
		// memdyn-stale found an alert's conversation missing).
		ConsistentRead: aws.Bool(true),
	}
	if after != "" {
		in.ExclusiveStartKey = inboxKey(u, convIndexSK(after))
	}
	var (
		out []im.ConversationState
		pos []indexPos
	)
	for {
		res, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("conversations of %s after %q: %w", u, after, err)
		}
		for _, it := range res.Items {
			out = append(out, stateFrom(it))
			pos = append(pos, indexPosFrom(it))
		}
		if len(res.LastEvaluatedKey) == 0 || len(out) >= limit {
			if err := st.withDerivedDelivered(ctx, u, out, pos); err != nil {
				return nil, "", err
			}
			if err := st.withGroupHeads(ctx, out); err != nil {
				return nil, "", err
			}
			if len(res.LastEvaluatedKey) == 0 {
				return out, "", nil
			}
			return out, out[len(out)-1].Conversation, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
		in.Limit = aws.Int32(int32(limit - len(out)))
	}
}

// ConversationStates reads the index items of conversation c for users, in
// BatchGetItem calls of 100 keys, with their delivered watermarks derived
// (withDerivedDelivered: a few reads per user, deriveWorkers users at a
// time: a 200-member group's receipts would otherwise wait for 600 calls in
// a row). Users without an item are absent.
func (st *Store) ConversationStates(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.UserID]im.ConversationState, error) {
	out := make(map[im.UserID]im.ConversationState, len(users))
	pos := make(map[im.UserID]indexPos, len(users))
	keys := make([]map[string]types.AttributeValue, len(users))
	for i, u := range users {
		keys[i] = inboxKey(u, convIndexSK(c))
	}
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		u := im.UserID(getS(it, attrUser))
		out[u], pos[u] = stateFrom(it), indexPosFrom(it)
	})
	if err != nil {
		return nil, fmt.Errorf("conversation states of %s: %w", c, err)
	}
	type derivation struct {
		user  im.UserID
		state []im.ConversationState
		err   error
	}
	work := make([]derivation, 0, len(out))
	for u, s := range out {
		work = append(work, derivation{user: u, state: []im.ConversationState{s}})
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, deriveWorkers)
	for i := range work {
		wg.Add(1)
		slots <- struct{}{}
		go func(d *derivation) {
			defer func() { <-slots; wg.Done() }()
			d.err = st.withDerivedDelivered(ctx, d.user, d.state, []indexPos{pos[d.user]})
		}(&work[i])
	}
	wg.Wait()
	for _, d := range work {
		if d.err != nil {
			return nil, d.err
		}
		out[d.user] = d.state[0]
	}
	return out, nil
}

// deriveWorkers bounds how many users' delivered watermarks
// ConversationStates derives at once.
const deriveWorkers = 16

// ConversationState reads u's index item of c (zero when there is none).
func (st *Store) ConversationState(ctx context.Context, u im.UserID, c im.ConversationID) (im.ConversationState, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return im.ConversationState{}, fmt.Errorf("conversation state %s in %s: %w", u, c, err)
	}
	if out.Item == nil {
		return im.ConversationState{Conversation: c}, nil
	}
	return stateFrom(out.Item), nil
}

// indexPos is where a conversation index item says the conversation's
// newest entry is: its convSeq (last) and inbox seq (iseq; 0 on items
// written before the index recorded it).
type indexPos struct{ last, iseq int64 }

func indexPosFrom(it map[string]types.AttributeValue) indexPos {
	return indexPos{last: getN(it, attrLast), iseq: getN(it, attrInboxSeq)}
}

// derivedDelivered reports whether c's delivered watermark is derived from
// the device cursors: a 1:1 conversation's or a group's; an app's alert
// conversation answers from its messages' "acked" events.
func derivedDelivered(c im.ConversationID) bool { return !c.AppConversation() }

// deliveredWalk bounds how many entries withDerivedDelivered reads back from
// the cursor for the conversations whose newest entry is not acked.
const deliveredWalk = 1000

// withDerivedDelivered sets the Delivered watermark of the 1:1 and group
// conversations among states (u's index items, pos their positions) to
// what u's devices acked: the highest convSeq of the conversation at or
// below the highest device cursor, or the stored watermark (written by the
// ack route before the fifteenth session for 1:1, the sixteenth for
// groups) where that is higher. Writing it in every ack cost a write unit
// per message and recipient at chat pace (200 for a 200-member group's
// message); deriving it costs reads when it is asked for — by a summary or
// a "receipts" query (issue 12; invariant 5 prefers it).
//
// The entries of one conversation are in convSeq order in the inbox, so a
// conversation whose newest entry (iseq) is at or below the cursor is
// delivered up to its last convSeq — once that entry is read and is the
// one the index names: a claim that lost its seq to another append (or
// whose run crashed before moving it, AppendGroup) names a seq holding
// another message, and would otherwise say delivered what is not in the
// inbox yet. For the others the entries below the cursor are read back,
// newest first, to the first of each (at most deliveredWalk entries: an
// older one keeps the stored value).
func (st *Store) withDerivedDelivered(ctx context.Context, u im.UserID, states []im.ConversationState, pos []indexPos) error {
	derived := false
	for _, s := range states {
		derived = derived || derivedDelivered(s.Conversation) && !s.ReadDiffused
	}
	if !derived {
		return nil
	}
	devices, err := st.Devices(ctx, u)
	if err != nil {
		return fmt.Errorf("delivered of %s: %w", u, err)
	}
	var cursor int64
	for _, d := range devices {
		cursor = max(cursor, d.Acked)
	}
	if cursor == 0 {
		return nil
	}
	pending := map[im.ConversationID]int{}
	var keys []map[string]types.AttributeValue
	for i, s := range states {
		if !derivedDelivered(s.Conversation) || s.ReadDiffused {
			continue
		}
		pending[s.Conversation] = i
		if pos[i].iseq > 0 && pos[i].iseq <= cursor {
			keys = append(keys, inboxKey(u, entrySK(pos[i].iseq)))
		}
	}
	if len(keys) > 0 {
		err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
			i, ok := pending[im.ConversationID(getS(it, attrConv))]
			if ok && getN(it, attrSeq) == pos[i].iseq && getN(it, attrCSeq) == pos[i].last {
				states[i].Delivered = max(states[i].Delivered, pos[i].last)
				delete(pending, states[i].Conversation)
			}
		})
		if err != nil {
			return fmt.Errorf("delivered of %s: %w", u, err)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	q := project(st.inboxSpan(u, 1, cursor), attrConv, attrCSeq)
	// Strongly consistent: the entry at a cursor may have been put a moment
	// before its ack (a sender told "delivered" asks at once).
	q.ScanIndexForward, q.ConsistentRead = aws.Bool(false), aws.Bool(true)
	q.Limit = aws.Int32(100) // pages: the first entries read usually settle it
	read := 0
	err = st.queryUntil(ctx, q, func(it map[string]types.AttributeValue) bool {
		read++
		if i, ok := pending[im.ConversationID(getS(it, attrConv))]; ok {
			states[i].Delivered = max(states[i].Delivered, getN(it, attrCSeq))
			delete(pending, states[i].Conversation)
		}
		return len(pending) > 0 && read < deliveredWalk
	})
	if err != nil {
		return fmt.Errorf("delivered of %s: %w", u, err)
	}
	return nil
}
