package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestASignedDeliveryVerifiesAndATamperedOneDoesNot(t *testing.T) {
	t.Parallel()
	secret, now := NewSecret(), time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"m1:read:ann","type":"read"}`)
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, now, body))
	if err := Verify(secret, h, body, now.Add(time.Minute), 0); err != nil {
		t.Fatalf("genuine delivery refused: %v", err)
	}
	if err := Verify(secret, h, []byte(`{"id":"m1:read:ann","type":"answered"}`), now, 0); !errors.Is(err, ErrSignature) {
		t.Errorf("tampered body: %v", err)
	}
	if err := Verify(NewSecret(), h, body, now, 0); !errors.Is(err, ErrSignature) {
		t.Errorf("other secret: %v", err)
	}
	bad := h.Clone()
	bad.Set(HeaderSignature, strings.Replace(h.Get(HeaderSignature), "v1=", "v1=0", 1)[:len(h.Get(HeaderSignature))])
	if err := Verify(secret, bad, body, now, 0); !errors.Is(err, ErrSignature) {
		t.Errorf("tampered signature: %v", err)
	}
	moved := h.Clone()
	moved.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
	if err := Verify(secret, moved, body, now, 0); !errors.Is(err, ErrSignature) {
		t.Errorf("timestamp changed under the signature: %v", err)
	}
	if err := Verify(secret, h, body, now.Add(6*time.Minute), 0); !errors.Is(err, ErrTimestamp) {
		t.Errorf("replayed after the tolerance: %v", err)
	}
	if err := Verify(secret, http.Header{}, body, now, 0); !errors.Is(err, ErrNoSignature) {
		t.Errorf("unsigned: %v", err)
	}
	rotating := h.Clone()
	rotating.Set(HeaderSignature, Sign(NewSecret(), now, body)+", "+h.Get(HeaderSignature))
	if err := Verify(secret, rotating, body, now, 0); err != nil {
		t.Errorf("one of two signatures matches: %v", err)
	}
}

func TestPostSignsAndReportsFailures(t *testing.T) {
	t.Parallel()
	secret := NewSecret()
	var got http.Header
	var gotBody string
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		b := make([]byte, 1024)
		n, _ := r.Body.Read(b)
		gotBody = string(b[:n])
		w.WriteHeader(status)
	}))
	defer srv.Close()
	c := New(2*time.Second, true)
	now := time.Now()
	if err := c.Post(context.Background(), srv.URL, secret, "m1:read:ann", 1, []byte(`{"x":1}`), now); err != nil {
		t.Fatal(err)
	}
	if got.Get(HeaderEventID) != "m1:read:ann" || got.Get(HeaderAttempt) != "1" || Verify(secret, got, []byte(gotBody), now, 0) != nil {
		t.Fatalf("delivery = %v %q", got, gotBody)
	}
	status = http.StatusServiceUnavailable
	if err := c.Post(context.Background(), srv.URL, secret, "m1:read:ann", 2, []byte(`{}`), now); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503 = %v", err)
	}
	status = http.StatusFound
	if err := c.Post(context.Background(), srv.URL, secret, "m1:read:ann", 3, []byte(`{}`), now); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("a redirect is a failure, not followed: %v", err)
	}
	// Deployed (allowPrivate false), the same loopback receiver is refused.
	if err := New(2*time.Second, false).Post(context.Background(), srv.URL, secret, "m1", 1, []byte(`{}`), now); err == nil || !strings.Contains(err.Error(), "not a public address") {
		t.Errorf("loopback reached from a deployed client: %v", err)
	}
}

func TestURLsAndAddresses(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/signet":     true,
		"http://hooks.example.com/signet":      false,
		"https://u:p@hooks.example.com/":       false,
		"https://hooks.example.com/#x":         false,
		"/relative":                            false,
		"mailto:ops@example.com":               false,
		"https://" + strings.Repeat("a", 2050): false,
	} {
		if err := CheckURL(raw, false); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v", raw, err)
		}
	}
	if err := CheckURL("http://127.0.0.1:9/x", true); err != nil {
		t.Errorf("local http refused: %v", err)
	}
	for ip, public := range map[string]bool{"8.8.8.8": true, "10.1.2.3": false, "127.0.0.1": false, "169.254.169.254": false,
		"192.168.0.1": false, "100.64.0.1": false, "::1": false, "fd00::1": false, "2606:4700::1111": true, "0.0.0.0": false} {
		if Public(net.ParseIP(ip)) != public {
			t.Errorf("Public(%s) = %v", ip, !public)
		}
	}
}
