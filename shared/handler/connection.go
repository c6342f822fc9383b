package handler

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// Connect records the connection ($connect). A non-2xx answer refuses it.
func (h *Handler) Connect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return events.APIGatewayProxyResponse{StatusCode: 403}, nil
	}
	now := h.now()
	connectedAt := now
	if ms := req.RequestContext.ConnectedAt; ms > 0 {
		connectedAt = time.UnixMilli(ms).UTC()
	}
	err := h.Connections.SaveConnection(ctx, im.Connection{User: c.User, ID: c.Connection, Device: c.Device, ConnectedAt: connectedAt, LastSeenAt: now})
	if err != nil {
		h.log().ErrorContext(ctx, "connect failed", "err", err.Error(), "userId", c.User, "connectionId", c.Connection)
		return events.APIGatewayProxyResponse{StatusCode: 500}, nil
	}
	h.log().InfoContext(ctx, "connected", "userId", c.User, "deviceId", c.Device, "connectionId", c.Connection)
	h.presenceChanged(ctx, c.User)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// Disconnect removes the connection record ($disconnect).
func (h *Handler) Disconnect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}
	if err := h.Connections.RemoveConnection(ctx, c.User, c.Connection); err != nil {
		// The record expires by TTL and a push to it yields 410: nothing is lost.
		h.log().ErrorContext(ctx, "disconnect cleanup failed", "err", err.Error(), "userId", c.User, "connectionId", c.Connection)
		return events.APIGatewayProxyResponse{StatusCode: 500}, nil
	}
	h.log().InfoContext(ctx, "disconnected", "userId", c.User, "deviceId", c.Device, "connectionId", c.Connection)
	h.presenceChanged(ctx, c.User)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// Ping refreshes the connection record and answers {"type":"pong"} with the
// inbox head and epoch. A record that was removed (say after a stale 410)
// is written again.
func (h *Handler) Ping(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return h.fail(ctx, c, wire.ActionPing, errNoCaller, "")
	}
	now := h.now()
	err := h.Connections.TouchConnection(ctx, c.User, c.Connection, now)
	if errors.Is(err, im.ErrNotFound) {
		err = h.Connections.SaveConnection(ctx, im.Connection{User: c.User, ID: c.Connection, Device: c.Device, ConnectedAt: now, LastSeenAt: now})
		if err == nil {
			// The record had expired or been removed: peers may see the
			// user offline until this heartbeat.
			h.presenceChanged(ctx, c.User)
		}
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionPing, err, "")
	}
	head, epoch, err := h.Inbox.EnsureHead(ctx, c.User, now)
	if err != nil {
		return h.fail(ctx, c, wire.ActionPing, err, "")
	}
	return reply(wire.Pong{Type: wire.TypePong, Head: head, Epoch: epoch})
}

// Default answers frames that name no route ($default): invalid JSON is a
// bad_request, a missing action too, anything else unknown_action.
func (h *Handler) Default(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, _ := callerOf(req)
	var env wire.Envelope
	if err := jsonUnmarshal(req.Body, &env); err != nil {
		return h.fail(ctx, c, "$default", wire.Problemf(wire.CodeBadRequest, "frame is not a JSON object with a string action"), "")
	}
	if env.Action == "" {
		return h.fail(ctx, c, "$default", wire.Problemf(wire.CodeBadRequest, "action is required"), "")
	}
	return h.fail(ctx, c, "$default", wire.Problemf(wire.CodeUnknownAction, "unknown action %q", truncate(env.Action, 64)), "")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
