package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/wire"
)

// A device back in more groups than its user's query budget lets it pull
// at once is refused some of its group syncs (rate_limited) and waits as
// it is told: it is never closed for ignoring the limit
// (rate_limit_ignored), and gets every group's message as the budget
// allows, on its first connection.
func TestADeviceBehindInManyGroupsWaitsOutItsQueryLimit(t *testing.T) {
	t.Parallel()
	const groups = 16
	st := startStackWith(t, devstack.Options{RateLimits: "query=6/30s", Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	for i := range groups {
		g, err := alice.CreateGroup(ctx, fmt.Sprintf("g%d", i), "bob")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(fmt.Sprintf(`"m%d"`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	var dials, limited, ignored atomic.Int64
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Dialer = func(ctx context.Context, url string, h http.Header) (Conn, error) {
			dials.Add(1)
			c, err := WebSocket(ctx, url, h)
			if err != nil {
				return nil, err
			}
			return watchedConn{Conn: c, seen: func(b []byte) {
				var e wire.Error
				if frameType(b) == wire.TypeError && json.Unmarshal(b, &e) == nil {
					switch e.Code {
					case wire.CodeRateLimited:
						limited.Add(1)
					case wire.CodeRateLimitIgnored:
						ignored.Add(1)
					}
				}
			}}, nil
		}
	})
	collect(t, bob, groups, 4*time.Minute)
	if ignored.Load() > 0 || dials.Load() != 1 {
		t.Fatalf("bob was told rate_limit_ignored %d times and dialed %d times; want never, and once", ignored.Load(), dials.Load())
	}
	if limited.Load() == 0 {
		t.Fatal("no group sync was refused: the test did not reach the limit")
	}
}

// watchedConn shows seen every frame it reads.
type watchedConn struct {
	Conn
	seen func([]byte)
}

func (w watchedConn) Read(ctx context.Context) ([]byte, error) {
	b, err := w.Conn.Read(ctx)
	if err == nil {
		w.seen(b)
	}
	return b, err
}
