package devstack_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
)

// A browser's WebSocket sees only that a handshake failed, never its HTTP
// status: the TypeScript SDK could not tell an expired token from a device
// beyond the limit, a rate limit or the network. GET /v1/handshake answers
// what $connect would, with the same token and device id, and changes
// nothing: no device is admitted and no connect counted. Each answer is
// held against a real handshake of the same token.
func TestTheHandshakeCheckSaysWhatTheHandshakeWouldMeetAndChangesNothing(t *testing.T) {
	t.Parallel()
	// Windows of an hour, the functions' clock a second into one (see
	// TestPerUserRateLimitsPerAction).
	clk := &clock{}
	now := time.Now()
	clk.Advance(now.Truncate(time.Hour).Add(time.Second).Sub(now))
	st := startStack(t, devstack.Options{RateLimits: "connect=4/1h", Env: map[string]string{config.EnvMaxDevices: "2"},
		Configure: func(_ string, h *handler.Deps) { h.Now = clk.Now }})
	ctx := context.Background()
	check := func(query string, headers map[string]string) httpResult {
		t.Helper()
		r := call(t, st, "GET", "/v1/handshake?"+query, "", headers, "")
		if r.header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("GET /v1/handshake?%s: Access-Control-Allow-Origin %q, want *", query, r.header.Get("Access-Control-Allow-Origin"))
		}
		return r
	}
	handshake := func(tok string) int {
		t.Helper()
		c, resp, err := websocket.Dial(ctx, st.URL+"?token="+url.QueryEscape(tok), nil)
		if err == nil {
			c.CloseNow()
			return http.StatusSwitchingProtocols
		}
		if resp == nil {
			t.Fatalf("handshake: %v", err)
		}
		return resp.StatusCode
	}
	errorOf := func(r httpResult) (code, msg string) {
		e, _ := r.body["error"].(map[string]any)
		code, _ = e["code"].(string)
		msg, _ = e["message"].(string)
		return code, msg
	}

	// Tokens: none, not one, expired, valid.
	if r := check("deviceId=web", nil); r.status != http.StatusUnauthorized || !strings.Contains(r.raw, "no token") {
		t.Errorf("no token: %d %s", r.status, r.raw)
	}
	if r := check("token=not.a.token", nil); r.status != http.StatusUnauthorized || !strings.Contains(r.raw, "invalid token") {
		t.Errorf("a malformed token: %d %s", r.status, r.raw)
	}
	expired := tokenAt(t, "bob", "phone", clk.Now().Add(-2*time.Hour))
	if r := check("token="+url.QueryEscape(expired), nil); r.status != http.StatusUnauthorized || !strings.Contains(r.raw, "expired") {
		t.Errorf("an expired token: %d %s", r.status, r.raw)
	}
	if s := handshake(expired); s == http.StatusSwitchingProtocols {
		t.Errorf("the expired token's handshake was admitted")
	}
	// A token without a device claim names its device in deviceId.
	bare, err := auth.Mint([]byte(devstack.DefaultSecret), "bob", "", clk.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r := check("token="+bare+"&deviceId="+url.QueryEscape("no spaces"), nil); r.status != http.StatusBadRequest || !strings.Contains(r.raw, "deviceId") {
		t.Errorf("a malformed deviceId: %d %s", r.status, r.raw)
	}
	phone := tokenAt(t, "bob", "phone", clk.Now())
	r := check("", map[string]string{"Authorization": "Bearer " + phone})
	if r.status != http.StatusOK || r.body["userId"] != "bob" || r.body["deviceId"] != "phone" || r.body["tokenExpiresAt"] != float64(clk.Now().Add(time.Hour).Unix()*1000) {
		t.Fatalf("a valid token in the header: %d %s", r.status, r.raw)
	}
	if r := check("token="+bare+"&deviceId=tablet", nil); r.status != http.StatusOK || r.body["deviceId"] != "tablet" {
		t.Fatalf("a valid token naming its device in deviceId: %d %s", r.status, r.raw)
	}
	// Nothing was admitted.
	if ds, err := st.Store.Devices(ctx, "bob"); err != nil || len(ds) != 0 {
		t.Fatalf("bob's devices after checks alone: %v, %v; want none", ds, err)
	}

	// The device limit (2): a third device id is refused, known ones not.
	dialAt(t, st, "bob", "phone", clk.Now())
	dialAt(t, st, "bob", "tablet", clk.Now())
	laptop := tokenAt(t, "bob", "laptop", clk.Now())
	r = check("token="+url.QueryEscape(laptop), nil)
	if code, msg := errorOf(r); r.status != http.StatusConflict || code != "conflict" || !strings.Contains(msg, "forget") {
		t.Errorf("a third device: %d %s; want 409 conflict saying an operator can forget one", r.status, r.raw)
	}
	if s := handshake(laptop); s != http.StatusConflict {
		t.Errorf("the third device's handshake: %d, want the 409 the check said", s)
	}
	if r := check("token="+url.QueryEscape(phone), nil); r.status != http.StatusOK {
		t.Errorf("a known device at the limit: %d %s", r.status, r.raw)
	}

	// The connect rate (4 an hour; bob's refused handshake counted too):
	// checks do not count. Carol connects three times, is checked as often
	// as anyone likes, connects a fourth time, and then the check says
	// what the fifth handshake meets.
	carol := tokenAt(t, "carol", "web", clk.Now())
	for i := range 3 {
		dialAt(t, st, "carol", "web", clk.Now())
		for range 4 {
			if r := check("token="+url.QueryEscape(carol), nil); r.status != http.StatusOK {
				t.Fatalf("carol after %d connects: %d %s", i+1, r.status, r.raw)
			}
		}
	}
	dialAt(t, st, "carol", "web", clk.Now())
	r = check("token="+url.QueryEscape(carol), nil)
	code, _ := errorOf(r)
	retry, _ := r.body["error"].(map[string]any)["retryAfterMs"].(float64)
	if r.status != http.StatusTooManyRequests || code != "rate_limited" || retry < float64((58*time.Minute).Milliseconds()) || retry > float64(time.Hour.Milliseconds()) {
		t.Errorf("carol after 4 connects: %d %s; want 429 rate_limited for the rest of the hour", r.status, r.raw)
	}
	if s := handshake(carol); s != http.StatusTooManyRequests {
		t.Errorf("carol's fifth handshake: %d, want the 429 the check said", s)
	}
	if ds, err := st.Store.Devices(ctx, "carol"); err != nil || len(ds) != 1 {
		t.Errorf("carol's devices: %v, %v; want the one she connected", ds, err)
	}

	// The checks themselves are limited per user (they write nothing, so
	// per container): a client asks once per failed handshake.
	erin := tokenAt(t, "erin", "web", clk.Now())
	for i := range handler.HandshakeChecks {
		if r := check("token="+url.QueryEscape(erin), nil); r.status != http.StatusOK {
			t.Fatalf("erin's check %d: %d %s", i+1, r.status, r.raw)
		}
	}
	if r := check("token="+url.QueryEscape(erin), nil); r.status != http.StatusTooManyRequests || !strings.Contains(r.raw, "handshake checks a minute") {
		t.Errorf("erin's check %d: %d %s; want 429", handler.HandshakeChecks+1, r.status, r.raw)
	}
	if s := handshake(erin); s != http.StatusSwitchingProtocols {
		t.Errorf("erin's handshake after her checks were limited: %d, want admitted", s)
	}
}
