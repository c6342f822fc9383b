package handler

import (
	"slices"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// An escalation's callbacks do not depend on its tick's trace being
// written: once the alert item says it ended, the users a step added are
// escalated and, with nobody's answer, it expired (before, a failed trace
// write lost both for good). While it runs, a user without the step's
// trace event waits for it (the tick writes it at its end).
func TestEscalationCallbacksComeFromTheAlertItemWhenItsTraceIsMissing(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	a := im.Alert{Message: im.Message{ID: "m1"}, App: "noc", Escalated: []im.UserID{"ben"}}
	ids := func(st alertStatus) []string {
		var out []string
		for _, e := range changes(a, st) {
			out = append(out, e.ID)
		}
		slices.Sort(out)
		return out
	}
	running := alertStatus{Escalation: &escalationStatus{State: "running"}, at: at}
	if got := ids(running); len(got) != 0 {
		t.Fatalf("running, no trace: %v, want nothing yet", got)
	}
	ended := alertStatus{Escalation: &escalationStatus{State: "ended"}, at: at}
	if got, want := ids(ended), []string{"m1:escalated:ben", "m1:expired"}; !slices.Equal(got, want) {
		t.Fatalf("ended, no trace: %v, want %v", got, want)
	}
	answered := ended
	answered.answers = map[im.UserID]im.Answer{"ann": {User: "ann", Option: "ack", At: at}}
	answered.deliveries = []im.Delivery{{User: "ann", State: "stored"}}
	if got, want := ids(answered), []string{"m1:answered:ann", "m1:escalated:ben"}; !slices.Equal(got, want) {
		t.Fatalf("ended by an answer, no trace: %v, want %v", got, want)
	}
	// With the trace: its times and details.
	traced := ended
	traced.events = []im.Event{{Type: im.EventEscalated, User: "ben", At: at.Add(-time.Minute), Detail: "tick 1: step 1"},
		{Type: im.EventEscalationEnded, At: at.Add(-time.Second), Detail: "nobody answered by the last step (tick 1)"}}
	for _, e := range changes(a, traced) {
		if e.At.Equal(at) || e.Detail == "escalation step" {
			t.Fatalf("traced %s: %+v, want the trace's time and detail", e.ID, e)
		}
	}
}
