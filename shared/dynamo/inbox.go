package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// entryItem is u's inbox entry e: a reference to its conversation log item
// (conversation, convSeq) with what a page, a trace and a receipt need
// without it (message id, sender, time) — not the body, which is stored
// once, in the log (issue 12: a 1 KB body copied into every inbox cost two
// write units per inbox, doubled in the send transaction, and a month of
// storage). Readers fill the body in from the log (withBodies); history is
// kept at least as long as inbox entries (config), so the log item outlives
// the entry. Entries written before this change carry their body and are
// read as they are.
func entryItem(u im.UserID, e im.Entry, ttl types.AttributeValue) map[string]types.AttributeValue {
	m := e.Message
	return map[string]types.AttributeValue{
		attrUser: s(string(u)), attrSK: s(entrySK(e.Seq)), attrSeq: n(e.Seq),
		attrMID: s(string(m.ID)), attrConv: s(string(m.Conversation)), attrCSeq: n(m.ConvSeq),
		attrFrom: s(string(m.From)), attrAt: n(m.SentAt.UnixMilli()), attrTTL: ttl,
	}
}

// entryFrom reads an entry item; its Body is nil when the item references
// the log (entryItem) and set when the item carries it (older entries,
// seeded inboxes).
func entryFrom(item map[string]types.AttributeValue) (im.Entry, error) {
	e := im.Entry{
		Seq: getN(item, attrSeq),
		Message: im.Message{
			ID:           im.MessageID(getS(item, attrMID)),
			Conversation: im.ConversationID(getS(item, attrConv)),
			ConvSeq:      getN(item, attrCSeq),
			From:         im.UserID(getS(item, attrFrom)),
			SentAt:       time.UnixMilli(getN(item, attrAt)).UTC(),
		},
	}
	if hasBody(item) {
		body, err := bodyOf(item)
		if err != nil {
			return im.Entry{}, fmt.Errorf("inbox entry #%d: %w", e.Seq, err)
		}
		e.Message.Body = body
	}
	return e, nil
}

// withBodies fills in the body of every entry that references its
// conversation log, from the log items. Reads are eventually consistent
// (half the read units: a log item never changes once written); an item
// such a read misses is read again with a strongly consistent GetItem
// (serializable with the transaction that wrote it). Where a page holds
// many messages of one conversation close together (a login's backlog, a
// busy group) one Query over their convSeq range reads them at a read unit
// per 4 KB; the rest are read with BatchGetItem (a unit per item).
//
// An entry whose log item is gone is left out only if the entry itself is
// past retention (expiresAt: the log outlives its entries, so both expired
// and DynamoDB's TTL process reaped the log item first): it is as good as
// expired. A live entry without its log item is an error, never a
// silently skipped message.
func (st *Store) withBodies(ctx context.Context, entries []im.Entry, expiresAt map[int64]time.Time, now time.Time) ([]im.Entry, error) {
	wanted := map[logRef]bool{}
	byConv := map[im.ConversationID][]int64{}
	for _, e := range entries {
		r := logRef{e.Message.Conversation, e.Message.ConvSeq}
		if e.Message.Body != nil || wanted[r] {
			continue
		}
		wanted[r] = true
		byConv[r.c] = append(byConv[r.c], r.cseq)
	}
	bodies := map[logRef][]byte{}
	var keys []map[string]types.AttributeValue
	for c, seqs := range byConv {
		lo, hi := slices.Min(seqs), slices.Max(seqs)
		if len(seqs) >= denseRun && hi-lo+1 <= 2*int64(len(seqs)) {
			if err := st.logRange(ctx, c, lo, hi, wanted, bodies); err != nil {
				return nil, err
			}
			continue
		}
		for _, cseq := range seqs {
			keys = append(keys, convKey(c, convSK(cseq)))
		}
	}
	if err := st.logBatch(ctx, keys, bodies); err != nil {
		return nil, err
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.Message.Body == nil {
			e.Message.Body = bodies[logRef{e.Message.Conversation, e.Message.ConvSeq}]
		}
		if e.Message.Body == nil {
			if exp, ok := expiresAt[e.Seq]; ok && !exp.After(now) {
				continue
			}
			m, err := st.Message(ctx, e.Message.Conversation, e.Message.ConvSeq)
			if errors.Is(err, im.ErrNotFound) {
				return nil, fmt.Errorf("inbox entry #%d: its log item %s #%d is missing", e.Seq, e.Message.Conversation, e.Message.ConvSeq)
			}
			if err != nil {
				return nil, fmt.Errorf("inbox entry #%d: %w", e.Seq, err)
			}
			e.Message.Body = m.Body
		}
		kept = append(kept, e)
	}
	return kept, nil
}

// logRef names a conversation log item.
type logRef struct {
	c    im.ConversationID
	cseq int64
}

// denseRun is how many messages of one conversation a page must hold, at
// least half of the convSeqs between its first and last, for withBodies to
// read them with one range Query.
const denseRun = 4

// logRange reads the bodies of conversation c's log items lo..hi that are
// wanted (eventually consistent Query pages; whole items — a projection
// would not lower the read units, which count the items read, and the
// benchmark's meter counts what a read returns).
func (st *Store) logRange(ctx context.Context, c im.ConversationID, lo, hi int64, wanted map[logRef]bool, bodies map[logRef][]byte) error {
	var bad error
	err := st.queryAll(ctx, st.logSpan(c, lo, hi), func(it map[string]types.AttributeValue) {
		if r := (logRef{c, getN(it, attrCSeq)}); wanted[r] {
			body, err := bodyOf(it)
			bad = cmp.Or(bad, err)
			bodies[r] = body
		}
	})
	if err = cmp.Or(err, bad); err != nil {
		return fmt.Errorf("message bodies of %s: %w", c, err)
	}
	return nil
}

// logBatch reads the bodies of the log items keys (eventually consistent
// BatchGetItem calls of up to 100 keys).
func (st *Store) logBatch(ctx context.Context, keys []map[string]types.AttributeValue, bodies map[logRef][]byte) error {
	var bad error
	err := st.batchGet(ctx, st.tables.Messages, keys, false, func(it map[string]types.AttributeValue) {
		body, err := bodyOf(it)
		bad = cmp.Or(bad, err)
		bodies[logRef{im.ConversationID(getS(it, attrConv)), getN(it, attrCSeq)}] = body
	})
	if err = cmp.Or(err, bad); err != nil {
		return fmt.Errorf("message bodies: %w", err)
	}
	return nil
}

// entryExpiry is when an entry item's retention ends (its TTL; ok false
// for an item without one, which never expires).
func entryExpiry(item map[string]types.AttributeValue) (time.Time, bool) {
	if _, ok := item[attrTTL]; !ok {
		return time.Time{}, false
	}
	return time.Unix(getN(item, attrTTL), 0), true
}

// EnsureHead returns the user's inbox head and epoch, creating the head
// (seq 0 with a fresh epoch) if the inbox has none: every answer about an
// inbox carries a non-empty epoch, so a device whose server lost or
// re-created its data sees a different epoch even before the first new
// message. Creating it is one conditional write per inbox lifetime.
func (st *Store) EnsureHead(ctx context.Context, u im.UserID, now time.Time) (int64, string, error) {
	head, epoch, err := st.Head(ctx, u)
	if err != nil || epoch != "" {
		return head, epoch, err
	}
	epoch = newEpoch(now)
	_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       inboxKey(u, skHead),
		UpdateExpression:          aws.String("SET #seq = if_not_exists(#seq, :zero), #epoch = :epoch"),
		ConditionExpression:       aws.String("attribute_not_exists(#epoch)"),
		ExpressionAttributeNames:  map[string]string{"#seq": attrSeq, "#epoch": attrEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0), ":epoch": s(epoch)},
	})
	if isConditionFailed(err) {
		// Another request created it first: use theirs.
		return st.Head(ctx, u)
	}
	if err != nil {
		return 0, "", fmt.Errorf("create inbox head %s: %w", u, err)
	}
	return head, epoch, nil
}

// Page returns up to limit entries with seq > cursor, ascending. It reads the
// head first and only entries up to it: every seq ≤ head was committed in the
// same transaction as the head, so the page never skips a sequence that could
// still appear.
//
// A cursor beyond the head is refused with im.ErrCursorBeyondHead (wrapped
// in an *im.HeadError naming the head and epoch): answering it with an
// empty page would let the client keep a cursor that skips the seqs
// allocated next.
func (st *Store) Page(ctx context.Context, u im.UserID, cursor int64, limit int, size func(im.Entry) int) (im.Page, error) {
	head, epoch, err := st.EnsureHead(ctx, u, time.Now())
	if err != nil {
		return im.Page{}, err
	}
	if cursor > head {
		return im.Page{}, fmt.Errorf("inbox page %s: %w", u, &im.HeadError{Err: im.ErrCursorBeyondHead, Position: cursor, Head: head, Epoch: epoch})
	}
	if cursor == head {
		return im.NewPage(cursor, nil, head, epoch), nil
	}
	// Entries up to head are contiguous except where retention expired the
	// oldest: reading "the next limit entries up to head" (not "seqs
	// cursor+1..cursor+limit") skips an expired stretch instead of
	// returning an empty page forever. A stretch whose log items are gone
	// is expired the same way (withBodies): read on past it.
	var entries []im.Entry
	for from := cursor; len(entries) == 0 && from < head; {
		q := st.inboxSpan(u, from+1, head)
		q.ConsistentRead, q.Limit = aws.Bool(true), aws.Int32(int32(limit))
		out, err := st.db.Query(ctx, q)
		if err != nil {
			return im.Page{}, fmt.Errorf("inbox page %s after %d: %w", u, cursor, err)
		}
		if len(out.Items) == 0 {
			break
		}
		expires := map[int64]time.Time{}
		for _, item := range out.Items {
			e, err := entryFrom(item)
			if err != nil {
				return im.Page{}, fmt.Errorf("inbox page %s after %d: %w", u, cursor, err)
			}
			entries = append(entries, e)
			if at, ok := entryExpiry(item); ok {
				expires[e.Seq] = at
			}
		}
		from = entries[len(entries)-1].Seq
		if entries, err = st.withBodies(ctx, entries, expires, time.Now()); err != nil {
			return im.Page{}, fmt.Errorf("inbox page %s after %d: %w", u, cursor, err)
		}
	}
	entries = im.Fit(entries, limit, im.MaxPageBytes, size)
	return im.NewPage(cursor, entries, head, epoch), nil
}

// Entry reads one inbox entry.
func (st *Store) Entry(ctx context.Context, u im.UserID, seq int64) (im.Entry, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(seq)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return im.Entry{}, fmt.Errorf("inbox entry %s#%d: %w", u, seq, err)
	}
	if out.Item == nil {
		return im.Entry{}, fmt.Errorf("inbox entry %s#%d: %w", u, seq, im.ErrNotFound)
	}
	e, err := entryFrom(out.Item)
	if err != nil {
		return im.Entry{}, fmt.Errorf("inbox entry %s#%d: %w", u, seq, err)
	}
	if e.Message.Body == nil {
		m, err := st.Message(ctx, e.Message.Conversation, e.Message.ConvSeq)
		if errors.Is(err, im.ErrNotFound) {
			if at, ok := entryExpiry(out.Item); ok && !at.After(time.Now()) {
				// Past retention, its log item reaped first: expired.
				return im.Entry{}, fmt.Errorf("inbox entry %s#%d: expired: %w", u, seq, im.ErrNotFound)
			}
			// A live entry without its message is not "not found": the
			// caller must not take it for an expired one.
			return im.Entry{}, fmt.Errorf("inbox entry %s#%d: its log item %s #%d is missing", u, seq, e.Message.Conversation, e.Message.ConvSeq)
		}
		if err != nil {
			return im.Entry{}, fmt.Errorf("inbox entry %s#%d: %w", u, seq, err)
		}
		e.Message.Body = m.Body
	}
	return e, nil
}

// Device reads a device's cursor item.
func (st *Store) Device(ctx context.Context, u im.UserID, d im.DeviceID) (im.DeviceCursor, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, deviceSK(d)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return im.DeviceCursor{}, fmt.Errorf("device %s/%s: %w", u, d, err)
	}
	return im.DeviceCursor{Acked: getN(out.Item, "acked"), SyncNext: getN(out.Item, "syncNext")}, nil
}

// AckedUpTo reads where device d's ack cursor is, eventually consistent
// (half a read unit; it may be behind, never ahead).
func (st *Store) AckedUpTo(ctx context.Context, u im.UserID, d im.DeviceID) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, deviceSK(d)),
		ProjectionExpression: aws.String("acked"),
	})
	if err != nil {
		return 0, fmt.Errorf("device %s/%s: %w", u, d, err)
	}
	return getN(out.Item, "acked"), nil
}

// Ack moves device a.Device's ack cursor forward to a.UpTo and records the
// ack's range for the trace (a.From is what the cursor was: the store sets
// it) in the same write, on the device's cursor item (ackRing). A lower or
// equal value changes nothing (forward-only); a value beyond the inbox head
// is rejected with im.ErrAckBeyondHead (in an *im.HeadError).
func (st *Store) Ack(ctx context.Context, a im.AckRange) (im.AckResult, error) {
	u, d, upTo := a.User, a.Device, a.UpTo
	// An entry at or above upTo proves upTo is not beyond the head: an
	// eventually consistent read of the newest entry (half a read unit,
	// issue 12) finds it unless the device acks an entry written a moment
	// ago; then the newest entry is read strongly consistent, and only if
	// that does not prove it either is the head itself read.
	newest, _, found, err := st.newestEntry(ctx, u, true)
	if err == nil && (!found || newest.seq < upTo) {
		newest, _, found, err = st.newestEntry(ctx, u, false)
	}
	if err != nil {
		return im.AckResult{}, err
	}
	if !found || newest.seq < upTo {
		head, epoch, err := st.Head(ctx, u)
		if err != nil {
			return im.AckResult{}, err
		}
		if upTo > head {
			return im.AckResult{}, fmt.Errorf("ack %s/%s: %w", u, d, &im.HeadError{Err: im.ErrAckBeyondHead, Position: upTo, Head: head, Epoch: epoch})
		}
	}
	if st.tables.Trace == "" { // no trace: the cursor alone
		old, moved, err := st.advance(ctx, inboxKey(u, deviceSK(d)), "acked", "ackedAt", upTo, a.At)
		if err != nil {
			return im.AckResult{}, fmt.Errorf("ack %s/%s up to %d: %w", u, d, upTo, err)
		}
		return im.AckResult{Old: old, Moved: moved}, nil
	}
	r, err := st.ackRecorded(ctx, a)
	if err != nil {
		return im.AckResult{}, fmt.Errorf("ack %s/%s up to %d: %w", u, d, upTo, err)
	}
	return r, nil
}

// LastAck returns the range of the ack that last moved device d's cursor,
// read strongly consistent from its cursor item (where ack ranges wait to
// move to the trace; the newest stays), whether it is current (a range
// recorded that ends at the cursor) and whether it was retold.
func (st *Store) LastAck(ctx context.Context, u im.UserID, d im.DeviceID) (im.LastAck, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, deviceSK(d)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return im.LastAck{}, fmt.Errorf("device %s/%s: %w", u, d, err)
	}
	rs := ackRanges(u, d, getN(out.Item, attrAckBase), out.Item[attrAcks])
	if len(rs) == 0 {
		return im.LastAck{}, nil
	}
	last := rs[len(rs)-1]
	acked := getN(out.Item, "acked")
	return im.LastAck{AckRange: last, Current: last.UpTo == acked, Retold: last.UpTo == acked && getN(out.Item, attrRetold) == acked}, nil
}

// attrRetold, on a device's cursor item, is the cursor at which an ack
// written again last sent its receipts and events again.
const attrRetold = "retold"

// MarkRetold records on device d's cursor item that an ack written again
// at upTo has sent its receipts and events again — if the cursor is still
// there (past it, a later ack told them: nothing to record).
func (st *Store) MarkRetold(ctx context.Context, u im.UserID, d im.DeviceID, upTo int64) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       inboxKey(u, deviceSK(d)),
		UpdateExpression:          aws.String("SET #r = :u"),
		ConditionExpression:       aws.String("#w = :u"),
		ExpressionAttributeNames:  map[string]string{"#r": attrRetold, "#w": "acked"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": n(upTo)},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("device %s/%s retold at %d: %w", u, d, upTo, err)
	}
	return nil
}

// advance moves the watermark attribute attr of an inbox item forward to
// upTo (stamping atAttr with now), conditionally on it being lower, and
// returns the previous value and whether it moved. Watermarks never move
// back: a lower or equal value is a no-op, not an error.
func (st *Store) advance(ctx context.Context, key map[string]types.AttributeValue, attr, atAttr string, upTo int64, now time.Time) (int64, bool, error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       key,
		UpdateExpression:          aws.String("SET #w = :n, #at = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(#w) OR #w < :n"),
		ExpressionAttributeNames:  map[string]string{"#w": attr, "#at": atAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": n(upTo), ":now": n(now.UnixMilli())},
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if isConditionFailed(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return getN(out.Attributes, attr), true, nil
}

// Devices returns the ack cursors of all of a user's devices.
func (st *Store) Devices(ctx context.Context, u im.UserID) (map[im.DeviceID]im.DeviceCursor, error) {
	items, err := st.deviceItems(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("devices of %s: %w", u, err)
	}
	out := map[im.DeviceID]im.DeviceCursor{}
	for _, it := range items {
		c := im.DeviceCursor{Acked: getN(it, "acked"), AckedAt: time.UnixMilli(getN(it, "ackedAt")).UTC(), SyncNext: getN(it, "syncNext")}
		if ms := getN(it, attrRegisteredAt); ms > 0 {
			c.RegisteredAt = time.UnixMilli(ms).UTC()
		}
		out[im.DeviceID(getS(it, attrSK)[2:])] = c
	}
	return out, nil
}

// EnsureDevice admits device d of user u ($connect): a device with a
// cursor item is one of u's devices; a new one gets its item (no cursor
// yet) unless u already has limit devices (im.ErrDeviceLimit). A known
// device costs one strongly consistent Query of the cursor items (a device
// that connected a moment ago is among them). A new device is admitted
// under the user's device version (skDevices): read it, count the devices
// again, and write the cursor item in one transaction with the version
// moved on, conditional on it not having moved since it was read. Every
// admission moves it, so devices connecting for the first time at the
// same moment cannot each take the last place: all but one find the
// version moved and count again. A forget need not move it: a count from
// before a forget is too high, never too low.
func (st *Store) EnsureDevice(ctx context.Context, u im.UserID, d im.DeviceID, limit int, now time.Time) error {
	known := func(items []map[string]types.AttributeValue) bool {
		return slices.ContainsFunc(items, func(it map[string]types.AttributeValue) bool { return getS(it, attrSK) == deviceSK(d) })
	}
	items, err := st.deviceItems(ctx, u)
	if err != nil {
		return fmt.Errorf("devices of %s: %w", u, err)
	}
	if known(items) {
		return nil
	}
	for range maxDeviceAdmissionTries {
		version, err := st.deviceVersion(ctx, u)
		if err != nil {
			return err
		}
		if items, err = st.deviceItems(ctx, u); err != nil {
			return fmt.Errorf("devices of %s: %w", u, err)
		}
		if known(items) {
			return nil
		}
		if len(items) >= limit {
			return fmt.Errorf("%s has %d devices, the most allowed, and %s is not one of them: %w", u, len(items), d, im.ErrDeviceLimit)
		}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                 aws.String(st.tables.Inbox),
				Key:                       inboxKey(u, deviceSK(d)),
				UpdateExpression:          aws.String("SET #r = if_not_exists(#r, :now)"),
				ExpressionAttributeNames:  map[string]string{"#r": attrRegisteredAt},
				ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.UnixMilli())},
			}},
			{Update: deviceVersionUpdate(st.tables.Inbox, u, version)},
		}})
		if err == nil {
			return nil
		}
		if classifyTx(err, -1) != txRace {
			return fmt.Errorf("device %s/%s: %w", u, d, err)
		}
	}
	return fmt.Errorf("device %s/%s: other devices admitted at the same time %d times: %w", u, d, maxDeviceAdmissionTries, im.ErrContention)
}

// DeviceAdmissible reports whether EnsureDevice would admit device d of
// u under limit (nil), or refuse it (im.ErrDeviceLimit), without admitting
// it: a known device, or a new one while the user has fewer than limit.
// One strongly consistent Query; nothing is written.
func (st *Store) DeviceAdmissible(ctx context.Context, u im.UserID, d im.DeviceID, limit int) error {
	items, err := st.deviceItems(ctx, u)
	if err != nil {
		return fmt.Errorf("devices of %s: %w", u, err)
	}
	if slices.ContainsFunc(items, func(it map[string]types.AttributeValue) bool { return getS(it, attrSK) == deviceSK(d) }) {
		return nil
	}
	if len(items) >= limit {
		return fmt.Errorf("%s has %d devices, the most allowed, and %s is not one of them: %w", u, len(items), d, im.ErrDeviceLimit)
	}
	return nil
}

// maxDeviceAdmissionTries bounds EnsureDevice's rounds: each lost round
// means another device of the user was admitted meanwhile.
const maxDeviceAdmissionTries = 8

// skDevices is the inbox item whose version (attrVersion) moves with every
// device admitted (EnsureDevice).
const (
	skDevices   = "devices"
	attrVersion = "v"
)

// deviceVersion reads u's device version (0 when no device was admitted
// under it yet), strongly consistent.
func (st *Store) deviceVersion(ctx context.Context, u im.UserID) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skDevices), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String(attrVersion),
	})
	if err != nil {
		return 0, fmt.Errorf("device version of %s: %w", u, err)
	}
	return getN(out.Item, attrVersion), nil
}

// deviceVersionUpdate moves u's device version on from read, conditional
// on it being read still (0: not written yet).
func deviceVersionUpdate(table string, u im.UserID, read int64) *types.Update {
	up := &types.Update{
		TableName:                 aws.String(table),
		Key:                       inboxKey(u, skDevices),
		UpdateExpression:          aws.String("SET #v = :next"),
		ConditionExpression:       aws.String("#v = :read"),
		ExpressionAttributeNames:  map[string]string{"#v": attrVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{":read": n(read), ":next": n(read + 1)},
	}
	if read == 0 {
		up.ConditionExpression = aws.String("attribute_not_exists(#v)")
		delete(up.ExpressionAttributeValues, ":read")
	}
	return up
}

// attrRegisteredAt is when a device first connected (EnsureDevice; absent
// on devices from before the device limit).
const attrRegisteredAt = "registeredAt"

// ForgetDevice removes device d of user u (an operator's decision: the
// device is gone), making room for a new one under the device limit. The
// ack ranges still on its cursor item go to the trace first, so that
// what it acked stays answerable there, its cursors in read-diffused
// groups are retired (retireGroupCursors), and its registration for
// wake-ups is removed. It refuses (im.ErrDeviceHoldsDelivered)
// when d acked further than every other device of u: the delivered
// watermarks derived from the cursors would move back. im.ErrNotFound: u
// has no such device. The delete is conditional on the cursor not having
// moved since it was read (an ack meanwhile: im.ErrContention).
func (st *Store) ForgetDevice(ctx context.Context, u im.UserID, d im.DeviceID) error {
	items, err := st.deviceItems(ctx, u)
	if err != nil {
		return fmt.Errorf("devices of %s: %w", u, err)
	}
	var mine map[string]types.AttributeValue
	var others int64
	for _, it := range items {
		if getS(it, attrSK) == deviceSK(d) {
			mine = it
		} else {
			others = max(others, getN(it, "acked"))
		}
	}
	if mine == nil {
		return fmt.Errorf("device %s/%s: %w", u, d, im.ErrNotFound)
	}
	acked := getN(mine, "acked")
	if acked > others {
		return fmt.Errorf("device %s/%s acked up to %d, its user's other devices up to %d: %w", u, d, acked, others, im.ErrDeviceHoldsDelivered)
	}
	if pending := ackRanges(u, d, getN(mine, attrAckBase), mine[attrAcks]); len(pending) > 0 {
		if err := st.putAckRanges(ctx, u, d, pending); err != nil {
			return err
		}
	}
	if err := st.retireGroupCursors(ctx, u, d, getN(mine, attrRegisteredAt)); err != nil {
		return err
	}
	// A gone device is woken no more: its registration for wake-ups is
	// emptied as a disabled one is (RemovePushEndpoint) — or, if it has
	// none, an empty one is written — and a register frame of it received
	// before now changes nothing after (SetPushEndpoint), also when the
	// device never had a registration. One registered later stands.
	_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skPush(d)),
		UpdateExpression:          aws.String("SET endpoint = :none, #t = :none, receivedAt = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(receivedAt) OR receivedAt <= :now"),
		ExpressionAttributeNames:  map[string]string{"#t": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":none": s(""), ":now": n(st.now().UnixMilli())},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("wake-up registration of %s/%s: %w", u, d, err)
	}
	cond, vals := "attribute_not_exists(acked)", map[string]types.AttributeValue(nil)
	if _, ok := mine["acked"]; ok {
		cond, vals = "acked = :a", map[string]types.AttributeValue{":a": n(acked)}
	}
	_, err = st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, deviceSK(d)),
		ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
	})
	if isConditionFailed(err) {
		return fmt.Errorf("device %s/%s acked while being forgotten: %w", u, d, im.ErrContention)
	}
	if err != nil {
		return fmt.Errorf("device %s/%s: %w", u, d, err)
	}
	return nil
}

// deviceItems reads the cursor items of all of a user's devices (a Query,
// strongly consistent; one page up to about a thousand devices — a client
// names its device, so a user can have more, and every page is read).
func (st *Store) deviceItems(ctx context.Context, u im.UserID) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	err := st.queryUntil(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :c)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":c": s("c#")},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		items = append(items, it)
		return true
	})
	return items, err
}

// SetSyncNext records where a device's unfinished sync continues (0: finished).
func (st *Store) SetSyncNext(ctx context.Context, u im.UserID, d im.DeviceID, next int64) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       inboxKey(u, deviceSK(d)),
		UpdateExpression:          aws.String("SET #next = :n"),
		ExpressionAttributeNames:  map[string]string{"#next": "syncNext"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": n(next)},
	})
	if err != nil {
		return fmt.Errorf("sync continuation %s/%s: %w", u, d, err)
	}
	return nil
}

// TakeSyncSlot admits one new sync per user per interval. When the slot is
// taken it returns im.ErrRateLimited and how long to wait (interval when the
// store cannot tell exactly).
func (st *Store) TakeSyncSlot(ctx context.Context, u im.UserID, now time.Time, interval time.Duration) (time.Duration, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.tables.Inbox),
		Key:                                 inboxKey(u, "rl#sync"),
		UpdateExpression:                    aws.String("SET #at = :now, #ttl = :ttl"),
		ConditionExpression:                 aws.String("attribute_not_exists(#at) OR #at <= :since"),
		ExpressionAttributeNames:            map[string]string{"#at": "at", "#ttl": attrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": n(now.UnixMilli()), ":since": n(now.Add(-interval).UnixMilli()), ":ttl": n(now.Add(time.Hour).Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return 0, nil
	}
	if ccf, ok := errorsAsCCF(err); ok {
		wait := interval
		if at := getN(ccf.Item, "at"); at > 0 {
			wait = max(time.UnixMilli(at).Add(interval).Sub(now), time.Millisecond)
		}
		return wait, fmt.Errorf("sync %s: %w", u, im.ErrRateLimited)
	}
	return 0, fmt.Errorf("sync slot %s: %w", u, err)
}

// AddUsage adds n to u's rate counter key ("rl#<key>" in the inbox table,
// removed by TTL after expires) and returns the new total: the global half
// of ratelimit.Limiter, called once per Flush frames of a busy user.
func (st *Store) AddUsage(ctx context.Context, u im.UserID, key string, n64 int64, expires time.Time) (int64, error) {
	out, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.tables.Inbox),
		Key:                       inboxKey(u, "rl#"+key),
		UpdateExpression:          aws.String("ADD #n :n SET #ttl = :ttl"),
		ExpressionAttributeNames:  map[string]string{"#n": "n", "#ttl": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": n(n64), ":ttl": n(expires.Unix())},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, fmt.Errorf("rate counter %s/%s: %w", u, key, err)
	}
	return getN(out.Attributes, "n"), nil
}

// Usage reads the counter named key of user u that AddUsage adds to (0
// if absent), strongly consistent, without adding to it.
func (st *Store) Usage(ctx context.Context, u im.UserID, key string) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(st.tables.Inbox),
		Key:                      inboxKey(u, "rl#"+key),
		ProjectionExpression:     aws.String("#n"),
		ExpressionAttributeNames: map[string]string{"#n": "n"},
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("rate counter %s/%s: %w", u, key, err)
	}
	return getN(out.Item, "n"), nil
}

// ExpireEntry removes one inbox entry as DynamoDB TTL does when retention
// ends. Emulators without TTL (minidyn) never expire entries; tests and
// maintenance tools use this to reproduce retention.
func (st *Store) ExpireEntry(ctx context.Context, u im.UserID, seq int64) error {
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(seq))})
	if err != nil {
		return fmt.Errorf("expire entry %s#%d: %w", u, seq, err)
	}
	return nil
}

// ExpireDue deletes u's inbox entries whose TTL is at or before now, as
// DynamoDB's TTL process would (it runs lazily, within days). Emulators
// without TTL (minidyn) never expire anything; tests and maintenance tools
// use this to reproduce retention. It returns how many entries it removed.
func (st *Store) ExpireDue(ctx context.Context, u im.UserID, now time.Time) (int, error) {
	var due []int64
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :e)"),
		FilterExpression:          aws.String("#ttl <= :now"),
		ProjectionExpression:      aws.String("#seq"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK, "#ttl": attrTTL, "#seq": attrSeq},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":e": s("e#"), ":now": n(now.Unix())},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		due = append(due, getN(it, attrSeq))
	})
	if err != nil {
		return 0, fmt.Errorf("expire %s: %w", u, err)
	}
	for i, seq := range due {
		if err := st.ExpireEntry(ctx, u, seq); err != nil {
			return i, err
		}
	}
	return len(due), nil
}

// SeedInbox writes entries (seq 1..n, ascending, into an empty inbox),
// the inbox head and one conversation-index item per conversation, with
// plain BatchWriteItem calls of 25 items: no transaction, no condition.
// It exists for load tests and benchmarks that need large inboxes on
// emulators whose transactions copy whole tables (moto, minidyn); it is
// never safe on a live inbox.
func (st *Store) SeedInbox(ctx context.Context, u im.UserID, entries []im.Entry, now time.Time) error {
	if len(entries) == 0 {
		return nil
	}
	ttl := st.ttlAt(now)
	var puts []map[string]types.AttributeValue
	last := map[im.ConversationID]im.Entry{}
	for _, e := range entries {
		// Seeded entries have no log item to reference: they carry their body.
		item := entryItem(u, e, ttl)
		setBody(item, e.Message.Body, st.CompressBodies)
		puts = append(puts, item)
		last[e.Message.Conversation] = e
	}
	puts = append(puts, map[string]types.AttributeValue{attrUser: s(string(u)), attrSK: s(skHead), attrSeq: n(entries[len(entries)-1].Seq), attrEpoch: s(newEpoch(now))})
	for c, e := range last {
		m := e.Message
		puts = append(puts, map[string]types.AttributeValue{
			attrUser: s(string(u)), attrSK: s(convIndexSK(c)), attrLast: n(m.ConvSeq), "lastFrom": s(string(m.From)),
			"lastAt": n(m.SentAt.UnixMilli()), "preview": s(im.Preview(m.Body)), attrInboxSeq: n(e.Seq),
		})
	}
	if err := st.batchPut(ctx, st.tables.Inbox, puts); err != nil {
		return fmt.Errorf("seed inbox %s: %w", u, err)
	}
	return nil
}

// AckCursors returns the ack cursor of device d of each of users (absent:
// 0), in BatchGetItem calls of 100 keys: one round trip per 100 users to see
// how far their devices have confirmed delivery.
func (st *Store) AckCursors(ctx context.Context, d im.DeviceID, users []im.UserID) (map[im.UserID]int64, error) {
	out := make(map[im.UserID]int64, len(users))
	keys := make([]map[string]types.AttributeValue, len(users))
	for i, u := range users {
		keys[i] = inboxKey(u, deviceSK(d))
	}
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) { out[im.UserID(getS(it, attrUser))] = getN(it, "acked") })
	if err != nil {
		return nil, fmt.Errorf("ack cursors of %s: %w", d, err)
	}
	return out, nil
}
