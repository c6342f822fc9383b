package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/signet-im/signet/shared/testkit"
)

// terminal is a `signet chat` (or any command) of the real binary on a
// pseudo-terminal: what it prints is collected, lines are typed into it.
type terminal struct {
	t   *testing.T
	f   *os.File
	out *syncBuffer
	cmd *exec.Cmd
}

func startTerminal(t *testing.T, bin string, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(bin, args...)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 250})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, f: f, out: &syncBuffer{}, cmd: cmd}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close(); <-copied })
	return term
}

// typeLine types a line and Enter.
func (term *terminal) typeLine(line string) {
	term.t.Helper()
	if _, err := term.f.Write([]byte(line + "\r")); err != nil {
		term.t.Fatal(err)
	}
}

// await waits until the terminal has shown text after the mark-th byte
// (mark: what was there before the action being checked). The bound only
// ends a failing test; a passing one takes what the work takes.
func (term *terminal) await(mark int, text string) int {
	term.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := term.out.String()
		if i := strings.Index(out[min(mark, len(out)):], text); i >= 0 {
			return mark + i + len(text)
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("no %q on the terminal after byte %d:\n%s", text, mark, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mark is how much the terminal has shown so far.
func (term *terminal) mark() int { return len(term.out.String()) }

// Issue 14, through a pseudo-terminal and the real binary against a real
// `signet local`: a member added to a group is told by whom and can open
// it by name; a 1:1 with a name nobody has and a group has is warned
// about; /leave returns to the conversation before; an alert shows its
// priority and title and its a: conversation opens and is marked read; a
// refusal says refused (not "retried"); with the server down the chat
// says so, keeps taking input, shows a line as queued, and marks it ✓
// when it is stored after the restart.
func TestChatOnATerminalTellsTheTruth(t *testing.T) {
	t.Parallel()
	bin, err := signetBinary()
	if err != nil {
		t.Fatal(err)
	}
	data, clients := t.TempDir(), t.TempDir()
	addr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	args := []string{"--data", data, "--addr", addr, "--http-addr", httpAddr, "--dynamodb-addr", "127.0.0.1:0", "--sqs-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0"}
	stack := startLocalProcess(t, bin, args...)
	url, api := "ws://"+addr+"/", "http://"+httpAddr
	chat := func(user string) *terminal {
		term := startTerminal(t, bin, "chat", "--user", user, "--url", url, "--data", clients)
		term.await(0, "Commands:")
		return term
	}
	alice, bob := chat("alice"), chat("bob")

	m := bob.mark()
	alice.typeLine("/group ops bob")
	alice.await(0, "Created #ops (g:")
	m = bob.await(m, "* alice added you to #ops (g:")

	bob.typeLine("/to alice")
	m = bob.await(m, "Talking in alice.")
	bob.typeLine("/to ops")
	m = bob.await(m, `no user "ops" has written to you, and you have a group #ops`)
	bob.typeLine("/to #ops")
	m = bob.await(m, "Talking in #ops (g:")
	bob.typeLine("hello team")
	m = bob.await(m, `✓ "hello team" stored for #ops (#1 in the conversation)`)

	// An alert: rendered, and its conversation opened and marked read.
	key, err := exec.Command(bin, "apps", "create", "--name", "monitoring", "--allow-user", "bob", "--api", api).Output()
	if err != nil {
		t.Fatalf("apps create: %v", err)
	}
	req, _ := http.NewRequest("POST", api+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"DB down","body":"failover needed","priority":"urgent"}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	req.Header.Set("Idempotency-Key", "inc-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post alert: %v %v", resp, err)
	}
	resp.Body.Close()
	m = bob.await(m, "[a:monitoring] URGENT ⚑ DB down — failover needed")
	bob.typeLine("/to a:monitoring")
	m = bob.await(m, "(1 unread; marked read)")

	// /leave goes back to where bob was before the group.
	bob.typeLine("/to #ops")
	m = bob.await(m, "Talking in #ops (g:")
	bob.typeLine("/leave")
	m = bob.await(m, "You left #ops. Talking in a:monitoring again.")

	// A refusal is shown as one: removed from a group, a send is refused.
	alice.typeLine("/add bob")
	m = bob.await(m, "* alice added you to #ops")
	alice.typeLine("/remove bob")
	m = bob.await(m, "* alice removed you from #ops")
	bob.typeLine("/to #ops")
	m = bob.await(m, "Talking in #ops")
	bob.typeLine("still here?")
	m = bob.await(m, `✗ "still here?" refused by the server, not sent: you are not a member of this conversation`)

	// The server goes away: the chat says so, takes input without waiting
	// (a query in the background, a line queued), and marks the line
	// stored once the server is back.
	bob.typeLine("/to alice")
	m = bob.await(m, "Talking in alice.")
	stack.kill(t)
	m = bob.await(m, "* disconnected; reconnecting")
	bob.typeLine("/list")
	bob.typeLine("are you there?")
	m = bob.await(m, "] you: are you there? …")
	m = bob.await(m, `… "are you there?" not acknowledged yet: queued in this device's outbox`)
	startLocalProcess(t, bin, args...)
	// Either may show first: the ✓ comes with the ACK, the state line
	// with the next look at the connection.
	bob.await(m, "* connected again")
	bob.await(m, `✓ "are you there?" stored for alice (#1 in the conversation) (at last)`)
	alice.await(0, "[bob] bob: are you there?")

	// A pasted line longer than the terminal passes is refused, not cut.
	m = bob.mark()
	bob.typeLine(strings.Repeat("x", 5000))
	bob.await(m, "not sent: this line is 4095 characters, the most a terminal passes in one line")

	bob.typeLine("/quit")
	done := make(chan error, 1)
	go func() { done <- bob.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat exit: %v\n%s", err, bob.out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("chat did not quit:\n%s", bob.out.String())
	}
}
