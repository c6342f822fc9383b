package handler

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// DeviceAdmission says, without admitting anyone, whether $connect would
// admit a device under the device limit (dynamo's Store.DeviceAdmissible).
type DeviceAdmission interface {
	DeviceAdmissible(ctx context.Context, u im.UserID, d im.DeviceID, limit int) error
}

// Handshakes answers GET /v1/handshake on the HTTP API: what a WebSocket
// handshake with the same token and deviceId would meet at $connect,
// without making one. A browser's WebSocket sees only that a handshake
// failed, never its HTTP status, so the TypeScript SDK asks here after a
// failure: a refused or expired token (401), a malformed device id (400),
// the user's connect rate limit (429, with retryAfterMs) or a new device
// beyond the device limit (409). Nothing is written: no connect is
// counted and no device admitted (a strongly consistent read of the
// user's connect counter and a Query of their device cursors).
type Handshakes struct {
	*core
	auth       *Authorizer
	Devices    DeviceAdmission // nil: the device limit is not checked
	MaxDevices int
	// checks limits each user's checks in this container (HandshakeChecks
	// per minute; no global counter: a check writes nothing).
	checks *ratelimit.Limiter
}

// HandshakeChecks is how many handshake checks a user may make per minute
// in one container: an SDK asks once per failed handshake, and its backoff
// makes that a few a minute.
const HandshakeChecks = 30

// Handshakes is the handshake check's use case.
func (d *Deps) Handshakes() *Handshakes {
	h := &Handshakes{core: d.core(), auth: d.Authorizer(), MaxDevices: deviceLimit(d.MaxDevices),
		checks: &ratelimit.Limiter{Limits: map[ratelimit.Action]ratelimit.Limit{handshakeCheck: {Per: HandshakeChecks, Window: time.Minute}}}}
	if a, ok := d.Inbox.(DeviceAdmission); ok {
		h.Devices = a
	}
	return h
}

// handshakeCheck is the action the checks are limited as.
const handshakeCheck ratelimit.Action = "handshake"

// HandshakeRoute is the HTTP API route of the handshake check.
const HandshakeRoute = "GET /v1/handshake"

// handshakeOK is the answer to a handshake that would be admitted.
type handshakeOK struct {
	UserID   string `json:"userId"`
	DeviceID string `json:"deviceId"`
	// TokenExpiresAt is when the token stops admitting connections (and
	// ends those it opened), Unix milliseconds.
	TokenExpiresAt int64 `json:"tokenExpiresAt"`
}

// handshakeRefused is the answer to one that would be refused: the error
// of every HTTP API route, with retryAfterMs for rate_limited (in the
// body: a page of another origin reads no Retry-After header unless it is
// exposed).
type handshakeRefused struct {
	Error struct {
		Code         wire.Code `json:"code"`
		Message      string    `json:"message"`
		RetryAfterMs int64     `json:"retryAfterMs,omitempty"`
	} `json:"error"`
}

// Handshake serves GET /v1/handshake?token=…&deviceId=… (or the token in
// "Authorization: Bearer"). Its answers carry Access-Control-Allow-Origin
// "*": the check tells the token's holder only what a handshake would,
// and the token travels in the request, never in a cookie, so a page of
// any origin that holds one may ask (a GET with the token in the query
// string needs no CORS preflight).
func (h *Handshakes) Handshake(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	status, body := h.check(ctx, req)
	resp := jsonResponse(status, body)
	resp.Headers["Access-Control-Allow-Origin"] = "*"
	resp.Headers["Cache-Control"] = "no-store"
	if r, ok := body.(handshakeRefused); ok && r.Error.RetryAfterMs > 0 {
		resp.Headers["Retry-After"] = strconv.FormatInt((r.Error.RetryAfterMs+999)/1000, 10)
	}
	return resp, nil
}

// check returns the status and body of the answer.
func (h *Handshakes) check(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any) {
	refuse := func(code wire.Code, retryAfterMs int64, msg string) (int, any) {
		var b handshakeRefused
		b.Error.Code, b.Error.Message, b.Error.RetryAfterMs = code, msg, retryAfterMs
		return wire.HTTPStatus(code), b
	}
	if req.RouteKey != HandshakeRoute {
		return refuse(wire.CodeNotFound, 0, "no route "+req.RouteKey)
	}
	token := req.QueryStringParameters["token"]
	if token == "" {
		token = bearer(req.Headers)
	}
	claims, device, err := h.auth.verify(ctx, token, req.QueryStringParameters["deviceId"])
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return refuse(wire.CodeUnauthorized, 0, "no token: pass the token the WebSocket handshake uses as the token query parameter or in Authorization: Bearer")
	case errors.Is(err, auth.ErrBadToken):
		return refuse(wire.CodeUnauthorized, 0, "the token is refused ("+err.Error()+"): get a new one")
	case errors.Is(err, errMalformedDevice):
		return refuse(wire.CodeBadRequest, 0, err.Error())
	case err != nil:
		h.log().ErrorContext(ctx, "handshake check: token not verified", "err", err.Error(), "requestId", req.RequestContext.RequestID)
		return refuse(wire.CodeInternal, 0, "the token could not be verified now (the identity provider's keys were not read): try again")
	}
	u := claims.User
	if wait, ok := h.checks.Allow(ctx, u, handshakeCheck, h.now()); !ok {
		return refuse(wire.CodeRateLimited, wait.Milliseconds()+1, "more than "+strconv.Itoa(HandshakeChecks)+" handshake checks a minute: wait before asking again")
	}
	wait, ok, err := h.Limits.Check(ctx, u, ratelimit.Connect, h.now())
	if err != nil {
		// $connect admits a connection when its counter fails (fail open).
		h.log().WarnContext(ctx, "handshake check: connect counter not read", "err", err.Error(), "userId", u)
	}
	if !ok {
		return refuse(wire.CodeRateLimited, wait.Milliseconds()+1, "this user opened too many connections in this window, or kept sending what a rate limit refused: connections are refused until it ends")
	}
	if h.Devices != nil {
		err := h.Devices.DeviceAdmissible(ctx, u, device, h.MaxDevices)
		if errors.Is(err, im.ErrDeviceLimit) {
			return refuse(wire.CodeConflict, 0, "device "+string(device)+" is new and "+string(u)+" already has "+strconv.Itoa(h.MaxDevices)+
				" devices, the most allowed: an operator can forget one that is gone (signet devices forget, DELETE /v1/users/{userId}/devices/{deviceId}), or connect with a device id the user has used before")
		}
		if err != nil {
			h.log().ErrorContext(ctx, "handshake check: devices not read", "err", err.Error(), "userId", u)
			return refuse(wire.CodeInternal, 0, "the user's devices could not be read now: try again")
		}
	}
	return 200, handshakeOK{UserID: string(u), DeviceID: string(device), TokenExpiresAt: claims.Expires.UnixMilli()}
}
