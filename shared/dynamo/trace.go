package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// TraceRetention is how long trace events are kept (DynamoDB TTL).
const TraceRetention = 30 * 24 * time.Hour

// AppendEvents appends events to their messages' traces. The events of
// one message in one call (one invocation's steps) are packed into one item
// of the Trace table — messageId / "<unix ms>#<part>#<random>", the events
// as a list in their recorded order — so a 1:1 send's seven steps cost one
// write unit, not seven (batchPut).
func (st *Store) AppendEvents(ctx context.Context, events []im.Event) error {
	if st.tables.Trace == "" || len(events) == 0 {
		return nil
	}
	var items []map[string]types.AttributeValue
	var order []im.MessageID
	byMessage := map[im.MessageID][]im.Event{}
	for _, e := range events {
		if _, ok := byMessage[e.Message]; !ok {
			order = append(order, e.Message)
		}
		byMessage[e.Message] = append(byMessage[e.Message], e)
	}
	for _, id := range order {
		evs := byMessage[id]
		for part := 0; part*eventsPerItem < len(evs); part++ {
			items = append(items, traceItem(evs[part*eventsPerItem:min((part+1)*eventsPerItem, len(evs))], part))
		}
	}
	if err := st.batchPut(ctx, st.tables.Trace, items); err != nil {
		return fmt.Errorf("append trace events: %w", err)
	}
	return nil
}

// eventsPerItem bounds the events packed into one trace item (each is at
// most a few hundred bytes: far below DynamoDB's 400 KB item limit).
const eventsPerItem = 500

// traceItem packs events of one message, in order, into one item; the sort
// key orders items by the time of their first event, then part.
func traceItem(events []im.Event, part int) map[string]types.AttributeValue {
	var r [4]byte
	_, _ = rand.Read(r[:])
	first := events[0]
	list := make([]types.AttributeValue, len(events))
	for i, e := range events {
		list[i] = &types.AttributeValueMemberM{Value: eventFields(e)}
	}
	return map[string]types.AttributeValue{
		"messageId": s(string(first.Message)),
		attrSK:      s(fmt.Sprintf("%013d#%04d#%s", first.At.UnixMilli(), part, hex.EncodeToString(r[:]))),
		attrTTL:     n(first.At.Add(TraceRetention).Unix()),
		"events":    &types.AttributeValueMemberL{Value: list},
	}
}

// eventFields renders one event's fields (without its message id).
func eventFields(e im.Event) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{"type": s(string(e.Type)), "at": n(e.At.UnixMilli())}
	put := func(name, v string) {
		if v != "" {
			item[name] = s(v)
		}
	}
	put("fn", e.Function)
	put("requestId", e.RequestID)
	put(attrUser, string(e.User))
	put("deviceId", string(e.Device))
	put(attrConn, string(e.Connection))
	put("detail", e.Detail)
	if e.Seq > 0 {
		item[attrSeq] = n(e.Seq)
	}
	if e.Attempt > 0 {
		item["attempt"] = n(int64(e.Attempt))
	}
	if e.Delay > 0 {
		item["delayMs"] = n(e.Delay.Milliseconds())
	}
	return item
}

// eventFrom reads one event's fields.
func eventFrom(id im.MessageID, it map[string]types.AttributeValue) im.Event {
	return im.Event{
		Message: id, Type: im.EventType(getS(it, "type")), At: time.UnixMilli(getN(it, "at")).UTC(),
		Function: getS(it, "fn"), RequestID: getS(it, "requestId"), User: im.UserID(getS(it, attrUser)),
		Device: im.DeviceID(getS(it, "deviceId")), Connection: im.ConnectionID(getS(it, attrConn)),
		Seq: getN(it, attrSeq), Attempt: int(getN(it, "attempt")), Delay: time.Duration(getN(it, "delayMs")) * time.Millisecond,
		Detail: getS(it, "detail"),
	}
}

// ackPartition is the Trace table partition of user u's ack ranges (no
// message id starts with "ack#").
func ackPartition(u im.UserID) string { return "ack#" + string(u) }

// AppendAck records one cumulative ack of a device: one item in the user's
// ack partition (sort key: the zero-padded upTo, then the device), from
// which Events derives the "acked" event of every 1:1 message the ack
// covered — one write per ack, where an "acked" event per message cost a
// write each (a login's 200 waiting messages: 200).
func (st *Store) AppendAck(ctx context.Context, a im.AckRange) error {
	if st.tables.Trace == "" {
		return nil
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	item := map[string]types.AttributeValue{
		"messageId": s(ackPartition(a.User)),
		attrSK:      s(fmt.Sprintf("%020d#%s#%s", a.UpTo, a.Device, hex.EncodeToString(r[:]))),
		"from":      n(a.From), "upTo": n(a.UpTo), "at": n(a.At.UnixMilli()), "deviceId": s(string(a.Device)),
		attrTTL: n(a.At.Add(TraceRetention).Unix()),
	}
	if a.Connection != "" {
		item[attrConn] = s(string(a.Connection))
	}
	if a.RequestID != "" {
		item["requestId"] = s(a.RequestID)
	}
	// BatchWriteItem, as every trace write (the functions' policies grant
	// it), retried if throttled (it used to drop an unprocessed item).
	if err := st.batchPut(ctx, st.tables.Trace, []map[string]types.AttributeValue{item}); err != nil {
		return fmt.Errorf("append ack %s/%s (%d, %d]: %w", a.User, a.Device, a.From, a.UpTo, err)
	}
	return nil
}

// acksCovering returns, per device, the first ack of u that covered inbox
// seq. Acks are cumulative and per device do not overlap, so the ranges
// with upTo ≥ seq, in ascending order, hold each device's covering one
// early; one page of ackPage is read.
func (st *Store) acksCovering(ctx context.Context, u im.UserID, seq int64) ([]im.AckRange, error) {
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Trace),
		KeyConditionExpression:    aws.String("#m = :m AND #sk >= :s"),
		ExpressionAttributeNames:  map[string]string{"#m": "messageId", "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": s(ackPartition(u)), ":s": s(fmt.Sprintf("%020d", seq))},
		Limit:                     aws.Int32(ackPage),
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("acks of %s covering %d: %w", u, seq, err)
	}
	var acks []im.AckRange
	seen := map[im.DeviceID]bool{}
	for _, it := range out.Items {
		a := im.AckRange{User: u, Device: im.DeviceID(getS(it, "deviceId")), Connection: im.ConnectionID(getS(it, attrConn)),
			RequestID: getS(it, "requestId"), From: getN(it, "from"), UpTo: getN(it, "upTo"), At: time.UnixMilli(getN(it, "at")).UTC()}
		if a.Covers(seq) && !seen[a.Device] {
			seen[a.Device] = true
			acks = append(acks, a)
		}
	}
	return acks, nil
}

// ackPage bounds the ack ranges read to derive one entry's "acked" events.
const ackPage = 25

// Events returns a message's trace, oldest first. It reads packed items
// and the one-event items written before events were packed alike, derives
// what the send function did not write for a 1:1 message (deriveSend), and
// derives the "acked" events of a 1:1 message (inboxed by the send
// function) from its recipients' ack ranges (AppendAck).
func (st *Store) Events(ctx context.Context, id im.MessageID) ([]im.Event, error) {
	var out []im.Event
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Trace),
		KeyConditionExpression:    aws.String("#m = :m"),
		ExpressionAttributeNames:  map[string]string{"#m": "messageId"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": s(string(id))},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		list, packed := it["events"].(*types.AttributeValueMemberL)
		if !packed {
			out = append(out, eventFrom(id, it))
			return
		}
		for _, v := range list.Value {
			if m, ok := v.(*types.AttributeValueMemberM); ok {
				out = append(out, eventFrom(id, m.Value))
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("trace of %s: %w", id, err)
	}
	if out, err = st.deriveSend(ctx, id, out); err != nil {
		return nil, fmt.Errorf("trace of %s: %w", id, err)
	}
	acked := map[im.UserID]map[int64]bool{}
	for _, e := range out {
		if e.Type == im.EventAcked {
			if acked[e.User] == nil {
				acked[e.User] = map[int64]bool{}
			}
			acked[e.User][e.Seq] = true
		}
	}
	for _, e := range slices.Clone(out) {
		if e.Type != im.EventInboxed || e.Function != "send" || e.Seq < 1 || acked[e.User][e.Seq] {
			continue
		}
		acks, err := st.acksCovering(ctx, e.User, e.Seq)
		if err != nil {
			return nil, fmt.Errorf("trace of %s: %w", id, err)
		}
		for _, a := range acks {
			out = append(out, a.Event(id, e.Seq))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// deriveSend completes the trace of a 1:1 message whose send went as
// expected and was not in the sampled share: the send function then writes
// no trace item (handler.Messages.Send; issue 12: a write unit and a month
// of storage per message), and what it would have written follows from
// what is stored. The located id names the log item (created and stored,
// at its time); each participant's inbox holds the entry (inboxed, found
// as a retried send finds it: placedSeqs); and an unwritten send pushed
// the entry to every connection each participant had — a recipient without
// one, or a failed push, would have written the whole trail ("pushed", with
// the connections and request ids only in written traces). A trace with a
// "stored" event was written and is returned as it is, as is the trace of a
// plain id (group messages, alerts) or of a message no longer in its log.
func (st *Store) deriveSend(ctx context.Context, id im.MessageID, evs []im.Event) ([]im.Event, error) {
	conv, cseq, ok := id.Locate()
	if !ok || slices.ContainsFunc(evs, func(e im.Event) bool { return e.Type == im.EventStored }) {
		return evs, nil
	}
	a, b, err := conv.Members()
	if err != nil {
		return evs, nil
	}
	logged, err := st.Log(ctx, conv, cseq-1, cseq)
	if err != nil {
		return nil, err
	}
	if len(logged) != 1 || logged[0].ID != id {
		return evs, nil
	}
	m := logged[0]
	add := func(e im.Event) {
		e.Message, e.At, e.Function = id, m.SentAt, "send"
		evs = append(evs, e)
	}
	add(im.Event{Type: im.EventCreated, User: m.From, Detail: "derived from the conversation log (trace not sampled)"})
	add(im.Event{Type: im.EventStored, Detail: fmt.Sprintf("%s #%d", conv, cseq)})
	for _, u := range []im.UserID{a, b} {
		seqs, placed, err := st.placedSeqs(ctx, m, []im.UserID{u})
		if err != nil {
			return nil, err
		}
		if !placed {
			continue
		}
		add(im.Event{Type: im.EventInboxed, User: u, Seq: seqs[u]})
		detail := "derived: pushed to every connection the recipient had"
		if u == m.From {
			detail = "derived: in sent, and pushed to the sender's other connections"
		}
		add(im.Event{Type: im.EventPushed, User: u, Seq: seqs[u], Detail: detail})
	}
	return evs, nil
}

// EntryRefs returns references to a user's inbox entries with seq in
// (after, upTo], at most limit of them, ascending.
func (st *Store) EntryRefs(ctx context.Context, u im.UserID, after, upTo int64, limit int) ([]im.EntryRef, error) {
	var out []im.EntryRef
	if upTo <= after {
		return out, nil
	}
	q := project(st.inboxSpan(u, after+1, upTo), attrSeq, attrMID, attrConv, attrCSeq, attrFrom)
	q.Limit = aws.Int32(int32(limit))
	res, err := st.db.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("entry ids %s (%d, %d]: %w", u, after, upTo, err)
	}
	for _, it := range res.Items {
		out = append(out, im.EntryRef{Seq: getN(it, attrSeq), ID: im.MessageID(getS(it, attrMID)),
			Conversation: im.ConversationID(getS(it, attrConv)), ConvSeq: getN(it, attrCSeq), From: im.UserID(getS(it, attrFrom))})
	}
	return out, nil
}
