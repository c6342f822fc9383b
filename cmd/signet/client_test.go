package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
	"github.com/signet-im/signet/shared/wire"
)

func startLocal(t *testing.T, concurrency ...int) *devstack.Stack {
	t.Helper()
	return startLocalWith(t, func(o *devstack.Options) {
		if len(concurrency) > 0 {
			o.Concurrency = concurrency[0]
		}
	})
}

// startLocalWith is startLocal with options changed by mutate.
func startLocalWith(t *testing.T, mutate func(*devstack.Options)) *devstack.Stack {
	t.Helper()
	quick := im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second, time.Second, time.Second, time.Second}}
	o := devstack.Options{
		Prefix: fmt.Sprintf("cli%d", time.Now().UnixNano()), Redelivery: &quick, SyncInterval: time.Millisecond, PollWait: 200 * time.Millisecond,
		RateLimits: "off",
	}
	mutate(&o)
	st, err := devstack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if f := st.Faults(); len(f) > 0 {
			t.Errorf("the stack saw %d faults AWS would show:\n%s", len(f), strings.Join(f, "\n"))
		}
	})
	return st
}

// Two `signet chat` sessions talk through the local stack.
func TestTwoChatSessionsTalk(t *testing.T) {
	st := startLocal(t)
	data := t.TempDir()
	bobIn, bobInW := io.Pipe()
	var bobOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdin = bobIn
	bobDone := make(chan int)
	go func() {
		bobDone <- run(ctx, []string{"chat", "--user", "bob", "--url", st.URL, "--data", data}, &bobOut, &bobOut)
	}()
	waitText(t, &bobOut, "Commands:")
	var aliceOut syncBuffer
	aliceIn, aliceInW := io.Pipe()
	stdin = aliceIn
	aliceDone := make(chan int)
	go func() {
		aliceDone <- run(ctx, []string{"chat", "--user", "alice", "--url", st.URL, "--data", data}, &aliceOut, &aliceOut)
	}()
	waitText(t, &aliceOut, "Commands:")
	fmt.Fprintln(aliceInW, "/to bob")
	fmt.Fprintln(aliceInW, "approve PO-7?")
	waitText(t, &aliceOut, `✓ "approve PO-7?" stored for bob`)
	waitText(t, &bobOut, "[alice] alice: approve PO-7?")
	waitText(t, &aliceOut, "✓✓ delivered to bob up to #1")
	fmt.Fprintln(bobInW, "/to alice")
	fmt.Fprintln(bobInW, "approved")
	waitText(t, &aliceOut, "[bob] bob: approved")
	// bob's own copy of "approved" reaches his inbox asynchronously: list
	// until both messages are there.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(bobOut.String(), fmt.Sprintf("  %-20s #%-5d", "alice", 2)) {
		if time.Now().After(deadline) {
			t.Fatalf("bob's list never showed 2 messages:\n%s", bobOut.String())
		}
		fmt.Fprintln(bobInW, "/list")
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintln(aliceInW, "/quit")
	fmt.Fprintln(bobInW, "/quit")
	for _, done := range []chan int{aliceDone, bobDone} {
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("chat exit %d:\n%s\n%s", code, aliceOut.String(), bobOut.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatal("chat did not quit")
		}
	}
	if strings.Count(aliceOut.String(), "approve PO-7?") != 2 { // typed line and its ✓
		t.Fatalf("alice's own message shown more than once:\n%s", aliceOut.String())
	}
}

// A group in `signet chat`: created, talked in, read marks asked for.
func TestChatGroupsAndReadMarks(t *testing.T) {
	st := startLocal(t)
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(user string) (*syncBuffer, *io.PipeWriter, chan int) {
		var out syncBuffer
		in, w := io.Pipe()
		stdin = in
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"chat", "--user", user, "--url", st.URL, "--data", data}, &out, &out)
		}()
		waitText(t, &out, "Commands:")
		return &out, w, done
	}
	bobOut, bobIn, bobDone := start("bob")
	aliceOut, aliceIn, aliceDone := start("alice")
	fmt.Fprintln(aliceIn, "/group release bob carol")
	waitText(t, aliceOut, "Created #release (g:")
	out := aliceOut.String()
	gid := out[strings.Index(out, "(g:")+1:]
	gid = gid[:strings.Index(gid, ")")]
	fmt.Fprintln(aliceIn, "ship it at 5?")
	waitText(t, aliceOut, `✓ "ship it at 5?" stored for #release (#1 in the conversation)`)
	// Issue 14: bob, online, is told who added him, and the group is named.
	waitText(t, bobOut, "* alice added you to #release ("+gid+"): /to #release")
	waitText(t, bobOut, "[#release] alice: ship it at 5?")
	fmt.Fprintln(bobIn, "/to #release")
	waitText(t, bobOut, "Talking in #release ("+gid+").")
	waitText(t, bobOut, "(1 unread; marked read)")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(aliceOut.String(), "#1: delivered 1/2, read 1/2 (read by bob)") {
		if time.Now().After(deadline) {
			t.Fatalf("no read mark for bob:\n%s", aliceOut.String())
		}
		fmt.Fprintln(aliceIn, "/receipts")
		time.Sleep(300 * time.Millisecond)
	}
	// signet send into the group.
	var sendOut syncBuffer
	if code := run(ctx, []string{"send", "--user", "carol", "--url", st.URL, "--data", data, "--to", gid, "on it"}, &sendOut, &sendOut); code != 0 {
		t.Fatalf("signet send to a group: %d\n%s", code, sendOut.String())
	}
	waitText(t, aliceOut, "[#release] carol: on it")
	fmt.Fprintln(bobIn, "/members")
	waitText(t, bobOut, "#release: 3 members")
	fmt.Fprintln(bobIn, "/add dave")
	waitText(t, bobOut, "✗ forbidden: your role in this group does not allow that")
	fmt.Fprintln(bobIn, "/list")
	waitText(t, bobOut, fmt.Sprintf("  %-20s #%-5d %-10s last: carol: on it", "#release", 2, ""))
	fmt.Fprintln(aliceIn, "/status away")
	waitText(t, aliceOut, "Others now see you as away.")
	fmt.Fprintln(bobIn, "/who alice carol")
	waitText(t, bobOut, fmt.Sprintf("  %-16s %s", "alice", "away"))
	waitText(t, bobOut, fmt.Sprintf("  %-16s %s", "carol", "offline"))
	fmt.Fprintln(aliceIn, "/quit")
	fmt.Fprintln(bobIn, "/quit")
	for _, done := range []chan int{aliceDone, bobDone} {
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("chat exit %d", code)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("chat did not quit")
		}
	}
}

func waitText(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", s, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A `signet tail` process killed with SIGKILL at random moments during a
// burst of messages (testkit.BurstSize), and restarted each time, ends with all on
// the device, each once, in order; its output across runs is every seq in
// order, where a kill may repeat at most the one line it interrupted.
func TestTailKilledAtRandomPrintsEveryMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	// 10 `signet send` processes at once, each a fresh connection: this
	// test is about the tail being killed, so it runs at AWS's standard
	// account concurrency (1,000), not a new account's 10. On
	// testkit.LargeTableEmulator: bob's inbox grows to the whole burst
	// (on minidyn this test took 80 s of make test).
	st := startLocalWith(t, func(o *devstack.Options) {
		o.Concurrency = 1000
		o.Emulator = testkit.LargeTableEmulator()
	})
	bin, err := signetBinary()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	total := testkit.BurstSize(t)
	sent := make(chan []string, 1)
	go func() {
		var ids []string
		var out syncBuffer
		for i := 0; i < total; i += 100 {
			// Many senders in parallel keep the burst dense.
			out = syncBuffer{}
			sendBatch(t, st, data, i, 100, &out)
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var s struct {
					MessageID string `json:"messageId"`
				}
				if json.Unmarshal([]byte(line), &s) == nil && s.MessageID != "" {
					ids = append(ids, s.MessageID)
				}
			}
		}
		sent <- ids
	}()
	rng := rand.New(rand.NewPCG(42, 7))
	var lines []string
	highest := 0 // highest seq printed so far
	kills := 0
	for deadline := time.Now().Add(8 * time.Minute); highest < total; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines after %d kills", len(lines), total, kills)
		}
		cmd := exec.Command(bin, "tail", "--user", "bob", "--device", "tailer", "--url", st.URL, "--data", data)
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill at a random moment, but only once this run printed something,
		// so that a slow machine still makes progress.
		var printedThisRun atomic.Int64
		stop := make(chan struct{})
		delay := time.Duration(100+rng.IntN(900)) * time.Millisecond
		go func() {
			tick := time.NewTicker(delay)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if printedThisRun.Load() > 0 {
						_ = cmd.Process.Signal(syscall.SIGKILL)
						return
					}
				}
			}
		}()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printedThisRun.Add(1)
			lines = append(lines, sc.Text())
			var e struct {
				Seq int `json:"seq"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Seq > highest {
				highest = e.Seq
			}
			if highest == total {
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		close(stop)
		if err := cmd.Wait(); err != nil {
			kills++
		}
	}
	ids := <-sent
	if len(ids) != total {
		t.Fatalf("sent %d", len(ids))
	}
	next, repeats := int64(1), 0
	got := map[string]bool{}
	for i, line := range lines {
		var e struct {
			Seq     int64 `json:"seq"`
			Message struct {
				MessageID string `json:"messageId"`
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		switch e.Seq {
		case next:
			next++
			got[e.Message.MessageID] = true
		case next - 1:
			repeats++ // the line a kill interrupted, printed again
		default:
			t.Fatalf("line %d: seq %d, want %d", i, e.Seq, next)
		}
	}
	if repeats > kills {
		t.Fatalf("%d repeated lines for %d kills", repeats, kills)
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("message %s never printed", id)
		}
	}
	t.Logf("%d lines (%d repeats) over %d SIGKILLs", len(lines), repeats, kills)
	// The device store: all of them, each once, at seqs 1..total.
	var cf clientFlags
	cf.user, cf.device, cf.url, cf.secret, cf.data = "bob", "tailer", st.URL, devstack.DefaultSecret, data
	c, err := cf.dial(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hist, err := c.History(0, 0)
	if err != nil || len(hist) != total {
		t.Fatalf("store holds %d messages (%v), want %d", len(hist), err, total)
	}
	seen := map[string]bool{}
	for i, m := range hist {
		if m.Seq != int64(i+1) || seen[m.MessageID] || !got[m.MessageID] {
			t.Fatalf("store entry %d: seq %d id %s (duplicate %v)", i, m.Seq, m.MessageID, seen[m.MessageID])
		}
		seen[m.MessageID] = true
	}
	if kills == 0 {
		t.Fatal("the tail process was never killed: the test proved nothing")
	}
}

// sendBatch sends n messages to bob with `signet send` run in-process, from
// n/10 senders.
func sendBatch(t *testing.T, st *devstack.Stack, data string, from, n int, out *syncBuffer) {
	done := make(chan int, n)
	for s := range 10 {
		go func() {
			for i := s; i < n; i += 10 {
				// A generous ACK timeout: this test is about the tail being
				// killed; under -race on 2 cores one send in a 1,000-message
				// burst once took longer than the default 15 s (CI, 2026-11-30).
				done <- run(context.Background(), []string{"send", "--user", fmt.Sprintf("s%d", s), "--to", "bob", "--url", st.URL, "--data", data, "--timeout", "90s", fmt.Sprintf("m%d", from+i)}, out, out)
			}
		}()
	}
	for range n {
		if code := <-done; code != 0 {
			t.Errorf("send exit %d: %s", code, out.String())
		}
	}
}

// Issue 14: `signet send --id X` with other text than the first send of X
// is refused with the server's words and a failing exit; the same text
// again prints the first ACK.
func TestSendRefusesAnIDReusedForOtherText(t *testing.T) {
	st := startLocal(t)
	data := t.TempDir()
	send := func(text string) (int, string) {
		var out, errOut syncBuffer
		code := run(context.Background(), []string{"send", "--user", "alice", "--to", "bob", "--url", st.URL, "--data", data, "--id", "po-7", text}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, first := send("approve PO-7?")
	if code != 0 {
		t.Fatalf("first send: exit %d: %s", code, first)
	}
	if code, again := send("approve PO-7?"); code != 0 || again != first {
		t.Fatalf("the same send again: exit %d %q; want the first ACK %q", code, again, first)
	}
	if code, other := send("approve PO-8?"); code == 0 || !strings.Contains(other, "clientMsgId was already used for a different message") {
		t.Fatalf("other text under the same --id: exit %d %q; want the server's refusal", code, other)
	}
}

// Issue 14: `signet tail --count N` acks what it printed before it exits,
// so the server does not re-push those messages to nobody: the device's
// ack cursor reaches N without another connection. The messages come as
// live pushes (whose acks wait for the ack window) while tail runs.
func TestTailAcksWhatItPrintedBeforeItExits(t *testing.T) {
	st := startLocal(t)
	data := t.TempDir()
	tailOut, exited := startTail(t, st, data, 3)
	var out syncBuffer
	for i := range 3 {
		if code := run(context.Background(), []string{"send", "--user", "alice", "--to", "bob", "--url", st.URL, "--data", data, fmt.Sprintf("m%d", i)}, &out, &out); code != 0 {
			t.Fatalf("send: exit %d: %s", code, out.String())
		}
	}
	if code := <-exited; code != 0 {
		t.Fatalf("tail: exit %d: %s", code, tailOut.String())
	}
	// The ack is an invocation of its own, after the frame; it needs no
	// more than the stack's own time, which a loaded machine stretches.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		d, err := st.Store.Device(context.Background(), "bob", "pager")
		if err == nil && d.Acked == 3 {
			break
		}
		if st.Running() == 0 && time.Since(start) > 5*time.Second {
			t.Fatalf("bob/pager acked %d of 3 after tail exited (%v)", d.Acked, err)
		}
	}
}

// `signet send` writes the device's outbox before it connects, as its help
// says: a send that cannot reach the server says where the message waits,
// and the next client command of that user and device sends it — once, and
// before what that command sends itself.
func TestASendThatCannotConnectIsSentByTheNextRun(t *testing.T) {
	ctx, data := context.Background(), t.TempDir()
	var out, errOut syncBuffer
	code := run(ctx, []string{"send", "--user", "alice", "--to", "bob", "--url", "ws://" + testkit.FreeAddr(t) + "/", "--data", data, "--timeout", "1s", "--id", "late-1", "the deploy window moved"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "clientMsgId late-1) stays in the outbox") {
		t.Fatalf("send with the server down: exit %d, %q; want a failure that says the message stays in the outbox", code, errOut.String())
	}
	st := startLocal(t)
	out, errOut = syncBuffer{}, syncBuffer{}
	if code := run(ctx, []string{"send", "--user", "alice", "--to", "bob", "--url", st.URL, "--data", data, "second"}, &out, &errOut); code != 0 {
		t.Fatalf("the next send: exit %d: %s", code, errOut.String())
	}
	page, err := st.Store.Page(ctx, "bob", 0, 10, wire.EntrySize)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Entries {
		var b struct{ Text string }
		_ = json.Unmarshal(e.Message.Body, &b)
		got = append(got, b.Text)
	}
	if strings.Join(got, "|") != "the deploy window moved|second" {
		t.Fatalf("bob's inbox: %q; want the queued message once, then the next run's", got)
	}
}

// `signet tail` and a read-diffused group (GroupDelivery=read, the
// default): the group's messages come without an inbox seq (0), and
// printing one must not move the recorded seq of the inbox back (a restart
// would print the inbox again); the group's shown convSeq is kept apart,
// so a restart does not print the group's message again either.
func TestTailKeepsItsShownSeqAcrossReadDiffusedGroupMessages(t *testing.T) {
	st := startLocalWith(t, func(o *devstack.Options) { o.Parameters = map[string]string{"GroupDelivery": "read"} })
	if _, err := st.Store.CreateGroup(context.Background(), "g:ops", "Ops", "alice", []im.UserID{"bob"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	tailOut, exited := startTail(t, st, data, 2)
	var out syncBuffer
	for _, to := range []string{"bob", "g:ops"} {
		if code := run(context.Background(), []string{"send", "--user", "alice", "--to", to, "--url", st.URL, "--data", data, "to " + to}, &out, &out); code != 0 {
			t.Fatalf("send to %s: exit %d: %s", to, code, out.String())
		}
	}
	if code := <-exited; code != 0 {
		t.Fatalf("tail: exit %d: %s", code, tailOut.String())
	}
	if !strings.Contains(tailOut.String(), `"conversationId":"g:ops"`) {
		t.Fatalf("tail printed %q, want the group's message", tailOut.String())
	}
	shown, err := os.ReadFile(filepath.Join(data, "bob", "pager", "tail.shown"))
	if err != nil || strings.TrimSpace(string(shown)) != "1" {
		t.Fatalf("tail.shown = %q, %v; want 1 (the inbox's seq of the 1:1 message)", shown, err)
	}
	groups, err := os.ReadFile(filepath.Join(data, "bob", "pager", "tail.shown-groups"))
	if err != nil || string(groups) != `{"g:ops":1}` {
		t.Fatalf("tail.shown-groups = %q, %v; want {\"g:ops\":1}", groups, err)
	}
	// A restart prints what came after, not the group's message again.
	tailOut, exited = startTail(t, st, data, 1)
	if code := run(context.Background(), []string{"send", "--user", "alice", "--to", "bob", "--url", st.URL, "--data", data, "third"}, &out, &out); code != 0 {
		t.Fatalf("send: exit %d: %s", code, out.String())
	}
	if code := <-exited; code != 0 || !strings.Contains(tailOut.String(), `"text":"third"`) {
		t.Fatalf("tail after a restart: exit %d, printed %q; want only the new message", code, tailOut.String())
	}
}

// startTail runs `signet tail --count n` for bob/pager until bob is
// connected; exited gets its exit code.
func startTail(t *testing.T, st *devstack.Stack, data string, n int) (out *syncBuffer, exited chan int) {
	t.Helper()
	out, exited = &syncBuffer{}, make(chan int, 1)
	go func() {
		exited <- run(context.Background(), []string{"tail", "--user", "bob", "--device", "pager", "--url", st.URL, "--data", data, "--count", fmt.Sprint(n)}, out, out)
	}()
	for {
		conns, err := st.Store.Connections(context.Background(), "bob")
		if err == nil && len(conns) == 1 {
			return out, exited
		}
		time.Sleep(20 * time.Millisecond)
	}
}
