package handler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/webhook"
)

// Status callbacks (issue 16): an app with a webhook is told every state
// change of its alerts' recipients — delivered, read, answered, escalated
// — and an escalation that ran out unanswered (expired), at least once,
// signed, with a stable event id.
//
// Nothing on a message's path waits for a webhook. Where a state changes
// (an ack, a read, an answer, an escalation tick) the function enqueues a
// callback job for the alert on the fan-out queue; the job derives the
// alert's changes from its status — the same derivation as
// GET /v1/messages/{id}, so a job that runs twice, late or for a change
// another job already saw records nothing twice (one conditional put per
// stable event id) — and POSTs the events that are due. A failed POST is
// retried after CallbackBackoff; after the last try the event is dead and
// waits for the app (GET /v1/apps/{appId}/events, POST .../events/retry).

// Callbacks is the storage of webhooks and callback events.
type Callbacks interface {
	SetWebhook(ctx context.Context, appID string, w im.Webhook) error
	RemoveWebhook(ctx context.Context, appID string) error
	RecordCallbackEvent(ctx context.Context, e im.CallbackEvent) (bool, error)
	AlertCallbackEvents(ctx context.Context, app string, id im.MessageID) ([]im.CallbackEvent, error)
	CallbackEvents(ctx context.Context, app, after string, limit int, states ...string) ([]im.CallbackEvent, string, error)
	UpdateCallbackEvent(ctx context.Context, e im.CallbackEvent, prevAttempts int) (bool, error)
	RetryCallbackEvent(ctx context.Context, app, id string, now time.Time) (im.CallbackEvent, bool, error)
	ScheduleCallbackRun(ctx context.Context, id im.MessageID, at, now time.Time) (bool, error)
}

// maxJobDelay is the longest delay of a queued job (SQS's DelaySeconds).
const maxJobDelay = 15 * time.Minute

// CallbackSender sends status callbacks to apps' SQS queues.
type CallbackSender interface {
	SendCallback(ctx context.Context, url, body string, attrs map[string]string) error
}

// CallbackQueuePrefix is what the name of an app's callback queue starts
// with: the fan-out function may send to such queues only (its IAM
// policy), in any account whose queue policy lets it.
const CallbackQueuePrefix = "signet-callbacks-"

// callbackPostTimeout bounds one POST to a webhook; callbackReserve is
// the time an invocation must have left to start one.
const (
	callbackPostTimeout = 4 * time.Second
	callbackReserve     = callbackPostTimeout + time.Second
)

// callbacksLater enqueues a callback job for each alert in ids. A job is
// lost only when its change's function fails or stops between the change
// and this call: the caller that can be retried (a queue job, a request
// the client repeats) returns the error, so that its retry enqueues the
// job; otherwise the change is still recorded by the alert's next job,
// and the app can read every alert's status. q nil: no fan-out queue.
func callbacksLater(ctx context.Context, h *core, q FanoutQueue, u im.UserID, ids ...im.MessageID) error {
	err := callbacksAfter(ctx, q, 0, u, ids)
	if err != nil {
		h.log().WarnContext(ctx, "status callback job not queued", "err", err.Error(), "alerts", len(ids))
	}
	return err
}

// callbacksAfter enqueues a callback job for each alert in ids that runs
// delay from now (none for no ids; q nil: no fan-out queue), naming user
// u when an ack, read or answer of theirs enqueued it: of an alert to
// many, the job derives u's state only (runCallbacks; escalation steps
// and retries name nobody: every recipient's).
func callbacksAfter(ctx context.Context, q FanoutQueue, delay time.Duration, u im.UserID, ids []im.MessageID) error {
	if q == nil || len(ids) == 0 {
		return nil
	}
	jobs := make([]im.FanoutJob, len(ids))
	for i, id := range ids {
		jobs[i] = im.FanoutJob{Kind: im.FanoutCallback, Alert: id, User: u}
	}
	if err := q.Enqueue(ctx, delay, jobs...); err != nil {
		return fmt.Errorf("status callback jobs: %w", err)
	}
	return nil
}

// coveredCallbacksAfter is callbacksAfter for the alerts an ack or read of
// rest.User named, plus, when it covered inbox entries (rest.From,
// rest.UpTo] it did not read itself (a catch-up ack or read), job rest,
// which reads them a page at a time and enqueues their alerts' jobs
// (FanoutWorker.coveredAlerts; a read's names its app conversation and
// device).
func coveredCallbacksAfter(ctx context.Context, q FanoutQueue, delay time.Duration, ids []im.MessageID, rest im.FanoutJob) error {
	if err := callbacksAfter(ctx, q, delay, rest.User, ids); err != nil || rest.UpTo <= rest.From || q == nil {
		return err
	}
	rest.Kind = im.FanoutCoveredAlerts
	if err := q.Enqueue(ctx, delay, rest); err != nil {
		return fmt.Errorf("the alerts of entries (%d, %d]: %w", rest.From, rest.UpTo, err)
	}
	return nil
}

// callbackBody is what a webhook receives for one event (and what
// GET /v1/apps/{appId}/events lists, with its delivery).
type callbackBody struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	App       string `json:"app"`
	MessageID string `json:"messageId"`
	UserID    string `json:"userId,omitempty"`
	At        string `json:"at"`
	Answer    string `json:"answer,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// bodyOf renders event e as its webhook body: the same bytes on every try.
func bodyOf(e im.CallbackEvent) callbackBody {
	return callbackBody{ID: e.ID, Type: string(e.Type), App: e.App, MessageID: string(e.Message), UserID: string(e.User),
		At: ts(e.At), Answer: e.Answer, Detail: e.Detail}
}

// changes lists the state changes status st of alert a shows: per
// recipient delivered, read and answered; per user an escalation step
// added, escalated; and expired once an escalation ended unanswered.
func changes(a im.Alert, st alertStatus) []im.CallbackEvent {
	var out []im.CallbackEvent
	add := func(typ im.CallbackType, u im.UserID, at time.Time, answer, detail string) {
		out = append(out, im.CallbackEvent{ID: im.CallbackEventID(a.Message.ID, typ, u), App: a.App, Type: typ, Message: a.Message.ID,
			User: u, At: at, Answer: answer, Detail: detail})
	}
	escalatedAt := map[im.UserID]im.Event{}
	var endedAt *im.Event
	for i, e := range st.events {
		switch e.Type {
		case im.EventEscalated:
			if _, ok := escalatedAt[e.User]; !ok && e.User != "" {
				escalatedAt[e.User] = e
			}
		case im.EventEscalationEnded:
			endedAt = &st.events[i]
		}
	}
	for _, d := range st.deliveries {
		if d.State == "delivered" || d.State == "read" {
			at := d.DeliveredAt
			if at.IsZero() {
				at = d.ReadAt // read on a device whose ack is not in yet
			}
			add(im.CallbackDelivered, d.User, at, "", "")
		}
		if d.State == "read" {
			add(im.CallbackRead, d.User, d.ReadAt, "", "")
		}
		if x, ok := st.answers[d.User]; ok {
			add(im.CallbackAnswered, d.User, x.At, x.Option, "")
		}
	}
	ended := st.Escalation != nil && st.Escalation.State == "ended"
	for _, u := range a.Escalated {
		// The alert item names the user (AddEscalated, before the step's
		// trace event); the event gives the time and detail. A tick still
		// running writes it at its end (the next job sees it); once the
		// escalation ended, a missing one was lost (a failed write).
		e, ok := escalatedAt[u]
		if !ok && !ended {
			continue
		}
		if !ok {
			e = im.Event{At: st.at, Detail: "escalation step"}
		}
		add(im.CallbackEscalated, u, e.At, "", e.Detail)
	}
	switch {
	case endedAt != nil && endedAt.User == "":
		// Ended with nobody answering (an answer ends it naming who):
		// expired, even if someone answers later.
		add(im.CallbackExpired, "", endedAt.At, "", endedAt.Detail)
	case endedAt == nil && ended && len(st.answers) == 0:
		// Ended (the alert item says so) and its trace event not in (the
		// trace is written after the claim and may fail): nobody answered.
		add(im.CallbackExpired, "", st.at, "", "nobody answered by the last step")
	}
	return out
}

// callbackUsers is the most users (recipients and escalated) of an alert
// whose every callback job derives all their states: a job costs about
// three reads per user, so beyond it a job of one user's change derives
// that user's only (callbackSweep).
const callbackUsers = 8

// callbackSweep is how long after a job of one user's change of a larger
// alert every recipient's state is derived again, by one job (the alert
// item's next-run time keeps it to one per alert in that time).
const callbackSweep = time.Minute

// runCallbacks runs one callback job: records alert job.Alert's state
// changes not yet recorded, then delivers the events due. A job that
// names a user (their ack, read or answer enqueued it) of an alert to more
// than callbackUsers derives that user's state only: the others' changes
// have jobs of their own, and an alert to a group of n whose members all
// ack and read would otherwise read every member's state 4n times. It
// then schedules a job of every recipient's state callbackSweep later,
// unless one is due by then: a change whose own jobs missed it (the job
// enqueued before a write that came more than 10 s later, in a function
// that then stopped) is recorded by it, as by the next job of any
// recipient's change when every job derived every state.
func (h *AlertsAPI) runCallbacks(ctx context.Context, job im.FanoutJob) error {
	if h.AlertStore == nil || h.Callbacks == nil {
		return fmt.Errorf("callbacks of %s: alerts are not configured", job.Alert)
	}
	a, err := h.AlertStore.Alert(ctx, job.Alert)
	if err != nil {
		return err
	}
	app, err := h.AlertStore.App(ctx, a.App)
	if errors.Is(err, im.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if app.Webhook == nil {
		return nil // no webhook: nothing is recorded (GET status still tells)
	}
	only := job.User
	if len(a.Recipients)+len(a.Escalated) <= callbackUsers {
		only = ""
	}
	st, err := h.status(ctx, a, only)
	if err != nil {
		return err
	}
	now := h.now()
	for _, e := range changes(a, st) {
		e.State, e.NextAt, e.CreatedAt = im.CallbackPending, now, now
		added, err := h.Callbacks.RecordCallbackEvent(ctx, e)
		if err != nil {
			return err
		}
		if added {
			h.log().DebugContext(ctx, "callback event recorded", "eventId", e.ID, "app", app.ID)
		}
	}
	if err := h.deliverCallbacks(ctx, app, a.Message.ID); err != nil || only == "" {
		return err
	}
	return h.callbackRunAt(ctx, a.Message.ID, now.Add(cmp.Or(h.CallbackSweep, callbackSweep)))
}

// deliverCallbacks POSTs alert id's pending events that are due to the
// app's webhook, one try each, and schedules the next run for the first
// still pending.
func (h *AlertsAPI) deliverCallbacks(ctx context.Context, app im.App, id im.MessageID) error {
	evs, err := h.Callbacks.AlertCallbackEvents(ctx, app.ID, id)
	if err != nil {
		return err
	}
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, e := range evs {
		if e.State != im.CallbackPending {
			continue
		}
		now := h.now()
		if e.NextAt.After(now) {
			soonest(e.NextAt)
			continue
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < callbackReserve {
			soonest(now) // out of time: the next run goes on
			continue
		}
		body, _ := json.Marshal(bodyOf(e))
		prev := e.Attempts
		e.Attempts++
		postCtx, cancel := context.WithTimeout(ctx, callbackPostTimeout)
		err := h.sendCallback(postCtx, app.Webhook, e.ID, e.Attempts, body, now)
		cancel()
		switch backoff := h.callbackBackoff(); {
		case err == nil:
			e.State, e.DeliveredAt, e.LastError = im.CallbackDone, h.now(), ""
		case e.Attempts > len(backoff):
			e.State, e.LastError = im.CallbackDead, err.Error()
			h.log().WarnContext(ctx, "status callback dead after its last try", "eventId", e.ID, "app", app.ID, "attempts", e.Attempts, "err", err.Error())
		default:
			e.NextAt, e.LastError = now.Add(backoff[e.Attempts-1]), err.Error()
			soonest(e.NextAt)
			h.log().InfoContext(ctx, "status callback failed; retried later", "eventId", e.ID, "app", app.ID, "attempt", e.Attempts, "retryAt", e.NextAt, "err", err.Error())
		}
		if _, err := h.Callbacks.UpdateCallbackEvent(ctx, e, prev); err != nil {
			return err
		}
	}
	if next.IsZero() {
		return nil
	}
	return h.callbackRunAt(ctx, id, next)
}

// sendCallback makes one try of event id (body) to w: a signed POST to
// its URL, or a message to its SQS queue with the same headers as
// message attributes.
func (h *AlertsAPI) sendCallback(ctx context.Context, w *im.Webhook, id string, attempt int, body []byte, now time.Time) error {
	if !w.Queue {
		return h.Webhooks.Post(ctx, w.URL, w.Secret, id, attempt, body, now)
	}
	if h.CallbackQueues == nil {
		return fmt.Errorf("no SQS client for callback queues")
	}
	return h.CallbackQueues.SendCallback(ctx, w.URL, string(body), map[string]string{
		webhook.HeaderEventID: id, webhook.HeaderTimestamp: strconv.FormatInt(now.Unix(), 10),
		webhook.HeaderSignature: webhook.Sign(w.Secret, now, body), webhook.HeaderAttempt: strconv.Itoa(attempt),
	})
}

// callbackRunAt enqueues a callback job for alert id to run at t (or, t
// beyond an SQS delay, as far as one reaches: that job enqueues the next),
// unless one is already due by then: however many jobs saw the same
// pending events, one chain of delayed jobs waits for them.
func (h *AlertsAPI) callbackRunAt(ctx context.Context, id im.MessageID, t time.Time) error {
	now := h.now()
	at := t
	if limit := now.Add(maxJobDelay); at.After(limit) {
		at = limit
	}
	if at.Before(now) {
		at = now
	}
	if ok, err := h.Callbacks.ScheduleCallbackRun(ctx, id, at, now); err != nil || !ok {
		return err
	}
	return h.FanoutQueue.Enqueue(ctx, at.Sub(now), im.FanoutJob{Kind: im.FanoutCallback, Alert: id})
}

// callbackBackoff is the configured retry schedule or the default.
func (h *AlertsAPI) callbackBackoff() []time.Duration {
	if len(h.CallbackBackoff) > 0 {
		return h.CallbackBackoff
	}
	return im.DefaultCallbackBackoff
}

// webhookClient is the client callbacks are posted with.
func newWebhookClient(private bool) *webhook.Client {
	return webhook.New(callbackPostTimeout, private)
}
