package dynamo

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
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

// Ack ranges. Every ack records its range — the device's cursor before
// and after it, when, on which connection and request — from which a 1:1
// message's trace derives each device's "acked" event (issue 12: an
// "acked" event per message cost a write each; a login's 200 waiting
// messages, 200). The ack's own UpdateItem of the device's cursor item
// appends the range to the item's "acks" list; once ackRing new ranges are
// there (or the list nears ackRingBytes) that ack puts them into the user's
// ack partition of the Trace table as one item and trims them from the
// cursor item (moveAcks: all but the newest). An ack so costs 1 + 2/ackRing
// write units where a trace item of its own made 2. A range's from is the
// previous range's upTo; the list's first starts at the item's "ackBase"
// (0 for a new device, the cursor it had for a device from before ranges
// were kept on it, the newest moved range's from after a move).
const (
	ackRing      = 8
	ackRingBytes = 800 // the cursor item stays within one 1 KB write unit
	ackRingMax   = 64  // pending ranges kept while the trace cannot take them
	attrAcks     = "acks"
	attrAckBase  = "ackBase"
)

// ackRecorded moves the device's cursor to a.UpTo and appends the ack's
// range to its cursor item in one conditional write; it moves the pending
// ranges to the trace when they are due.
func (st *Store) ackRecorded(ctx context.Context, a im.AckRange) (im.AckResult, error) {
	key := inboxKey(a.User, deviceSK(a.Device))
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox),
		Key:       key,
		UpdateExpression: aws.String("SET #w = :n, #at = :now, #acks = list_append(if_not_exists(#acks, :none), :e), " +
			"#base = if_not_exists(#base, :zero)"),
		ConditionExpression:      aws.String("attribute_not_exists(#w) OR #w < :n"),
		ExpressionAttributeNames: map[string]string{"#w": "acked", "#at": "ackedAt", "#acks": attrAcks, "#base": attrAckBase},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": n(a.UpTo), ":now": n(a.At.UnixMilli()), ":zero": n(0),
			":none": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":e":    &types.AttributeValueMemberL{Value: []types.AttributeValue{ackElement(a)}},
		},
		// The whole item as it was (an emulator may leave out of
		// UPDATED_OLD an attribute set to the value it had).
		ReturnValues: types.ReturnValueAllOld,
	})
	if isConditionFailed(err) {
		return im.AckResult{}, nil
	}
	if err != nil {
		return im.AckResult{}, err
	}
	old := out.Attributes
	a.From = getN(old, "acked")
	pending := ackRanges(a.User, a.Device, getN(old, attrAckBase), old[attrAcks])
	res := im.AckResult{Old: a.From, Moved: true}
	if len(pending) == 0 && old[attrAckBase] == nil && a.From > 0 {
		// A cursor item from before ack ranges were kept on it: the
		// list's first range starts at the cursor it had, not at 0.
		res.TraceErr = st.setAckBase(ctx, key, a)
	}
	pending = append(pending, a)
	bytes := 0
	for _, p := range pending {
		bytes += ackElementBytes(p)
	}
	if len(pending) > ackRing || bytes >= ackRingBytes { // ackRing new and the one kept
		if err := st.moveAcks(ctx, a.User, a.Device, pending); err != nil {
			res.TraceErr = errors.Join(res.TraceErr, err)
		}
	}
	return res, nil
}

// setAckBase records, on a cursor item that had no ack ranges yet, where
// the first one (a) started — on condition that it is still the first.
func (st *Store) setAckBase(ctx context.Context, key map[string]types.AttributeValue, a im.AckRange) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       key,
		UpdateExpression:          aws.String("SET #base = :from"),
		ConditionExpression:       aws.String("#base = :zero AND #acks[0].#u = :upTo"),
		ExpressionAttributeNames:  map[string]string{"#base": attrAckBase, "#acks": attrAcks, "#u": "u"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":from": n(a.From), ":zero": n(0), ":upTo": n(a.UpTo)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("ack ranges of %s/%s: where the first starts: %w", a.User, a.Device, err)
	}
	return nil
}

// moveAcks puts a device's pending ack ranges (oldest first, as its cursor
// item lists them) into the user's ack partition as one item, then trims
// all but the newest from the cursor item — on condition that they are
// still its first, so that of two acks moving them at once one trims (the
// other's item repeats ranges: readers take each device's covering range
// once). The newest stays so that the list is never empty (it starts the
// next item too; minidyn, the tests' emulator, mishandles empty lists). A
// crash between the put and the trim leaves ranges in both places, never
// in neither.
func (st *Store) moveAcks(ctx context.Context, u im.UserID, d im.DeviceID, pending []im.AckRange) error {
	first, last := pending[0], pending[len(pending)-1]
	// Should the put keep failing, the ranges stay pending up to
	// ackRingMax; past that they are dropped from the trace (reported)
	// rather than grow the cursor item until acks fail.
	var dropped error
	if err := st.putAckRanges(ctx, u, d, pending); err != nil {
		if len(pending) < ackRingMax {
			return err
		}
		dropped = fmt.Errorf("%d dropped from the trace: %w", len(pending)-1, err)
	}
	if len(pending) < 2 {
		return dropped
	}
	remove := make([]string, len(pending)-1)
	for i := range remove {
		remove[i] = fmt.Sprintf("#acks[%d]", i)
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       inboxKey(u, deviceSK(d)),
		UpdateExpression:          aws.String("REMOVE " + strings.Join(remove, ", ") + " SET #base = :base"),
		ConditionExpression:       aws.String("#acks[0].#u = :first"),
		ExpressionAttributeNames:  map[string]string{"#acks": attrAcks, "#base": attrAckBase, "#u": "u"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":first": n(first.UpTo), ":base": n(last.From)},
	})
	if err != nil && !isConditionFailed(err) {
		return errors.Join(dropped, fmt.Errorf("ack ranges of %s/%s moved to the trace, not trimmed: %w", u, d, err))
	}
	return dropped
}

// putAckRanges puts ranges of u's device d (oldest first, each from the
// previous one's upTo) into u's ack partition of the Trace table as one
// item: BatchWriteItem, as every trace write (the functions' policies
// grant it), retried if throttled.
func (st *Store) putAckRanges(ctx context.Context, u im.UserID, d im.DeviceID, pending []im.AckRange) error {
	first, last := pending[0], pending[len(pending)-1]
	list := make([]types.AttributeValue, len(pending))
	for i, a := range pending {
		list[i] = ackElement(a)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	item := map[string]types.AttributeValue{
		"messageId": s(ackPartition(u)),
		attrSK:      s(fmt.Sprintf("%020d#%s#%s", last.UpTo, d, hex.EncodeToString(r[:]))),
		"deviceId":  s(string(d)), attrAckBase: n(first.From), attrAcks: &types.AttributeValueMemberL{Value: list},
		attrTTL: n(last.At.Add(TraceRetention).Unix()),
	}
	if err := st.batchPut(ctx, st.tables.Trace, []map[string]types.AttributeValue{item}); err != nil {
		return fmt.Errorf("ack ranges of %s/%s (%d, %d]: %w", u, d, first.From, last.UpTo, err)
	}
	return nil
}

// ackElement is one range as the lists hold it (its from is implied).
func ackElement(a im.AckRange) types.AttributeValue {
	m := map[string]types.AttributeValue{"u": n(a.UpTo), "t": n(a.At.UnixMilli())}
	if a.Connection != "" {
		m["c"] = s(string(a.Connection))
	}
	if a.RequestID != "" {
		m["r"] = s(a.RequestID)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// ackElementBytes bounds an element's size in DynamoDB's measure (names,
// numbers of up to 21 digits, the map's overhead).
func ackElementBytes(a im.AckRange) int { return 40 + len(a.Connection) + len(a.RequestID) }

// ackRanges reads a list of ranges of u's device d, the first from base.
func ackRanges(u im.UserID, d im.DeviceID, base int64, v types.AttributeValue) []im.AckRange {
	l, _ := v.(*types.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	out := make([]im.AckRange, 0, len(l.Value))
	from := base
	for _, e := range l.Value {
		m, ok := e.(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		a := im.AckRange{User: u, Device: d, Connection: im.ConnectionID(getS(m.Value, "c")), RequestID: getS(m.Value, "r"),
			From: from, UpTo: getN(m.Value, "u"), At: time.UnixMilli(getN(m.Value, "t")).UTC()}
		out = append(out, a)
		from = a.UpTo
	}
	return out
}

// acksCovering returns, per device, the ack of u that first covered inbox
// seq: of the ranges that cover it (a range moved to the trace may also
// still be pending, or be in two items), the one with the lowest upTo.
// Ranges still pending are on the devices' cursor items, read first; those
// moved to the trace are found from their item's last upTo: the items with
// one ≥ seq, in ascending order, hold each device's covering one early,
// though other devices' items may come before it (a device that acked seq
// in one long range, moved long after, while another acked message by
// message), so they are read on until every device whose cursor covers
// seq has its range (ackPage, ackPageMore, ackPages). Items of one range
// each (from before ranges were kept on the cursor item) are read alike.
func (st *Store) acksCovering(ctx context.Context, u im.UserID, seq int64) ([]im.AckRange, error) {
	first := map[im.DeviceID]im.AckRange{}
	consider := func(a im.AckRange) {
		if b, ok := first[a.Device]; a.Covers(seq) && (!ok || a.UpTo < b.UpTo) {
			first[a.Device] = a
		}
	}
	devices, err := st.deviceItems(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("pending acks of %s covering %d: %w", u, seq, err)
	}
	var covered []im.DeviceID // devices whose cursor is at seq or past it
	for _, it := range devices {
		d := im.DeviceID(getS(it, attrSK)[2:])
		for _, a := range ackRanges(u, d, getN(it, attrAckBase), it[attrAcks]) {
			consider(a)
		}
		if getN(it, "acked") >= seq {
			covered = append(covered, d)
		}
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Trace),
		KeyConditionExpression:    aws.String("#m = :m AND #sk >= :s"),
		ExpressionAttributeNames:  map[string]string{"#m": "messageId", "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": s(ackPartition(u)), ":s": s(fmt.Sprintf("%020d", seq))},
		Limit:                     aws.Int32(cmp.Or(st.ackPage, ackPage)),
		ConsistentRead:            aws.Bool(true),
	}
	for page := 1; ; page++ {
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("acks of %s covering %d: %w", u, seq, err)
		}
		for _, it := range out.Items {
			d := im.DeviceID(getS(it, "deviceId"))
			if list, ok := it[attrAcks]; ok {
				for _, a := range ackRanges(u, d, getN(it, attrAckBase), list) {
					consider(a)
				}
				continue
			}
			consider(im.AckRange{User: u, Device: d, Connection: im.ConnectionID(getS(it, attrConn)),
				RequestID: getS(it, "requestId"), From: getN(it, "from"), UpTo: getN(it, "upTo"), At: time.UnixMilli(getN(it, "at")).UTC()})
		}
		missing := slices.ContainsFunc(covered, func(d im.DeviceID) bool { _, ok := first[d]; return !ok })
		if !missing || out.LastEvaluatedKey == nil || page == ackPages {
			break
		}
		in.ExclusiveStartKey, in.Limit = out.LastEvaluatedKey, aws.Int32(ackPageMore)
	}
	acks := slices.Collect(maps.Values(first))
	slices.SortFunc(acks, func(a, b im.AckRange) int {
		return cmp.Or(cmp.Compare(a.UpTo, b.UpTo), strings.Compare(string(a.Device), string(b.Device)))
	})
	return acks, nil
}

// ackPage is how many trace items of ack ranges acksCovering reads first;
// while a device whose cursor covers the entry has no range found yet it
// reads on, ackPageMore at a time, up to ackPages pages.
const (
	ackPage     = 25
	ackPageMore = 100
	ackPages    = 40
)

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
	if out, err = st.deriveGroupReads(ctx, id, out); err != nil {
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

// deriveGroupReads completes the trace of a read-diffused group's message
// (whose written trace is re-pushes, failures and waits for a pull, and
// the send's created and stored events only for a retry and the sampled
// share: no member gets an inbox copy, and a member's first pushes are not
// written) from what is stored: created and stored from the log item when
// no stored event was written, its answer to the sending connection when
// that connection took it from "sent" (its log item names it), which
// members it is due to (their membership), which of their devices have it
// (each device's cursor in the group, with the time it last moved: the
// device acked it then or before) and who read it (the member's read
// watermark). One BatchGetItem of the members' index items, strongly
// consistent. The trace of any other message is returned as it is.
func (st *Store) deriveGroupReads(ctx context.Context, id im.MessageID, evs []im.Event) ([]im.Event, error) {
	conv, cseq, ok := id.Locate()
	if !ok || !conv.ValidGroup() {
		return evs, nil
	}
	logged, err := st.Log(ctx, conv, cseq-1, cseq)
	if err != nil || len(logged) != 1 || logged[0].ID != id {
		return evs, err
	}
	head, err := st.readHead(ctx, conv)
	if err != nil || !head.reads {
		return evs, err
	}
	members, err := st.Members(ctx, conv)
	if err != nil {
		return nil, err
	}
	var keys []map[string]types.AttributeValue
	for _, m := range members {
		if m.Receives(cseq) {
			keys = append(keys, inboxKey(m.User, convIndexSK(conv)))
		}
	}
	m := logged[0]
	add := func(e im.Event) {
		e.Message = id
		evs = append(evs, e)
	}
	if !slices.ContainsFunc(evs, func(e im.Event) bool { return e.Type == im.EventStored }) {
		add(im.Event{Type: im.EventCreated, User: m.From, At: m.SentAt, Function: "send", Detail: "derived from the group log (trace not sampled)"})
		add(im.Event{Type: im.EventStored, At: m.SentAt, Function: "send", Detail: fmt.Sprintf("%s #%d; fan-out queued", conv, cseq)})
	}
	if m.TakenBy != "" && !slices.ContainsFunc(evs, func(e im.Event) bool {
		return e.Connection == m.TakenBy && (e.Type == im.EventPushed || e.Type == im.EventPushFailed)
	}) {
		// The send's answer carried it to the sending connection (a failed
		// answer would have written the send's trace).
		add(im.Event{Type: im.EventPushed, User: m.From, Connection: m.TakenBy, At: m.SentAt, Function: "send",
			Detail: "derived: in sent to the sending connection, which asked for it (ownFromSent); the device's next ack in the group confirms it has it"})
	}
	var due []im.Event
	err = st.batchGet(ctx, st.tables.Inbox, keys, true, func(it map[string]types.AttributeValue) {
		u := im.UserID(getS(it, attrUser))
		due = append(due, im.Event{Type: im.EventInboxed, User: u, At: m.SentAt, Function: "send",
			Detail: fmt.Sprintf("derived: due to this member in the group log, %s #%d (read diffusion: no inbox copy)", conv, cseq)})
		for d, cur := range groupCursorsOf(it) {
			if cur.Acked >= cseq {
				detail := fmt.Sprintf("derived: the device's cursor in the group is at #%d, last moved at this time", cur.Acked)
				if id, retired := retiredDevice(d); retired {
					d, detail = id, detail+"; the device was forgotten since (its cursor is kept under "+string(d)+")"
				}
				due = append(due, im.Event{Type: im.EventAcked, User: u, Device: d, At: cur.AckedAt, Function: "ack", Detail: detail})
			}
		}
		if read := getN(it, attrRead); read >= cseq && u != m.From { // a sender's watermark moves at the send
			at := time.UnixMilli(getN(it, "readAt")).UTC()
			if at.Before(m.SentAt) {
				at = m.SentAt
			}
			due = append(due, im.Event{Type: im.EventRead, User: u, At: at, Function: "read",
				Detail: fmt.Sprintf("derived: the member's read watermark is at #%d, last moved at this time", read)})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", conv, err)
	}
	// The batch answers in no order (Events then orders by time).
	rank := map[im.EventType]int{im.EventInboxed: 0, im.EventAcked: 1, im.EventRead: 2}
	slices.SortFunc(due, func(a, b im.Event) int {
		return cmp.Or(strings.Compare(string(a.User), string(b.User)), cmp.Compare(rank[a.Type], rank[b.Type]), strings.Compare(string(a.Device), string(b.Device)))
	})
	for _, e := range due {
		add(e)
	}
	return evs, nil
}

// AlertsInSpan returns the message ids of u's alerts (entries of app
// conversations; of app conversation c only, when c is not empty) with
// inbox seq in (after, upTo] among at most limit entries read (one Query
// page), and the seq that page reached: upTo when the span is done. For
// the part of an ack's range beyond the entries it read itself, and of a
// read's beyond those it looked through (im.FanoutCoveredAlerts), so each
// alert a catch-up ack or read covered gets its status callback. Strongly
// consistent: a page read behind would end short and pass for the end of
// the span (a rare path: acks that cover more than 200 entries, reads
// more than ReadSpan). A page DynamoDB cut at 1 MB before limit (entries
// stored before they referenced the log carry their body) reaches its
// last entry, not upTo.
func (st *Store) AlertsInSpan(ctx context.Context, u im.UserID, c im.ConversationID, after, upTo int64, limit int) ([]im.MessageID, int64, error) {
	if upTo <= after {
		return nil, upTo, nil
	}
	// The entries are told apart here rather than by a FilterExpression:
	// it would read (and bill) the same items, and minidyn answers a
	// filtered page with a LastEvaluatedKey behind where it read.
	q := project(st.inboxSpan(u, after+1, upTo), attrSeq, attrMID, attrConv)
	q.Limit, q.ConsistentRead = aws.Int32(int32(limit)), aws.Bool(true)
	res, err := st.db.Query(ctx, q)
	if err != nil {
		return nil, after, fmt.Errorf("alerts of %s in (%d, %d]: %w", u, after, upTo, err)
	}
	var ids []im.MessageID
	for _, it := range res.Items {
		if conv := im.ConversationID(getS(it, attrConv)); conv.AppConversation() && (c == "" || conv == c) {
			ids = append(ids, im.MessageID(getS(it, attrMID)))
		}
	}
	reached := upTo
	if n := len(res.Items); n > 0 && (n == limit || len(res.LastEvaluatedKey) > 0) {
		reached = getN(res.Items[n-1], attrSeq)
	}
	return ids, reached, nil
}

// EntryRefs returns references to a user's inbox entries with seq in
// (after, upTo], at most limit of them, ascending. An ack names what its
// device was just pushed, and its delivered receipt and an alert's
// delivered status callback come from these references: an eventually
// consistent read a moment behind the newest entry's write left them out
// (the chaos run on memdyn-stale lost a callback, forty-fifth session).
// So the span is read eventually consistent (half the read units: a
// login's ack covers 200 entries) and read again strongly consistent when
// it does not reach upTo (nor the limit). Pages DynamoDB cut at 1 MB
// (entries stored before they referenced the log carry their body) are
// followed up to the limit.
func (st *Store) EntryRefs(ctx context.Context, u im.UserID, after, upTo int64, limit int) ([]im.EntryRef, error) {
	var out []im.EntryRef
	if upTo <= after {
		return out, nil
	}
	q := project(st.inboxSpan(u, after+1, upTo), attrSeq, attrMID, attrConv, attrCSeq, attrFrom)
	q.Limit = aws.Int32(int32(limit))
	items, err := st.queryFirst(ctx, q, limit)
	if err == nil {
		if n := len(items); n < limit && (n == 0 || getN(items[n-1], attrSeq) < upTo) {
			q.ConsistentRead = aws.Bool(true)
			items, err = st.queryFirst(ctx, q, limit)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("entry ids %s (%d, %d]: %w", u, after, upTo, err)
	}
	for _, it := range items {
		out = append(out, im.EntryRef{Seq: getN(it, attrSeq), ID: im.MessageID(getS(it, attrMID)),
			Conversation: im.ConversationID(getS(it, attrConv)), ConvSeq: getN(it, attrCSeq), From: im.UserID(getS(it, attrFrom))})
	}
	return out, nil
}
