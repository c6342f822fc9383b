package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
)

// A user's device ids were unbounded: every id a client made up got a
// cursor that receipts, alert statuses and traces read, and group cursors
// on the user's index items. A new device id beyond SIGNET_MAX_DEVICES is
// refused at the handshake (409) before anything is stored; the user's
// known devices keep connecting; an operator frees a place by forgetting
// a device that is gone — not while it is connected, not while the
// user's delivered receipts rest on its cursor — and what it acked stays
// in the trace; it is woken no more.
func TestANewDeviceBeyondTheLimitIsRefusedUntilOneIsForgotten(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Env: map[string]string{config.EnvMaxDevices: "3"}})
	ctx := context.Background()
	alice := dial(t, st, "alice", "laptop")
	phone, tablet := dial(t, st, "bob", "phone"), dial(t, st, "bob", "tablet")
	watch := dialNoCleanup(t, st, "bob", "watch")
	watch.t = t
	defer watch.conn.CloseNow()

	// Message 1 reaches all three; phone and watch ack it. Message 2 is
	// acked by tablet alone: its cursor is the furthest.
	alice.send("c1", "bob", "one")
	first := alice.next("sent", 5*time.Second)
	for _, c := range []*wsClient{phone, watch} {
		f := c.next("message", 5*time.Second)
		c.write(map[string]any{"action": "ack", "upTo": f.Seq})
	}
	tablet.next("message", 5*time.Second)
	alice.send("c2", "bob", "two")
	alice.next("sent", 5*time.Second)
	tablet.write(map[string]any{"action": "ack", "upTo": tablet.next("message", 5*time.Second).Seq})
	waitFor(t, "the acks on the cursors", func() bool {
		ds, err := st.Store.Devices(ctx, "bob")
		return err == nil && ds["phone"].Acked == 1 && ds["watch"].Acked == 1 && ds["tablet"].Acked == 2
	})

	// A fourth device id is refused before anything is stored; the Go
	// SDK's transport says why.
	_, resp, err := websocket.Dial(ctx, st.URL+"?token="+token(t, "bob", "laptop"), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("a 4th device: %v (status %v), want 409", err, resp)
	}
	_, err = client.WebSocket(ctx, st.URL+"?token="+token(t, "bob", "laptop"), nil)
	if !errors.As(err, new(*client.DeviceLimitError)) {
		t.Fatalf("the SDK's dial of a 4th device: %v, want a *client.DeviceLimitError", err)
	}
	if ds, err := st.Store.Devices(ctx, "bob"); err != nil || len(ds) != 3 {
		t.Fatalf("bob's devices after the refusal: %v, %v", ds, err)
	}
	cs, err := st.Store.Connections(ctx, "bob")
	if err != nil || slices.ContainsFunc(cs, func(c im.Connection) bool { return c.Device == "laptop" }) {
		t.Fatalf("bob's connections %+v, %v: the refused one was recorded", cs, err)
	}
	// A known device connects again as ever.
	dial(t, st, "bob", "phone").write(map[string]any{"action": "ping"})

	list := call(t, st, "GET", "/v1/users/bob/devices", devstack.DefaultAdminKey, nil, "")
	if list.status != http.StatusOK || list.body["maxDevices"] != float64(3) || !strings.Contains(list.raw, `"deviceId":"watch","acked":1`) ||
		!strings.Contains(list.raw, `"deviceId":"tablet","acked":2`) {
		t.Fatalf("GET devices: %d %s", list.status, list.raw)
	}
	// The tablet, gone, holds bob's delivered receipts (its cursor is the
	// furthest); the watch is still connected.
	tablet.conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the tablet's connection record gone", func() bool {
		cs, err := st.Store.Connections(ctx, "bob")
		return err == nil && !slices.ContainsFunc(cs, func(c im.Connection) bool { return c.Device == "tablet" })
	})
	for _, c := range []struct {
		key, path string
		status    int
		why       string
	}{
		{"sk_nobody_x", "/v1/users/bob/devices/watch", http.StatusUnauthorized, ""},
		{devstack.DefaultAdminKey, "/v1/users/bob/devices/watch", http.StatusConflict, "connected"},
		{devstack.DefaultAdminKey, "/v1/users/bob/devices/tablet", http.StatusConflict, "delivered receipts"},
		{devstack.DefaultAdminKey, "/v1/users/bob/devices/laptop", http.StatusNotFound, "no device"},
	} {
		r := call(t, st, "DELETE", c.path, c.key, nil, "")
		if r.status != c.status || !strings.Contains(r.raw, c.why) {
			t.Errorf("DELETE %s: %d %s; want %d (%s)", c.path, r.status, r.raw, c.status, c.why)
		}
	}
	if ds, err := st.Store.Devices(ctx, "bob"); err != nil || len(ds) != 3 {
		t.Fatalf("bob's devices after refused forgets: %v, %v", ds, err)
	}

	// Once the watch is gone it can be forgotten: its place goes to the
	// laptop, and it is a new device itself now.
	watch.conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the watch's connection record gone", func() bool {
		cs, err := st.Store.Connections(ctx, "bob")
		return err == nil && !slices.ContainsFunc(cs, func(c im.Connection) bool { return c.Device == "watch" })
	})
	registered := time.Now().Add(-time.Second)
	if _, _, err := st.Store.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "watch", Platform: im.PlatformFCM, Token: "watch-token"}, registered); err != nil {
		t.Fatal(err)
	}
	if r := call(t, st, "DELETE", "/v1/users/bob/devices/watch", devstack.DefaultAdminKey, nil, ""); r.status != http.StatusNoContent {
		t.Fatalf("forget the watch: %d %s", r.status, r.raw)
	}
	// It is woken no more, though a register frame of its received before
	// it was forgotten runs late.
	if _, applied, err := st.Store.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "watch", Platform: im.PlatformFCM, Token: "late-token"}, registered.Add(time.Second/2)); err != nil || applied {
		t.Fatalf("a register frame of the watch received before it was forgotten: applied %v, %v; want not", applied, err)
	}
	eps, err := st.Store.PushEndpoints(ctx, "bob")
	if err != nil || slices.ContainsFunc(eps, func(p im.PushEndpoint) bool { return p.Device == "watch" && p.Token != "" }) {
		t.Fatalf("the forgotten watch's wake-up registration remains: %+v, %v", eps, err)
	}
	dial(t, st, "bob", "laptop").write(map[string]any{"action": "ping"})
	if _, resp, err := websocket.Dial(ctx, st.URL+"?token="+token(t, "bob", "watch"), nil); err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("the forgotten watch, now a 4th device: %v (status %v), want 409", err, resp)
	}
	// What the watch acked is still in message 1's trace.
	r := call(t, st, "GET", "/v1/messages/"+first.MessageID+"/trace", devstack.DefaultAdminKey, nil, "")
	if r.status != http.StatusOK || !strings.Contains(r.raw, `"deviceId":"watch"`) {
		t.Fatalf("message 1's trace lost the forgotten watch's ack: %d %s", r.status, r.raw)
	}
}

// A new device whose admission keeps losing to other new devices of its
// user (the store gives up with im.ErrContention) is refused with 429, as
// a burst of connects is, not a 500: nothing is recorded, and it is
// admitted when it tries again.
func TestANewDeviceThatLostItsAdmissionRacesIsToldToRetry(t *testing.T) {
	t.Parallel()
	var lose atomic.Bool
	lose.Store(true)
	st := startStack(t, devstack.Options{Configure: func(fn string, h *handler.Deps) {
		if fn == "ConnectFunction" && h.Inbox != nil {
			h.Inbox = losingAdmission{Inbox: h.Inbox, lose: &lose}
		}
	}})
	ctx := context.Background()
	_, resp, err := websocket.Dial(ctx, st.URL+"?token="+token(t, "bob", "phone"), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a device whose admission lost its races: %v (response %v), want 429", err, resp)
	}
	if cs, err := st.Store.Connections(ctx, "bob"); err != nil || len(cs) != 0 {
		t.Fatalf("bob's connections after the refusal: %+v, %v", cs, err)
	}
	lose.Store(false)
	dial(t, st, "bob", "phone").write(map[string]any{"action": "ping"})
	if ds, err := st.Store.Devices(ctx, "bob"); err != nil || len(ds) != 1 {
		t.Fatalf("bob's devices once admitted: %v, %v", ds, err)
	}
}

// losingAdmission is an inbox whose EnsureDevice gives up as the store
// does after losing every round to other admissions, while lose is set.
type losingAdmission struct {
	handler.Inbox
	lose *atomic.Bool
}

func (l losingAdmission) EnsureDevice(ctx context.Context, u im.UserID, d im.DeviceID, limit int, now time.Time) error {
	if l.lose.Load() {
		return fmt.Errorf("device %s/%s: other devices admitted at the same time: %w", u, d, im.ErrContention)
	}
	return l.Inbox.EnsureDevice(ctx, u, d, limit, now)
}
