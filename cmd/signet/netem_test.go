package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/wire"
)

// A client behind `signet netem` on a lossy, reordering, duplicating
// network still gets every message once and in order.
func TestTailThroughNetemGetsEveryMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	// The standard account quota, not a new account's 10: on a loaded
	// machine the stack's invocations run slowly enough to fill 10 and
	// throttle the sends' authorizer until a send gives up connecting
	// (seen under go test -parallel 4), and throttling is not what this
	// test is about.
	st := startLocal(t, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var netOut, netErr syncBuffer
	netDone := make(chan int, 1)
	go func() {
		netDone <- run(ctx, []string{"netem", "--listen", "127.0.0.1:0", "--upstream", st.URL, "--loss", "0.2",
			"--duplicate", "0.05", "--reorder", "0.05", "--delay", "5ms±5ms", "--seed", "3", "--stats-every", "0"}, &netOut, &netErr)
	}()
	waitText(t, &netOut, "Ctrl-C to stop")
	addr := regexp.MustCompile(`ws://[0-9.:]+/`).FindString(netOut.String())
	if addr == "" {
		t.Fatalf("no address in:\n%s", netOut.String())
	}
	data := t.TempDir()
	const n = 20
	var tailOut, tailErr syncBuffer
	tailDone := make(chan int, 1)
	go func() {
		tailDone <- run(ctx, []string{"tail", "--user", "bob", "--url", addr, "--data", data, "--count", fmt.Sprint(n)}, &tailOut, &tailErr)
	}()
	var want []string
	for i := range n {
		var out, errOut syncBuffer
		if code := run(ctx, []string{"send", "--user", "alice", "--url", st.URL, "--data", data, "--to", "bob", fmt.Sprintf("m%02d", i)}, &out, &errOut); code != 0 {
			t.Fatalf("send %d: exit %d: %s", i, code, errOut.String())
		}
		want = append(want, fmt.Sprintf(`{"text":"m%02d"}`, i))
	}
	select {
	case code := <-tailDone:
		if code != 0 {
			t.Fatalf("tail exit %d: %s", code, tailErr.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("tail printed %d of %d lines through netem:\n%s", strings.Count(tailOut.String(), "\n"), n, tailErr.String())
	}
	var got []string
	for i, line := range strings.Split(strings.TrimSpace(tailOut.String()), "\n") {
		var e wire.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Seq != int64(i+1) {
			t.Fatalf("line %d: %q (%v)", i, line, err)
		}
		got = append(got, string(e.Message.Body))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("bodies\n got %v\nwant %v", got, want)
	}
	cancel()
	<-netDone
	if !strings.Contains(netOut.String(), "stopped:") || strings.Contains(netOut.String(), " 0 dropped") {
		t.Fatalf("netem dropped nothing, the test proves nothing:\n%s", netOut.String())
	}
}
