package handler

import (
	"context"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// An entry is urgent only as an alert whose body says so: a chat message
// saying "priority":"urgent" is not, and neither is a normal alert.
func TestUrgentEntries(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		conv im.ConversationID
		body string
		want bool
	}{
		{"a:pager", `{"title":"DB down","priority":"urgent"}`, true},
		{"a:pager", `{"title":"report","priority":"normal"}`, false},
		{"a:pager", `not json`, false},
		{"d:alice:bob", `{"priority":"urgent"}`, false},
	} {
		e := im.Entry{Seq: 1, Message: im.Message{Conversation: c.conv, Body: []byte(c.body)}}
		if got := urgentEntry(e); got != c.want {
			t.Errorf("%s %s: urgent %v", c.conv, c.body, got)
		}
	}
}

// fakeQueue records what is enqueued.
type fakeQueue struct {
	delays []time.Duration
	jobs   []im.FanoutJob
}

func (q *fakeQueue) Enqueue(_ context.Context, delay time.Duration, jobs ...im.FanoutJob) error {
	for _, j := range jobs {
		q.delays, q.jobs = append(q.delays, delay), append(q.jobs, j)
	}
	return nil
}

// A tick due past one SQS delay hops: enqueued 15 minutes out with its due
// time, sent on by the fan-out worker until then, run when due.
func TestJobsDuePastOneSQSDelayHop(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	q := &fakeQueue{}
	job := im.FanoutJob{Kind: im.FanoutEscalate, Alert: "m1", Tick: 2}
	if err := enqueueAt(context.Background(), q, now, 40*time.Minute, job); err != nil {
		t.Fatal(err)
	}
	if q.delays[0] != 15*time.Minute || !q.jobs[0].NotBefore.Equal(now.Add(40*time.Minute)) {
		t.Fatalf("first hop: %s, due %s", q.delays[0], q.jobs[0].NotBefore)
	}
	clock := now.Add(15 * time.Minute)
	w := &FanoutWorker{delivery: &delivery{core: &core{Now: func() time.Time { return clock }}}, FanoutQueue: q}
	if err := w.RunFanout(context.Background(), "q1", q.jobs[0]); err != nil {
		t.Fatal(err)
	}
	if q.delays[1] != 15*time.Minute || !q.jobs[1].NotBefore.Equal(now.Add(40*time.Minute)) || q.jobs[1].Tick != 2 {
		t.Fatalf("second hop: %s %+v", q.delays[1], q.jobs[1])
	}
	clock = now.Add(30 * time.Minute)
	if err := w.RunFanout(context.Background(), "q2", q.jobs[1]); err != nil {
		t.Fatal(err)
	}
	if q.delays[2] != 10*time.Minute {
		t.Fatalf("last hop: %s", q.delays[2])
	}
	if err := enqueueAt(context.Background(), q, now, 5*time.Minute, job); err != nil || q.delays[3] != 5*time.Minute || !q.jobs[3].NotBefore.IsZero() {
		t.Fatalf("a job within one delay goes as it is: %s %+v %v", q.delays[3], q.jobs[3], err)
	}
}
