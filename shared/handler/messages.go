package handler

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// Send stores a message and answers with the server ACK once it is durable
// in every recipient inbox; then it pushes the new entries to the
// recipients' connections (the sender's other devices included).
func (h *Handler) Send(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return h.fail(ctx, c, wire.ActionSend, errNoCaller, "")
	}
	draft, clientMsgID, err := wire.DecodeSend(req.Body, c.User)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	if draft.Conversation.IsGroup() {
		return h.fail(ctx, c, wire.ActionSend, im.ErrGroupsUnsupported, clientMsgID)
	}
	if _, err := draft.Recipients(); err != nil {
		return h.fail(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	stored, err := h.Inbox.Send(ctx, draft, h.now())
	if err != nil {
		return h.fail(ctx, c, wire.ActionSend, err, clientMsgID)
	}
	h.log().InfoContext(ctx, "message stored", "messageId", stored.Message.ID, "conversationId", stored.Message.Conversation,
		"convSeq", stored.Message.ConvSeq, "userId", c.User, "replayed", stored.Replayed, "requestId", c.RequestID)
	// A replay pushes again: the first attempt may have crashed before its
	// pushes. Devices drop entries they already have (seq ≤ cursor).
	for user, seq := range stored.Inboxed {
		h.deliver(ctx, user, im.Entry{Seq: seq, Message: stored.Message})
	}
	return reply(wire.NewSent(clientMsgID, stored.Message))
}

// deliver pushes an entry to every connection of user and schedules the
// first redelivery check of each push. Failures are logged: the entry is
// durable and a check or the next sync delivers it.
func (h *Handler) deliver(ctx context.Context, user im.UserID, e im.Entry) {
	conns, err := h.Connections.Connections(ctx, user)
	if err != nil {
		h.log().ErrorContext(ctx, "push skipped: listing connections failed", "err", err.Error(), "userId", user, "seq", e.Seq, "messageId", e.Message.ID)
		return
	}
	frame, _ := json.Marshal(wire.NewPush(e))
	for _, conn := range conns {
		h.pushAndSchedule(ctx, conn, e, frame, 0)
	}
}

// pushAndSchedule makes push number attempt+1 of entry e to conn and, unless
// the connection is gone or the policy is exhausted, schedules the next check.
func (h *Handler) pushAndSchedule(ctx context.Context, conn im.Connection, e im.Entry, frame []byte, attempt int) {
	log := h.log().With("userId", conn.User, "deviceId", conn.Device, "connectionId", conn.ID, "seq", e.Seq, "messageId", e.Message.ID, "attempt", attempt)
	err := h.Pusher.Push(ctx, conn.ID, frame)
	switch {
	case errors.Is(err, im.ErrGone):
		log.InfoContext(ctx, "push_failed: connection gone; message waits for pull")
		if err := h.Connections.RemoveConnection(ctx, conn.User, conn.ID); err != nil {
			log.ErrorContext(ctx, "removing stale connection failed", "err", err.Error())
		}
		return
	case err != nil:
		log.WarnContext(ctx, "push_failed; left for redelivery", "err", err.Error())
	default:
		log.InfoContext(ctx, "pushed")
	}
	delay, ok := h.Redelivery.CheckDelay(attempt)
	if !ok {
		log.InfoContext(ctx, "awaiting_pull: redelivery exhausted")
		return
	}
	check := im.Check{User: conn.User, Device: conn.Device, Connection: conn.ID, Seq: e.Seq, Attempt: attempt}
	if err := h.Scheduler.Schedule(ctx, check, delay); err != nil {
		log.ErrorContext(ctx, "scheduling redelivery failed; message waits for pull", "err", err.Error())
		return
	}
	log.InfoContext(ctx, "redelivery_scheduled", "delay", delay.String())
}

// Ack moves the device's cumulative ack cursor ({"action":"ack","upTo":N}).
// It answers nothing on success.
func (h *Handler) Ack(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return h.fail(ctx, c, wire.ActionAck, errNoCaller, "")
	}
	upTo, err := wire.DecodeAck(req.Body)
	if err != nil {
		return h.fail(ctx, c, wire.ActionAck, err, "")
	}
	moved, err := h.Inbox.Ack(ctx, c.User, c.Device, upTo, h.now())
	if err != nil {
		return h.fail(ctx, c, wire.ActionAck, err, "")
	}
	if moved {
		h.log().InfoContext(ctx, "acked", "userId", c.User, "deviceId", c.Device, "seq", upTo)
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// Sync answers a cursor pull with one page. A new sync (not the continuation
// of this device's unfinished one) is admitted once per user per SyncInterval.
func (h *Handler) Sync(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return h.fail(ctx, c, wire.ActionSync, errNoCaller, "")
	}
	cursor, limit, err := wire.DecodeSync(req.Body)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
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
	return reply(wire.NewSyncPage(page))
}

func (h *Handler) syncInterval() time.Duration {
	if h.SyncInterval > 0 {
		return h.SyncInterval
	}
	return 2 * time.Second
}
