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
	User    im.UserID
	Device  im.DeviceID // empty when the token names no device
	Expires time.Time   // the token's "exp": a connection opened with it ends then
}

// DefaultMaxLifetime is the longest a token may be valid (exp − iat) unless
// Policy.MaxLifetime says otherwise.
const DefaultMaxLifetime = 24 * time.Hour

// ClockSkew is how far in the future a token's "iat" may lie (the issuer's
// clock may run a little ahead); beyond it the token is refused.
const ClockSkew = 30 * time.Second

// Policy is what a token must satisfy besides a valid signature and an
// "exp" after now. The zero Policy checks no issuer or audience and allows
// DefaultMaxLifetime.
type Policy struct {
	// Issuer, when set, must equal the token's "iss".
	Issuer string
	// Audience, when set, must be one of the token's "aud".
	Audience string
	// MaxLifetime bounds exp − iat (exp − now for a token without "iat");
	// 0 means DefaultMaxLifetime. A token valid until year 9999 is refused.
	MaxLifetime time.Duration
}

type claims struct {
	jwt.RegisteredClaims
	Device string `json:"did,omitempty"`
}

// Mint returns a token for user (and device, if not empty) valid for ttl.
func Mint(secret []byte, user im.UserID, device im.DeviceID, now time.Time, ttl time.Duration) (string, error) {
	if !user.Person() {
		return "", fmt.Errorf("mint token: invalid user id %q (1-64 characters of [A-Za-z0-9._@-], not starting with %q)", user, im.AppSenderPrefix)
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

// Verify checks an HS256 token with the zero Policy.
func Verify(secret []byte, token string, now time.Time) (Claims, error) {
	return Policy{}.Verify(secret, token, now)
}

// Verify checks an HS256 token's signature, expiry, issue time and lifetime
// at now, and issuer and audience when p names them, and returns its claims.
func (p Policy) Verify(secret []byte, token string, now time.Time) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if p.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(p.Issuer))
	}
	if p.Audience != "" {
		opts = append(opts, jwt.WithAudience(p.Audience))
	}
	var c claims
	if _, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return secret, nil }, opts...); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	if err := p.checkTimes(c.RegisteredClaims, now); err != nil {
		return Claims{}, err
	}
	out := Claims{User: im.UserID(c.Subject), Device: im.DeviceID(c.Device), Expires: c.ExpiresAt.Time}
	if !out.User.Person() || (out.Device != "" && !out.Device.Valid()) {
		return Claims{}, fmt.Errorf("%w: subject or device id malformed or reserved", ErrBadToken)
	}
	return out, nil
}

// checkTimes refuses a token issued in the future or valid for longer than
// the policy's maximum lifetime.
func (p Policy) checkTimes(c jwt.RegisteredClaims, now time.Time) error {
	maxLife := p.MaxLifetime
	if maxLife <= 0 {
		maxLife = DefaultMaxLifetime
	}
	from := now
	if c.IssuedAt != nil {
		if c.IssuedAt.After(now.Add(ClockSkew)) {
			return fmt.Errorf("%w: issued in the future (iat %s)", ErrBadToken, c.IssuedAt.UTC().Format(time.RFC3339))
		}
		from = c.IssuedAt.Time
	}
	if life := c.ExpiresAt.Sub(from); life > maxLife {
		return fmt.Errorf("%w: valid for %s, longer than the %s allowed", ErrBadToken, life.Round(time.Second), maxLife)
	}
	return nil
}
