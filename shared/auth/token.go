// Package auth mints and verifies Signet's client tokens: JWT HS256 with the
// user id in "sub" and an optional device id in "did".
package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/signet-im/signet/shared/im"
)

// Errors of Verify.
var (
	// ErrNoToken: the request carried no token.
	ErrNoToken = errors.New("no token")
	// ErrBadToken: the token is malformed, badly signed, expired or names no valid user.
	ErrBadToken = errors.New("invalid token")
)

// Claims are the verified contents of a token.
type Claims struct {
	User   im.UserID
	Device im.DeviceID // empty when the token names no device
}

type claims struct {
	jwt.RegisteredClaims
	Device string `json:"did,omitempty"`
}

// Mint returns a token for user (and device, if not empty) valid for ttl.
func Mint(secret []byte, user im.UserID, device im.DeviceID, now time.Time, ttl time.Duration) (string, error) {
	if !user.Valid() {
		return "", fmt.Errorf("mint token: invalid user id %q", user)
	}
	if device != "" && !device.Valid() {
		return "", fmt.Errorf("mint token: invalid device id %q", device)
	}
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   string(user),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Device: string(device),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verify checks an HS256 token's signature and expiry at now and returns its claims.
func Verify(secret []byte, token string, now time.Time) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	out := Claims{User: im.UserID(c.Subject), Device: im.DeviceID(c.Device)}
	if !out.User.Valid() || (out.Device != "" && !out.Device.Valid()) {
		return Claims{}, fmt.Errorf("%w: subject or device id malformed", ErrBadToken)
	}
	return out, nil
}
