// Package webhook signs Signet's status callbacks and verifies them: the
// server side (Sign, Client) and what a Go receiver needs (Verify). The
// scheme is in docs/webhooks.md: each delivery carries
//
//	Signet-Event-Id:   the event's stable id (dedupe on it)
//	Signet-Timestamp:  Unix seconds when this try was signed
//	Signet-Signature:  v1=<hex HMAC-SHA256 of "<timestamp>.<body>" under the secret>
//
// and a receiver recomputes the HMAC over the raw body, compares it in
// constant time and refuses a timestamp too far from its clock (a replay
// of an old delivery).
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Header names of a delivery.
const (
	HeaderEventID   = "Signet-Event-Id"
	HeaderTimestamp = "Signet-Timestamp"
	HeaderSignature = "Signet-Signature"
	// HeaderAttempt is the try number (1 for the first): informational,
	// not signed.
	HeaderAttempt = "Signet-Attempt"
)

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock.
const DefaultTolerance = 5 * time.Minute

// NewSecret returns a new signing secret, whsec_<64 hex digits>.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + hex.EncodeToString(b)
}

// Sign returns the Signet-Signature value of body signed at ts.
func Sign(secret string, ts time.Time, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrNoSignature = errors.New("webhook: no Signet-Signature or Signet-Timestamp header")
	ErrSignature   = errors.New("webhook: signature does not match the body")
	ErrTimestamp   = errors.New("webhook: timestamp outside the tolerance")
)

// Verify checks a delivery: that header's signature is the HMAC of body at
// its timestamp under secret, and that the timestamp is within tolerance
// of now (0: DefaultTolerance). Several v1= values (comma-separated, as
// during a secret rotation) pass if any matches.
func Verify(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sig := header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return ErrNoSignature
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now", ErrTimestamp, d.Round(time.Second))
	}
	want := mac(secret, ts, body)
	for _, part := range strings.Split(sig, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(part), "v1=")
		if !ok {
			continue
		}
		got, err := hex.DecodeString(v)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}

// Client delivers signed events.
type Client struct {
	// HTTP posts them (a Client with AllowPrivate's dial guard and a
	// timeout when nil: see New).
	HTTP *http.Client
}

// New returns a Client whose posts time out after timeout and that, unless
// allowPrivate, refuses to connect to loopback, private, link-local and
// other non-public addresses (checked on the address dialed, after DNS:
// a webhook URL cannot reach the function's own network).
func New(timeout time.Duration, allowPrivate bool) *Client {
	d := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !Public(ip) {
				return fmt.Errorf("webhook: %s is not a public address", host)
			}
			return nil
		}
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout, MaxIdleConnsPerHost: 4, Proxy: nil}
	return &Client{HTTP: &http.Client{Timeout: timeout, Transport: tr,
		// A redirect would be followed without the receiver's say: a
		// 3xx is a failed try, like any answer that is not 2xx.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Public reports whether ip is a public unicast address.
func Public(ip net.IP) bool {
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() &&
		!(ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64) // 100.64.0.0/10, carrier-grade NAT
}

// CheckURL says whether raw may be a webhook URL: absolute https (http
// too when allowHTTP), a host, no credentials, at most 2,048 characters.
func CheckURL(raw string, allowHTTP bool) error {
	if len(raw) > 2048 {
		return errors.New("url is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return errors.New("url must be an absolute https URL")
	}
	if u.Scheme != "https" && !(allowHTTP && u.Scheme == "http") {
		if allowHTTP {
			return errors.New("url must be http or https")
		}
		return errors.New("url must be https")
	}
	if u.User != nil {
		return errors.New("url must not carry credentials: the signature authenticates Signet")
	}
	if u.Fragment != "" {
		return errors.New("url must not have a fragment")
	}
	return nil
}

// Post delivers body (event id, try number attempt) to target signed with
// secret at now. A 2xx answer is success; anything else, or no answer, is
// an error that says what happened (shown to the app as lastError).
func (c *Client) Post(ctx context.Context, target, secret, id string, attempt int, body []byte, now time.Time) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("bad url: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Signet-Webhooks/1")
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(secret, now, body))
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	resp, err := c.HTTP.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
