package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Offline push hand-off (issue 16): a device registers its APNs or FCM
// token ({"action":"register"}); when a message reaches a user none of
// whose devices is connected, or redelivery gives up on a device, or an
// urgent alert reaches a user some of whose devices are connected (then
// for the registered devices that are not), the function that found it
// enqueues a wake job on the presence queue (it
// reads and writes nothing else: a message path pays one SQS message). The
// hints function (Hints) sends each registered device a wake-up through SNS —
// ids only, at most one per device per WakeWindow, held while the user is
// in do-not-disturb unless the message is an urgent alert — and traces it
// (woken, wake_held, wake_failed). A wake-up is never counted as delivery:
// the device's ack after it syncs is.

// Waker registers device tokens with SNS and publishes wake-ups.
type Waker interface {
	Register(ctx context.Context, platform, token string) (string, error)
	Wake(ctx context.Context, endpoint string, n im.Wake) error
}

// WakeStore keeps devices' registrations, their last wake-up and the
// users' chosen display state.
type WakeStore interface {
	SetPushEndpoint(ctx context.Context, u im.UserID, p im.PushEndpoint, at time.Time) (stands im.PushEndpoint, applied bool, err error)
	SetEndpointARN(ctx context.Context, u im.UserID, d im.DeviceID, token, endpoint string) error
	PushEndpoints(ctx context.Context, u im.UserID) ([]im.PushEndpoint, error)
	RemovePushEndpoint(ctx context.Context, u im.UserID, d im.DeviceID, endpoint string) error
	ClaimWake(ctx context.Context, u im.UserID, d im.DeviceID, now time.Time, window time.Duration) (bool, error)
	ChosenStatus(ctx context.Context, u im.UserID) (im.Status, error)
}

// wake enqueues a wake job for entry e of u (only device only when set),
// best effort: the entry waits in the inbox either way.
func (h *delivery) wake(ctx context.Context, u im.UserID, e im.Entry, only im.DeviceID) {
	h.enqueueWake(ctx, im.FanoutJob{Kind: im.FanoutWake, User: u, Device: only, Alert: e.Message.ID, Conversation: e.Message.Conversation, UpTo: e.Seq, Urgent: urgentEntry(e)})
}

// wakeUnconnected enqueues a wake job for urgent entry e of u that wakes
// only u's registered devices without a connection, best effort.
func (h *delivery) wakeUnconnected(ctx context.Context, u im.UserID, e im.Entry) {
	h.enqueueWake(ctx, im.FanoutJob{Kind: im.FanoutWake, User: u, Alert: e.Message.ID, Conversation: e.Message.Conversation, UpTo: e.Seq, Urgent: true, Unconnected: true})
}

// enqueueWake puts wake job job on the presence queue (none without
// offline push), logging a failure.
func (h *delivery) enqueueWake(ctx context.Context, job im.FanoutJob) {
	if h.WakeQueue == nil {
		return
	}
	if err := h.WakeQueue.Enqueue(ctx, 0, job); err != nil {
		h.log().WarnContext(ctx, "wake job not queued", "err", err.Error(), "userId", job.User, "seq", job.UpTo)
	}
}

// RunHint runs one job of the presence queue: a presence push or a
// wake-up.
func (h *Hints) RunHint(ctx context.Context, id string, job im.FanoutJob) error {
	switch job.Kind {
	case im.FanoutPresence:
		return h.presence.pushPresence(ctx, job.User)
	case im.FanoutWake:
		return h.RunWake(ctx, id, job)
	}
	return fmt.Errorf("hint job %s: kind %q is not a presence push or a wake-up", id, job.Kind)
}

// RunWake runs one wake job: each of the user's registered devices (the
// job's one device, when it names one; only those without a connection,
// for an Unconnected job) not woken within the window is
// sent a wake-up, unless the user is in do-not-disturb and the entry is
// not urgent. A device whose SNS endpoint does not exist yet gets one
// first; one SNS says is disabled loses its registration.
func (h *Hints) RunWake(ctx context.Context, id string, job im.FanoutJob) error {
	if h.Waker == nil || h.Wakes == nil {
		return fmt.Errorf("wake job %s: no SNS configured", id)
	}
	u := job.User
	eps, err := h.Wakes.PushEndpoints(ctx, u)
	if err != nil {
		return err
	}
	var due []im.PushEndpoint
	for _, p := range eps {
		if job.Device == "" || p.Device == job.Device {
			due = append(due, p)
		}
	}
	if job.Unconnected && len(due) > 0 {
		conns, err := h.Connections.Connections(ctx, u)
		if err != nil {
			return err
		}
		due = slices.DeleteFunc(due, func(p im.PushEndpoint) bool {
			return slices.ContainsFunc(conns, func(c im.Connection) bool { return c.Device == p.Device })
		})
	}
	if len(due) == 0 {
		return nil
	}
	tr := h.trail("wake", id)
	defer tr.flush(ctx)
	n := im.Wake{Message: job.Alert, Conversation: job.Conversation, Seq: job.UpTo, Urgent: job.Urgent}
	if !n.Urgent {
		status, err := h.Wakes.ChosenStatus(ctx, u)
		if err != nil {
			return err
		}
		if status == im.StatusDND {
			tr.add(im.Event{Message: n.Message, Type: im.EventWakeHeld, User: u, Seq: n.Seq, Detail: "do-not-disturb: not urgent"})
			return nil
		}
	}
	for _, p := range due {
		claimed, err := h.Wakes.ClaimWake(ctx, u, p.Device, h.now(), h.wakeWindow())
		if err != nil {
			return err
		}
		if !claimed {
			continue // woken within the window: one wake-up covers the burst
		}
		tr.add(h.wakeOne(ctx, u, p, n))
	}
	return nil
}

// wakeOne sends device p of u wake-up n and returns its trace event.
func (h *Hints) wakeOne(ctx context.Context, u im.UserID, p im.PushEndpoint, n im.Wake) im.Event {
	ev := im.Event{Message: n.Message, Type: im.EventWakeFailed, User: u, Device: p.Device, Seq: n.Seq}
	if p.Endpoint == "" {
		arn, err := h.Waker.Register(ctx, p.Platform, p.Token)
		if err != nil {
			h.log().WarnContext(ctx, "wake-up failed: no SNS endpoint", "err", err.Error(), "userId", u, "deviceId", p.Device)
			ev.Detail = p.Platform + ": " + err.Error()
			return ev
		}
		if err := h.Wakes.SetEndpointARN(ctx, u, p.Device, p.Token, arn); err != nil {
			h.log().WarnContext(ctx, "SNS endpoint not recorded; made again next time", "err", err.Error(), "userId", u, "deviceId", p.Device)
		}
		p.Endpoint = arn
	}
	err := h.Waker.Wake(ctx, p.Endpoint, n)
	switch {
	case errors.Is(err, im.ErrEndpointDisabled):
		ev.Detail = p.Platform + ": endpoint disabled; registration removed"
		if rerr := h.Wakes.RemovePushEndpoint(ctx, u, p.Device, p.Endpoint); rerr != nil {
			h.log().WarnContext(ctx, "removing a disabled registration failed", "err", rerr.Error(), "userId", u, "deviceId", p.Device)
		}
	case err != nil:
		ev.Detail = p.Platform + ": " + err.Error()
		h.log().WarnContext(ctx, "wake-up failed", "err", err.Error(), "userId", u, "deviceId", p.Device)
	default:
		ev.Type, ev.Detail = im.EventWoken, p.Platform
		if n.Urgent {
			ev.Detail += ", urgent"
		}
		h.log().DebugContext(ctx, "woken", "userId", u, "deviceId", p.Device, "platform", p.Platform)
	}
	return ev
}

// wakeWindow is the configured window between two wake-ups of a device.
func (h *Hints) wakeWindow() time.Duration {
	if h.WakeWindow > 0 {
		return h.WakeWindow
	}
	return im.DefaultWakeWindow
}

// Register records the calling device's token for wake-ups
// ({"action":"register","platform":…,"token":…}; an empty token removes
// the registration), answered with {"type":"registered",…}: the device's
// registration as it stands (a frame API Gateway received before the one
// that wrote it changes nothing).
func (h *PresenceRoutes) Register(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, f, err := admit(ctx, h.core, req, wire.DecodeRegister, ratelimit.Presence)
	if err != nil {
		return h.fail(ctx, c, wire.ActionRegister, err, "")
	}
	if h.Wakes == nil || !slices.Contains(h.PushPlatforms, f.Platform) {
		return h.fail(ctx, c, wire.ActionRegister, wire.Problemf(wire.CodeBadRequest, "this deployment sends no %s wake-ups", f.Platform), "")
	}
	// The SNS endpoint is made by the wake function, at the first wake-up:
	// this route stores the token only.
	token := *f.Token
	stands, applied, err := h.Wakes.SetPushEndpoint(ctx, c.User, im.PushEndpoint{Device: c.Device, Platform: f.Platform, Token: token}, h.receivedAt(req))
	if err != nil {
		return h.fail(ctx, c, wire.ActionRegister, err, "")
	}
	if applied {
		h.log().InfoContext(ctx, "push registration", "userId", c.User, "deviceId", c.Device, "platform", f.Platform, "registered", token != "")
	} else {
		// A register frame received later wrote the registration that
		// stands (this one ran late, or was written again): answered with it.
		h.log().InfoContext(ctx, "register frame older than the registration stored: not applied", "userId", c.User, "deviceId", c.Device, "registered", stands.Token != "")
	}
	return reply(wire.Registered{Type: wire.TypeRegistered, Ref: c.Ref, DeviceID: string(c.Device), Platform: stands.Platform, Registered: stands.Token != ""})
}

// urgentEntry reports whether entry e is an urgent alert (its body says
// "priority":"urgent"): its re-pushes and wake-ups are urgent too.
func urgentEntry(e im.Entry) bool {
	if !e.Message.Conversation.AppConversation() {
		return false
	}
	var b struct {
		Priority string `json:"priority"`
	}
	return json.Unmarshal(e.Message.Body, &b) == nil && b.Priority == "urgent"
}
