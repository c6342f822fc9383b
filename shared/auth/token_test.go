package auth

import (
	"errors"
	"testing"
	"time"
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
