package handler

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// AlertStore is the storage of the HTTP alerts API.
type AlertStore interface {
	CreateApp(ctx context.Context, a im.App) error
	App(ctx context.Context, id string) (im.App, error)
	RevokeApp(ctx context.Context, id string, now time.Time) error
	Apps(ctx context.Context) ([]im.App, error)
	RotateAppKey(ctx context.Context, id, keyHash string, now time.Time) error
	TakeAppSlot(ctx context.Context, id string, now time.Time, perMinute int) (time.Duration, error)
	KeyedAlert(ctx context.Context, appID, key, fingerprint string) (im.AlertStart, error)
	BeginAlert(ctx context.Context, appID, key, fingerprint string, a im.Alert, now time.Time) (im.AlertStart, error)
	FinishAlert(ctx context.Context, appID, key, response string) error
	Alert(ctx context.Context, id im.MessageID) (im.Alert, error)
	AppendInbox(ctx context.Context, u im.UserID, m im.Message, expiry time.Duration, now time.Time) (int64, error)
	InboxSeq(ctx context.Context, u im.UserID, id im.MessageID) (int64, error)
	Devices(ctx context.Context, u im.UserID) (map[im.DeviceID]im.DeviceCursor, error)
	Events(ctx context.Context, id im.MessageID) ([]im.Event, error)
	Answer(ctx context.Context, id im.MessageID, a im.Answer, firstWins bool) (im.Answer, bool, error)
	Answers(ctx context.Context, id im.MessageID) ([]im.Answer, error)
}

// Validator checks a request body against a named OpenAPI schema.
type Validator interface {
	Validate(schema string, body []byte) error
}

// HTTP API limits and defaults.
const (
	MaxAlertRequestBytes = 64 << 10
	DefaultAppRate       = 600 // posts per minute
)

// httpErrorBody is the body of an HTTP API error: the code and message of
// wire.ProblemOf, as the WebSocket API's error frames carry them.
type httpErrorBody struct {
	Error struct {
		Code    wire.Code `json:"code"`
		Message string    `json:"message"`
	} `json:"error"`
}

// Alerts serves the HTTP API (API Gateway HTTP API, payload format 2.0):
// POST /v1/messages, GET /v1/messages/{id}, GET /v1/messages/{id}/trace,
// GET and POST /v1/apps, DELETE /v1/apps/{appId},
// POST /v1/apps/{appId}/key, PUT and DELETE /v1/apps/{appId}/webhook,
// GET /v1/apps/{appId}/events and POST /v1/apps/{appId}/events/retry,
// GET /v1/users/{userId}/devices, DELETE /v1/users/{userId}/devices/{deviceId}.
func (h *AlertsAPI) Alerts(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	reqID := req.RequestContext.RequestID
	status, body, err := h.routeAlerts(ctx, req)
	if err != nil {
		p := wire.ProblemOf(err)
		status := wire.HTTPStatus(p.Code)
		if p.Code == wire.CodeInternal {
			h.log().ErrorContext(ctx, "alerts request failed", "err", err.Error(), "route", req.RouteKey, "requestId", reqID)
		} else {
			h.log().InfoContext(ctx, "alerts request rejected", "status", status, "code", p.Code, "msg", p.Msg, "route", req.RouteKey, "requestId", reqID)
		}
		var b httpErrorBody
		b.Error.Code, b.Error.Message = p.Code, p.Msg
		resp := jsonResponse(status, b)
		if p.RetryAfterMs > 0 {
			resp.Headers["Retry-After"] = strconv.FormatInt((p.RetryAfterMs+999)/1000, 10)
		}
		return resp, nil
	}
	if body == nil {
		return events.APIGatewayV2HTTPResponse{StatusCode: status}, nil
	}
	return jsonResponse(status, body), nil
}

// jsonResponse is an HTTP response of status with v as its JSON body.
func jsonResponse(status int, v any) events.APIGatewayV2HTTPResponse {
	b, _ := json.Marshal(v)
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(b)}
}

// routeAlerts dispatches an HTTP API request by its route key.
func (h *AlertsAPI) routeAlerts(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
	if h.AlertStore == nil {
		return 0, nil, wire.Problemf(wire.CodeNotFound, "the alerts API is not configured")
	}
	switch req.RouteKey {
	case "POST /v1/messages":
		return h.postAlert(ctx, req)
	case "GET /v1/messages/{id}":
		return h.getAlert(ctx, req)
	case "GET /v1/messages/{id}/trace":
		return h.getTrace(ctx, req)
	case "POST /v1/apps":
		return h.createApp(ctx, req)
	case "DELETE /v1/apps/{appId}":
		return h.revokeApp(ctx, req)
	case "GET /v1/apps":
		return h.listApps(ctx, req)
	case "PUT /v1/apps/{appId}/webhook":
		return h.setWebhook(ctx, req)
	case "DELETE /v1/apps/{appId}/webhook":
		return h.removeWebhook(ctx, req)
	case "GET /v1/apps/{appId}/events":
		return h.listEvents(ctx, req)
	case "POST /v1/apps/{appId}/events/retry":
		return h.retryEvents(ctx, req)
	case "POST /v1/apps/{appId}/key":
		return h.rotateAppKey(ctx, req)
	case "GET /v1/users/{userId}/devices":
		return h.listDevices(ctx, req)
	case "DELETE /v1/users/{userId}/devices/{deviceId}":
		return h.forgetDevice(ctx, req)
	}
	return 0, nil, wire.Problemf(wire.CodeNotFound, "no route %s", req.RouteKey)
}

// principal is who called: an app, or the admin.
type principal struct {
	app   im.App
	admin bool
}

// header returns a request header by its name, in any case.
func header(req events.APIGatewayV2HTTPRequest, name string) string {
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// authenticate resolves the bearer key to an app or the admin.
func (h *AlertsAPI) authenticate(ctx context.Context, req events.APIGatewayV2HTTPRequest) (principal, error) {
	scheme, key, _ := strings.Cut(strings.TrimSpace(header(req, "Authorization")), " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return principal{}, wire.Problemf(wire.CodeUnauthorized, "Authorization: Bearer <app key or admin key> is required")
	}
	if h.AdminKeyHash != "" && subtle.ConstantTimeCompare([]byte(im.HashSecret(key)), []byte(h.AdminKeyHash)) == 1 {
		return principal{admin: true}, nil
	}
	appID, secret, ok := im.ParseAppKey(key)
	if !ok {
		return principal{}, wire.Problemf(wire.CodeUnauthorized, "the key is neither the admin key nor an app key (sk_<app>_<secret>)")
	}
	app, err := h.AlertStore.App(ctx, appID)
	if errors.Is(err, im.ErrNotFound) || (err == nil && (!app.Matches(secret) || app.Revoked)) {
		return principal{}, wire.Problemf(wire.CodeUnauthorized, "invalid or revoked app key")
	}
	if err != nil {
		return principal{}, err
	}
	return principal{app: app}, nil
}

// requestBody returns a request's body (base64-decoded when API Gateway
// encoded it), refusing one over MaxAlertRequestBytes.
func requestBody(req events.APIGatewayV2HTTPRequest) ([]byte, error) {
	raw := []byte(req.Body)
	if req.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(req.Body)
		if err != nil {
			return nil, wire.Problemf(wire.CodeBadRequest, "body is not valid base64")
		}
		raw = b
	}
	if len(raw) > MaxAlertRequestBytes {
		return nil, wire.Problemf(wire.CodeTooLarge, "body is %d bytes; the limit is %d", len(raw), MaxAlertRequestBytes)
	}
	// The same rules as a message body: one JSON value every reader reads
	// alike (valid UTF-8, no key twice, numbers a double holds).
	if _, err := wire.CanonicalBody(raw); err != nil {
		return nil, wire.Problemf(wire.CodeBadRequest, "%s", err.Error())
	}
	return raw, nil
}
