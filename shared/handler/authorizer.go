package handler

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/im"
)

// Keys of the authorizer context passed to every route of a connection.
const (
	ContextUser   = "userId"
	ContextDevice = "deviceId"
	// ContextExpires is the token's expiry, Unix seconds as a string (API
	// Gateway passes authorizer context values as strings).
	ContextExpires = "tokenExpires"
)

// ErrUnauthorized is what the authorizer returns for a request without a
// token: API Gateway answers the upgrade with 401. (Its text is the one API
// Gateway recognises.)
var ErrUnauthorized = errors.New("Unauthorized")

// Authorize is the $connect REQUEST authorizer. The token comes from the
// "token" query parameter or an "Authorization: Bearer" header; the device
// from the token's "did" claim, else the "deviceId" query parameter, else
// "default". No token → 401; a bad or expired token → Deny (403).
func (h *Authorizer) Authorize(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	token := req.QueryStringParameters["token"]
	if token == "" {
		token = bearer(req.Headers)
	}
	claims, device, err := h.verify(ctx, token, req.QueryStringParameters["deviceId"])
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return events.APIGatewayCustomAuthorizerResponse{}, ErrUnauthorized
	case errors.Is(err, errMalformedDevice):
		h.log().InfoContext(ctx, "connection refused", "reason", "malformed deviceId", "userId", claims.User)
		return policy(string(claims.User), "Deny", req.MethodArn, nil), nil
	case err != nil:
		h.log().InfoContext(ctx, "connection refused", "reason", err.Error(), "requestId", req.RequestContext.RequestID)
		return policy("anonymous", "Deny", req.MethodArn, nil), nil
	}
	return policy(string(claims.User), "Allow", req.MethodArn, map[string]any{
		ContextUser:    string(claims.User),
		ContextDevice:  string(device),
		ContextExpires: strconv.FormatInt(claims.Expires.Unix(), 10),
	}), nil
}

// errMalformedDevice refuses a handshake whose device id is not one.
var errMalformedDevice = errors.New("deviceId must be 1-64 characters of [A-Za-z0-9._@-]")

// verify checks token as $connect does and returns its claims and the
// device the connection would be: the token's "did" claim, else
// deviceParam (the "deviceId" query parameter), else "default". Errors:
// auth.ErrNoToken, auth.ErrBadToken (wrapped, saying why), errMalformedDevice
// (with the claims), or an identity provider's keys that could not be read.
func (h *Authorizer) verify(ctx context.Context, token, deviceParam string) (auth.Claims, im.DeviceID, error) {
	var claims auth.Claims
	var err error
	if h.OIDC != nil && token != "" && auth.Algorithm(token) != "HS256" {
		claims, err = h.OIDC.Verify(ctx, token, h.now())
	} else {
		claims, err = h.TokenPolicy.Verify(h.Secret, token, h.now())
	}
	if err != nil {
		return auth.Claims{}, "", err
	}
	device := cmp.Or(claims.Device, im.DeviceID(deviceParam), im.DefaultDevice)
	if !device.Valid() {
		return claims, "", errMalformedDevice
	}
	return claims, device, nil
}

// bearer returns the token of an "Authorization: Bearer" header; header name
// and scheme in any case (RFC 9110: the scheme is case-insensitive).
func bearer(headers map[string]string) string {
	for k, v := range headers {
		if strings.EqualFold(k, "authorization") {
			if scheme, t, ok := strings.Cut(strings.TrimSpace(v), " "); ok && strings.EqualFold(scheme, "Bearer") {
				return strings.TrimSpace(t)
			}
		}
	}
	return ""
}

// policy is the authorizer answer that allows or denies principal to
// invoke resource, with ctx as the connection's authorizer context.
func policy(principal, effect, resource string, ctx map[string]any) events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: principal,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
			Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{
				Action:   []string{"execute-api:Invoke"},
				Effect:   effect,
				Resource: []string{resource},
			}},
		},
		Context: ctx,
	}
}
