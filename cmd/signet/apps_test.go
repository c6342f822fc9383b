package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The done-when from the command line: an app created with
// `signet apps create` posts an alert over HTTP, and `signet trace` shows
// the recipient's path.
func TestAppsCreatePostAndTrace(t *testing.T) {
	st := startLocal(t)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"apps", "create", "--name", "monitoring", "--allow-user", "bob", "--api", st.HTTPURL}, &out, &errOut); code != 0 {
		t.Fatalf("apps create: %d %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	if !strings.HasPrefix(key, "sk_monitoring_") {
		t.Fatalf("key = %q", key)
	}
	req, _ := http.NewRequest("POST", st.HTTPURL+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"DB down","body":"failover"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "inc-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %v %v", resp, err)
	}
	var accepted struct{ MessageID string }
	_ = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()

	out.Reset()
	if code := run(context.Background(), []string{"trace", accepted.MessageID, "--api", st.HTTPURL}, &out, &errOut); code != 0 {
		t.Fatalf("trace: %d %s", code, errOut.String())
	}
	for _, want := range []string{"Trace of " + accepted.MessageID, "created", "stored", "inboxed", "user bob, seq 1", "awaiting_pull"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("trace output lacks %q:\n%s", want, out.String())
		}
	}
	// The app's key may read its own trace; revoking it stops that.
	out.Reset()
	if code := run(context.Background(), []string{"trace", accepted.MessageID, "--api", st.HTTPURL, "--key", key}, &out, &errOut); code != 0 {
		t.Fatalf("trace with app key: %d %s", code, errOut.String())
	}
	if code := run(context.Background(), []string{"apps", "revoke", "monitoring", "--api", st.HTTPURL}, &out, &errOut); code != 0 {
		t.Fatalf("revoke: %d %s", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"trace", accepted.MessageID, "--api", st.HTTPURL, "--key", key}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "401") {
		t.Fatalf("trace with revoked key: exit %d %s", code, errOut.String())
	}
}
