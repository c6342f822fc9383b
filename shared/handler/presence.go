package handler

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// PresenceStore keeps display states and the debounce state of pushes.
type PresenceStore interface {
	SetStatus(ctx context.Context, u im.UserID, status im.Status, at time.Time) (old im.Status, applied bool, err error)
	Presences(ctx context.Context, users []im.UserID, now time.Time, stale time.Duration) ([]im.Presence, error)
	SchedulePresence(ctx context.Context, u im.UserID, now time.Time, stuckAfter time.Duration) (bool, error)
	ClearPresencePending(ctx context.Context, u im.UserID) error
	MarkPresencePushed(ctx context.Context, u im.UserID, visible im.Status, now time.Time) (bool, error)
	DirectPeers(ctx context.Context, u im.UserID) ([]im.UserID, error)
}

// Presence serves {"action":"presence","status":…} (choose a display state;
// answered with what others now see of the caller; a frame API Gateway
// received before the one that chose the state stored changes nothing) and
// {"action":"presence.query","users":[…]} (what others may see of those
// users: invisible users and users without a live connection show offline).
func (h *PresenceRoutes) Presence(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	if req.RequestContext.RouteKey == wire.ActionRegister {
		return h.Register(ctx, req) // the same function serves the route
	}
	c, err := h.frameCaller(ctx, req)
	route := req.RequestContext.RouteKey
	if route == "" {
		route = wire.ActionPresence
	}
	if err != nil {
		return h.fail(ctx, c, route, err, "")
	}
	action := ratelimit.Presence
	if route == wire.ActionPresenceQuery {
		action = ratelimit.Query
	}
	if err := h.limit(ctx, c, action); err != nil {
		return h.fail(ctx, c, route, err, "")
	}
	now := h.now()
	var users []im.UserID
	if route == wire.ActionPresenceQuery {
		f, err := wire.DecodePresenceQuery(req.Body)
		c.useRef(f.Ref)
		if err != nil {
			return h.fail(ctx, c, route, err, "")
		}
		users = f.UserIDs()
	} else {
		f, err := wire.DecodePresence(req.Body)
		c.useRef(f.Ref)
		if err != nil {
			return h.fail(ctx, c, route, err, "")
		}
		status := im.Status(f.Status)
		old, applied, err := h.Presences.SetStatus(ctx, c.User, status, h.receivedAt(req))
		if err != nil {
			return h.fail(ctx, c, route, err, "")
		}
		if !applied {
			// A frame received later chose the state that stands: this one
			// (run late, or written again) is answered with it.
			h.log().InfoContext(ctx, "presence frame older than the state stored: not applied", "userId", c.User, "status", status)
		} else if old != status {
			h.log().InfoContext(ctx, "presence set", "userId", c.User, "status", status)
			h.presenceChanged(ctx, c.User)
		}
		users = []im.UserID{c.User}
	}
	ps, err := h.Presences.Presences(ctx, users, now, h.presenceStale())
	if err != nil {
		return h.fail(ctx, c, route, err, "")
	}
	return events.APIGatewayProxyResponse{StatusCode: 200, Body: string(presenceFrame(c.Ref, ps))}, nil
}

// presenceStale is how long a connection counts as live after its last
// connect or ping (PresenceStale or im.DefaultPresenceStale).
func (h *PresenceRoutes) presenceStale() time.Duration {
	if h.PresenceStale > 0 {
		return h.PresenceStale
	}
	return im.DefaultPresenceStale
}

// presenceDebounce is how long presence changes wait before they are
// pushed (PresenceDebounce or im.DefaultPresenceDebounce).
func (h *PresenceRoutes) presenceDebounce() time.Duration {
	if h.PresenceDebounce > 0 {
		return h.PresenceDebounce
	}
	return im.DefaultPresenceDebounce
}

// presenceChanged schedules one debounced push of u's presence to their 1:1
// peers, unless one is already pending: changes within the debounce window
// collapse into the one push, which sends the state at that time. Best
// effort: presence is a hint and a failure here must not fail the route.
func (h *PresenceRoutes) presenceChanged(ctx context.Context, u im.UserID) {
	if h.Presences == nil || h.PresenceQueue == nil {
		return
	}
	now := h.now()
	claimed, err := h.Presences.SchedulePresence(ctx, u, now, 10*h.presenceDebounce()+time.Minute)
	if err != nil || !claimed {
		if err != nil {
			h.log().WarnContext(ctx, "presence push not scheduled", "err", err.Error(), "userId", u)
		} else {
			h.log().DebugContext(ctx, "presence push already pending", "userId", u)
		}
		return
	}
	if err := h.PresenceQueue.Enqueue(ctx, h.presenceDebounce(), im.FanoutJob{Kind: im.FanoutPresence, User: u}); err != nil {
		h.log().WarnContext(ctx, "presence push not scheduled", "err", err.Error(), "userId", u)
		_ = h.Presences.ClearPresencePending(ctx, u)
	}
}

// pushPresence runs a debounced presence job: it pushes u's visible state to
// the connections of u's 1:1 peers, if it differs from the last one pushed.
func (h *PresenceRoutes) pushPresence(ctx context.Context, u im.UserID) error {
	if err := h.Presences.ClearPresencePending(ctx, u); err != nil {
		return err
	}
	now := h.now()
	ps, err := h.Presences.Presences(ctx, []im.UserID{u}, now, h.presenceStale())
	if err != nil {
		return err
	}
	news, err := h.Presences.MarkPresencePushed(ctx, u, ps[0].Visible(), now)
	if err != nil || !news || h.Pusher == nil {
		return err
	}
	peers, err := h.Presences.DirectPeers(ctx, u)
	if err != nil {
		return err
	}
	frame := presenceFrame("", ps)
	for _, p := range peers {
		h.pushAll(ctx, "presence", p, "", frame)
	}
	h.log().InfoContext(ctx, "presence pushed", "userId", u, "status", ps[0].Visible(), "peers", len(peers))
	return nil
}

// presenceFrame renders a presence answer or push.
func presenceFrame(ref string, ps []im.Presence) []byte {
	out := wire.PresenceAnswer{Type: wire.TypePresence, Ref: ref, Users: make([]wire.UserPresence, len(ps))}
	for i, p := range ps {
		out.Users[i] = wire.UserPresence{UserID: string(p.User), Status: string(p.Visible())}
	}
	b, _ := json.Marshal(out)
	return b
}
