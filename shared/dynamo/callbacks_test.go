package dynamo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Webhooks live on the app item; callback events are recorded once per id,
// tried on condition, listed by state and page, and replayed when dead.
func TestWebhooksAndCallbackEvents(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := st.SetWebhook(ctx, "nope", im.Webhook{URL: "https://x.example", Secret: "s", SetAt: now}); !errors.Is(err, im.ErrNotFound) {
		t.Fatalf("webhook of no app: %v", err)
	}
	if err := st.CreateApp(ctx, im.App{ID: "ops", KeyHash: "h", AllowUsers: []string{"*"}, RatePerMinute: 10, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWebhook(ctx, "ops", im.Webhook{URL: "https://x.example/h", Secret: "whsec_1", SetAt: now}); err != nil {
		t.Fatal(err)
	}
	if a, err := st.App(ctx, "ops"); err != nil || a.Webhook == nil || a.Webhook.URL != "https://x.example/h" || a.Webhook.Secret != "whsec_1" || !a.Webhook.SetAt.Equal(now) {
		t.Fatalf("app = %+v %v", a.Webhook, err)
	}
	if err := st.RemoveWebhook(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if a, err := st.App(ctx, "ops"); err != nil || a.Webhook != nil || a.KeyHash != "h" {
		t.Fatalf("after removal: %+v %v", a, err)
	}

	ev := func(msg im.MessageID, typ im.CallbackType, u im.UserID) im.CallbackEvent {
		return im.CallbackEvent{ID: im.CallbackEventID(msg, typ, u), App: "ops", Type: typ, Message: msg, User: u, At: now,
			State: im.CallbackPending, NextAt: now, CreatedAt: now}
	}
	for _, e := range []im.CallbackEvent{ev("m1", im.CallbackDelivered, "ann"), ev("m1", im.CallbackRead, "ann"), ev("m2", im.CallbackExpired, "")} {
		if added, err := st.RecordCallbackEvent(ctx, e); err != nil || !added {
			t.Fatalf("record %s: %v %v", e.ID, added, err)
		}
	}
	again := ev("m1", im.CallbackRead, "ann")
	again.At = now.Add(time.Hour)
	if added, err := st.RecordCallbackEvent(ctx, again); err != nil || added {
		t.Fatalf("the same change again was recorded: %v %v", added, err)
	}
	evs, err := st.AlertCallbackEvents(ctx, "ops", "m1")
	if err != nil || len(evs) != 2 || evs[0].ID != "m1:delivered:ann" || evs[1].ID != "m1:read:ann" || !evs[1].At.Equal(now) {
		t.Fatalf("m1's events = %+v %v", evs, err)
	}
	tried := evs[0]
	tried.Attempts, tried.NextAt, tried.LastError = 1, now.Add(time.Minute), "answered 503"
	if ok, err := st.UpdateCallbackEvent(ctx, tried, 0); err != nil || !ok {
		t.Fatalf("first try: %v %v", ok, err)
	}
	if ok, err := st.UpdateCallbackEvent(ctx, tried, 0); err != nil || ok {
		t.Fatalf("a second run's try of the same attempt: %v %v (want refused)", ok, err)
	}
	dead := tried
	dead.Attempts, dead.State = 2, im.CallbackDead
	if ok, err := st.UpdateCallbackEvent(ctx, dead, 1); err != nil || !ok {
		t.Fatalf("dead: %v %v", ok, err)
	}
	done := evs[1]
	done.Attempts, done.State, done.DeliveredAt = 1, im.CallbackDone, now
	if ok, err := st.UpdateCallbackEvent(ctx, done, 0); err != nil || !ok {
		t.Fatalf("delivered: %v %v", ok, err)
	}
	list := func(after string, limit int, states ...string) ([]string, string) {
		t.Helper()
		evs, next, err := st.CallbackEvents(ctx, "ops", after, limit, states...)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID+"="+e.State)
		}
		return ids, next
	}
	if ids, next := list("", 10, im.CallbackPending, im.CallbackDead); len(ids) != 2 || ids[0] != "m1:delivered:ann=dead" || ids[1] != "m2:expired=pending" || next != "" {
		t.Fatalf("undelivered = %v next %q", ids, next)
	}
	if ids, next := list("", 1); len(ids) != 1 || next != "m1:delivered:ann" {
		t.Fatalf("page 1 = %v next %q", ids, next)
	}
	if ids, next := list("m1:delivered:ann", 2); len(ids) != 2 || ids[0] != "m1:read:ann=delivered" || next != "" {
		t.Fatalf("page 2 = %v next %q", ids, next)
	}
	if _, ok, err := st.RetryCallbackEvent(ctx, "ops", "m1:read:ann", now); err != nil || ok {
		t.Fatalf("a delivered event replayed: %v %v", ok, err)
	}
	if e, ok, err := st.RetryCallbackEvent(ctx, "ops", "m1:delivered:ann", now); err != nil || !ok || e.State != im.CallbackPending || e.Attempts != 0 || e.Message != "m1" {
		t.Fatalf("replay: %+v %v %v", e, ok, err)
	}
}
