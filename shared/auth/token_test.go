package auth

import (
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestMintVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	now := time.Now()
	tok, err := Mint(secret, "alice", "laptop", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(secret, tok, now)
	if err != nil || c.User != "alice" || c.Device != "laptop" {
		t.Fatalf("claims %+v, %v", c, err)
	}
	cases := map[string]struct {
		secret []byte
		token  string
		at     time.Time
		want   error
	}{
		"empty":        {secret, "", now, ErrNoToken},
		"garbage":      {secret, "a.b.c", now, ErrBadToken},
		"wrong secret": {[]byte("other"), tok, now, ErrBadToken},
		"expired":      {secret, tok, now.Add(2 * time.Hour), ErrBadToken},
		// alg=none must never verify.
		"alg none": {secret, "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.", now, ErrBadToken},
	}
	for name, tc := range cases {
		if _, err := Verify(tc.secret, tc.token, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	if _, err := Mint(secret, "bad:user", "", now, time.Hour); err == nil {
		t.Error("minted a token for a malformed user id")
	}
}

// sign signs arbitrary claims with HS256, as another issuer might.
func sign(t *testing.T, secret []byte, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Issue 11 findings 8 and 11: no iss/aud check, no maximum lifetime (exp in
// year 9999 passed), a future iat passed, and "app.<id>" could be a user.
func TestPolicyRefusesTokensOutsideIt(t *testing.T) {
	t.Parallel()
	secret, now := []byte("s3cret"), time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	strict := Policy{Issuer: "https://idp.example.com", Audience: "signet", MaxLifetime: time.Hour}
	cases := []struct {
		name   string
		policy Policy
		claims jwt.MapClaims
		ok     bool
	}{
		{"within the default lifetime", Policy{}, jwt.MapClaims{"sub": "alice", "iat": at(0), "exp": at(24 * time.Hour)}, true},
		{"year 9999", Policy{}, jwt.MapClaims{"sub": "alice", "iat": at(0), "exp": int64(253402300799)}, false},
		{"no iat, lifetime counted from now", Policy{}, jwt.MapClaims{"sub": "alice", "exp": at(25 * time.Hour)}, false},
		{"iat in the future", Policy{}, jwt.MapClaims{"sub": "alice", "iat": at(10 * time.Minute), "exp": at(time.Hour)}, false},
		{"iat within the clock skew", Policy{}, jwt.MapClaims{"sub": "alice", "iat": at(10 * time.Second), "exp": at(time.Hour)}, true},
		{"reserved app sender", Policy{}, jwt.MapClaims{"sub": "app.monitoring", "iat": at(0), "exp": at(time.Hour)}, false},
		{"issuer and audience match", strict, jwt.MapClaims{"sub": "alice", "iss": "https://idp.example.com", "aud": []string{"other", "signet"}, "iat": at(0), "exp": at(time.Hour)}, true},
		{"wrong issuer", strict, jwt.MapClaims{"sub": "alice", "iss": "https://evil.example.com", "aud": "signet", "iat": at(0), "exp": at(time.Hour)}, false},
		{"no issuer", strict, jwt.MapClaims{"sub": "alice", "aud": "signet", "iat": at(0), "exp": at(time.Hour)}, false},
		{"wrong audience", strict, jwt.MapClaims{"sub": "alice", "iss": "https://idp.example.com", "aud": "mail", "iat": at(0), "exp": at(time.Hour)}, false},
		{"longer than the policy's lifetime", strict, jwt.MapClaims{"sub": "alice", "iss": "https://idp.example.com", "aud": "signet", "iat": at(0), "exp": at(2 * time.Hour)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.policy.Verify(secret, sign(t, secret, tc.claims), now)
			if tc.ok && (err != nil || c.User != "alice" || c.Expires.IsZero()) {
				t.Fatalf("refused: %+v, %v", c, err)
			}
			if !tc.ok && !errors.Is(err, ErrBadToken) {
				t.Fatalf("accepted: %+v, %v", c, err)
			}
		})
	}
	if _, err := Mint(secret, "app.monitoring", "", now, time.Hour); err == nil {
		t.Error("minted a token for an app sender id")
	}
}
