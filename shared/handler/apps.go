package handler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// requireAdmin refuses a caller without the admin key.
func (h *Handler) requireAdmin(ctx context.Context, req events.APIGatewayV2HTTPRequest) error {
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
func (h *Handler) createApp(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
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
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	sec := hex.EncodeToString(secret)
	app := im.App{ID: in.Name, KeyHash: im.HashSecret(sec), AllowUsers: in.AllowUsers, AllowGroups: in.AllowGroups, RatePerMinute: in.RatePerMinute, CreatedAt: h.now()}
	if app.RatePerMinute == 0 {
		app.RatePerMinute = DefaultAppRate
	}
	if err := h.AlertStore.CreateApp(ctx, app); err != nil {
		return 0, nil, err // im.ErrAppExists: conflict (wire.ProblemOf)
	}
	h.log().InfoContext(ctx, "app created", "app", app.ID, "allowUsers", len(app.AllowUsers))
	return http.StatusCreated, map[string]string{"appId": app.ID, "key": "sk_" + app.ID + "_" + sec}, nil
}

// revokeApp serves DELETE /v1/apps/{appId} (admin key).
func (h *Handler) revokeApp(ctx context.Context, req events.APIGatewayV2HTTPRequest) (int, any, error) {
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
