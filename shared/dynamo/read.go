package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// MarkRead moves u's read watermark of conversation c forward to upTo (a
// convSeq no greater than the conversation head). It returns the previous
// watermark and whether it moved; lower or equal values change nothing.
// Group conversations are open to their members (current or removed).
// It costs one read (the conversation head, with the membership for a
// group) and one write, whatever the number of messages covered. An app's
// alert conversation is read by ReadAlerts.
func (st *Store) MarkRead(ctx context.Context, u im.UserID, c im.ConversationID, upTo int64, now time.Time) (int64, bool, error) {
	if c.AppConversation() {
		return 0, false, fmt.Errorf("read %s in %s: an app conversation is read by ReadAlerts", u, c)
	}
	head, member, err := st.headAndMember(ctx, c, u)
	if err == nil && c.IsGroup() && !member.Role.Valid() {
		err = fmt.Errorf("read %s in %s: %w", u, c, im.ErrNotMember)
	}
	if err != nil {
		return 0, false, err
	}
	if upTo > head {
		return 0, false, fmt.Errorf("read %s in %s up to %d (head %d): %w", u, c, upTo, head, im.ErrReadBeyondHead)
	}
	old, moved, err := st.advance(ctx, inboxKey(u, convIndexSK(c)), attrRead, "readAt", upTo, now)
	if err != nil {
		return 0, false, fmt.Errorf("read %s in %s: %w", u, c, err)
	}
	return old, moved, nil
}

// Attributes of an app conversation's index item (besides those of every
// index item, conversations.go):
//
//	rseq    the inbox seq up to which the user has read the app's alerts
//	late    "<inbox seq> <message id>" of each alert that reached the inbox
//	        after a later alert of the app and is not read yet (at most
//	        maxLate; the read that covers one names it for the trace), and
//	        "0", which keeps the set from being emptied (DynamoDB drops an
//	        emptied set, minidyn keeps it and then fails every Query of the
//	        partition; its REMOVE of an attribute leaves it behind)
//	lateN   how many alerts late lists (minidyn refuses a condition on
//	        size() of a missing set)
const (
	attrReadSeq = "rseq"
	attrLate    = "late"
	attrLateN   = "lateN"
	maxLate     = 64
)

// ReadAlerts marks u's alerts of app conversation c read: up to convSeq
// upTo, and, when inboxSeq is set, exactly those at inbox seqs up to it.
// An app's convSeqs number every user's alerts and an alert can reach an
// inbox after a later one (a retried post, an escalation), below the
// convSeq watermark: what a user has read is the inbox seq (rseq), which
// a read without inboxSeq moves to the newest alert when upTo covers the
// last one, else to the newest it covers by convSeq. A user may read only
// up to the last alert they received, and only if they received one (the
// shared numbering would tell how many the app sent). The unread count is
// cleared when the read covers the newest alert, else lowered by the
// alerts it covered. One read of the index item; for a read by convSeq
// alone that does not cover the last alert, the log ids and inbox seqs of
// the newest maxReadCover convSeqs up to upTo; when the read moves
// anything, the user's inbox entries it covers (alertsIn: which alerts it
// names); and one conditional write (all again if an alert arrived in
// between).
func (st *Store) ReadAlerts(ctx context.Context, u im.UserID, c im.ConversationID, upTo, inboxSeq int64, now time.Time) (im.AlertsRead, error) {
	return st.ReadAlertsBefore(ctx, u, c, upTo, inboxSeq, now, nil)
}

// ReadAlertsBefore is ReadAlerts telling beforeWrite (when not nil) which
// alerts the read is about to cover, before each try of its write: the
// alerts among the newest ReadSpan inbox entries it covers, by id, and
// when it covers more, the entries (after, below] it did not look
// through. An error from it stops the read with nothing written. (The
// read route enqueues their status callback jobs there — for the entries
// below, a job that reads them — so that a function that stops after the
// write loses none.)
func (st *Store) ReadAlertsBefore(ctx context.Context, u im.UserID, c im.ConversationID, upTo, inboxSeq int64, now time.Time, beforeWrite func(ids []im.MessageID, after, below int64) error) (im.AlertsRead, error) {
	key := inboxKey(u, convIndexSK(c))
	for attempt := range st.MaxAttempts {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, err)
		}
		it := out.Item
		last, iseq, read, rseq := getN(it, attrLast), getN(it, attrInboxSeq), getN(it, attrRead), getN(it, attrReadSeq)
		if last == 0 {
			return im.AlertsRead{}, fmt.Errorf("read %s in %s: not a recipient: %w", u, c, im.ErrNotMember)
		}
		if upTo > last {
			return im.AlertsRead{}, fmt.Errorf("read %s in %s up to %d (last %d): %w", u, c, upTo, last, im.ErrReadBeyondHead)
		}
		cover := rseq
		switch {
		case inboxSeq > 0:
			cover = min(inboxSeq, iseq)
		case upTo >= last:
			cover = iseq
		default:
			// The inbox seq upTo covers: that of the newest alert of the
			// user at or below it, from the alerts above the watermark.
			above, err := st.alertsAbove(ctx, u, c, read, upTo)
			if err != nil {
				return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, err)
			}
			for _, a := range above {
				if a.convSeq <= upTo {
					cover = max(cover, a.seq)
				}
			}
		}
		r := im.AlertsRead{Old: read, UpTo: max(read, upTo), ReadSeq: max(rseq, cover)}
		if r.UpTo == read && r.ReadSeq == rseq {
			return r, nil
		}
		span := cmp.Or(st.ReadSpan, DefaultReadSpan)
		newly, err := st.alertsIn(ctx, u, c, rseq, r.ReadSeq, span)
		if err != nil {
			return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, err)
		}
		var gone []string
		if ss, ok := it[attrLate].(*types.AttributeValueMemberSS); ok {
			for _, e := range ss.Value {
				seq, id, _ := strings.Cut(e, " ")
				if v, err := strconv.ParseInt(seq, 10, 64); err == nil && v > 0 && v <= r.ReadSeq {
					newly[im.MessageID(id)] = true
					gone = append(gone, e)
				}
			}
		}
		iseqIs := "#iseq = :iseq"
		if _, ok := it[attrInboxSeq]; !ok {
			iseqIs = "(attribute_not_exists(#iseq) OR #iseq = :iseq)"
		}
		if below := max(rseq, r.ReadSeq-span); beforeWrite != nil && (len(newly) > 0 || below > rseq) {
			if err := beforeWrite(slices.Sorted(maps.Keys(newly)), rseq, below); err != nil {
				return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, err)
			}
		}
		names := map[string]string{"#read": attrRead, "#rseq": attrReadSeq, "#iseq": attrInboxSeq}
		values := map[string]types.AttributeValue{
			":read": n(r.UpTo), ":rseq": n(r.ReadSeq), ":now": n(now.UnixMilli()), ":iseq": n(iseq), ":oldRead": n(read), ":oldRseq": n(rseq),
		}
		set, add, del := []string{"#read = :read", "#rseq = :rseq", "readAt = :now"}, []string(nil), []string(nil)
		switch {
		case r.ReadSeq >= iseq:
			set = append(set, "#unread = :zero")
			names["#unread"], values[":zero"] = attrUnread, n(0)
		case len(newly) > 0:
			add = append(add, "#unread :minus")
			names["#unread"], values[":minus"] = attrUnread, n(-int64(len(newly)))
		}
		if len(gone) > 0 {
			add, del = append(add, "#lateN :lessLate"), append(del, "#late :gone")
			names["#late"], names["#lateN"] = attrLate, attrLateN
			values[":gone"], values[":lessLate"] = &types.AttributeValueMemberSS{Value: gone}, n(-int64(len(gone)))
		}
		_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(st.tables.Inbox), Key: key,
			UpdateExpression:          aws.String(updateExpression(set, add, del)),
			ConditionExpression:       aws.String(iseqIs + " AND (attribute_not_exists(#read) OR #read = :oldRead) AND (attribute_not_exists(#rseq) OR #rseq = :oldRseq)"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		if isConditionFailed(err) { // an alert arrived, or another read moved on
			if err := sleepJitter(ctx, attempt); err != nil {
				return im.AlertsRead{}, err
			}
			continue
		}
		if err != nil {
			return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, err)
		}
		r.Moved = true
		for id := range newly {
			r.Read = append(r.Read, id)
		}
		slices.Sort(r.Read)
		return r, nil
	}
	return im.AlertsRead{}, fmt.Errorf("read %s in %s: %w", u, c, im.ErrContention)
}

// updateExpression joins SET, ADD and DELETE actions into an update
// expression (a clause only when it has actions).
func updateExpression(set, add, del []string) string {
	var clauses []string
	for _, c := range []struct {
		verb    string
		actions []string
	}{{"SET", set}, {"ADD", add}, {"DELETE", del}} {
		if len(c.actions) > 0 {
			clauses = append(clauses, c.verb+" "+strings.Join(c.actions, ", "))
		}
	}
	return strings.Join(clauses, " ")
}

// maxReadCover bounds the alerts a read without an inbox seq looks up by
// convSeq to find the inbox seq its upTo covers: the newest maxReadCover
// convSeqs up to it (the alert at upTo, which the device was shown, among
// them).
const maxReadCover = 200

// DefaultReadSpan is Store.ReadSpan unless set: the inbox entries a read
// of alerts looks through itself to name the alerts it covers (about 300
// strongly consistent read units at most). A read covering more marks
// them read all the same (the inbox seq watermark), and the alerts below
// get their status callbacks and "read" trace events from a job
// (ReadAlertsBefore's beforeWrite is told the span); only the unread
// count, lowered by those named, stays above the truth until a read covers
// the newest alert. A read lands after a push or a sync showed
// the alerts, so its span is what arrived since the last.
const DefaultReadSpan = 5000

// alertsIn returns u's alerts of app conversation c at inbox seqs in
// (after, upTo] — within the newest span — from u's inbox entries,
// strongly consistent (a read names what its device was just shown). An
// app's convSeqs number every user's alerts, so the log's convSeq span of
// one user's read holds every other user's alerts of the app too: named
// from the newest maxReadCover convSeqs of that span, a busy app's alerts
// read a little later lost their read events and status callbacks (the
// 20,000-message chaos run: 40 users, 1,000 alerts; forty-sixth session).
func (st *Store) alertsIn(ctx context.Context, u im.UserID, c im.ConversationID, after, upTo, span int64) (map[im.MessageID]bool, error) {
	out := map[im.MessageID]bool{}
	for from := max(after, upTo-span); from < upTo; {
		ids, reached, err := st.AlertsInSpan(ctx, u, c, from, upTo, alertsPage)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out[id] = true
		}
		from = reached
	}
	return out, nil
}

// alertsPage is the inbox entries alertsIn asks for in one Query.
const alertsPage = 1000

// alertPlace is where an alert is: its convSeq and its seq in an inbox.
type alertPlace struct{ convSeq, seq int64 }

// alertsAbove returns u's alerts of app conversation c with convSeq in
// (after, upTo] — within the newest maxReadCover convSeqs of the range
// (readCover in the store suite) — and where they are.
func (st *Store) alertsAbove(ctx context.Context, u im.UserID, c im.ConversationID, after, upTo int64) (map[im.MessageID]alertPlace, error) {
	window := cmp.Or(st.readCover, maxReadCover)
	ids, err := st.ConversationIDs(ctx, c, max(after, upTo-window), upTo, int(window))
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	seqs, err := st.receivedSeqs(ctx, u, slices.Collect(maps.Values(ids)))
	out := map[im.MessageID]alertPlace{}
	for convSeq, id := range ids {
		if seq, ok := seqs[id]; ok {
			out[id] = alertPlace{convSeq: convSeq, seq: seq}
		}
	}
	return out, err
}

// ReadWatermark returns u's read watermark of c, when it last moved and,
// in an app conversation, the inbox seq up to which its alerts are read.
func (st *Store) ReadWatermark(ctx context.Context, u im.UserID, c im.ConversationID) (im.ReadMark, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return im.ReadMark{}, fmt.Errorf("read watermark %s in %s: %w", u, c, err)
	}
	_, hasSeq := out.Item[attrReadSeq]
	return im.ReadMark{UpTo: getN(out.Item, attrRead), At: time.UnixMilli(getN(out.Item, "readAt")).UTC(), Seq: getN(out.Item, attrReadSeq), HasSeq: hasSeq}, nil
}

// ConversationIDs returns the message ids of c with convSeq in (after, upTo],
// at most limit, by convSeq. Strongly consistent: a read names what its
// device was just shown, and the alerts it marks read and the read events
// come from these ids (an eventually consistent read a moment behind the
// log item's write would leave the newest out). Pages DynamoDB cut at
// 1 MB (alerts with large bodies) are followed up to the limit.
func (st *Store) ConversationIDs(ctx context.Context, c im.ConversationID, after, upTo int64, limit int) (map[int64]im.MessageID, error) {
	out := map[int64]im.MessageID{}
	if upTo <= after {
		return out, nil
	}
	q := project(st.logSpan(c, after+1, upTo), attrCSeq, attrMID)
	q.Limit, q.ConsistentRead = aws.Int32(int32(limit)), aws.Bool(true)
	items, err := st.queryFirst(ctx, q, limit)
	if err != nil {
		return nil, fmt.Errorf("conversation ids %s (%d, %d]: %w", c, after, upTo, err)
	}
	for _, it := range items {
		out[getN(it, attrCSeq)] = im.MessageID(getS(it, attrMID))
	}
	return out, nil
}

// lastReceived returns the convSeq of the last message of c in u's inbox
// (0 when none), from u's conversation index item.
func (st *Store) lastReceived(ctx context.Context, u im.UserID, c im.ConversationID) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, convIndexSK(c)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("last of %s for %s: %w", c, u, err)
	}
	return getN(out.Item, attrLast), nil
}

// receivedSeqs returns the inbox seqs of those of ids that are in u's
// inbox (their dedup items), in BatchGetItem calls of 100 keys.
func (st *Store) receivedSeqs(ctx context.Context, u im.UserID, ids []im.MessageID) (map[im.MessageID]int64, error) {
	got := map[im.MessageID]int64{}
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = inboxKey(u, dedupSK(id))
	}
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		got[im.MessageID(strings.TrimPrefix(getS(it, attrSK), "m#"))] = getN(it, attrSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("received by %s: %w", u, err)
	}
	return got, nil
}
