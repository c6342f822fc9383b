package handler

import (
	"context"
	"testing"

	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// An optional dependency left nil gets its no-op default in every use
// case: the clock is the time, nothing is rate limited, and closing a
// connection without @connections removes nothing but the record (it does
// not panic).
func TestUseCasesGetNoOpDefaults(t *testing.T) {
	t.Parallel()
	c := (&Deps{}).core()
	if c.Now == nil || c.Limits == nil || c.Disconnector == nil {
		t.Fatalf("core of empty Deps: %+v", c)
	}
	if c.now().IsZero() {
		t.Error("no clock")
	}
	ctx := context.Background()
	for range 1000 {
		if err := c.limit(ctx, caller{User: "u", Device: "d", Connection: "x"}, ratelimit.Send); err != nil {
			t.Fatalf("limited without limits: %v", err)
		}
	}
	c.closeConnection(ctx, "x", "r", wire.Problemf(wire.CodeForbidden, "test"))
}
