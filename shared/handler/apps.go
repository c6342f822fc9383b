package handler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
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
