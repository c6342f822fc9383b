package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Send modes (Store.SendMode, setting SIGNET_SEND_MODE).
const (
	// SendClaim (the default) stores the log item and the idempotency
	// item in one transaction and then places the message in both inboxes
	// the way the group fan-out does (AppendGroup: claim in the
	// conversation index, then put the entry), before the ACK (issue 12:
	// about 8.5 write units per message instead of 12).
	SendClaim = "claim"
	// SendTransaction stores a 1:1 message, its idempotency item and both
	// inbox entries and conversation index updates in one transaction
	// (sendItems): six items at twice the write units. The default until
	// the tenth session; kept for stacks that want one transaction per send.
	SendTransaction = "transaction"
)

// sendClaimed is Send in SendClaim mode.
//
// The log item is the conversation's sequence point: it is put at the
// conversation's head + 1 on condition that the convSeq is free, in one
// transaction with the sender's idempotency item (invariant 1: the dedup
// record is written with the message). The head is the highest last
// convSeq of both participants' conversation index, and after a lost race
// also the newest log item (a silent conversation's log may have expired,
// so the index always counts). Then each participant's inbox
// gets the message with AppendGroup, in convSeq order: a predecessor a
// crashed send left unplaced is placed first, from the log, so both
// inboxes hold the conversation in one order, each message once. The ACK
// (the Stored returned) follows both placements; a retry of the same
// clientMsgId finds the idempotency item and completes what a crash left
// (replayClaimed).
func (st *Store) sendClaimed(ctx context.Context, d im.Draft, recipients []im.UserID, now time.Time) (im.Stored, error) {
	for attempt := range st.MaxAttempts {
		pos, head, err := st.directHead(ctx, d.Conversation, recipients, attempt)
		if err != nil {
			return im.Stored{}, err
		}
		msg := im.Message{ID: im.NewLocatedMessageID(now, d.Conversation, head+1), Conversation: d.Conversation, ConvSeq: head + 1, From: d.From, Body: d.Body, SentAt: now}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{
				TableName:                aws.String(st.tables.Inbox),
				Item:                     idemItem(d, msg, nil, n(msg.SentAt.UnixMilli()), st.ttlAt(now)),
				ConditionExpression:      aws.String("attribute_not_exists(#sk)"),
				ExpressionAttributeNames: map[string]string{"#sk": attrSK},
			}},
			{Put: st.logPut(msg, d.ClientMsgID, now)},
		}})
		if err == nil {
			return st.placeDirect(ctx, msg, recipients, pos, now, false)
		}
		switch classifyTx(err, posIdem) {
		case txCondition:
			stored, err := st.replay(ctx, d)
			if !errors.Is(err, im.ErrNotFound) {
				return stored, err
			}
			// As in transactSend: an uncommitted item seen (moto): retry.
		case txRace:
		default:
			return im.Stored{}, fmt.Errorf("send %s/%s: %w", d.From, d.ClientMsgID, err)
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return im.Stored{}, err
		}
	}
	return im.Stored{}, fmt.Errorf("send %s/%s after %d attempts: %w", d.From, d.ClientMsgID, st.MaxAttempts, im.ErrContention)
}

// sendSeen is Send in SendClaim mode for a draft that says which convSeq
// its device had seen when it first queued it (Draft.Seen). The log item —
// which carries the sender and the clientMsgId — is then the idempotency
// record, written in the one conditional put that stores the message
// (invariant 1), with no idempotency item and no transaction: one write
// unit where sendClaimed's transaction costs four (issue 12).
//
// A try of the draft that was stored before took a convSeq above Seen, so
// before the put at head + 1 the send reads the log above Seen up to the
// head and replays what an earlier try stored (replayLogged). The order
// makes it safe against concurrent tries of the same draft: the head is
// read first, then the span, then the log item is put on condition that
// head + 1 is free. The log grows one convSeq at a time, so an earlier try
// that succeeded either holds a convSeq up to the head (and the span read
// after the head shows it) or holds head + 1 itself; then the put fails and
// the next attempt reads the span again up to the newest log item. At chat
// pace the device has seen the head and the span is empty: no read at all.
// A seen above the head (a store reset since the draft was queued) counts
// as 0.
func (st *Store) sendSeen(ctx context.Context, d im.Draft, recipients []im.UserID, now time.Time) (im.Stored, error) {
	seen := *d.Seen
	for attempt := range st.MaxAttempts {
		pos, head, err := st.directHead(ctx, d.Conversation, recipients, attempt)
		if err != nil {
			return im.Stored{}, err
		}
		from := seen
		if from > head {
			// More than the device can have seen (its entries are in its
			// inbox, claimed in its index): a store reset since it queued
			// the draft, or a client's mistake. Look at the whole log.
			from = 0
		}
		if head > from {
			earlier, found, err := st.loggedTry(ctx, d, from, head)
			if err != nil {
				return im.Stored{}, err
			}
			if found {
				return st.replayLogged(ctx, d, earlier, recipients)
			}
		}
		msg := im.Message{ID: im.NewLocatedMessageID(now, d.Conversation, head+1), Conversation: d.Conversation, ConvSeq: head + 1, From: d.From, Body: d.Body, SentAt: now}
		put := st.logPut(msg, d.ClientMsgID, now)
		_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: put.TableName, Item: put.Item,
			ConditionExpression: put.ConditionExpression, ExpressionAttributeNames: put.ExpressionAttributeNames})
		if err == nil {
			return st.placeDirect(ctx, msg, recipients, pos, now, false)
		}
		if _, failed := errorsAsCCF(err); !failed {
			return im.Stored{}, fmt.Errorf("send %s/%s: %w", d.From, d.ClientMsgID, err)
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return im.Stored{}, err
		}
	}
	return im.Stored{}, fmt.Errorf("send %s/%s after %d attempts: %w", d.From, d.ClientMsgID, st.MaxAttempts, im.ErrContention)
}

// directHead reads the participants' positions in 1:1 conversation c and
// the conversation's head for send attempt number attempt. The
// participants' index is the head unless a send is under way or crashed
// before placing its message: then the log is ahead, and a lost race
// (attempt > 0) reads it (a silent conversation's log may have expired, so
// the index counts too).
func (st *Store) directHead(ctx context.Context, c im.ConversationID, recipients []im.UserID, attempt int) (map[im.UserID]im.InboxPosition, int64, error) {
	pos, err := st.Positions(ctx, c, recipients)
	if err != nil {
		return nil, 0, err
	}
	var head int64
	for _, p := range pos {
		head = max(head, p.Last)
	}
	if attempt > 0 {
		newest, err := st.newestConvSeq(ctx, c)
		if err != nil {
			return nil, 0, err
		}
		head = max(head, newest)
	}
	return pos, head, nil
}

// loggedTry looks for a try of d in its conversation's log with convSeq in
// (after, upTo], newest first and strongly consistent: an earlier try is
// found after reading the messages logged since it, and at most
// SeenWindow items are read (a client claiming to have seen nothing of a
// long conversation costs a bounded read, not the whole log).
func (st *Store) loggedTry(ctx context.Context, d im.Draft, after, upTo int64) (im.Message, bool, error) {
	window := cmp.Or(st.SeenWindow, DefaultSeenWindow)
	q := st.logSpan(d.Conversation, max(after, upTo-int64(window))+1, upTo)
	q.ScanIndexForward, q.ConsistentRead = aws.Bool(false), aws.Bool(true)
	var (
		found im.Message
		ok    bool
		bad   error
	)
	err := st.queryUntil(ctx, q, func(it map[string]types.AttributeValue) bool {
		if im.UserID(getS(it, attrFrom)) != d.From || getS(it, "cmid") != d.ClientMsgID {
			return true
		}
		found, bad = messageFrom(d.Conversation, it)
		ok = bad == nil
		return false
	})
	if err = cmp.Or(err, bad); err != nil {
		return im.Message{}, false, fmt.Errorf("send %s/%s: earlier tries in %s (%d, %d]: %w", d.From, d.ClientMsgID, d.Conversation, after, upTo, err)
	}
	return found, ok, nil
}

// replayLogged answers a retry whose earlier try stored msg: refused if
// it carries other content (im.ErrClientMsgIDReused), else placed where a
// crash left it unplaced, with the seqs of its first answer.
func (st *Store) replayLogged(ctx context.Context, d im.Draft, msg im.Message, recipients []im.UserID) (im.Stored, error) {
	if (im.Draft{Conversation: msg.Conversation, Body: msg.Body}).Fingerprint() != d.Fingerprint() {
		return im.Stored{}, fmt.Errorf("replay %s/%s: %w", d.From, d.ClientMsgID, im.ErrClientMsgIDReused)
	}
	return st.replayPlaced(ctx, d, msg, recipients)
}

// replayPlaced answers the retry d of a claim-mode send that logged msg:
// where msg is in each inbox, after placing it where the sending run
// crashed before it did.
func (st *Store) replayPlaced(ctx context.Context, d im.Draft, msg im.Message, recipients []im.UserID) (im.Stored, error) {
	seqs, placed, err := st.placedSeqs(ctx, msg, recipients)
	if err != nil {
		return im.Stored{}, fmt.Errorf("replay %s/%s: %w", d.From, d.ClientMsgID, err)
	}
	if placed {
		return im.Stored{Message: msg, Inboxed: seqs, Replayed: true}, nil
	}
	return st.placeDirect(ctx, msg, recipients, nil, time.Now(), true)
}

// newestConvSeq is the convSeq of a conversation's newest log item (0 if
// it has none).
func (st *Store) newestConvSeq(ctx context.Context, c im.ConversationID) (int64, error) {
	q := st.logSpan(c, 1, maxConvSeq)
	q.ScanIndexForward, q.Limit, q.ConsistentRead = aws.Bool(false), aws.Int32(1), aws.Bool(true)
	q.ProjectionExpression = aws.String("#c")
	q.ExpressionAttributeNames["#c"] = attrCSeq
	out, err := st.db.Query(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("newest message of %s: %w", c, err)
	}
	if len(out.Items) == 0 {
		return 0, nil
	}
	return getN(out.Items[0], attrCSeq), nil
}

// placeDirect puts msg, logged, into each recipient's inbox after any
// predecessor not yet there (AppendGroup), and returns where it is.
// pos are the positions read before the log put (nil: read them).
func (st *Store) placeDirect(ctx context.Context, msg im.Message, recipients []im.UserID, pos map[im.UserID]im.InboxPosition, now time.Time, replayed bool) (im.Stored, error) {
	if pos == nil {
		var err error
		if pos, err = st.Positions(ctx, msg.Conversation, recipients); err != nil {
			return im.Stored{}, err
		}
	}
	// The inboxes are placed at once: a placement races other appends to
	// its inbox from the moment pos was read, so the shorter that is, the
	// fewer races it loses.
	seqs := make(map[im.UserID]int64, len(recipients))
	errs := make([]error, len(recipients))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i, u := range recipients {
		wg.Go(func() {
			seq, err := st.placeInInbox(ctx, msg, u, pos[u], now)
			mu.Lock()
			defer mu.Unlock()
			seqs[u], errs[i] = seq, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return im.Stored{}, err
	}
	return im.Stored{Message: msg, Inboxed: seqs, Replayed: replayed}, nil
}

// placeRounds is how many times placeInInbox starts over when the inbox
// is too busy (each round is AppendGroup's MaxAttempts): the message is
// logged, and placing it now spares the sender a retry.
const placeRounds = 4

// placeInInbox puts msg into u's inbox after its predecessors (from p,
// u's position read before) and returns its seq there.
func (st *Store) placeInInbox(ctx context.Context, msg im.Message, u im.UserID, p im.InboxPosition, now time.Time) (int64, error) {
	for round := 0; ; round++ {
		seq, err := st.placeOnce(ctx, msg, u, p, now)
		if !errors.Is(err, im.ErrContention) || round+1 >= placeRounds {
			return seq, err
		}
		if err := sleepJitter(ctx, 7); err != nil {
			return 0, err
		}
		ps, err := st.Positions(ctx, msg.Conversation, []im.UserID{u})
		if err != nil {
			return 0, err
		}
		p = ps[u]
	}
}

// placeOnce is one round of placeInInbox.
func (st *Store) placeOnce(ctx context.Context, msg im.Message, u im.UserID, p im.InboxPosition, now time.Time) (int64, error) {
	owed := []im.Message{msg}
	switch {
	case p.Last == msg.ConvSeq && p.LastInPlace && p.LastSeq > 0:
		return p.LastSeq, nil // placed already (a retry)
	case p.Last >= msg.ConvSeq:
		owed = nil // placed already, or claimed (a retry, another send's backlog)
	case p.Last < msg.ConvSeq-1:
		before, err := st.Log(ctx, msg.Conversation, p.Last, msg.ConvSeq-1)
		if err != nil {
			return 0, err
		}
		owed = append(before, msg)
	}
	entries, err := st.AppendGroup(ctx, msg.Conversation, u, p, owed, now)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Message.ID == msg.ID {
			return e.Seq, nil
		}
	}
	head, _, err := st.Head(ctx, u)
	if err != nil {
		return 0, err
	}
	return st.seqOf(ctx, u, msg, head)
}

// placedSeqs reports where msg, logged by a claim-mode send, is in each
// recipient's inbox, reading only what a placed message needs (a retried
// send, which a weak network makes common, then costs a few item reads
// instead of a placement's head Queries): each recipient's conversation
// index item and, where its last convSeq is msg's, the entry it claimed.
// A last convSeq beyond msg's means msg is in place: a message is claimed
// only after its predecessor's entry is (AppendGroup). placed is false when
// an inbox may still lack msg; the caller places it (placeDirect).
func (st *Store) placedSeqs(ctx context.Context, msg im.Message, recipients []im.UserID) (seqs map[im.UserID]int64, placed bool, err error) {
	keys := make([]map[string]types.AttributeValue, 0, len(recipients))
	for _, u := range recipients {
		keys = append(keys, inboxKey(u, convIndexSK(msg.Conversation)))
	}
	type claimed struct{ last, seq int64 }
	index := make(map[im.UserID]claimed, len(recipients))
	err = st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		index[im.UserID(getS(it, attrUser))] = claimed{getN(it, attrLast), getN(it, attrInboxSeq)}
	})
	if err != nil {
		return nil, false, fmt.Errorf("placed %s: %w", msg.ID, err)
	}
	seqs = make(map[im.UserID]int64, len(recipients))
	for _, u := range recipients {
		c := index[u]
		switch {
		case c.last < msg.ConvSeq || c.seq == 0:
			return nil, false, nil
		case c.last == msg.ConvSeq:
			out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(c.seq)), ConsistentRead: aws.Bool(true)})
			if err != nil {
				return nil, false, fmt.Errorf("placed %s: claimed entry #%d: %w", msg.ID, c.seq, err)
			}
			if out.Item == nil || getS(out.Item, attrMID) != string(msg.ID) {
				return nil, false, nil
			}
			seqs[u] = c.seq
		default:
			seq, err := st.seqOf(ctx, u, msg, c.seq)
			if errors.Is(err, im.ErrNotFound) {
				return nil, false, nil // reaped, or moved: let placement decide
			}
			if err != nil {
				return nil, false, err
			}
			seqs[u] = seq
		}
	}
	return seqs, true, nil
}

// seqOf finds where msg is in u's inbox at or below seq hi (the head, or
// the seq of a later message of its conversation): the entries read back
// from hi until msg's.
func (st *Store) seqOf(ctx context.Context, u im.UserID, msg im.Message, hi int64) (int64, error) {
	q := st.inboxSpan(u, 1, hi)
	q.ScanIndexForward, q.ConsistentRead = aws.Bool(false), aws.Bool(true)
	var seq int64
	err := st.queryUntil(ctx, q, func(it map[string]types.AttributeValue) bool {
		if getS(it, attrMID) == string(msg.ID) {
			seq = getN(it, attrSeq)
			return false
		}
		// Entries of this conversation are in convSeq order: past an
		// older one, msg is not there.
		return !(im.ConversationID(getS(it, attrConv)) == msg.Conversation && getN(it, attrCSeq) < msg.ConvSeq)
	})
	if err != nil {
		return 0, fmt.Errorf("inbox seq of %s for %s: %w", msg.ID, u, err)
	}
	if seq == 0 {
		return 0, fmt.Errorf("inbox seq of %s for %s: %w", msg.ID, u, im.ErrNotFound)
	}
	return seq, nil
}
