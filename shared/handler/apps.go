package handler

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/webhook"
	"github.com/signet-im/signet/shared/wire"
)

// requireAdmin refuses a caller without the admin key.
func (h *AlertsAPI) requireAdmin(ctx context.Context, req events.APIGatewayV2HTTPRequest) error {
	p, err := h.authenticate(ctx, req)
	if err != nil {
		return err
	}
	if !p.admin {
		return wire.Problemf(wire.CodeForbidden, "this needs the admin key")
	}
	return nil
}

// createApp serves POST /v1/apps (admin key): an app and its key, shown
// once; only the key's hash is stored.
func (h *AlertsAPI) createApp(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	if err := h.requireAdmin(ctx, req); err != nil {
		return 0, nil, err
	}
	raw, err := requestBody(req)
	if err != nil {
		return 0, nil, err
	}
	if h.Validator != nil {
		if err := h.Validator.Validate("AppRequest", raw); err != nil {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
		}
	}
	var in struct {
		Name          string   `json:"name"`
		AllowUsers    []string `json:"allowUsers"`
		AllowGroups   []string `json:"allowGroups"`
		RatePerMinute int      `json:"ratePerMinute"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || !im.ValidAppID(in.Name) {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "name must be 1-48 characters of [A-Za-z0-9.@-]")
	}
	key, hash := newAppKey(in.Name)
	app := im.App{ID: in.Name, KeyHash: hash, AllowUsers: in.AllowUsers, AllowGroups: in.AllowGroups, RatePerMinute: in.RatePerMinute, CreatedAt: h.now()}
	if app.RatePerMinute == 0 {
		app.RatePerMinute = DefaultAppRate
	}
	if err := h.AlertStore.CreateApp(ctx, app); err != nil {
		return 0, nil, err // im.ErrAppExists: conflict (wire.ProblemOf)
	}
	h.log().InfoContext(ctx, "app created", "app", app.ID, "allowUsers", len(app.AllowUsers))
	return http.StatusCreated, map[string]string{"appId": app.ID, "key": key}, nil
}

// newAppKey makes an app's key, sk_<appId>_<secret>, and the hash of its
// secret part (all that is stored).
func newAppKey(appID string) (key, hash string) {
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	sec := hex.EncodeToString(secret)
	return "sk_" + appID + "_" + sec, im.HashSecret(sec)
}

// appView is an app as GET /v1/apps shows it: never its key or hash.
type appView struct {
	AppID         string     `json:"appId"`
	AllowUsers    []string   `json:"allowUsers"`
	AllowGroups   []string   `json:"allowGroups"`
	RatePerMinute int        `json:"ratePerMinute"`
	CreatedAt     time.Time  `json:"createdAt"`
	KeyRotatedAt  *time.Time `json:"keyRotatedAt,omitempty"`
	Revoked       bool       `json:"revoked"`
	RevokedAt     *time.Time `json:"revokedAt,omitempty"`
	WebhookURL    string     `json:"webhookUrl,omitempty"`
	CallbackQueue string     `json:"callbackQueueUrl,omitempty"`
}

// listApps serves GET /v1/apps (admin key): every app, revoked ones too.
func (h *AlertsAPI) listApps(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	if err := h.requireAdmin(ctx, req); err != nil {
		return 0, nil, err
	}
	apps, err := h.AlertStore.Apps(ctx)
	if err != nil {
		return 0, nil, err
	}
	views := make([]appView, len(apps))
	for i, a := range apps {
		views[i] = appView{AppID: a.ID, AllowUsers: orEmpty(a.AllowUsers), AllowGroups: orEmpty(a.AllowGroups), RatePerMinute: a.RatePerMinute,
			CreatedAt: a.CreatedAt, KeyRotatedAt: timeOrNil(a.KeyRotatedAt), Revoked: a.Revoked, RevokedAt: timeOrNil(a.RevokedAt)}
		if a.Webhook != nil && a.Webhook.Queue {
			views[i].CallbackQueue = a.Webhook.URL
		} else if a.Webhook != nil {
			views[i].WebhookURL = a.Webhook.URL
		}
	}
	return http.StatusOK, map[string]any{"apps": views}, nil
}

// rotateAppKey serves POST /v1/apps/{appId}/key (admin key): a new key,
// shown once; the old one stops working at once.
func (h *AlertsAPI) rotateAppKey(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	if err := h.requireAdmin(ctx, req); err != nil {
		return 0, nil, err
	}
	id := req.PathParameters["appId"]
	key, hash := newAppKey(id)
	err := h.AlertStore.RotateAppKey(ctx, id, hash, h.now())
	if errors.Is(err, im.ErrNotFound) {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no app %s (or it is revoked: create it again)", id)
	}
	if err != nil {
		return 0, nil, err
	}
	h.log().InfoContext(ctx, "app key rotated", "app", id)
	return http.StatusOK, map[string]string{"appId": id, "key": key}, nil
}

// orEmpty is v, or an empty list instead of nil (JSON [] rather than null).
func orEmpty(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// timeOrNil is t, or nil when it is zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// revokeApp serves DELETE /v1/apps/{appId} (admin key).
func (h *AlertsAPI) revokeApp(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	if err := h.requireAdmin(ctx, req); err != nil {
		return 0, nil, err
	}
	err := h.AlertStore.RevokeApp(ctx, req.PathParameters["appId"], h.now())
	if errors.Is(err, im.ErrNotFound) {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no app %s", req.PathParameters["appId"])
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// requireAppOrAdmin refuses a caller that is neither the admin nor app
// appID itself.
func (h *AlertsAPI) requireAppOrAdmin(ctx context.Context, req events.APIGatewayV2HTTPRequest, appID string) error {
	p, err := h.authenticate(ctx, req)
	if err != nil {
		return err
	}
	if !p.admin && p.app.ID != appID {
		return wire.Problemf(wire.CodeForbidden, "this needs the admin key or app %s's own key", appID)
	}
	if h.Callbacks == nil {
		return wire.Problemf(wire.CodeBadRequest, "this deployment has no status callbacks")
	}
	return nil
}

// setWebhook serves PUT /v1/apps/{appId}/webhook (the admin or the app):
// status callbacks go to the URL, signed with a new secret shown once in
// the answer (a PUT again replaces both; the old secret stops at once).
func (h *AlertsAPI) setWebhook(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	id := req.PathParameters["appId"]
	if err := h.requireAppOrAdmin(ctx, req, id); err != nil {
		return 0, nil, err
	}
	raw, err := requestBody(req)
	if err != nil {
		return 0, nil, err
	}
	if h.Validator != nil {
		if err := h.Validator.Validate("WebhookRequest", raw); err != nil {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
		}
	}
	var in struct {
		URL      string `json:"url"`
		SQSQueue string `json:"sqsQueueUrl"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || (in.URL == "") == (in.SQSQueue == "") {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "body must be {\"url\": \"https://…\"} or {\"sqsQueueUrl\": \"https://sqs.<region>.amazonaws.com/<account>/%s…\"}", CallbackQueuePrefix)
	}
	w := im.Webhook{URL: in.URL, Secret: webhook.NewSecret(), SetAt: h.now()}
	if in.SQSQueue != "" {
		w.URL, w.Queue = in.SQSQueue, true
		if err := webhook.CheckURL(in.SQSQueue, h.WebhookPrivate); err != nil {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "sqsQueueUrl: %s", err.Error())
		}
		if name := in.SQSQueue[strings.LastIndexByte(in.SQSQueue, '/')+1:]; !strings.HasPrefix(name, CallbackQueuePrefix) || len(name) > 80 {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "sqsQueueUrl must name a queue called %s… (at most 80 characters): Signet may send to those only", CallbackQueuePrefix)
		}
	} else if err := webhook.CheckURL(in.URL, h.WebhookPrivate); err != nil {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
	}
	err = h.Callbacks.SetWebhook(ctx, id, w)
	if errors.Is(err, im.ErrNotFound) {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no app %s (or it is revoked)", id)
	}
	if err != nil {
		return 0, nil, err
	}
	h.log().InfoContext(ctx, "webhook set", "app", id, "url", w.URL, "sqs", w.Queue)
	out := map[string]string{"appId": id, "url": w.URL, "secret": w.Secret}
	if w.Queue {
		out = map[string]string{"appId": id, "sqsQueueUrl": w.URL, "secret": w.Secret}
	}
	return http.StatusOK, out, nil
}

// removeWebhook serves DELETE /v1/apps/{appId}/webhook (the admin or the
// app): no more callbacks are recorded; those recorded stay listed.
func (h *AlertsAPI) removeWebhook(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	id := req.PathParameters["appId"]
	if err := h.requireAppOrAdmin(ctx, req, id); err != nil {
		return 0, nil, err
	}
	err := h.Callbacks.RemoveWebhook(ctx, id)
	if errors.Is(err, im.ErrNotFound) {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "no app %s", id)
	}
	if err != nil {
		return 0, nil, err
	}
	h.log().InfoContext(ctx, "webhook removed", "app", id)
	return http.StatusNoContent, nil, nil
}

// eventView is a callback event as GET /v1/apps/{appId}/events lists it:
// the body its webhook gets, and how its delivery stands.
type eventView struct {
	callbackBody
	Delivery struct {
		State         string `json:"state"`
		Attempts      int    `json:"attempts"`
		NextAttemptAt string `json:"nextAttemptAt,omitempty"`
		LastError     string `json:"lastError,omitempty"`
		DeliveredAt   string `json:"deliveredAt,omitempty"`
	} `json:"delivery"`
}

// eventStates are the ?state= filters of GET /v1/apps/{appId}/events.
var eventStates = map[string][]string{
	"undelivered": {im.CallbackPending, im.CallbackDead},
	"pending":     {im.CallbackPending},
	"dead":        {im.CallbackDead},
	"delivered":   {im.CallbackDone},
	"all":         nil,
}

// listEvents serves GET /v1/apps/{appId}/events (the admin or the app):
// the app's callback events, oldest alert first, ?state=undelivered (the
// default: pending and dead), pending, dead, delivered or all; ?limit=
// 1-100 (default 100) and ?after=<event id> to page on. An app that
// missed deliveries reads them here and dedupes on id, like deliveries.
func (h *AlertsAPI) listEvents(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	id := req.PathParameters["appId"]
	if err := h.requireAppOrAdmin(ctx, req, id); err != nil {
		return 0, nil, err
	}
	q := req.QueryStringParameters
	state := cmp.Or(q["state"], "undelivered")
	states, ok := eventStates[state]
	if !ok {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "state must be undelivered, pending, dead, delivered or all")
	}
	limit := 100
	if v := q["limit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "limit must be 1-100")
		}
		limit = n
	}
	after := q["after"]
	if _, ok := im.ParseCallbackEventID(after); after != "" && !ok {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "after must be an event id")
	}
	evs, next, err := h.Callbacks.CallbackEvents(ctx, id, after, limit, states...)
	if err != nil {
		return 0, nil, err
	}
	out := struct {
		Events []eventView `json:"events"`
		Next   string      `json:"next,omitempty"`
	}{Events: []eventView{}, Next: next}
	for _, e := range evs {
		v := eventView{callbackBody: bodyOf(e)}
		v.Delivery.State, v.Delivery.Attempts, v.Delivery.LastError, v.Delivery.DeliveredAt = e.State, e.Attempts, e.LastError, ts(e.DeliveredAt)
		if e.State == im.CallbackPending {
			v.Delivery.NextAttemptAt = ts(e.NextAt)
		}
		out.Events = append(out.Events, v)
	}
	return http.StatusOK, out, nil
}

// retryEvents serves POST /v1/apps/{appId}/events/retry (the admin or the
// app): dead events — those named in eventIds, or the first 100 — are
// pending again with their tries counted afresh, and delivered by a
// callback job per alert.
func (h *AlertsAPI) retryEvents(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	id := req.PathParameters["appId"]
	if err := h.requireAppOrAdmin(ctx, req, id); err != nil {
		return 0, nil, err
	}
	if strings.TrimSpace(req.Body) == "" {
		req.Body, req.IsBase64Encoded = "{}", false // no body: every dead event
	}
	raw, err := requestBody(req)
	if err != nil {
		return 0, nil, err
	}
	if h.Validator != nil {
		if err := h.Validator.Validate("RetryEventsRequest", raw); err != nil {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
		}
	}
	var in struct {
		EventIDs []string `json:"eventIds"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return 0, nil, wire.Problemf(wire.CodeBadRequest, "body must be {\"eventIds\": […]} or {}")
	}
	ids := in.EventIDs
	if len(ids) == 0 {
		dead, _, err := h.Callbacks.CallbackEvents(ctx, id, "", 100, im.CallbackDead)
		if err != nil {
			return 0, nil, err
		}
		for _, e := range dead {
			ids = append(ids, e.ID)
		}
	}
	retried := []string{}
	var alerts []im.MessageID
	for _, eid := range ids {
		if _, ok := im.ParseCallbackEventID(eid); !ok {
			return 0, nil, wire.Problemf(wire.CodeBadRequest, "%q is not an event id", eid)
		}
		e, ok, err := h.Callbacks.RetryCallbackEvent(ctx, id, eid, h.now())
		if err != nil {
			return 0, nil, err
		}
		if ok {
			retried = append(retried, eid)
			if !slices.Contains(alerts, e.Message) {
				alerts = append(alerts, e.Message)
			}
		}
	}
	if len(alerts) > 0 && h.FanoutQueue != nil {
		jobs := make([]im.FanoutJob, len(alerts))
		for i, m := range alerts {
			jobs[i] = im.FanoutJob{Kind: im.FanoutCallback, Alert: m}
		}
		if err := h.FanoutQueue.Enqueue(ctx, 0, jobs...); err != nil {
			return 0, nil, err
		}
	}
	h.log().InfoContext(ctx, "callback events retried", "app", id, "events", len(retried))
	return http.StatusOK, map[string]any{"retried": retried}, nil
}
