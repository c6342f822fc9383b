package handler

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Reads is the storage of read watermarks.
type Reads interface {
	MarkRead(ctx context.Context, u im.UserID, c im.ConversationID, upTo int64, now time.Time) (int64, bool, error)
	ReadAlertsBefore(ctx context.Context, u im.UserID, c im.ConversationID, upTo, inboxSeq int64, now time.Time, beforeWrite func(ids []im.MessageID, after, below int64) error) (im.AlertsRead, error)
	ReadWatermark(ctx context.Context, u im.UserID, c im.ConversationID) (im.ReadMark, error)
	ConversationIDs(ctx context.Context, c im.ConversationID, after, upTo int64, limit int) (map[int64]im.MessageID, error)
	Message(ctx context.Context, c im.ConversationID, convSeq int64) (im.Message, error)
}

// Read moves the user's read watermark of a conversation
// ({"action":"read","conversationId":…,"upTo":convSeq}), tells the user's
// other devices ({"type":"read",…}), sends a 1:1 peer a read receipt and
// records "read" in the trace of each newly read 1:1 or alert message.
// Whatever the number of messages covered, the watermark is one write.
// A read that moves nothing tells no one, unless it says again (tellAgain).
// It is a one-way route: nothing answers a success; an error frame is
// pushed.
func (h *ReadRoutes) Read(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	if req.RequestContext.RouteKey == wire.ActionAnswer {
		return h.Answer(ctx, req) // the same function serves both routes
	}
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionRead, err)
	}
	f, err := wire.DecodeRead(req.Body)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionRead, err)
	}
	conv, upTo := im.ConversationID(f.ConversationID), *f.UpTo
	if err := conv.CanRead(c.User); err != nil {
		return h.failOneWay(ctx, c, wire.ActionRead, err)
	}
	if conv.AppConversation() {
		return h.readAlerts(ctx, c, conv, upTo, f.InboxSeq, f.Again)
	}
	old, moved, err := h.Reads.MarkRead(ctx, c.User, conv, upTo, h.now())
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionRead, err)
	}
	if !moved {
		if f.Again {
			h.tellAgain(ctx, c, conv, upTo)
		}
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}
	h.log().InfoContext(ctx, "read", "userId", c.User, "deviceId", c.Device, "conversationId", conv, "upTo", upTo)
	h.syncRead(ctx, c, wire.ReadSync{ConversationID: string(conv), UpTo: upTo})
	h.receipt(ctx, c.User, conv, wire.ReceiptRead, upTo)
	// In a group, per-message read events would cost one trace write per
	// message per member (300 members × 100 messages = 30,000 writes for
	// one catch-up): group read state is derived from the watermarks
	// instead ("receipts").
	if h.Tracer != nil && !conv.IsGroup() {
		from := max(old, upTo-maxAckTrace)
		ids, err := h.Reads.ConversationIDs(ctx, conv, from, upTo, maxAckTrace)
		if err != nil {
			h.log().WarnContext(ctx, "read trace not recorded", "err", err.Error())
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		}
		tr := h.trail("read", c.RequestID)
		for seq := from + 1; seq <= upTo; seq++ {
			if id, ok := ids[seq]; ok {
				tr.add(im.Event{Message: id, Type: im.EventRead, User: c.User, Device: c.Device, Detail: string(conv)})
			}
		}
		tr.flush(ctx)
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// tellAgain sends again what a read at upTo told when it moved the
// watermark — the user's other devices their read frame, a 1:1 peer the
// receipt — if the watermark stands at upTo: the read says "again" (the
// client writes it again after an error), and its first invocation may
// have failed after its write, before telling anyone. A watermark above
// upTo was moved by a later read, which told them. Half a read unit, for
// reads written again only.
func (h *ReadRoutes) tellAgain(ctx context.Context, c caller, conv im.ConversationID, upTo int64) {
	mark, err := h.Reads.ReadWatermark(ctx, c.User, conv)
	if err != nil {
		h.log().WarnContext(ctx, "read watermark not read: a read written again not told again", "err", err.Error(), "userId", c.User, "conversationId", conv)
		return
	}
	if mark.UpTo != upTo {
		return
	}
	sync := wire.ReadSync{ConversationID: string(conv), UpTo: upTo}
	if mark.HasSeq {
		sync.InboxSeq = mark.Seq
	}
	h.syncRead(ctx, c, sync)
	if !conv.AppConversation() {
		h.receipt(ctx, c.User, conv, wire.ReceiptRead, upTo)
	}
}

// readAlerts is Read in an app's alert conversation: the read covers the
// user's alerts up to convSeq upTo and, when the device names it, exactly
// those at inbox seqs up to inboxSeq (an alert can reach the inbox after a
// later one, below the convSeq watermark). Each alert it newly covers is
// traced "read" and gets a status callback.
func (h *ReadRoutes) readAlerts(ctx context.Context, c caller, conv im.ConversationID, upTo, inboxSeq int64, again bool) (events.APIGatewayProxyResponse, error) {
	// The alerts the read covers get a status callback job that runs
	// callbackDelay after it, enqueued before its write: a function that
	// stops after the write (or whose job below is not enqueued) loses no
	// read callback. That enqueue failing fails the read before anything
	// is written. A read covering more inbox entries than the store looks
	// through itself (Store.ReadSpan: an app's alerts read long after the
	// last read) names the alerts of the newest; those below (after,
	// below] get their jobs from a job that reads the rest, as a
	// catch-up ack's do, and traces them read by this device.
	early := func(ids []im.MessageID, after, below int64) error {
		return coveredCallbacksAfter(ctx, h.FanoutQueue, callbackDelay, ids, im.FanoutJob{User: c.User, Device: c.Device, Conversation: conv, From: after, UpTo: below})
	}
	r, err := h.Reads.ReadAlertsBefore(ctx, c.User, conv, upTo, inboxSeq, h.now(), early)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionRead, err)
	}
	if !r.Moved {
		if again {
			h.tellAgain(ctx, c, conv, upTo)
		}
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}
	h.log().InfoContext(ctx, "read", "userId", c.User, "deviceId", c.Device, "conversationId", conv, "upTo", r.UpTo, "inboxSeq", r.ReadSeq, "alerts", len(r.Read))
	h.syncRead(ctx, c, wire.ReadSync{ConversationID: string(conv), UpTo: r.UpTo, InboxSeq: r.ReadSeq})
	if h.Tracer != nil {
		tr := h.trail("read", c.RequestID)
		for _, id := range r.Read {
			tr.add(im.Event{Message: id, Type: im.EventRead, User: c.User, Device: c.Device, Detail: string(conv)})
		}
		tr.flush(ctx)
		callbacksLater(ctx, h.core, h.FanoutQueue, c.User, r.Read...)
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// Answers is the storage of people's answers to alerts.
type Answers interface {
	Alert(ctx context.Context, id im.MessageID) (im.Alert, error)
	Answer(ctx context.Context, id im.MessageID, a im.Answer, firstWins bool) (im.Answer, bool, error)
}

// Answer records a person's answer to an alert that asks for one
// ({"action":"answer","messageId":…,"option":…}) and answers with the
// answer that stands ({"type":"answer",…}): once per recipient and
// forward-only (the same answer again is answered as before; another
// option is conflict), only by a recipient (forbidden), only with one of
// the alert's options (bad_request); with first answer wins, the first
// recipient's answer is the alert's and the others are refused (conflict,
// naming it). A new answer is traced ("answered") and synced to the
// user's other devices.
func (h *ReadRoutes) Answer(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, f, err := admit(ctx, h.core, req, wire.DecodeAnswer, ratelimit.Query)
	if err != nil {
		return h.fail(ctx, c, wire.ActionAnswer, err, "")
	}
	if h.Answers == nil {
		return h.fail(ctx, c, wire.ActionAnswer, wire.Problemf(wire.CodeBadRequest, "this deployment has no alerts"), "")
	}
	id := im.MessageID(f.MessageID)
	a, err := h.Answers.Alert(ctx, id)
	if errors.Is(err, im.ErrNotFound) || (err == nil && !a.IsRecipient(c.User)) {
		// Whether the alert exists is not told to users it was not for.
		return h.fail(ctx, c, wire.ActionAnswer, wire.Problemf(wire.CodeForbidden, "no alert %s for you", id), "")
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionAnswer, err, "")
	}
	if a.Ack == nil || !a.Ack.Allows(f.Option) {
		var opts []string
		if a.Ack != nil {
			opts = a.Ack.Options
		}
		return h.fail(ctx, c, wire.ActionAnswer, wire.Problemf(wire.CodeBadRequest, "alert %s takes the answers %v, not %q", id, opts, f.Option), "")
	}
	got, recorded, err := h.Answers.Answer(ctx, id, im.Answer{User: c.User, Device: c.Device, Option: f.Option, At: h.now()}, a.Ack.FirstWins)
	if errors.Is(err, im.ErrAlreadyAnswered) {
		return h.fail(ctx, c, wire.ActionAnswer, wire.Problemf(wire.CodeConflict, "%s", strings.TrimSuffix(err.Error(), ": "+im.ErrAlreadyAnswered.Error())), "")
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionAnswer, err, "")
	}
	res := wire.AnswerResult{Type: wire.TypeAnswer, Ref: c.Ref, MessageID: string(id), UserID: string(got.User), Option: got.Option, AnsweredAt: wire.Timestamp(got.At)}
	if !recorded {
		// The same answer again: a client that had no answer (the
		// function failed or stopped after recording it) asks again, and
		// the status callback job it may have lost is enqueued now (a
		// duplicate records nothing twice).
		if err := callbacksLater(ctx, h.core, h.FanoutQueue, c.User, id); err != nil {
			return h.fail(ctx, c, wire.ActionAnswer, err, "")
		}
		return reply(res)
	}
	h.log().InfoContext(ctx, "answered", "messageId", id, "userId", c.User, "deviceId", c.Device, "option", f.Option)
	tr := h.trail("answer", c.RequestID)
	tr.add(im.Event{Message: id, Type: im.EventAnswered, User: c.User, Device: c.Device, Detail: f.Option})
	tr.flush(ctx)
	if err := callbacksLater(ctx, h.core, h.FanoutQueue, c.User, id); err != nil {
		// Recorded, its callback job not: the client asks again.
		return h.fail(ctx, c, wire.ActionAnswer, err, "")
	}
	sync := res
	sync.Ref = ""
	frame, _ := json.Marshal(sync)
	h.pushAll(ctx, "answer sync", c.User, c.Connection, frame)
	return reply(res)
}

// syncRead pushes the new watermark to the user's other connections.
func (h *ReadRoutes) syncRead(ctx context.Context, c caller, f wire.ReadSync) {
	f.Type = wire.TypeRead
	frame, _ := json.Marshal(f)
	h.pushAll(ctx, "read sync", c.User, c.Connection, frame)
}
