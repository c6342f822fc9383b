package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/signet-im/signet/shared/im"
)

// OIDC verifies tokens an OpenID Connect provider (Amazon Cognito, Entra ID,
// Okta, …) signed with RS256 or ES256, against the provider's published
// keys (JWKS). Keys are cached by issuer and key id; a token naming an
// unknown key id refreshes the set, at most once per RefreshInterval, and
// at most MaxKeys keys are kept. Safe for concurrent use.
type OIDC struct {
	// Issuer must equal the token's "iss" (for Cognito
	// https://cognito-idp.<region>.amazonaws.com/<user pool id>); its
	// /.well-known/openid-configuration names the JWKS.
	Issuer string
	// Audience must be one of the token's "aud" (Cognito: the app client
	// id, present in ID tokens).
	Audience string
	// UserClaim names the claim holding the Signet user id (default "sub";
	// e.g. "email" or "cognito:username"). Its value must be a valid user id.
	UserClaim string
	// JWKSURL, when set, is used instead of discovery.
	JWKSURL string
	// Policy bounds lifetime and issue time as for HS256 tokens (its Issuer
	// and Audience are ignored: the fields above apply).
	Policy Policy
	// Client fetches discovery and keys (default: 10 s timeout).
	Client *http.Client

	mu        sync.Mutex
	keys      map[string]crypto.PublicKey // issuer + "|" + kid
	fetchedAt time.Time
	fetching  chan struct{} // closed when the fetch under way ends (nil: none)
}

// RefreshInterval is the least time between two fetches of the keys: a
// stream of tokens with made-up key ids cannot make Signet hammer the
// provider.
const RefreshInterval = 30 * time.Second

// MaxKeys bounds the cached keys of the issuer.
const MaxKeys = 64

// Algorithm returns the "alg" of a token's header, unverified ("" when the
// token is not a JWT).
func Algorithm(token string) string {
	head, _, ok := strings.Cut(token, ".")
	if !ok {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Alg
}

// Verify checks an RS256 or ES256 token of the issuer at now and returns
// its claims (the user from UserClaim; no device: the client names it).
func (o *OIDC) Verify(ctx context.Context, token string, now time.Time) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return o.key(ctx, kid, now)
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}),
		jwt.WithIssuer(o.Issuer), jwt.WithAudience(o.Audience), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	var reg jwt.RegisteredClaims
	if exp, err := claims.GetExpirationTime(); err == nil {
		reg.ExpiresAt = exp
	}
	if iat, err := claims.GetIssuedAt(); err == nil {
		reg.IssuedAt = iat
	}
	if err := o.Policy.checkTimes(reg, now); err != nil {
		return Claims{}, err
	}
	name := o.UserClaim
	if name == "" {
		name = "sub"
	}
	user, _ := claims[name].(string)
	if !im.UserID(user).Person() {
		return Claims{}, fmt.Errorf("%w: claim %q is not a user id (1-64 characters of [A-Za-z0-9._@-], not starting with %q)", ErrBadToken, name, im.AppSenderPrefix)
	}
	return Claims{User: im.UserID(user), Expires: reg.ExpiresAt.Time}, nil
}

// key returns the issuer's key kid, fetching the keys when it is unknown
// and the last fetch is older than RefreshInterval. The fetch runs without
// the lock, so tokens with cached keys verify while it is under way; one
// fetch is in flight at a time, and callers that need it wait for it.
func (o *OIDC) key(ctx context.Context, kid string, now time.Time) (crypto.PublicKey, error) {
	id := o.Issuer + "|" + kid
	for {
		o.mu.Lock()
		if k, ok := o.keys[id]; ok {
			o.mu.Unlock()
			return k, nil
		}
		if wait := o.fetching; wait != nil {
			o.mu.Unlock()
			select {
			case <-wait:
				continue // look again: the fetch may have brought it
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if !o.fetchedAt.IsZero() && now.Sub(o.fetchedAt) < RefreshInterval {
			o.mu.Unlock()
			return nil, fmt.Errorf("unknown key id %q (keys fetched %s ago)", kid, now.Sub(o.fetchedAt).Round(time.Second))
		}
		o.fetchedAt = now
		done := make(chan struct{})
		o.fetching = done
		o.mu.Unlock()

		keys, err := o.fetch(ctx)
		o.mu.Lock()
		o.fetching = nil
		if err == nil {
			o.keys = keys
		}
		k, ok := o.keys[id]
		o.mu.Unlock()
		close(done)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return k, nil
		}
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
}

// fetch reads the issuer's JWKS (discovering its URL unless JWKSURL is set).
func (o *OIDC) fetch(ctx context.Context) (map[string]crypto.PublicKey, error) {
	url := o.JWKSURL
	if url == "" {
		var disc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := o.getJSON(ctx, strings.TrimSuffix(o.Issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
			return nil, err
		}
		if disc.Issuer != o.Issuer || disc.JWKSURI == "" {
			return nil, fmt.Errorf("discovery of %s names issuer %q and jwks_uri %q", o.Issuer, disc.Issuer, disc.JWKSURI)
		}
		url = disc.JWKSURI
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := o.getJSON(ctx, url, &set); err != nil {
		return nil, err
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if len(keys) == MaxKeys {
			break
		}
		if pub, err := k.public(); err == nil && k.Kid != "" && (k.Use == "" || k.Use == "sig") {
			keys[o.Issuer+"|"+k.Kid] = pub
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("the JWKS at %s holds no usable RS256 or ES256 signing key", url)
	}
	return keys, nil
}

func (o *OIDC) getJSON(ctx context.Context, url string, v any) error {
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("oidc %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("oidc %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("oidc %s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("oidc %s: %w", url, err)
	}
	return nil
}

// jwk is one JSON Web Key (RFC 7517) of kind RSA or EC P-256.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func (k jwk) public() (crypto.PublicKey, error) {
	b64 := base64.RawURLEncoding
	switch k.Kty {
	case "RSA":
		n, err1 := b64.DecodeString(k.N)
		e, err2 := b64.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("malformed RSA key (or shorter than 2048 bits)")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		x, err1 := b64.DecodeString(k.X)
		y, err2 := b64.DecodeString(k.Y)
		if k.Crv != "P-256" || err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("malformed or unsupported EC key (P-256 only)")
		}
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	}
	return nil, fmt.Errorf("unsupported key type %q", k.Kty)
}
