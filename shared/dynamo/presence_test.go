package dynamo_test

import (
	"context"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestPresencePushIsClaimedOnceUntilCleared(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	steps := []struct {
		name string
		do   func() (bool, error)
		want bool
	}{
		{"first claim", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now, time.Minute) }, true},
		{"second claim while pending", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now, time.Minute) }, false},
		{"claim after clear", func() (bool, error) {
			if err := st.ClearPresencePending(ctx, "alice"); err != nil {
				return false, err
			}
			return st.SchedulePresence(ctx, "alice", now, time.Minute)
		}, true},
		{"stuck claim is taken over", func() (bool, error) { return st.SchedulePresence(ctx, "alice", now.Add(2*time.Minute), time.Minute) }, true},
		{"first push is news", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOnline, now) }, true},
		{"same state is not", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOnline, now) }, false},
		{"another state is", func() (bool, error) { return st.MarkPresencePushed(ctx, "alice", im.StatusOffline, now) }, true},
	}
	for _, s := range steps {
		got, err := s.do()
		if err != nil || got != s.want {
			t.Fatalf("%s: %v, %v; want %v", s.name, got, err, s.want)
		}
	}
}

// A state frame whose invocation runs after a later frame's (a cold start,
// or a copy an SDK wrote again) changes nothing: the display state and a
// device's registration for wake-ups are the ones API Gateway received
// last, and so is a forgotten device's emptied registration.
func TestAStateFromAFrameReceivedEarlierChangesNothing(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	if _, applied, err := st.SetStatus(ctx, "alice", im.StatusDND, at(2)); err != nil || !applied {
		t.Fatalf("dnd received at 2: applied %v, %v", applied, err)
	}
	if _, applied, err := st.SetStatus(ctx, "alice", im.StatusOnline, at(1)); err != nil || applied {
		t.Fatalf("online received at 1, run after dnd received at 2: applied %v, %v; want not", applied, err)
	}
	if old, applied, err := st.SetStatus(ctx, "alice", im.StatusAway, at(3)); err != nil || !applied || old != im.StatusDND {
		t.Fatalf("away received at 3: old %q, applied %v, %v; want dnd replaced", old, applied, err)
	}

	tokens := func() []string {
		eps, err := st.PushEndpoints(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range eps {
			out = append(out, string(p.Device)+"="+p.Token)
		}
		return out
	}
	register := func(token string, s int, want bool) {
		t.Helper()
		stands, applied, err := st.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "phone", Platform: im.PlatformFCM, Token: token}, at(s))
		if err != nil || applied != want {
			t.Fatalf("register %q received at %d: applied %v, %v; want %v", token, s, applied, err, want)
		}
		if applied && stands.Token != token {
			t.Fatalf("register %q applied answers %q standing", token, stands.Token)
		}
	}
	register("new", 2, true)
	register("old", 1, false)
	if stands, _, err := st.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "phone", Platform: im.PlatformAPNS, Token: "older"}, at(0)); err != nil || stands.Token != "new" || stands.Platform != im.PlatformFCM {
		t.Fatalf("a refused register answers %+v, %v standing; want fcm new", stands, err)
	}
	if got := tokens(); len(got) != 1 || got[0] != "phone=new" {
		t.Fatalf("registrations %v, want phone=new", got)
	}
	register("", 3, true) // signed out
	register("new", 2, false)
	if got := tokens(); len(got) != 0 {
		t.Fatalf("registrations after sign-out and a late copy %v, want none", got)
	}
	register("again", 4, true) // signed in again
	if got := tokens(); len(got) != 1 || got[0] != "phone=again" {
		t.Fatalf("registrations %v, want phone=again", got)
	}

	// A device forgotten before it ever registered: a register frame of it
	// received before it was forgotten, run late, changes nothing.
	if err := st.EnsureDevice(ctx, "bob", "watch", 10, at(0)); err != nil {
		t.Fatal(err)
	}
	if err := st.ForgetDevice(ctx, "bob", "watch"); err != nil {
		t.Fatal(err)
	}
	if _, applied, err := st.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "watch", Platform: im.PlatformFCM, Token: "late"}, at(5)); err != nil || applied {
		t.Fatalf("a forgotten device's register frame received before the forget: applied %v, %v; want not", applied, err)
	}
	if got := tokens(); len(got) != 1 || got[0] != "phone=again" {
		t.Fatalf("registrations %v after a forgotten device's late register frame, want phone=again", got)
	}
	// Registered after the forget (the device came back): it stands.
	if _, applied, err := st.SetPushEndpoint(ctx, "bob", im.PushEndpoint{Device: "watch", Platform: im.PlatformFCM, Token: "back"}, time.Now().Add(time.Minute)); err != nil || !applied {
		t.Fatalf("a register frame received after the forget: applied %v, %v; want applied", applied, err)
	}
}
