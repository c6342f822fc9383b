package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// idp is a local OpenID Connect provider: discovery and a JWKS whose keys
// the test can rotate.
type idp struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []map[string]string
	fetches atomic.Int32
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": p.keys})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) publish(keys ...map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = keys
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PrivateKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]string {
	raw, _ := k.PublicKey.Bytes() // 0x04 || X || Y
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])}
}

func signWith(t *testing.T, m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Issue 11: enterprise sign-in with an OpenID Connect provider's tokens.
func TestOIDCVerifiesProviderTokensAgainstItsKeys(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.publish(rsaJWK("r1", rk), ecJWK("e1", ek))
	o := &OIDC{Issuer: p.srv.URL, Audience: "signet-client", UserClaim: "email"}
	now := time.Now()
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"iss": p.srv.URL, "aud": "signet-client", "sub": "3f1c-uuid", "email": "ann@corp.example", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	ctx := context.Background()
	for _, tok := range []string{signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(nil)), signWith(t, jwt.SigningMethodES256, "e1", ek, claims(nil))} {
		c, err := o.Verify(ctx, tok, now)
		if err != nil || c.User != "ann@corp.example" || c.Expires.Unix() != now.Add(time.Hour).Unix() {
			t.Fatalf("verify: %+v, %v", c, err)
		}
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	bad := map[string]string{
		"wrong issuer":        signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"iss": "https://evil.example"})),
		"wrong audience":      signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"aud": "mail"})),
		"expired":             signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()})),
		"too long-lived":      signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"exp": now.Add(48 * time.Hour).Unix()})),
		"signed by another":   signWith(t, jwt.SigningMethodRS256, "r1", other, claims(nil)),
		"user claim missing":  signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"email": nil})),
		"user claim reserved": signWith(t, jwt.SigningMethodRS256, "r1", rk, claims(jwt.MapClaims{"email": "app.payroll"})),
		// Algorithm confusion: HS256 keyed with the public key's bytes.
		"HS256": signWith(t, jwt.SigningMethodHS256, "r1", rk.N.Bytes(), claims(nil)),
	}
	for name, tok := range bad {
		if c, err := o.Verify(ctx, tok, now); !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: accepted %+v (%v)", name, c, err)
		}
	}
	if n := p.fetches.Load(); n != 1 {
		t.Errorf("%d JWKS fetches, want 1: keys are cached by issuer and kid", n)
	}
	// The provider rotates to a new key: a token with its kid refreshes
	// the set once; made-up kids do not refetch within RefreshInterval.
	rk2, _ := rsa.GenerateKey(rand.Reader, 2048)
	p.publish(rsaJWK("r2", rk2))
	later := now.Add(RefreshInterval + time.Second)
	if c, err := o.Verify(ctx, signWith(t, jwt.SigningMethodRS256, "r2", rk2, claims(nil)), later); err != nil || c.User != "ann@corp.example" {
		t.Fatalf("rotated key: %+v, %v", c, err)
	}
	for i := range 20 {
		tok := signWith(t, jwt.SigningMethodRS256, "made-up-"+string(rune('a'+i)), rk2, claims(nil))
		if _, err := o.Verify(ctx, tok, later.Add(time.Second)); !errors.Is(err, ErrBadToken) {
			t.Fatalf("unknown kid accepted: %v", err)
		}
	}
	if n := p.fetches.Load(); n != 2 {
		t.Errorf("%d JWKS fetches after a rotation and 20 unknown kids, want 2", n)
	}
}

func TestAlgorithmReadsTheHeader(t *testing.T) {
	t.Parallel()
	tok, _ := Mint([]byte("s"), "alice", "", time.Now(), time.Hour)
	if a := Algorithm(tok); a != "HS256" {
		t.Fatalf("Algorithm = %q", a)
	}
	if a := Algorithm("garbage"); a != "" {
		t.Fatalf("Algorithm(garbage) = %q", a)
	}
}

// Issue 11: the key cache was locked during a JWKS fetch, so a slow
// provider stalled every sign-in. A cached key verifies while a fetch for
// an unknown one hangs, and callers needing the fetch share it.
func TestACachedKeyVerifiesWhileAFetchIsUnderWay(t *testing.T) {
	t.Parallel()
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	rk2, _ := rsa.GenerateKey(rand.Reader, 2048)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock()
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fetches.Add(1) > 1 {
			<-release // the second fetch (for the rotated key) hangs
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{rsaJWK("r1", rk), rsaJWK("r2", rk2)}})
	}))
	defer srv.Close()
	o := &OIDC{Issuer: "https://idp.example", Audience: "signet", JWKSURL: srv.URL}
	now := time.Now()
	claims := jwt.MapClaims{"iss": "https://idp.example", "aud": "signet", "sub": "ann", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	ctx := context.Background()
	// Only r1 is cached at first (the first fetch is for it).
	if _, err := o.Verify(ctx, signWith(t, jwt.SigningMethodRS256, "r1", rk, claims), now); err != nil {
		t.Fatal(err)
	}
	delete(o.keys, o.Issuer+"|r2")
	later := now.Add(RefreshInterval + time.Second)
	waiting := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := o.Verify(ctx, signWith(t, jwt.SigningMethodRS256, "r2", rk2, claims), later)
			waiting <- err
		}()
	}
	for fetches.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		_, err := o.Verify(ctx, signWith(t, jwt.SigningMethodRS256, "r1", rk, claims), later)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cached key: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a token with a cached key waited for the JWKS fetch")
	}
	unblock()
	for range 2 {
		if err := <-waiting; err != nil {
			t.Errorf("token with the fetched key: %v", err)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2 (the two callers share one)", n)
	}
}
