package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// jsonUnmarshal decodes the JSON text s into v.
func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// Send stores a message and answers with the server ACK ("sent", posted to
// the sender's connection: send is a one-way route) once it is durable in
// every recipient inbox; only then does it push the new entries to the
// recipients' connections (the sender's other devices included), all at
// once and each within the push deadline, so a recipient that stopped
// reading delays neither the ACK nor anyone else's push.
func (h *Messages) Send(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, "")
	}
	f, err := wire.DecodeSend(req.Body)
	if err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, f.ClientMsgID)
	}
	draft, clientMsgID := f.Draft(c.User), f.ClientMsgID
	if err := h.limit(ctx, c, ratelimit.Send); err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	if draft.Conversation.IsGroup() {
		if !draft.Conversation.ValidGroup() {
			return h.failPushed(ctx, c, wire.ActionSend, im.ErrMalformedConversation, clientMsgID)
		}
		if f.OwnFromSent {
			draft.OwnConnection = c.Connection
		}
		return h.sendGroup(ctx, c, draft, clientMsgID)
	}
	if _, err := draft.Recipients(); err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	stored, err := h.Inbox.Send(ctx, draft, h.now())
	if err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	// The sending connection's own copy travels in "sent": no push, no
	// redelivery check and no ack of it. Should "sent" not be posted, the
	// connection is pushed its copy like any other.
	own, hasOwn := stored.Inboxed[c.User]
	sent := wire.NewSent(clientMsgID, stored.Message)
	if hasOwn {
		sent = wire.NewSentEntry(clientMsgID, im.Entry{Seq: own, Message: stored.Message})
	}
	var carried im.ConnectionID
	if h.answer(ctx, c, wire.ActionSend, sent) && hasOwn {
		carried = c.Connection
	}
	tr := h.trail("send", c.RequestID)
	defer tr.flush(ctx)
	id := stored.Message.ID
	if !stored.Replayed {
		tr.omitIfDerivable(id, h.TraceSample)
	}
	if stored.Replayed {
		tr.add(im.Event{Message: id, Type: im.EventCreated, User: c.User, Device: c.Device, Detail: "retry of clientMsgId " + clientMsgID})
	} else {
		tr.add(im.Event{Message: id, Type: im.EventCreated, User: c.User, Device: c.Device})
		tr.add(im.Event{Message: id, Type: im.EventStored, Detail: fmt.Sprintf("%s #%d", stored.Message.Conversation, stored.Message.ConvSeq)})
		for user, seq := range stored.Inboxed {
			tr.add(im.Event{Message: id, Type: im.EventInboxed, User: user, Seq: seq})
		}
	}
	h.log().InfoContext(ctx, "message stored", "messageId", stored.Message.ID, "conversationId", stored.Message.Conversation,
		"convSeq", stored.Message.ConvSeq, "userId", c.User, "replayed", stored.Replayed, "requestId", c.RequestID)
	if carried != "" {
		tr.add(im.Event{Message: id, Type: im.EventPushed, User: c.User, Device: c.Device, Connection: c.Connection, Seq: own, Detail: "in sent"})
	}
	// A replay pushes again: the first attempt may have crashed before its
	// pushes. Devices drop entries they already have (seq ≤ cursor).
	var wg sync.WaitGroup
	cs := &checks{}
	for user, seq := range stored.Inboxed {
		wg.Go(func() { h.deliver(ctx, tr, cs, user, im.Entry{Seq: seq, Message: stored.Message}, carried) })
	}
	wg.Wait()
	h.scheduleChecks(ctx, tr, cs)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// sendGroup stores a group message in the conversation log, enqueues its
// fan-out and only then ACKs: a message the sender has a "sent" for is in
// the log and has a fan-out job. If enqueueing fails the sender gets an
// internal error and retries with the same clientMsgId; the retry (a
// replay) enqueues again. Even a job that is never enqueued is made good by
// the group's next message, whose fan-out fills every inbox from where it
// stands, not just with that one message.
//
// A group under read diffusion whose sender said ownFromSent (the draft's
// OwnConnection) gets its message and proof in "sent", and the message's
// log item records the sending connection, which the fan-out does not
// push it to (issue 12: a push, an ack, an invocation and a write fewer
// per message; in a burst, whichever job pushes the run skips each of the
// connection's own messages). Should "sent" not reach the client, it sends
// again with the same clientMsgId, and the replay's "sent" carries the
// message again (a device applies a convSeq once).
func (h *Messages) sendGroup(ctx context.Context, c caller, draft im.Draft, clientMsgID string) (events.APIGatewayProxyResponse, error) {
	stored, err := h.Groups.SendGroup(ctx, draft, h.now())
	if err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	m := stored.Message
	job, sent := im.FanoutJob{Kind: im.FanoutMessages, Conversation: m.Conversation, UpTo: m.ConvSeq}, wire.NewSent(clientMsgID, m)
	if draft.OwnConnection != "" && m.TakenBy != "" {
		// Its log item says a client took it from "sent" (a read-diffused
		// group): this try's answer carries it too, a retry's included —
		// a retry's connection may never have had the first answer, and
		// the fan-out does not push it to the connection of the first try.
		sent = wire.NewSentGroupMessage(clientMsgID, m, h.proofKey(ctx))
	}
	if err := h.FanoutQueue.Enqueue(ctx, 0, job); err != nil {
		return h.failPushed(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	posted := h.answer(ctx, c, wire.ActionSend, sent)
	tr := h.trail("send", c.RequestID)
	defer tr.flush(ctx)
	if !stored.Replayed && stored.ReadDiffused {
		// Store.Events derives created and stored from the log item.
		tr.omitIfDerivable(m.ID, h.TraceSample)
	}
	if stored.Replayed {
		tr.add(im.Event{Message: m.ID, Type: im.EventCreated, User: c.User, Device: c.Device, Detail: "retry of clientMsgId " + clientMsgID})
	} else {
		tr.add(im.Event{Message: m.ID, Type: im.EventCreated, User: c.User, Device: c.Device})
		tr.add(im.Event{Message: m.ID, Type: im.EventStored, Detail: fmt.Sprintf("%s #%d; fan-out queued", m.Conversation, m.ConvSeq)})
	}
	if sent.Message != nil {
		// The sending connection takes its message from "sent" (the fan-out
		// skips it). Not posted, the trace says so in full: the client sends
		// again, and that retry's "sent" carries it.
		e := im.Event{Message: m.ID, Type: im.EventPushed, User: c.User, Device: c.Device, Connection: c.Connection, Detail: "in sent"}
		if !posted {
			e.Type, e.Detail = im.EventPushFailed, "sent not posted; the client's retry of clientMsgId "+clientMsgID+" carries it"
		}
		tr.add(e)
	}
	h.log().InfoContext(ctx, "group message stored", "messageId", m.ID, "conversationId", m.Conversation, "convSeq", m.ConvSeq,
		"userId", c.User, "replayed", stored.Replayed, "requestId", c.RequestID)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// deliver pushes an entry to every connection of user but skip (the
// sending connection, which had it in "sent"; "" for none), all at once,
// and adds the first redelivery check of each push to cs. Failures are
// logged: the entry is durable and a check or the next sync delivers it.
func (h *delivery) deliver(ctx context.Context, tr *trail, cs *checks, user im.UserID, e im.Entry, skip im.ConnectionID) {
	h.deliverPush(ctx, tr, cs, user, e, skip, wire.NewPush(e))
}

// deliverPush is deliver with the push frame given (an alert's carries
// its urgency and re-notification count).
func (h *delivery) deliverPush(ctx context.Context, tr *trail, cs *checks, user im.UserID, e im.Entry, skip im.ConnectionID, push wire.Push) {
	conns, err := h.Connections.Connections(ctx, user)
	if err != nil {
		h.log().ErrorContext(ctx, "push skipped: listing connections failed", "err", err.Error(), "userId", user, "seq", e.Seq, "messageId", e.Message.ID)
		return
	}
	carried := slices.ContainsFunc(conns, func(c im.Connection) bool { return c.ID == skip })
	conns = slices.DeleteFunc(conns, func(c im.Connection) bool { return c.ID == skip })
	frame, _ := json.Marshal(push)
	if len(conns) == 0 && !carried {
		tr.add(im.Event{Message: e.Message.ID, Type: im.EventAwaitingPull, User: user, Seq: e.Seq, Detail: "no connection"})
		h.wake(ctx, user, e, "")
	} else if push.Urgent {
		// An urgent alert also wakes the user's registered devices that
		// are not connected: the on-call phone in a pocket while the
		// laptop at the office is online.
		h.wakeUnconnected(ctx, user, e)
	}
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() { h.pushAndCollect(ctx, tr, cs, conn, e, frame, 0) })
	}
	wg.Wait()
}

// ConnectGrace is how long after $connect a 410 does not remove a
// connection record: the handshake may still be under way.
const ConnectGrace = 30 * time.Second

// pushAndCollect makes push number attempt+1 of entry e to conn and, unless
// the connection is gone or the policy is exhausted, adds the next check
// to cs (scheduleChecks schedules them).
func (h *delivery) pushAndCollect(ctx context.Context, tr *trail, cs *checks, conn im.Connection, e im.Entry, frame []byte, attempt int) {
	log := h.log().With("userId", conn.User, "deviceId", conn.Device, "connectionId", conn.ID, "seq", e.Seq, "messageId", e.Message.ID, "attempt", attempt)
	ev := im.Event{Message: e.Message.ID, User: conn.User, Device: conn.Device, Connection: conn.ID, Seq: e.Seq, Attempt: attempt}
	event := func(t im.EventType, detail string, delay time.Duration) {
		ev.Type, ev.Detail, ev.Delay = t, detail, delay
		tr.add(ev)
	}
	err := h.push(ctx, conn.ID, frame)
	switch {
	case errors.Is(err, im.ErrGone):
		// A connection still in its $connect handshake also answers 410:
		// only a record older than the grace period is stale.
		removed, rerr := h.Connections.RemoveStaleConnection(ctx, conn.User, conn.ID, h.now().Add(-ConnectGrace))
		if rerr != nil {
			log.ErrorContext(ctx, "removing stale connection failed", "err", rerr.Error())
		}
		if removed || rerr != nil {
			log.InfoContext(ctx, "push_failed: 410 gone, connection record removed; message waits for pull")
			event(im.EventPushFailed, "410 gone: connection record removed", 0)
			event(im.EventAwaitingPull, "", 0)
			h.wake(ctx, conn.User, e, conn.Device)
			return
		}
		// Too young to be stale: retry like any failed push.
		log.InfoContext(ctx, "push_failed: 410 during the connect handshake; left for redelivery")
		event(im.EventPushFailed, "410 gone during the connect handshake; left for redelivery", 0)
	case err != nil:
		log.WarnContext(ctx, "push_failed; left for redelivery", "err", err.Error())
		event(im.EventPushFailed, "push error; left for redelivery", 0)
	default:
		log.DebugContext(ctx, "pushed")
		event(im.EventPushed, "", 0)
	}
	if _, ok := h.Redelivery.CheckDelay(attempt); !ok {
		log.InfoContext(ctx, "awaiting_pull: redelivery exhausted")
		event(im.EventAwaitingPull, fmt.Sprintf("not acked after %d pushes", attempt+1), 0)
		if e.Seq == 0 {
			// A group's message: nothing but a later push of the group,
			// the notify or a reconnect tells the device (a pong names its
			// inbox head only), so the next pong names the group too.
			h.markGroupPulls(ctx, []im.Check{{User: conn.User, Connection: conn.ID, Conversation: e.Message.Conversation}})
		}
		h.notify(ctx, conn)
		h.wake(ctx, conn.User, e, conn.Device) // a half-open connection: the device may sleep
		return
	}
	check := im.Check{User: conn.User, Device: conn.Device, Connection: conn.ID, Seq: e.Seq, Attempt: attempt}
	if e.Seq == 0 { // a read-diffused group's message (groupEntry)
		check.Conversation, check.Seq = e.Message.Conversation, e.Message.ConvSeq
	}
	cs.add(check, ev)
}

// checks collects the redelivery checks of one invocation's pushes, each
// with the trace event of its push, so that they are scheduled together:
// one queue message per attempt number (all its checks come due at once)
// instead of one per push (issue 12: a send's pushes to every device of
// both users, a fan-out batch's to every member, cost one SQS request).
type checks struct {
	mu      sync.Mutex
	pending []pendingCheck
}

// markGroupPulls marks the connections of the read-diffused groups' checks
// in list that could not be scheduled, so that their next pong names the
// group (a pong names the inbox head only).
func (h *delivery) markGroupPulls(ctx context.Context, list []im.Check) {
	marked := map[im.ConnectionID]bool{}
	for _, c := range list {
		if c.Conversation == "" || marked[c.Connection] {
			continue
		}
		marked[c.Connection] = true
		if err := h.Connections.MarkPull(ctx, c.User, c.Connection); err != nil {
			h.log().WarnContext(ctx, "group pull not marked for the next pong", "err", err.Error(), "userId", c.User, "connectionId", c.Connection)
		}
	}
}

// pendingCheck is one redelivery check to schedule and the trace event
// that says when it is due.
type pendingCheck struct {
	check im.Check
	ev    im.Event // the push's trace event, for the scheduled/awaiting one
}

// add collects check c with the trace event of its push.
func (cs *checks) add(c im.Check, ev im.Event) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.pending = append(cs.pending, pendingCheck{c, ev})
}

// scheduleChecks schedules the collected checks, one queue message per
// attempt number and im.MaxChecksPerSchedule checks. A check that cannot
// be scheduled leaves its message to the next sync (the device's next
// ping tells it the head; of a read-diffused group, its connection is
// marked for the pong to name the group), as a single failed schedule did.
func (h *delivery) scheduleChecks(ctx context.Context, tr *trail, cs *checks) {
	byAttempt := map[int][]pendingCheck{}
	for _, p := range cs.pending {
		byAttempt[p.check.Attempt] = append(byAttempt[p.check.Attempt], p)
	}
	for attempt, ps := range byAttempt {
		delay, _ := h.Redelivery.CheckDelay(attempt)
		for start := 0; start < len(ps); start += im.MaxChecksPerSchedule {
			chunk := ps[start:min(start+im.MaxChecksPerSchedule, len(ps))]
			list := make([]im.Check, len(chunk))
			for i, p := range chunk {
				list[i] = p.check
			}
			err := h.Scheduler.Schedule(ctx, list, delay)
			if err != nil {
				h.log().ErrorContext(ctx, "scheduling redelivery failed; messages wait for pull", "err", err.Error(), "checks", len(list), "attempt", attempt)
				h.markGroupPulls(ctx, list)
			} else {
				h.log().DebugContext(ctx, "redelivery_scheduled", "checks", len(list), "attempt", attempt, "delay", delay.String())
			}
			for _, p := range chunk {
				ev := p.ev
				if err != nil {
					ev.Type, ev.Detail, ev.Delay = im.EventAwaitingPull, "scheduling redelivery failed", 0
				} else {
					ev.Type, ev.Detail, ev.Delay = im.EventRedeliveryScheduled, "", delay
				}
				tr.add(ev)
			}
		}
	}
}

// notify tells a connection that pushing has given up and where its inbox
// head is ({"type":"notify"}): a device that missed every push (or whose
// acks were lost) syncs instead of waiting for its next ping or reconnect.
func (h *delivery) notify(ctx context.Context, conn im.Connection) {
	head, epoch, err := h.Inbox.Head(ctx, conn.User)
	if err != nil {
		h.log().WarnContext(ctx, "notify skipped: reading the inbox head failed", "err", err.Error(), "userId", conn.User)
		return
	}
	n := wire.Notify{Type: wire.TypeNotify, Head: head, Epoch: epoch, Groups: h.groupsBehind(ctx, conn)}
	frame, _ := json.Marshal(n)
	if err := h.push(ctx, conn.ID, frame); err != nil && !errors.Is(err, im.ErrGone) {
		h.log().WarnContext(ctx, "notify push failed", "err", err.Error(), "connectionId", conn.ID)
	}
}

// groupsBehind lists the read-diffused groups in which conn's device is
// behind (nil when none, or when reading them failed: logged).
func (h *delivery) groupsBehind(ctx context.Context, conn im.Connection) []wire.GroupHead {
	if h.GroupLogs == nil {
		return nil
	}
	groups, err := h.GroupLogs.ReadGroups(ctx, conn.User, conn.Device)
	if err != nil {
		h.log().WarnContext(ctx, "group heads not read", "err", err.Error(), "userId", conn.User)
	}
	return wire.GroupHeads(slices.DeleteFunc(groups, func(p im.GroupPosition) bool { return !p.Behind() }))
}

// Ack moves the device's cumulative ack cursor ({"action":"ack","upTo":N}).
// It is a one-way route: nothing answers a success; an error frame is
// pushed.
func (h *Messages) Ack(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionAck, err)
	}
	f, err := wire.DecodeAck(req.Body)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionAck, err)
	}
	if f.ConversationID != "" {
		return h.ackGroup(ctx, c, im.ConversationID(f.ConversationID), *f.UpTo, f.Proof)
	}
	upTo := *f.UpTo
	now := h.now()
	covered, err := h.alertsBeforeAck(ctx, c, upTo)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionAck, err)
	}
	// The ack's range for the trace goes in the same write as the cursor
	// (dynamo's Store.Ack), where 1:1 messages' "acked" events come from.
	res, err := h.Inbox.Ack(ctx, im.AckRange{User: c.User, Device: c.Device, Connection: c.Connection, RequestID: c.RequestID, UpTo: upTo, At: now})
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionAck, err)
	}
	if res.TraceErr != nil {
		h.log().WarnContext(ctx, "ack ranges not moved to the trace (kept on the device's cursor item unless the error says dropped)", "err", res.TraceErr.Error(), "userId", c.User, "deviceId", c.Device)
	}
	if res.Moved {
		h.log().DebugContext(ctx, "acked", "userId", c.User, "deviceId", c.Device, "seq", upTo)
		h.afterAck(ctx, c, res.Old, upTo, now, covered)
	} else if f.Again {
		h.deliveredAgain(ctx, c, upTo)
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// deliveredAgain sends again the delivered receipts of the ack that moved
// the device's cursor to upTo: an ack at the cursor says "again" (the
// client writes it again after an error), and the first one's invocation
// may have failed after its write, before the receipts and the "acked"
// events of the alerts it covered — those are written now unless the
// alert's trace has them. A cursor moved past upTo since was moved by a
// later ack, whose receipts cover these. Once that is done, the cursor
// item says so (MarkRetold) and acks written again at the same cursor
// tell no one again: a client that writes its ack again after every error
// frame, or one that repeats it on purpose, costs a read of the cursor
// item per frame, not the reads of up to maxAckTrace entries and alert
// traces. A consistent read of the cursor item, and until it is marked of
// the entries it covered (and of each alert's trace), for acks written
// again only.
func (h *Messages) deliveredAgain(ctx context.Context, c caller, upTo int64) {
	last, err := h.Inbox.LastAck(ctx, c.User, c.Device)
	if err != nil {
		h.log().WarnContext(ctx, "last ack not read: an ack written again not told again", "err", err.Error(), "userId", c.User, "deviceId", c.Device)
		return
	}
	if !last.Current || last.UpTo != upTo || last.Retold {
		return
	}
	refs, err := h.Inbox.EntryRefs(ctx, c.User, max(last.From, upTo-maxAckTrace), upTo, maxAckTrace)
	if err != nil {
		h.log().WarnContext(ctx, "entries not read: an ack written again not told again", "err", err.Error(), "userId", c.User)
		return
	}
	for conv, cseq := range peerMessages(c.User, refs, func(int64) bool { return true }) {
		h.receipt(ctx, c.User, conv, wire.ReceiptDelivered, cseq)
	}
	if !h.alertsAckedAgain(ctx, c, refs) {
		return // told again by the next ack written again
	}
	if err := h.Inbox.MarkRetold(ctx, c.User, c.Device, upTo); err != nil {
		h.log().WarnContext(ctx, "ack written again not marked told: the next one tells again", "err", err.Error(), "userId", c.User, "deviceId", c.Device)
	}
}

// alertsAckedAgain writes the "acked" event of this device for each alert
// among refs whose trace lacks it, and queues their status callbacks:
// whether all of it was done (false: logged).
func (h *Messages) alertsAckedAgain(ctx context.Context, c caller, refs []im.EntryRef) bool {
	if h.Traces == nil {
		return true
	}
	tr := h.trail("ack", c.RequestID)
	var alerts []im.MessageID
	done := true
	for _, r := range refs {
		if !r.Conversation.AppConversation() {
			continue
		}
		evs, err := h.Traces.Events(ctx, r.ID)
		if err != nil {
			h.log().WarnContext(ctx, "alert trace not read: its acked event not written again", "err", err.Error(), "messageId", r.ID)
			done = false
			continue
		}
		if slices.ContainsFunc(evs, func(e im.Event) bool {
			return e.Type == im.EventAcked && e.User == c.User && e.Device == c.Device
		}) {
			continue
		}
		tr.add(im.Event{Message: r.ID, Type: im.EventAcked, User: c.User, Device: c.Device, Connection: c.Connection, Seq: r.Seq})
		alerts = append(alerts, r.ID)
	}
	if !tr.flush(ctx) {
		done = false
	}
	return callbacksLater(ctx, h.core, h.FanoutQueue, c.User, alerts...) == nil && done
}

// peerMessages returns, per 1:1 conversation, the highest convSeq of the
// peer's messages among refs whose inbox seq mine says this device is the
// first to have (their delivered receipt is its to send).
func peerMessages(u im.UserID, refs []im.EntryRef, mine func(seq int64) bool) map[im.ConversationID]int64 {
	out := map[im.ConversationID]int64{}
	for _, r := range refs {
		switch {
		case r.From == u || r.Conversation.AppConversation() || r.Conversation.IsGroup():
		case mine(r.Seq):
			out[r.Conversation] = max(out[r.Conversation], r.ConvSeq)
		}
	}
	return out
}

// callbackDelay is how long after an ack or a read the status callback
// job that it enqueues before its write runs: long after the write has
// landed.
const callbackDelay = 10 * time.Second

// coveredRefs are the inbox entries an ack is about to cover, read before
// its write: the refs after from (the cursor then, read eventually
// consistent: at or behind the cursor the write finds).
type coveredRefs struct {
	from int64
	refs []im.EntryRef
	read bool
}

// alertsBeforeAck reads which entries an ack up to upTo will cover and,
// for the alerts among them, enqueues a status callback job that runs
// callbackDelay later, before the cursor moves: a function that stops
// after the write and before afterAck's job is enqueued (or whose enqueue
// fails) loses no delivered callback — the delayed job derives it from
// the cursor. A failure here fails the ack before anything is written (the
// device acks again; its entries are pushed again until it does). Half a
// read unit per ack (the cursor); the entries' refs are read once, here
// instead of in afterAck. Without a fan-out queue (no alerts) it does
// nothing.
func (h *Messages) alertsBeforeAck(ctx context.Context, c caller, upTo int64) (coveredRefs, error) {
	if h.FanoutQueue == nil {
		return coveredRefs{}, nil
	}
	old, err := h.Inbox.AckedUpTo(ctx, c.User, c.Device)
	if err != nil || old >= upTo {
		return coveredRefs{}, err // old >= upTo: nothing moves (unless the read was stale: afterAck reads)
	}
	from := max(old, upTo-maxAckTrace)
	refs, err := h.Inbox.EntryRefs(ctx, c.User, from, upTo, maxAckTrace)
	if err != nil {
		return coveredRefs{}, err
	}
	var alerts []im.MessageID
	for _, r := range refs {
		if r.Conversation.AppConversation() {
			alerts = append(alerts, r.ID)
		}
	}
	// A catch-up ack covers more than the newest maxAckTrace entries
	// read above (from > old): the alerts below them get their jobs from
	// a job that reads the rest of the range.
	if err := coveredCallbacksAfter(ctx, h.FanoutQueue, callbackDelay, alerts, im.FanoutJob{User: c.User, From: old, UpTo: from}); err != nil {
		return coveredRefs{}, fmt.Errorf("the alerts acked: %w", err)
	}
	return coveredRefs{from: from, refs: refs, read: true}, nil
}

// maxAckTrace bounds how many messages one ack records in their traces.
const maxAckTrace = 200

// afterAck records the ack in the traces of the alerts it covered (an
// "acked" event each: an app's delivery status reads them; a 1:1 message's
// are derived from the ack's range, stored with the cursor) and a status
// callback job per alert (for its app's webhook). No
// conversation's delivered watermark is written: it is derived from the
// device cursors when asked for (dynamo's Store.withDerivedDelivered; a
// write per message and recipient at chat pace, issue 12; group senders ask
// with "receipts"), and the sender of a 1:1 message gets a delivered
// receipt for the peer's messages no other device of this user had acked.
func (h *Messages) afterAck(ctx context.Context, c caller, old, upTo int64, now time.Time, covered coveredRefs) {
	from := max(old, upTo-maxAckTrace)
	var refs []im.EntryRef
	if covered.read && covered.from <= from {
		// Read before the write, from at or behind the cursor it found.
		refs = slices.DeleteFunc(covered.refs, func(r im.EntryRef) bool { return r.Seq <= from })
	} else {
		var err error
		if refs, err = h.Inbox.EntryRefs(ctx, c.User, from, upTo, maxAckTrace); err != nil {
			h.log().WarnContext(ctx, "ack trace and receipts skipped", "err", err.Error(), "userId", c.User)
			return
		}
	}
	tr := h.trail("ack", c.RequestID)
	// others is the highest cursor of this user's other devices that
	// acked before this one: what they acked was delivered before, and
	// its receipt is theirs to send. "Before" orders (ackedAt, device), so
	// of devices acking the same message at once exactly one sends the
	// receipt (a later ack of the earlier device can make it two: a
	// receipt repeated, never one lost). Read once, when a peer's 1:1
	// message needs it, strongly consistent: a cursor read behind would
	// repeat the receipt of every ack that follows another device's within
	// a second (the end-to-end suite on memdyn-stale).
	others := int64(-1)
	othersAcked := func() int64 {
		if others < 0 {
			others = 0
			devices, err := h.Inbox.Devices(ctx, c.User)
			if err != nil {
				h.log().WarnContext(ctx, "other devices' cursors not read: a delivered receipt may repeat", "err", err.Error(), "userId", c.User)
			}
			for d, cur := range devices {
				at, mine := cur.AckedAt.UnixMilli(), now.UnixMilli() // as stored
				earlier := at < mine || at == mine && d < c.Device
				if d != c.Device && earlier {
					others = max(others, cur.Acked)
				}
			}
		}
		return others
	}
	var alerts []im.MessageID
	for _, r := range refs {
		// Group messages get no "acked" event at all: at a login that
		// would be one trace write per message per member; "receipts"
		// answers from the device cursors.
		if r.Conversation.AppConversation() {
			tr.add(im.Event{Message: r.ID, Type: im.EventAcked, User: c.User, Device: c.Device, Connection: c.Connection, Seq: r.Seq})
			alerts = append(alerts, r.ID)
		}
	}
	tr.flush(ctx)
	callbacksLater(ctx, h.core, h.FanoutQueue, c.User, alerts...) // after the flush: the job reads the trace
	receipts := peerMessages(c.User, refs, func(seq int64) bool { return seq > othersAcked() })
	for conv, cseq := range receipts {
		h.receipt(ctx, c.User, conv, wire.ReceiptDelivered, cseq)
	}
}

// receipt tells the peer of a 1:1 conversation how far user has it.
func (h *delivery) receipt(ctx context.Context, user im.UserID, conv im.ConversationID, kind string, upTo int64) {
	peer, err := conv.Peer(user)
	if err != nil || peer == user || h.Pusher == nil {
		return
	}
	frame, _ := json.Marshal(wire.Receipt{Type: wire.TypeReceipt, Kind: kind, ConversationID: string(conv), UserID: string(user), UpTo: upTo})
	h.pushAll(ctx, "receipt", peer, "", frame)
}

// pushAll pushes frame to every connection of u but except ("" for none),
// best effort: what (a receipt, a presence change, a read watermark) is
// also answered to a query or the next sync, so a failure is only logged
// and a connection that is gone is skipped.
func (h *delivery) pushAll(ctx context.Context, what string, u im.UserID, except im.ConnectionID, frame []byte) {
	if h.Pusher == nil {
		return
	}
	conns, err := h.Connections.Connections(ctx, u)
	if err != nil {
		h.log().WarnContext(ctx, what+" push skipped", "err", err.Error(), "userId", u)
		return
	}
	for _, conn := range conns {
		if conn.ID == except {
			continue
		}
		if err := h.push(ctx, conn.ID, frame); err != nil && !errors.Is(err, im.ErrGone) {
			h.log().WarnContext(ctx, what+" push failed", "err", err.Error(), "connectionId", conn.ID)
		}
	}
}

// Sync answers a cursor pull with one page. A new sync (not the continuation
// of this device's unfinished one) is admitted once per user per SyncInterval.
func (h *Messages) Sync(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
	f, err := wire.DecodeSync(req.Body)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
	c.useRef(f.Ref)
	if f.ConversationID != "" {
		return h.syncGroup(ctx, c, im.ConversationID(f.ConversationID), *f.Cursor, f.Limit)
	}
	cursor, limit := *f.Cursor, f.Limit
	dev, err := h.Inbox.Device(ctx, c.User, c.Device)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
	if continuation := dev.SyncNext > 0 && cursor == dev.SyncNext; !continuation {
		wait, err := h.Inbox.TakeSyncSlot(ctx, c.User, h.now(), h.syncInterval())
		if errors.Is(err, im.ErrRateLimited) {
			return h.fail(ctx, c, wire.ActionSync, wire.RateLimited("one new sync per user every "+h.syncInterval().String(), wait.Milliseconds()+1), "")
		}
		if err != nil {
			return h.fail(ctx, c, wire.ActionSync, err, "")
		}
	}
	page, err := h.Inbox.Page(ctx, c.User, cursor, limit, wire.EntrySize)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
	next := int64(0)
	if page.More {
		next = page.Next
	}
	if next != dev.SyncNext {
		if err := h.Inbox.SetSyncNext(ctx, c.User, c.Device, next); err != nil {
			return h.fail(ctx, c, wire.ActionSync, err, "")
		}
	}
	out := wire.NewSyncPage(page, h.Redelivery.PushTimeout)
	out.Ref = c.Ref
	if !page.More && h.GroupLogs != nil {
		// The last page names the caller's read-diffused groups and
		// the last convSeq due in each: the device pulls those it is
		// behind in (what it missed while away) and those it has never
		// pulled (it learns where it starts).
		groups, err := h.GroupLogs.ReadGroups(ctx, c.User, c.Device)
		if err != nil {
			return h.fail(ctx, c, wire.ActionSync, err, "")
		}
		out.Groups = wire.GroupHeads(groups)
	}
	return reply(out)
}

// syncInterval is how often a user may start a new sync (SyncInterval, or
// the configuration's default).
func (h *Messages) syncInterval() time.Duration {
	if h.SyncInterval > 0 {
		return h.SyncInterval
	}
	return 2 * time.Second
}
