package handler

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// deviceView is one device of a user as GET /v1/users/{userId}/devices
// shows it.
type deviceView struct {
	DeviceID     string     `json:"deviceId"`
	Acked        int64      `json:"acked"`
	AckedAt      *time.Time `json:"ackedAt,omitempty"`
	RegisteredAt *time.Time `json:"registeredAt,omitempty"`
	Connections  int        `json:"connections"`
}

// listDevices serves GET /v1/users/{userId}/devices (admin key): the
// user's devices — each with its ack cursor and open connections — and
// the device limit they count against.
func (h *AlertsAPI) listDevices(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	u, err := h.deviceOwner(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	devices, err := h.Inbox.Devices(ctx, u)
	if err != nil {
		return 0, nil, err
	}
	conns, err := h.Connections.Connections(ctx, u)
	if err != nil {
		return 0, nil, err
	}
	open := map[im.DeviceID]int{}
	for _, c := range conns {
		open[c.Device]++
	}
	views := make([]deviceView, 0, len(devices))
	for d, c := range devices {
		v := deviceView{DeviceID: string(d), Acked: c.Acked, RegisteredAt: timeOrNil(c.RegisteredAt), Connections: open[d]}
		if c.Acked > 0 {
			v.AckedAt = &c.AckedAt
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b deviceView) int { return strings.Compare(a.DeviceID, b.DeviceID) })
	return http.StatusOK, map[string]any{"userId": u, "maxDevices": h.MaxDevices, "devices": views}, nil
}

// forgetDevice serves DELETE /v1/users/{userId}/devices/{deviceId} (admin
// key): the device is gone, and its place under the device limit is freed.
// A device with a connection, or one that acked further than every other
// device of the user (its user's delivered receipts rest on it), is
// refused with 409: disconnect it, or let another device catch up, first.
func (h *AlertsAPI) forgetDevice(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	u, err := h.deviceOwner(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	d := im.DeviceID(req.PathParameters["deviceId"])
	if !d.Valid() {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "malformed device id %q", d)
	}
	conns, err := h.Connections.Connections(ctx, u)
	if err != nil {
		return 0, nil, err
	}
	for _, c := range conns {
		if c.Device == d {
			return 0, nil, wire.Problemf(wire.CodeConflict, "device %s of %s is connected (%s): it must disconnect before it is forgotten", d, u, c.ID)
		}
	}
	switch err := h.Inbox.ForgetDevice(ctx, u, d); {
	case errors.Is(err, im.ErrNotFound):
		return 0, nil, wire.Problemf(wire.CodeNotFound, "%s has no device %s", u, d)
	case errors.Is(err, im.ErrDeviceHoldsDelivered):
		return 0, nil, wire.Problemf(wire.CodeConflict, "%s: forgetting it would move the user's delivered receipts back; forget it once another device has caught up", err)
	case errors.Is(err, im.ErrContention):
		return 0, nil, wire.Problemf(wire.CodeConflict, "%s: it is in use; try again once it has disconnected", err)
	case err != nil:
		return 0, nil, err
	}
	h.log().InfoContext(ctx, "device forgotten", "userId", u, "deviceId", d)
	return http.StatusNoContent, nil, nil
}

// deviceOwner checks the admin key and the path's user id.
func (h *AlertsAPI) deviceOwner(ctx context.Context, req events.APIGatewayV2HTTPRequest) (im.UserID, error) {
	if err := h.requireAdmin(ctx, req); err != nil {
		return "", err
	}
	u := im.UserID(req.PathParameters["userId"])
	if !u.Person() {
		return "", wire.Problemf(wire.CodeBadRequest, "malformed user id %q", u)
	}
	return u, nil
}
