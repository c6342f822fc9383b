package handler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Escalations is the storage side of alert escalation.
type Escalations interface {
	ClaimTick(ctx context.Context, id im.MessageID, t int, job string) (bool, error)
	AddEscalated(ctx context.Context, id im.MessageID, users []im.UserID) error
	EscalationTick(ctx context.Context, id im.MessageID) (int, error)
}

// escalate runs tick job.Tick of an alert's escalation (job id: its queue
// message's id), driven by delayed fan-out jobs, one per tick — no polling:
// if anyone answered, the escalation ends (traced once); otherwise the
// tick is claimed (a duplicate delivery of the job, or a stale one, finds
// it claimed and does nothing), its users are notified — a new step's
// users get the alert in their inbox and pushed, a re-notification pushes
// it again to everyone notified so far — and the next tick is enqueued,
// Every later, until the last.
//
// The end's status callback job (expired, or escalated users) is enqueued
// after the trace's flush; when that fails the job returns the error, and
// its retry — which finds the tick or the end claimed — enqueues it again.
// A step that escalates to users also enqueues a delayed callback job
// before it records them (callbackDelay), so that a function stopping
// between the write and the deferred job loses no escalated event.
func (h *AlertsAPI) escalate(ctx context.Context, jobID string, job im.FanoutJob) (err error) {
	if h.AlertStore == nil || h.Escalations == nil {
		return fmt.Errorf("escalation of %s: alerts are not configured", job.Alert)
	}
	a, err := h.AlertStore.Alert(ctx, job.Alert)
	if err != nil {
		return err
	}
	e := a.Escalation
	if e == nil || job.Tick > e.LastTick() {
		return nil
	}
	id := a.Message.ID
	changed := false // someone was escalated to, or it ended: a status callback job
	defer func() {
		if changed {
			err = errors.Join(err, callbacksLater(ctx, h.core, h.FanoutQueue, "", id))
		}
	}() // deferred first, so it runs after the trace's flush
	tr := h.trail("escalate", jobID)
	defer tr.flush(ctx)
	answers, err := h.AlertStore.Answers(ctx, id)
	if err != nil {
		return err
	}
	if len(answers) > 0 {
		ended, err := h.Escalations.ClaimTick(ctx, id, im.EscalationEnded, jobID)
		changed = err == nil // ended now, or before (a retry: its job may be lost)
		if ended {
			tr.add(im.Event{Message: id, Type: im.EventEscalationEnded, User: answers[0].User, Detail: fmt.Sprintf("answered (%s by %s) before tick %d", answers[0].Option, answers[0].User, job.Tick)})
		}
		return err
	}
	claimed, err := h.Escalations.ClaimTick(ctx, id, job.Tick, jobID)
	if err != nil || !claimed {
		if err == nil {
			h.log().DebugContext(ctx, "escalation tick already run or ended", "messageId", id, "tick", job.Tick)
			// A retry of a tick whose callback job failed to enqueue, or a
			// duplicate: one job more, which records nothing twice.
			changed = job.Tick == e.LastTick()
		}
		return err
	}
	cs := &checks{}
	defer h.scheduleChecks(ctx, tr, cs) // before the flush: defers run last first
	stage, round := e.At(job.Tick)
	if round == 0 {
		before := a.Notified(stage - 1)
		var added []im.UserID
		for _, u := range e.Steps[stage-1] {
			if !slices.Contains(before, u) {
				added = append(added, u)
			}
		}
		if len(added) > 0 {
			// A callback job callbackDelay later, enqueued before the
			// step is recorded: a function that stops after the write
			// (before its deferred job) still has the step's escalated
			// events posted, not only once the escalation ends or the
			// next step's job brings them up to date. Failing, nothing is
			// written and the job's retry runs the tick again.
			if err := callbacksAfter(ctx, h.FanoutQueue, callbackDelay, "", []im.MessageID{id}); err != nil {
				return err
			}
			if err := h.Escalations.AddEscalated(ctx, id, added); err != nil {
				return err
			}
			changed = true
		}
		for _, u := range added {
			tr.add(im.Event{Message: id, Type: im.EventEscalated, User: u, Detail: fmt.Sprintf("tick %d: step %d", job.Tick, stage)})
			if err := h.inboxAlert(ctx, tr, cs, u, a); err != nil {
				return err
			}
		}
		h.log().InfoContext(ctx, "alert escalated", "messageId", id, "tick", job.Tick, "step", stage, "users", strings.Join(userStrings(added), ","))
	} else {
		for _, u := range a.Notified(stage) {
			seq, err := h.AlertStore.InboxSeq(ctx, u, id)
			if err != nil {
				h.log().WarnContext(ctx, "re-notify skipped: not in the inbox", "messageId", id, "userId", u, "err", err.Error())
				continue
			}
			tr.add(im.Event{Message: id, Type: im.EventEscalated, User: u, Seq: seq, Detail: fmt.Sprintf("tick %d: re-notify %d of %d", job.Tick, round, e.Renotify)})
			h.deliverAlert(ctx, tr, cs, u, a, seq, job.Tick)
		}
	}
	if job.Tick < e.LastTick() {
		next := job
		next.Tick, next.NotBefore = next.Tick+1, time.Time{}
		return enqueueAt(ctx, h.FanoutQueue, h.now(), e.Every, next)
	}
	ended, err := h.Escalations.ClaimTick(ctx, id, im.EscalationEnded, jobID)
	if err != nil {
		return err
	}
	changed = true // ended now, or before (a retry: its job may be lost)
	if !ended {
		return nil
	}
	tr.add(im.Event{Message: id, Type: im.EventEscalationEnded, Detail: fmt.Sprintf("nobody answered by the last step (tick %d)", job.Tick)})
	return nil
}

func userStrings(us []im.UserID) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = string(u)
	}
	return out
}

// repeat runs re-push job.Tick of an urgent alert (job id: its queue
// message's id): claimed like an escalation tick, so a duplicate delivery
// pushes nobody twice; each recipient who has neither read the alert nor
// answered it is pushed it again ("urgent", "renotify":N; a device with no
// connection gets a wake-up), and the next re-push is enqueued while
// anyone is left and ticks remain. A first answer that wins ends it for
// everyone.
func (h *AlertsAPI) repeat(ctx context.Context, jobID string, job im.FanoutJob) error {
	if h.AlertStore == nil || h.Escalations == nil {
		return fmt.Errorf("re-push of %s: alerts are not configured", job.Alert)
	}
	a, err := h.AlertStore.Alert(ctx, job.Alert)
	if err != nil {
		return err
	}
	r := a.Repeat
	if r == nil || job.Tick > r.Times {
		return nil
	}
	id := a.Message.ID
	if claimed, err := h.Escalations.ClaimTick(ctx, id, job.Tick, jobID); err != nil || !claimed {
		return err
	}
	answers, err := h.AlertStore.Answers(ctx, id)
	if err != nil {
		return err
	}
	if a.Ack != nil && a.Ack.FirstWins && len(answers) > 0 {
		return nil
	}
	answered := map[im.UserID]bool{}
	for _, x := range answers {
		answered[x.User] = true
	}
	tr := h.trail("repeat", jobID)
	defer tr.flush(ctx)
	cs := &checks{}
	defer h.scheduleChecks(ctx, tr, cs) // before the flush: defers run last first
	due := 0
	for _, u := range a.Recipients {
		if answered[u] {
			continue
		}
		seq, err := h.AlertStore.InboxSeq(ctx, u, id)
		if err != nil {
			continue // not in the inbox (yet): a group alert's fan-out
		}
		if h.Reads != nil {
			mark, err := h.Reads.ReadWatermark(ctx, u, a.Message.Conversation)
			if err != nil {
				return err
			}
			if mark.CoversAlert(a.Message.ConvSeq, seq, time.Time{}) {
				continue
			}
		}
		due++
		tr.add(im.Event{Message: id, Type: im.EventEscalated, User: u, Seq: seq, Detail: fmt.Sprintf("urgent: re-push %d of %d (not read or answered)", job.Tick, r.Times)})
		h.deliverAlert(ctx, tr, cs, u, a, seq, job.Tick)
	}
	if due > 0 && job.Tick < r.Times {
		next := job
		next.Tick, next.NotBefore = next.Tick+1, time.Time{}
		return enqueueAt(ctx, h.FanoutQueue, h.now(), r.Every, next)
	}
	return nil
}
