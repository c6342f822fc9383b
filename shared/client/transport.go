package client

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Conn is one WebSocket connection as the client uses it.
type Conn interface {
	Read(ctx context.Context) ([]byte, error)
	Write(ctx context.Context, data []byte) error
	Close() error
}

// Dialer opens a connection to url with the given headers.
type Dialer func(ctx context.Context, url string, header http.Header) (Conn, error)

// WebSocket is the default Dialer (github.com/coder/websocket).
func WebSocket(ctx context.Context, url string, header http.Header) (Conn, error) {
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, &AuthError{Status: resp.StatusCode}
		}
		if resp != nil && resp.StatusCode == http.StatusConflict {
			return nil, &DeviceLimitError{}
		}
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	return wsConn{c}, nil
}

type wsConn struct{ c *websocket.Conn }

func (w wsConn) Read(ctx context.Context) ([]byte, error) {
	_, b, err := w.c.Read(ctx)
	return b, err
}
func (w wsConn) Write(ctx context.Context, b []byte) error {
	return w.c.Write(ctx, websocket.MessageText, b)
}
func (w wsConn) Close() error { return w.c.CloseNow() }

// AuthError is a refused upgrade (401/403): reconnecting will not help
// until the token changes.
type AuthError struct{ Status int }

func (e *AuthError) Error() string {
	if e.Status == http.StatusUnauthorized {
		return "connection refused: no token (401)"
	}
	return "connection refused: invalid or expired token (403)"
}

// DeviceLimitError is a refused upgrade (409): the user has the most
// devices the server allows, and this device id is not one of them.
// Reconnecting will not help until an operator forgets one of the user's
// devices (signet devices forget), or the client uses a device id the
// user already has.
type DeviceLimitError struct{}

func (e *DeviceLimitError) Error() string {
	return "connection refused: the user has the most devices allowed and this device id is new (409)"
}

// Flaky wraps a Dialer so that pushed "message" frames are dropped,
// duplicated, reordered or delayed with the given probabilities, from a
// seeded source so that runs are reproducible. It models what a lossy path
// and a retrying server do to pushes; other frames pass through (delayed).
type Flaky struct {
	Dial                     Dialer
	Seed                     uint64
	Drop, Duplicate, Reorder float64
	Delay                    float64
	MaxDelay                 time.Duration
	mu                       sync.Mutex
	rng                      *rand.Rand
}

// Dialer returns the wrapped dialer.
func (f *Flaky) Dialer() Dialer {
	f.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	return func(ctx context.Context, url string, h http.Header) (Conn, error) {
		c, err := f.Dial(ctx, url, h)
		if err != nil {
			return nil, err
		}
		return &flakyConn{Conn: c, f: f}, nil
	}
}

func (f *Flaky) roll(p float64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < p
}

func (f *Flaky) delay() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.MaxDelay <= 0 {
		return 0
	}
	return time.Duration(f.rng.Int64N(int64(f.MaxDelay)))
}

type flakyConn struct {
	Conn
	f    *Flaky
	held [][]byte // frames waiting to be delivered (reorder, duplicate)
}

func (c *flakyConn) Read(ctx context.Context) ([]byte, error) {
	for {
		if len(c.held) > 0 {
			b := c.held[0]
			c.held = c.held[1:]
			return b, nil
		}
		b, err := c.Conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		if c.f.roll(c.f.Delay) {
			time.Sleep(c.f.delay())
		}
		var env struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &env) != nil || env.Type != "message" {
			return b, nil
		}
		switch {
		case c.f.roll(c.f.Drop):
			continue
		case c.f.roll(c.f.Duplicate):
			c.held = append(c.held, b)
			return b, nil
		case c.f.roll(c.f.Reorder):
			// Deliver the next frame first, then this one.
			next, err := c.Conn.Read(ctx)
			if err != nil {
				return b, nil
			}
			c.held = append(c.held, b)
			return next, nil
		}
		return b, nil
	}
}
