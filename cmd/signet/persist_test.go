package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
)

// binDir holds the signet binary the tests build (removed by TestMain).
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// signetBinary builds the signet command once per test process.
var signetBinary = sync.OnceValues(func() (string, error) {
	var err error
	if binDir, err = os.MkdirTemp("", "signet-bin-"); err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "signet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build: %v\n%s", err, out)
	}
	return bin, nil
})

// localProcess is a `signet local` process of the real binary.
type localProcess struct {
	cmd *exec.Cmd
	out *syncBuffer
	// exited is closed when the process has exited (err: how).
	exited chan struct{}
	err    error
}

// startLocalProcess runs `signet local` with args and waits for its
// banner (as long as a loaded machine needs: the start is bounded by the
// test's own timeout, not a guess).
func startLocalProcess(t *testing.T, bin string, args ...string) *localProcess {
	t.Helper()
	p := &localProcess{cmd: exec.Command(bin, append([]string{"local", "--quiet"}, args...)...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.exited })
	for !strings.Contains(p.out.String(), "Press Ctrl-C to stop.") {
		select {
		case <-p.exited:
			t.Fatalf("signet local exited (%v):\n%s", p.err, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return p
}

// kill is kill -9; it returns once the process is gone.
func (p *localProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// Issue 14: `signet local --data DIR`, killed with SIGKILL in the middle of
// a stream of messages and started again on the same directory, keeps
// every message it acknowledged and the app keys it issued; the clients,
// which keep their cursors on disk, go on where they were: the receiver
// ends with every acknowledged message once, in inbox order, no gap.
func TestAStackKilledAndRestartedWithDataKeepsEveryAcknowledgedMessage(t *testing.T) {
	bin, err := signetBinary()
	if err != nil {
		t.Fatal(err)
	}
	data, clients := t.TempDir(), t.TempDir()
	addr, httpAddr, dynamoAddr, sqsAddr := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	args := []string{"--data", data, "--addr", addr, "--http-addr", httpAddr, "--dynamodb-addr", dynamoAddr, "--sqs-addr", sqsAddr, "--console-addr", "127.0.0.1:0"}
	stack := startLocalProcess(t, bin, args...)
	// The banner says where the data is and where the emulators listen
	// (pinned by the flags, so scripts can reach them).
	for _, want := range []string{"kept across restarts (0 items", "DynamoDB        http://" + dynamoAddr + "  (memdyn", "SQS             http://" + sqsAddr + "  (memsqs)"} {
		if !strings.Contains(stack.out.String(), want) {
			t.Fatalf("no %q in a new data directory's banner:\n%s", want, stack.out.String())
		}
	}
	url, api := "ws://"+addr+"/", "http://"+httpAddr

	key, err := exec.Command(bin, "apps", "create", "--name", "monitoring", "--allow-user", "bob", "--api", api).Output()
	if err != nil {
		t.Fatalf("apps create: %v", err)
	}

	dial := func(user string) *client.Client {
		c, err := client.Dial(context.Background(), client.Options{
			URL: url, Device: "d1", Path: filepath.Join(clients, user+".db"),
			Token: func(context.Context) (string, error) {
				return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), "d1", time.Now(), time.Hour)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice, bob := dial("alice"), dial("bob")

	const total, killAt = 60, 25
	acked := make(chan string, total)
	sendErr := make(chan error, 1)
	go func() {
		for i := range total {
			// Send waits for the ACK, through the kill and the restart (the
			// outbox retries with the same clientMsgId).
			s, err := alice.SendDraft(context.Background(), client.Draft{ClientMsgID: "m" + strconv.Itoa(i), To: "bob", Body: []byte(fmt.Sprintf(`{"text":"m%d"}`, i))})
			if err != nil {
				sendErr <- fmt.Errorf("send %d: %w", i, err)
				return
			}
			acked <- s.MessageID
		}
		close(acked)
	}()

	var ackedIDs []string
	for len(ackedIDs) < killAt {
		ackedIDs = append(ackedIDs, <-acked)
	}
	stack.kill(t)
	stack = startLocalProcess(t, bin, args...)
	if m := regexp.MustCompile(`kept across restarts \((\d+) items`).FindStringSubmatch(stack.out.String()); m == nil || m[1] == "0" {
		t.Fatalf("the restarted stack kept nothing:\n%s", stack.out.String())
	}
	for id := range acked {
		ackedIDs = append(ackedIDs, id)
	}
	select {
	case err := <-sendErr:
		t.Fatal(err)
	default:
	}

	// Every acknowledged message reaches bob once and in order. The wait
	// grows with what is still missing: it ends when nothing arrives for
	// as long as a redelivery cycle takes.
	want := map[string]bool{}
	for _, id := range ackedIDs {
		want[id] = true
	}
	seen, next := map[string]bool{}, int64(1)
	for len(seen) < len(want) {
		select {
		case m, ok := <-bob.Messages():
			if !ok {
				t.Fatal("bob's client stopped")
			}
			if m.Seq != next {
				t.Fatalf("bob got inbox seq %d, want %d (a gap or a repeat)", m.Seq, next)
			}
			next++
			if seen[m.MessageID] || !want[m.MessageID] {
				t.Fatalf("bob got %s twice or never acknowledged", m.MessageID)
			}
			seen[m.MessageID] = true
		case <-time.After(2 * time.Minute):
			t.Fatalf("bob has %d of %d acknowledged messages\n%s", len(seen), len(want), stack.out.String())
		}
	}

	// The app key issued before the kill still posts.
	req, _ := http.NewRequest("POST", api+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"after restart","body":"still here"}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	req.Header.Set("Idempotency-Key", "after-restart")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("the app key issued before the kill: %s after the restart", resp.Status)
	}
}
