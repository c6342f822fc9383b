package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// signet devices lists a user's devices through the admin API, and says
// plainly why a forget is refused.
func TestDevicesListAndForget(t *testing.T) {
	st := startLocal(t)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"send", "--user", "alice", "--device", "laptop", "--url", st.URL, "--data", t.TempDir(), "--to", "bob", "hi"}, &out, &errOut); code != 0 {
		t.Fatalf("send: %d %s", code, errOut.String())
	}
	out.Reset()
	if code := run(ctx, []string{"devices", "list", "--user", "alice", "--api", st.HTTPURL}, &out, &errOut); code != 0 {
		t.Fatalf("devices list: %d %s", code, errOut.String())
	}
	for _, want := range []string{"alice has 1 of at most 20 devices.", "DEVICE", "laptop"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("devices list lacks %q:\n%s", want, out.String())
		}
	}
	errOut.Reset()
	if code := run(ctx, []string{"devices", "forget", "--user", "alice", "--device", "phone", "--api", st.HTTPURL}, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "alice has no device phone (404 not_found)") {
		t.Fatalf("forget of a device alice lacks: %d %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(ctx, []string{"devices", "forget", "--user", "alice", "--api", st.HTTPURL}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--user and --device are required") {
		t.Fatalf("forget without --device: %d %q", code, errOut.String())
	}
}
