package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// Register stores the device's token for wake-ups (the store shows it) and
// an empty token removes it; a platform the deployment lacks is refused.
func TestRegisterForWakeUps(t *testing.T) {
	t.Parallel()
	st := startStackWith(t, devstack.Options{})
	c := newDevice(t, st, "bob", "phone").dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Register(ctx, im.PlatformFCM, "fcm-token-1"); err != nil {
		t.Fatal(err)
	}
	eps, err := st.Store.PushEndpoints(ctx, "bob")
	if err != nil || len(eps) != 1 || eps[0].Device != "phone" || eps[0].Platform != "fcm" || eps[0].Token != "fcm-token-1" {
		t.Fatalf("registrations %+v %v", eps, err)
	}
	var se *ServerError
	if err := c.Register(ctx, "webpush", "x"); !errors.As(err, &se) || se.Code != "bad_request" {
		t.Fatalf("an unknown platform: %v", err)
	}
	if err := c.Register(ctx, im.PlatformFCM, ""); err != nil {
		t.Fatal(err)
	}
	if eps, err := st.Store.PushEndpoints(ctx, "bob"); err != nil || len(eps) != 0 {
		t.Fatalf("after removal: %+v %v", eps, err)
	}
}
