package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/webhook"
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

// postWith posts an alert to bob with key and returns the HTTP status.
func postWith(t *testing.T, api, key, idem string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", api+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"t","body":"b"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idem)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue 14: apps list shows every app and its state; rotate-key prints a
// new key and the old one stops working; a revoked app's name can be
// created again (an active one cannot); a wrong --key is named as the
// admin key it should have been.
func TestAppsListRotateAndRecreate(t *testing.T) {
	st := startLocal(t)
	apps := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(append([]string{"apps"}, args...), "--api", st.HTTPURL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, first, errs := apps("create", "--name", "pager", "--allow-user", "bob")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	first = strings.TrimSpace(first)
	if code, _, errs := apps("create", "--name", "pager", "--allow-user", "bob"); code == 0 || !strings.Contains(errs, "an app with this name exists") {
		t.Fatalf("create of an active name: exit %d %q", code, errs)
	}
	code, second, errs := apps("rotate-key", "pager")
	second = strings.TrimSpace(second)
	if code != 0 || !strings.HasPrefix(second, "sk_pager_") || second == first || !strings.Contains(errs, "the old one no longer works") {
		t.Fatalf("rotate-key: exit %d %q %q", code, second, errs)
	}
	if s := postWith(t, st.HTTPURL, first, "a"); s != http.StatusUnauthorized {
		t.Fatalf("the old key after rotation: %d, want 401", s)
	}
	if s := postWith(t, st.HTTPURL, second, "b"); s != http.StatusAccepted {
		t.Fatalf("the new key: %d, want 202", s)
	}
	if code, out, errs := apps("list"); code != 0 || !regexp.MustCompile(`(?m)^pager\s+active\s+bob\s+600\s`).MatchString(out) {
		t.Fatalf("list: exit %d %q %q", code, out, errs)
	}
	if code, _, errs := apps("revoke", "pager"); code != 0 {
		t.Fatalf("revoke: %d %s", code, errs)
	}
	if code, _, errs := apps("rotate-key", "pager"); code == 0 || !strings.Contains(errs, "revoked") {
		t.Fatalf("rotate-key of a revoked app: exit %d %q", code, errs)
	}
	code, out, errs := apps("list", "--json")
	var list struct {
		Apps []struct {
			AppID   string `json:"appId"`
			Revoked bool   `json:"revoked"`
		} `json:"apps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Apps) != 1 || !list.Apps[0].Revoked {
		t.Fatalf("list --json after revoke: exit %d %q %q", code, out, errs)
	}
	code, third, errs := apps("create", "--name", "pager", "--allow-user", "bob")
	if code != 0 {
		t.Fatalf("re-create of a revoked name: %d %s", code, errs)
	}
	if s := postWith(t, st.HTTPURL, strings.TrimSpace(third), "c"); s != http.StatusAccepted {
		t.Fatalf("the re-created app's key: %d, want 202", s)
	}
	if s := postWith(t, st.HTTPURL, second, "d"); s != http.StatusUnauthorized {
		t.Fatalf("the revoked app's key after re-creation: %d, want 401", s)
	}
	if code, _, errs := apps("create", "--name", "other", "--key", "wrong"); code == 0 || !strings.Contains(errs, "neither the admin key nor an app key") {
		t.Fatalf("create with a wrong --key: exit %d %q", code, errs)
	}
}

// `signet apps webhook | events | retry`: the secret is printed once, the
// events of an escalation nobody answered reach the receiver signed, and
// are listed with their delivery.
func TestAppsWebhookEventsAndRetry(t *testing.T) {
	st := startLocal(t)
	var (
		mu   sync.Mutex
		got  []string
		sigs []http.Header
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, sigs = append(got, string(b)), append(sigs, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer rcv.Close()
	api := []string{"--api", st.HTTPURL}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append([]string{"apps", "create", "--name", "noc", "--allow-user", "bob", "--allow-user", "carol"}, api...), &out, &errOut); code != 0 {
		t.Fatalf("apps create: %d %s", code, errOut.String())
	}
	key := strings.TrimSpace(out.String())
	out.Reset()
	if code := run(context.Background(), append([]string{"apps", "webhook", "noc", rcv.URL + "/hook", "--key", key}, api...), &out, &errOut); code != 0 {
		t.Fatalf("apps webhook: %d %s", code, errOut.String())
	}
	secret := strings.TrimSpace(out.String())
	if !strings.HasPrefix(secret, "whsec_") || !strings.Contains(errOut.String(), "shown only now") {
		t.Fatalf("apps webhook printed %q / %q", secret, errOut.String())
	}
	if code := run(context.Background(), append([]string{"apps", "webhook", "noc"}, api...), &out, &errOut); code != 2 {
		t.Fatalf("apps webhook without a URL: exit %d", code)
	}
	req, _ := http.NewRequest("POST", st.HTTPURL+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"Cert","body":"","ack":{},"escalation":{"everySeconds":1,"renotify":0,"steps":[{"to":["carol"]}]}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "c-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %d events", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	for i, b := range got {
		if err := webhook.Verify(secret, sigs[i], []byte(b), time.Now(), 0); err != nil {
			t.Errorf("delivery %s: %v", b, err)
		}
	}
	mu.Unlock()
	out.Reset()
	if code := run(context.Background(), append([]string{"apps", "events", "noc", "--state", "delivered", "--key", key}, api...), &out, &errOut); code != 0 {
		t.Fatalf("apps events: %d %s", code, errOut.String())
	}
	for _, want := range []string{"EVENT", ":escalated:carol", "escalated", "carol", ":expired", "expired", "delivered"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("apps events lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), append([]string{"apps", "events", "noc"}, api...), &out, &errOut); code != 0 || !strings.Contains(out.String(), "No events.") {
		t.Fatalf("undelivered events: %d %q %s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), append([]string{"apps", "retry", "noc"}, api...), &out, &errOut); code != 0 || !strings.Contains(out.String(), "0 dead events") {
		t.Fatalf("apps retry: %d %q %s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), append([]string{"apps", "webhook", "noc", "--remove"}, api...), &out, &errOut); code != 0 || !strings.Contains(out.String(), "no more status callbacks") {
		t.Fatalf("apps webhook --remove: %d %q %s", code, out.String(), errOut.String())
	}
}
