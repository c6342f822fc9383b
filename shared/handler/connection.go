package handler

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Connect records the connection ($connect). A non-2xx answer refuses it.
func (h *Sessions) Connect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, ok := callerOf(req)
	if !ok {
		return events.APIGatewayProxyResponse{StatusCode: 403}, nil
	}
	now := h.now()
	if wait, ok := h.Limits.Allow(ctx, c.User, ratelimit.Connect, now); !ok {
		// API Gateway refuses the handshake with this status.
		h.log().InfoContext(ctx, "connect refused: rate limited", "userId", c.User, "deviceId", c.Device, "retryAfter", wait)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusTooManyRequests,
			Headers: map[string]string{"Retry-After": strconv.Itoa(int(wait.Seconds()) + 1)}}, nil
	}
	if err := h.Inbox.EnsureDevice(ctx, c.User, c.Device, h.MaxDevices, now); errors.Is(err, im.ErrDeviceLimit) {
		// A device id the user has not connected with before, beyond
		// the limit: reconnecting will not help until an operator
		// forgets one of the user's devices (DELETE
		// /v1/users/{userId}/devices/{deviceId}, signet devices forget).
		h.log().WarnContext(ctx, "connect refused: device limit", "userId", c.User, "deviceId", c.Device, "limit", h.MaxDevices)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusConflict}, nil
	} else if errors.Is(err, im.ErrContention) {
		// Other new devices of the user were admitted meanwhile, round
		// after round: a burst of first connects; this one may try again.
		h.log().WarnContext(ctx, "connect refused: devices admitted at the same time", "userId", c.User, "deviceId", c.Device)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusTooManyRequests, Headers: map[string]string{"Retry-After": "1"}}, nil
	} else if err != nil {
		h.log().ErrorContext(ctx, "connect failed: device not admitted", "err", err.Error(), "userId", c.User, "deviceId", c.Device)
		return events.APIGatewayProxyResponse{StatusCode: 500}, nil
	}
	connectedAt := now
	if ms := req.RequestContext.ConnectedAt; ms > 0 {
		connectedAt = time.UnixMilli(ms).UTC()
	}
	conn := im.Connection{User: c.User, ID: c.Connection, Device: c.Device, ConnectedAt: connectedAt, LastSeenAt: now}
	err := h.Connections.SaveConnection(ctx, conn)
	if err == nil {
		err = h.indexOnline(ctx, conn)
	}
	if err != nil {
		h.log().ErrorContext(ctx, "connect failed", "err", err.Error(), "userId", c.User, "connectionId", c.Connection)
		return events.APIGatewayProxyResponse{StatusCode: 500}, nil
	}
	h.log().InfoContext(ctx, "connected", "userId", c.User, "deviceId", c.Device, "connectionId", c.Connection)
	h.closeOldest(ctx, c)
	h.presence.presenceChanged(ctx, c.User)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// indexOnline puts a new connection in the online index of the user's
// read-diffused groups (Deps.Online), after its record is saved: a group
// the user is added to meanwhile either is listed here or finds the
// record when it indexes its new members' connections (GroupRoutes), so
// no connection is left out of a group's index. Refusing the connection
// when this fails keeps a device from being connected yet never pushed
// its groups' messages.
func (h *Sessions) indexOnline(ctx context.Context, conn im.Connection) error {
	if h.Online == nil {
		return nil
	}
	if err := h.Online.EnsureGroupProofKey(ctx); err != nil {
		// Pushes go without proofs: each ack then reads the group's log.
		h.log().WarnContext(ctx, "group proof key not made", "err", err.Error())
	}
	groups, err := h.Online.ReadGroupsOf(ctx, conn.User)
	if err != nil {
		return err
	}
	_, err = h.Online.IndexOnline(ctx, conn, groups)
	return err
}

// closeOldest keeps the user within MaxConnections: the oldest connections
// beyond it (never the new one) are told connection_limit and closed, and
// their records removed, so one user's pile of sockets cannot multiply the
// pushes, queue messages and trace writes of every message to them. The
// new connection is admitted, so a device that reconnects over a flaky
// network (its old socket not yet known dead) is never locked out. One
// Query per $connect; failures are logged, never refuse the connection.
func (h *Sessions) closeOldest(ctx context.Context, c caller) {
	limit := h.MaxConnections
	if limit <= 0 {
		limit = im.DefaultMaxConnections
	}
	conns, err := h.Connections.Connections(ctx, c.User)
	if err != nil {
		h.log().WarnContext(ctx, "connection limit not checked", "err", err.Error(), "userId", c.User)
		return
	}
	for _, old := range im.Oldest(conns, limit, c.Connection) {
		h.closeConnection(ctx, old.ID, c.RequestID, wire.Problemf(wire.CodeConnectionLimit,
			"%s opened more than %d connections: this, the oldest, is closed", c.User, limit))
		if err := h.Connections.RemoveConnection(ctx, c.User, old.ID); err != nil {
			h.log().WarnContext(ctx, "removing an excess connection record failed", "err", err.Error(), "userId", c.User, "connectionId", old.ID)
		}
		h.log().InfoContext(ctx, "connection closed: over the per-user limit", "userId", c.User, "connectionId", old.ID, "deviceId", old.Device, "limit", limit)
	}
}

// Disconnect removes the connection record ($disconnect).
func (h *Sessions) Disconnect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
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
	h.presence.presenceChanged(ctx, c.User)
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// Ping refreshes the connection record and answers {"type":"pong"} with the
// inbox head and epoch. A record that was removed (say after a stale 410)
// is written again.
func (h *Sessions) Ping(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.fail(ctx, c, wire.ActionPing, err, "")
	}
	now := h.now()
	pull, err := h.Connections.TouchConnection(ctx, c.User, c.Connection, now)
	if errors.Is(err, im.ErrNotFound) {
		conn := im.Connection{User: c.User, ID: c.Connection, Device: c.Device, ConnectedAt: now, LastSeenAt: now}
		err = h.Connections.SaveConnection(ctx, conn)
		if err == nil {
			err = h.indexOnline(ctx, conn)
		}
		if err == nil {
			// The record had expired or been removed: peers may see the
			// user offline until this heartbeat, and its groups' pushes
			// went elsewhere.
			h.presence.presenceChanged(ctx, c.User)
			pull = true
		}
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionPing, err, "")
	}
	head, epoch, err := h.Inbox.EnsureHead(ctx, c.User, now)
	if err != nil {
		return h.fail(ctx, c, wire.ActionPing, err, "")
	}
	pong := wire.Pong{Type: wire.TypePong, Head: head, Epoch: epoch}
	if pull {
		// Redelivery of a group's message gave up on this connection, or
		// it had no record (its pushes went nowhere): name the groups its
		// device is behind in, as the notify did.
		pong.Groups = h.groupsBehind(ctx, im.Connection{User: c.User, ID: c.Connection, Device: c.Device})
	}
	return reply(pong)
}

// Default answers frames that name no route ($default): invalid JSON is a
// bad_request, a missing action too, anything else unknown_action.
func (h *Sessions) Default(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
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

// truncate shortens s to n bytes for a message, marking the cut.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// closeConnection tells a connection why it is closed (an error frame of
// problem) and closes it from the server side; the frame is accepted before
// the delete, so it is delivered first. Failures are logged.
func (h *core) closeConnection(ctx context.Context, id im.ConnectionID, requestID string, problem *wire.Problem) {
	if h.Pusher != nil {
		frame, _ := json.Marshal(wire.NewError(problem, requestID, ""))
		_ = h.push(ctx, id, frame)
	}
	if err := h.Disconnector.Disconnect(ctx, id); err != nil {
		h.log().WarnContext(ctx, "closing a connection failed", "err", err.Error(), "connectionId", id, "code", problem.Code)
	}
}
