package handler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// MaxAlertTitle is the longest alert title, in characters (docs/openapi.yaml).
const MaxAlertTitle = 200

// alertRequest is the body of POST /v1/messages (validated by the OpenAPI schema).
type alertRequest struct {
	To         []string           `json:"to"`
	Group      string             `json:"group"`
	Title      string             `json:"title"`
	Body       string             `json:"body"`
	Priority   string             `json:"priority"`
	TTLSeconds int                `json:"ttlSeconds"`
	Ack        *ackRequest        `json:"ack"`
	Escalation *escalationRequest `json:"escalation"`
	Repeat     *repeatRequest     `json:"repeat"`
}

// repeatRequest re-pushes an urgent alert until read or answered.
type repeatRequest struct {
	EverySeconds int `json:"everySeconds"`
	Times        int `json:"times"`
}

// escalationRequest goes on notifying an unanswered alert (issue 16).
type escalationRequest struct {
	EverySeconds int `json:"everySeconds"`
	Renotify     int `json:"renotify"`
	Steps        []struct {
		To    []string `json:"to"`
		Group string   `json:"group"`
	} `json:"steps"`
}

// ackRequest asks the recipients of an alert for an answer (issue 16).
type ackRequest struct {
	Required        *bool    `json:"required"`
	Options         []string `json:"options"`
	FirstAnswerWins bool     `json:"firstAnswerWins"`
}

// spec is the AckSpec an ack request asks for, its defaults filled in:
// required, and the one option "ack".
func (r *ackRequest) spec() *im.AckSpec {
	if r == nil {
		return nil
	}
	s := &im.AckSpec{Required: r.Required == nil || *r.Required, Options: r.Options, FirstWins: r.FirstAnswerWins}
	if len(s.Options) == 0 {
		s.Options = []string{im.DefaultAckOption}
	}
	return s
}

// decodeAlert reads a POST /v1/messages body that passed the schema: the
// checks a schema cannot state (display text, reserved ids).
func decodeAlert(raw []byte) (alertRequest, []im.UserID, error) {
	var ar alertRequest
	if err := json.Unmarshal(raw, &ar); err != nil {
		return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "body must be a JSON object")
	}
	if !im.ValidDisplayText(ar.Title, MaxAlertTitle) {
		return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "title must be 1-%d characters without control or bidirectional-control characters", MaxAlertTitle)
	}
	if len(ar.To) == 0 && ar.Group == "" {
		return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "to must list at least one user, or group name a group")
	}
	if ar.Priority == "" {
		ar.Priority = "normal"
	}
	if ar.Ack != nil {
		seen := map[string]bool{}
		for i, o := range ar.Ack.Options {
			if !wire.AckOptionPattern.MatchString(o) || seen[o] {
				return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "ack.options[%d] must be a new option of 1-32 characters of [a-z0-9_-], starting with a letter", i)
			}
			seen[o] = true
		}
		if len(ar.Ack.Options) > im.MaxAckOptions {
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "ack.options may name at most %d options", im.MaxAckOptions)
		}
	}
	if ar.Escalation != nil {
		if ar.Ack == nil || (ar.Ack.Required != nil && !*ar.Ack.Required) {
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "escalation needs an ack that is required: it stops at the first answer")
		}
		every := time.Duration(ar.Escalation.EverySeconds) * time.Second
		if every < im.MinEscalationEvery || every > im.MaxEscalationEvery {
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "escalation.everySeconds must be %d..%d", int(im.MinEscalationEvery.Seconds()), int(im.MaxEscalationEvery.Seconds()))
		}
		for i, st := range ar.Escalation.Steps {
			if len(st.To) == 0 && st.Group == "" {
				return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "escalation.steps[%d] must name users (to), a group, or both", i)
			}
			for j, u := range st.To {
				if !im.UserID(u).Person() {
					return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "escalation.steps[%d].to[%d] is not a user id", i, j)
				}
			}
		}
	}
	if ar.Repeat != nil {
		switch {
		case ar.Priority != "urgent":
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "repeat is for urgent alerts (priority urgent)")
		case ar.Escalation != nil:
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "an escalation re-notifies on its own schedule: give repeat or escalation, not both")
		case ar.Repeat.EverySeconds < 1 || ar.Repeat.EverySeconds > int(im.MaxEscalationEvery/time.Second) || ar.Repeat.Times < 0 || ar.Repeat.Times > im.MaxEscalationRenotify:
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "repeat.everySeconds must be 1..%d and repeat.times 0..%d", int(im.MaxEscalationEvery/time.Second), im.MaxEscalationRenotify)
		}
	}
	recipients := make([]im.UserID, len(ar.To))
	for i, u := range ar.To {
		recipients[i] = im.UserID(u)
		if !recipients[i].Person() {
			return alertRequest{}, nil, wire.Problemf(wire.CodeBadRequest, "to[%d] is not a user id (1-64 characters of [A-Za-z0-9._@-], not starting with %q)", i, im.AppSenderPrefix)
		}
	}
	return ar, recipients, nil
}

// postAlert serves POST /v1/messages: an app posts an alert to users and
// groups, once per Idempotency-Key, answered 202 once it is durable.
func (h *AlertsAPI) postAlert(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	p, err := h.authenticate(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	if p.admin {
		return 0, nil, wire.Problemf(wire.CodeForbidden, "the admin key cannot post alerts; use an app key")
	}
	raw, err := requestBody(req)
	if err != nil {
		return 0, nil, err
	}
	key := header(req, "Idempotency-Key")
	if key == "" || len(key) > 128 || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "Idempotency-Key header is required: 1-128 printable ASCII characters")
	}
	if h.Validator != nil {
		if err := h.Validator.Validate("AlertRequest", raw); err != nil {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
		}
	}
	ar, recipients, err := decodeAlert(raw)
	if err != nil {
		return 0, nil, err
	}
	for i, u := range recipients {
		if !p.app.Allows(u) {
			return 0, nil, wire.Problemf(wire.CodeForbidden, "app %s may not message %s", p.app.ID, ar.To[i])
		}
	}
	if ar.Group != "" {
		members, err := h.groupRecipients(ctx, p.app, ar.Group)
		if err != nil {
			return 0, nil, err
		}
		for _, u := range members {
			if !slices.Contains(recipients, u) {
				recipients = append(recipients, u)
			}
		}
	}
	fields := map[string]any{"title": ar.Title, "body": ar.Body, "priority": ar.Priority, "app": p.app.ID}
	if ar.TTLSeconds > 0 {
		fields["ttlSeconds"] = ar.TTLSeconds
	}
	for _, st := range escalationSteps(ar.Escalation) {
		for _, u := range st {
			if !p.app.Allows(u) {
				return 0, nil, wire.Problemf(wire.CodeForbidden, "app %s may not message %s (escalation)", p.app.ID, u)
			}
		}
	}
	if ar.Escalation != nil {
		// A step naming a group notifies its members as they are now (the
		// step is stored as users: a member who joins later is not added).
		for i, st := range ar.Escalation.Steps {
			if st.Group == "" {
				continue
			}
			members, err := h.groupRecipients(ctx, p.app, st.Group)
			if err != nil {
				return 0, nil, err
			}
			for _, u := range members {
				if !slices.Contains(ar.Escalation.Steps[i].To, string(u)) {
					ar.Escalation.Steps[i].To = append(ar.Escalation.Steps[i].To, string(u))
				}
			}
		}
	}
	ack := ar.Ack.spec()
	if ack != nil {
		fields["ack"] = map[string]any{"options": ack.Options, "required": ack.Required, "firstAnswerWins": ack.FirstWins}
	}
	body, _ := json.Marshal(fields)
	if len(body) > im.MaxBodyBytes {
		return 0, nil, wire.Problemf(wire.CodeTooLarge, "alert is %d bytes encoded; the limit is %d", len(body), im.MaxBodyBytes)
	}
	sum := sha256.Sum256(raw)
	fingerprint := hex.EncodeToString(sum[:])
	// A retry of a key already taken is answered (or resumed) before the
	// rate limit: it posts nothing new, so it must not get 429.
	start, err := h.AlertStore.KeyedAlert(ctx, p.app.ID, key, fingerprint)
	if errors.Is(err, im.ErrNotFound) {
		rate := p.app.RatePerMinute
		if rate <= 0 {
			rate = DefaultAppRate
		}
		if wait, err := h.AlertStore.TakeAppSlot(ctx, p.app.ID, h.now(), rate); errors.Is(err, im.ErrRateLimited) {
			return 0, nil, wire.RateLimited(fmt.Sprintf("app %s may post %d alerts per minute", p.app.ID, rate), max(wait.Milliseconds(), 1))
		} else if err != nil {
			return 0, nil, err
		}
		alert := im.Alert{
			Message:    im.Message{Conversation: p.app.Conversation(), From: p.app.Sender(), Body: body},
			App:        p.app.ID,
			Recipients: recipients,
			Title:      ar.Title,
			Priority:   ar.Priority,
			Expiry:     time.Duration(ar.TTLSeconds) * time.Second,
			Ack:        ack,
			Escalation: escalationOf(ar.Escalation),
			Repeat:     repeatOf(ar),
		}
		start, err = h.AlertStore.BeginAlert(ctx, p.app.ID, key, fingerprint, alert, h.now())
	}
	if err != nil {
		return 0, nil, err // im.ErrIdempotencyConflict: conflict (wire.ProblemOf)
	}
	if start.Response != "" {
		return http.StatusAccepted, json.RawMessage(start.Response), nil
	}
	// Put the alert in every recipient inbox (exactly once each, also when
	// an earlier attempt with this key stopped half-way), then push.
	tr := h.trail("alerts", req.RequestContext.RequestID)
	defer tr.flush(ctx)
	cs := &checks{}
	defer h.scheduleChecks(ctx, tr, cs) // before the flush: defers run last first
	m := start.Alert.Message
	if !start.Replayed {
		tr.add(im.Event{Message: m.ID, Type: im.EventCreated, Detail: "app " + p.app.ID + ", Idempotency-Key " + key})
		tr.add(im.Event{Message: m.ID, Type: im.EventStored, Detail: fmt.Sprintf("%s #%d", m.Conversation, m.ConvSeq)})
	}
	type recipientState struct {
		UserID string `json:"userId"`
		State  string `json:"state"`
	}
	accepted := struct {
		MessageID  string           `json:"messageId"`
		Recipients []recipientState `json:"recipients"`
	}{MessageID: string(m.ID)}
	if ar.Group != "" && h.FanoutQueue != nil {
		// A group may have hundreds of members: like a group message, the
		// alert reaches their inboxes through the fan-out queue in batches
		// (exactly once each however often a job runs), never one after
		// another inside this 10 s invocation.
		jobs := im.FanoutJob{Kind: im.FanoutAlert, Alert: m.ID}.Batches(start.Alert.Recipients, fanoutBatch(h.FanoutBatch))
		if err := h.FanoutQueue.Enqueue(ctx, 0, jobs...); err != nil {
			return 0, nil, err
		}
		h.log().InfoContext(ctx, "alert fan-out queued", "messageId", m.ID, "recipients", len(start.Alert.Recipients), "jobs", len(jobs))
		for _, u := range start.Alert.Recipients {
			accepted.Recipients = append(accepted.Recipients, recipientState{UserID: string(u), State: "queued"})
		}
	} else {
		for _, u := range start.Alert.Recipients {
			if err := h.inboxAlert(ctx, tr, cs, u, start.Alert); err != nil {
				return 0, nil, err
			}
			accepted.Recipients = append(accepted.Recipients, recipientState{UserID: string(u), State: "stored"})
		}
	}
	if r := start.Alert.Repeat; r != nil && h.FanoutQueue != nil {
		// Re-push 1, one interval from now (claimed like an escalation tick).
		if err := enqueueAt(ctx, h.FanoutQueue, h.now(), r.Every, im.FanoutJob{Kind: im.FanoutRepeat, Alert: m.ID, Tick: 1}); err != nil {
			return 0, nil, err
		}
	}
	if e := start.Alert.Escalation; e != nil && h.FanoutQueue != nil {
		// Tick 1, one interval from now (a resumed request enqueues it
		// again: a tick runs once, whichever job claims it).
		if err := enqueueAt(ctx, h.FanoutQueue, h.now(), e.Every, im.FanoutJob{Kind: im.FanoutEscalate, Alert: m.ID, Tick: 1}); err != nil {
			return 0, nil, err
		}
	}
	resp, _ := json.Marshal(accepted)
	if err := h.AlertStore.FinishAlert(ctx, p.app.ID, key, string(resp)); err != nil {
		return 0, nil, err
	}
	h.log().InfoContext(ctx, "alert accepted", "messageId", m.ID, "app", p.app.ID, "recipients", len(accepted.Recipients), "requestId", req.RequestContext.RequestID)
	return http.StatusAccepted, json.RawMessage(resp), nil
}

// escalationSteps lists the users of each step of an escalation request.
func escalationSteps(r *escalationRequest) [][]im.UserID {
	if r == nil {
		return nil
	}
	out := make([][]im.UserID, len(r.Steps))
	for i, st := range r.Steps {
		for _, u := range st.To {
			out[i] = append(out[i], im.UserID(u))
		}
	}
	return out
}

// repeatOf is the Repeat of an alert request: an urgent alert without an
// escalation repeats as it asks, by default im.DefaultUrgentRepeat; nil
// for no re-pushes.
func repeatOf(ar alertRequest) *im.Repeat {
	if ar.Priority != "urgent" || ar.Escalation != nil {
		return nil
	}
	r := im.DefaultUrgentRepeat
	if ar.Repeat != nil {
		r = im.Repeat{Every: time.Duration(ar.Repeat.EverySeconds) * time.Second, Times: ar.Repeat.Times}
	}
	if r.Times == 0 {
		return nil
	}
	return &r
}

// escalationOf is the Escalation an escalation request asks for.
func escalationOf(r *escalationRequest) *im.Escalation {
	if r == nil {
		return nil
	}
	return &im.Escalation{Every: time.Duration(r.EverySeconds) * time.Second, Renotify: r.Renotify, Steps: escalationSteps(r)}
}

// inboxAlert puts alert a into u's inbox (exactly once) and pushes it,
// adding the pushes' redelivery checks to cs.
func (h *AlertsAPI) inboxAlert(ctx context.Context, tr *trail, cs *checks, u im.UserID, a im.Alert) error {
	seq, err := h.AlertStore.AppendInbox(ctx, u, a.Message, a.Expiry, h.now())
	if err != nil {
		return err
	}
	tr.add(im.Event{Message: a.Message.ID, Type: im.EventInboxed, User: u, Seq: seq})
	h.deliverAlert(ctx, tr, cs, u, a, seq, 0)
	return nil
}

// deliverAlert pushes alert a (at u's inbox seq) to u's devices, flagged
// urgent when it is and with its re-notification number (0: none).
func (h *AlertsAPI) deliverAlert(ctx context.Context, tr *trail, cs *checks, u im.UserID, a im.Alert, seq int64, renotify int) {
	e := im.Entry{Seq: seq, Message: a.Message}
	push := wire.NewPush(e)
	push.Urgent, push.Renotify = a.Priority == "urgent", renotify
	h.deliverPush(ctx, tr, cs, u, e, "", push)
}

// fanoutAlert runs one batch of a group alert's fan-out: each member of
// the batch who is a recipient of the alert gets it in their inbox once.
func (h *AlertsAPI) fanoutAlert(ctx context.Context, job im.FanoutJob) error {
	if h.AlertStore == nil {
		return fmt.Errorf("alert fan-out %s: alerts are not configured", job.Alert)
	}
	a, err := h.AlertStore.Alert(ctx, job.Alert)
	if err != nil {
		return err
	}
	tr := h.trail("fanout", string(job.Alert))
	defer tr.flush(ctx)
	cs := &checks{}
	defer h.scheduleChecks(ctx, tr, cs)
	for _, u := range job.Members {
		if !slices.Contains(a.Recipients, u) {
			h.log().WarnContext(ctx, "alert fan-out: not a recipient; skipped", "messageId", job.Alert, "userId", u)
			continue
		}
		if err := h.inboxAlert(ctx, tr, cs, u, a); err != nil {
			return err
		}
	}
	return nil
}

// groupRecipients returns the current members of group id (without the
// "g:" prefix) if the app may message that group.
func (h *AlertsAPI) groupRecipients(ctx context.Context, app im.App, id string) ([]im.UserID, error) {
	if !app.AllowsGroup(id) {
		return nil, wire.Problemf(wire.CodeForbidden, "app %s may not message group %s", app.ID, id)
	}
	if h.Groups == nil {
		return nil, wire.Problemf(wire.CodeBadRequest, "groups are not configured")
	}
	all, err := h.Groups.Members(ctx, im.Group(id))
	if err != nil {
		return nil, err
	}
	var out []im.UserID
	for _, m := range all {
		if m.Active() {
			out = append(out, m.User)
		}
	}
	if len(out) == 0 {
		return nil, wire.Problemf(wire.CodeNotFound, "no group %s (or it has no members)", id)
	}
	return out, nil
}

// maxMessageIDLength bounds a message id in a path: a 1:1 message's id
// names its conversation (im.NewLocatedMessageID: 27 + 2 + up to 19 digits
// + a conversation id of up to 131 characters).
const maxMessageIDLength = 200

// readableAlert loads the alert of {id} if the caller may read it.
func (h *AlertsAPI) readableAlert(ctx context.Context, req events.APIGatewayV2HTTPRequest) (im.Alert, principal, error) {
	p, err := h.authenticate(ctx, req)
	if err != nil {
		return im.Alert{}, p, err
	}
	id := im.MessageID(req.PathParameters["id"])
	if len(id) == 0 || len(id) > maxMessageIDLength {
		return im.Alert{}, p, wire.Problemf(wire.CodeBadRequest, "message id must be 1-%d characters", maxMessageIDLength)
	}
	a, err := h.AlertStore.Alert(ctx, id)
	if errors.Is(err, im.ErrNotFound) {
		if p.admin {
			return im.Alert{Message: im.Message{ID: id}}, p, nil // a chat message: trace only
		}
		return im.Alert{}, p, wire.Problemf(wire.CodeNotFound, "no alert %s", id)
	}
	if err != nil {
		return im.Alert{}, p, err
	}
	if !p.admin && a.App != p.app.ID {
		return im.Alert{}, p, wire.Problemf(wire.CodeForbidden, "alert %s was sent by another app", id)
	}
	return a, p, nil
}

// alertStatus is the body of GET /v1/messages/{id}.
type alertStatus struct {
	MessageID  string            `json:"messageId"`
	App        string            `json:"app"`
	Title      string            `json:"title"`
	Priority   string            `json:"priority"`
	SentAt     string            `json:"sentAt"`
	Recipients []recipientStatus `json:"recipients"`
	Counts     map[string]int    `json:"counts"`
	Ack        *ackStatus        `json:"ack,omitempty"`
	Escalation *escalationStatus `json:"escalation,omitempty"`
	Repeat     *repeatStatus     `json:"repeat,omitempty"`
	// events, answers and deliveries are what it was derived from, with
	// their times (for callbacks); at is when it was derived (the time of
	// a change whose trace event is missing).
	events     []im.Event
	answers    map[im.UserID]im.Answer
	deliveries []im.Delivery
	at         time.Time
}

// escalationStatus is where an alert's escalation stands.
type escalationStatus struct {
	EverySeconds int `json:"everySeconds"`
	Renotify     int `json:"renotify"`
	Steps        int `json:"steps"`
	// State is running or ended (answered, or past its last tick).
	State string `json:"state"`
	// Tick is the last tick run (0: none yet, or ended), of LastTick.
	Tick        int      `json:"tick"`
	LastTick    int      `json:"lastTick"`
	EscalatedTo []string `json:"escalatedTo,omitempty"`
}

// repeatStatus is where an urgent alert's re-pushes stand.
type repeatStatus struct {
	EverySeconds int `json:"everySeconds"`
	Times        int `json:"times"`
	// Tick is the last re-push run (0: none yet).
	Tick int `json:"tick"`
}

// ackStatus is the answer an alert asks for and where it stands.
type ackStatus struct {
	Options         []string `json:"options"`
	Required        bool     `json:"required"`
	FirstAnswerWins bool     `json:"firstAnswerWins"`
	// Answered counts the recipients who answered.
	Answered int `json:"answered"`
	// Answer is the alert's answer when the first answer wins, and FirstBy
	// who gave it.
	Answer  string `json:"answer,omitempty"`
	FirstBy string `json:"answeredBy,omitempty"`
}

// recipientStatus is one recipient's state in an alert's status answer.
type recipientStatus struct {
	UserID      string `json:"userId"`
	State       string `json:"state"`
	Seq         int64  `json:"seq"`
	Pushes      int    `json:"pushes"`
	StoredAt    string `json:"storedAt,omitempty"`
	PushedAt    string `json:"pushedAt,omitempty"`
	DeliveredAt string `json:"deliveredAt,omitempty"`
	ReadAt      string `json:"readAt,omitempty"`
	// Answer is the recipient's answer to an alert that asks for one.
	Answer     string `json:"answer,omitempty"`
	AnsweredAt string `json:"answeredAt,omitempty"`
}

// ts renders t for the HTTP API (empty for the zero time).
func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return wire.Timestamp(t)
}

// getAlert serves GET /v1/messages/{id}: an alert's status per recipient.
func (h *AlertsAPI) getAlert(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	a, _, err := h.readableAlert(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	if a.App == "" {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no alert %s (chat messages have a trace only)", a.Message.ID)
	}
	out, err := h.status(ctx, a, "")
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// status is where alert a stands for each recipient (only for user only,
// when not empty: a callback job of one user's ack, read or answer, three
// reads instead of three per recipient): what GET /v1/messages/{id}
// answers, and what status callbacks report.
func (h *AlertsAPI) status(ctx context.Context, a im.Alert, only im.UserID) (alertStatus, error) {
	evs, err := h.AlertStore.Events(ctx, a.Message.ID)
	if err != nil {
		return alertStatus{}, err
	}
	ds := make([]im.Delivery, 0, len(a.Recipients)+len(a.Escalated))
	for _, u := range append(slices.Clone(a.Recipients), a.Escalated...) {
		if only != "" && u != only {
			continue
		}
		d := im.Delivery{User: u}
		seq, err := h.AlertStore.InboxSeq(ctx, u, a.Message.ID)
		if err != nil && !errors.Is(err, im.ErrNotFound) {
			return alertStatus{}, err
		}
		devs, err := h.AlertStore.Devices(ctx, u)
		if err != nil {
			return alertStatus{}, err
		}
		d = im.Progress(d, seq, devs, evs)
		if h.Reads != nil && seq > 0 {
			mark, err := h.Reads.ReadWatermark(ctx, u, a.Message.Conversation)
			if err != nil {
				return alertStatus{}, err
			}
			// Alert convSeqs number every user's alerts of the app, and an
			// alert can reach an inbox after a later one (a post retried
			// after a failure, an escalation): what counts is the inbox
			// seq read up to (im.ReadMark.CoversAlert).
			if mark.CoversAlert(a.Message.ConvSeq, seq, d.StoredAt) {
				d.State = "read"
				if d.ReadAt.IsZero() {
					d.ReadAt = mark.At
				}
			}
		}
		ds = append(ds, d)
	}
	out := alertStatus{MessageID: string(a.Message.ID), App: a.App, Title: a.Title, Priority: a.Priority, SentAt: wire.Timestamp(a.Message.SentAt), Counts: map[string]int{"stored": 0, "pushed": 0, "delivered": 0, "read": 0}}
	answers := map[im.UserID]im.Answer{}
	if a.Ack != nil {
		list, err := h.AlertStore.Answers(ctx, a.Message.ID)
		if err != nil {
			return alertStatus{}, err
		}
		out.Ack = &ackStatus{Options: a.Ack.Options, Required: a.Ack.Required, FirstAnswerWins: a.Ack.FirstWins, Answered: len(list)}
		for _, x := range list {
			answers[x.User] = x
		}
		if a.Ack.FirstWins && len(list) > 0 {
			out.Ack.Answer, out.Ack.FirstBy = list[0].Option, string(list[0].User)
		}
		out.Counts["answered"] = len(list)
	}
	if e := a.Escalation; e != nil && h.Escalations != nil {
		tick, err := h.Escalations.EscalationTick(ctx, a.Message.ID)
		if err != nil {
			return alertStatus{}, err
		}
		es := &escalationStatus{EverySeconds: int(e.Every / time.Second), Renotify: e.Renotify, Steps: len(e.Steps), State: "running", Tick: tick, LastTick: e.LastTick()}
		if tick == im.EscalationEnded {
			es.State, es.Tick = "ended", 0
		}
		for _, u := range a.Escalated {
			es.EscalatedTo = append(es.EscalatedTo, string(u))
		}
		out.Escalation = es
	}
	if r := a.Repeat; r != nil && h.Escalations != nil {
		tick, err := h.Escalations.EscalationTick(ctx, a.Message.ID)
		if err != nil {
			return alertStatus{}, err
		}
		out.Repeat = &repeatStatus{EverySeconds: int(r.Every / time.Second), Times: r.Times, Tick: tick}
	}
	for _, d := range ds {
		rs := recipientStatus{UserID: string(d.User), State: d.State, Seq: d.Seq, Pushes: d.Pushes,
			StoredAt: ts(d.StoredAt), PushedAt: ts(d.PushedAt), DeliveredAt: ts(d.DeliveredAt), ReadAt: ts(d.ReadAt)}
		if x, ok := answers[d.User]; ok {
			rs.Answer, rs.AnsweredAt = x.Option, ts(x.At)
		}
		out.Recipients = append(out.Recipients, rs)
		for _, st := range im.StatesUpTo(d.State) {
			out.Counts[st]++
		}
	}
	out.events, out.answers, out.deliveries, out.at = evs, answers, ds, h.now()
	return out, nil
}

// traceEvent is one event of a trace answer (GET /v1/messages/{id}/trace).
type traceEvent struct {
	Type         string `json:"type"`
	At           string `json:"at"`
	Function     string `json:"function"`
	RequestID    string `json:"requestId,omitempty"`
	UserID       string `json:"userId,omitempty"`
	DeviceID     string `json:"deviceId,omitempty"`
	ConnectionID string `json:"connectionId,omitempty"`
	Seq          int64  `json:"seq,omitempty"`
	Attempt      int    `json:"attempt,omitempty"`
	DelayMs      int64  `json:"delayMs,omitempty"`
	Detail       string `json:"detail,omitempty"`
}

// getTrace serves GET /v1/messages/{id}/trace: every step of a message's
// path (an app sees its own alerts' traces, redacted; the admin any).
func (h *AlertsAPI) getTrace(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	a, p, err := h.readableAlert(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	evs, err := h.AlertStore.Events(ctx, a.Message.ID)
	if err != nil {
		return 0, nil, err
	}
	if len(evs) == 0 && a.App == "" {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no trace for %s", a.Message.ID)
	}
	out := struct {
		MessageID string       `json:"messageId"`
		Events    []traceEvent `json:"events"`
	}{MessageID: string(a.Message.ID), Events: []traceEvent{}}
	for _, e := range evs {
		te := traceEvent{Type: string(e.Type), At: wire.Timestamp(e.At), Function: e.Function, RequestID: e.RequestID,
			UserID: string(e.User), DeviceID: string(e.Device), ConnectionID: string(e.Connection), Seq: e.Seq, Attempt: e.Attempt,
			DelayMs: e.Delay.Milliseconds(), Detail: e.Detail}
		if !p.admin {
			// An app sees what happened to its alert and when, not its
			// recipients' devices, connections or Lambda request ids.
			te.RequestID, te.DeviceID, te.ConnectionID = "", "", ""
		}
		out.Events = append(out.Events, te)
	}
	return http.StatusOK, out, nil
}
