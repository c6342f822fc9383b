package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/im"
)

// stdin is where chat reads its input (tests replace it).
var stdin io.Reader = os.Stdin

func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	in := stdin
	fs := flag.NewFlagSet("signet chat", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "default")
	to := fs.String("to", "", "start in the conversation with this user")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: signet chat --user <me> [flags]

Interactive terminal chat. Lines you type are sent to the current
conversation; commands:
  /to <user>    switch to the conversation with <user>
  /list         list conversations
  /history      show the current conversation's last 20 messages
  /quit         leave (also Ctrl-D)
Your messages show "…" until the server ACKs them (✓: stored in every
recipient inbox), then "✓✓ delivered to <user> up to #N" when a device of
theirs has them and "✓✓ read by <user>" when they read them. Messages
survive restarts: they are kept on this device
and unsent ones are retried.
`+clientHelpTail+"\nFlags:\n", dataHome())
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		fs.Usage()
		return err
	}
	ch := &chat{me: cf.user, out: stdout, peer: *to}
	c, err := cf.dial(ctx, func(o *client.Options) {
		o.OnReceipt = func(r client.Receipt) {
			mark := "✓✓ delivered to"
			if r.Kind == "read" {
				mark = "✓✓ read by"
			}
			ch.printf("  %s %s up to #%d\n", mark, r.UserID, r.UpTo)
		}
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ch.c = c
	ch.printf("Connected as %s (device %s) to %s\n", cf.user, cf.device, cf.url)
	ch.list()
	ch.printf("Commands: /to <user>, /list, /history, /quit. Anything else is sent to the current conversation.\n")
	if ch.peer != "" {
		ch.printf("Talking to %s.\n", ch.peer)
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			ch.wait(5 * time.Second)
			return nil
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			ch.incoming(m)
		case line, ok := <-lines:
			if !ok {
				ch.wait(10 * time.Second)
				return nil
			}
			if quit := ch.command(ctx, strings.TrimSpace(line)); quit {
				ch.wait(10 * time.Second)
				return nil
			}
		}
	}
}

type chat struct {
	c    *client.Client
	me   string
	peer string
	mu   sync.Mutex
	out  io.Writer
	wg   sync.WaitGroup
	// mine are this session's sends whose own inbox copy is not shown again.
	mine []string
}

func (ch *chat) printf(format string, a ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	fmt.Fprintf(ch.out, format, a...)
}

func text(body json.RawMessage) string {
	var b struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(body, &b) == nil && b.Text != nil {
		return *b.Text
	}
	return string(body)
}

func peerOf(conv, me string) string {
	p, err := im.ConversationID(conv).Peer(im.UserID(me))
	if err != nil {
		return conv
	}
	return string(p)
}

func (ch *chat) incoming(m client.Message) {
	peer := peerOf(m.ConversationID, ch.me)
	if m.From == ch.me {
		key := m.ConversationID + "\x00" + string(m.Body)
		ch.mu.Lock()
		for i, k := range ch.mine {
			if k == key {
				ch.mine = append(ch.mine[:i], ch.mine[i+1:]...)
				ch.mu.Unlock()
				return // shown when it was typed
			}
		}
		ch.mu.Unlock()
		ch.printf("%s [%s] you (another device): %s ✓\n", m.SentAt.Local().Format("15:04:05"), peer, text(m.Body))
		return
	}
	ch.printf("%s [%s] %s: %s\n", m.SentAt.Local().Format("15:04:05"), peer, m.From, text(m.Body))
}

// command handles one input line; it reports whether to quit.
func (ch *chat) command(ctx context.Context, line string) bool {
	switch {
	case line == "":
	case line == "/quit" || line == "/exit":
		return true
	case line == "/list":
		ch.list()
	case line == "/history":
		ch.history()
	case strings.HasPrefix(line, "/to"):
		peer := strings.TrimSpace(strings.TrimPrefix(line, "/to"))
		if !im.UserID(peer).Valid() {
			ch.printf("usage: /to <user>\n")
			break
		}
		ch.peer = peer
		ch.printf("Talking to %s.\n", peer)
	case strings.HasPrefix(line, "/"):
		ch.printf("unknown command %s (try /to, /list, /history, /quit)\n", strings.Fields(line)[0])
	case ch.peer == "":
		ch.printf("choose a conversation first: /to <user>\n")
	default:
		ch.send(ctx, ch.peer, line)
	}
	return false
}

func (ch *chat) send(ctx context.Context, peer, line string) {
	body, _ := json.Marshal(map[string]string{"text": line})
	conv := string(im.Direct(im.UserID(ch.me), im.UserID(peer)))
	ch.mu.Lock()
	ch.mine = append(ch.mine, conv+"\x00"+string(body))
	ch.mu.Unlock()
	ch.printf("%s [%s] you: %s …\n", time.Now().Format("15:04:05"), peer, line)
	ch.wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		sent, err := ch.c.SendDraft(sctx, client.Draft{To: peer, Body: body})
		if err != nil {
			ch.printf("  ✗ not acknowledged yet (%v); it stays in the outbox and is retried\n", err)
			return
		}
		ch.printf("  ✓ %q stored for %s (#%d in the conversation)\n", truncateText(line, 40), peer, sent.ConvSeq)
	})
}

func truncateText(s string, n int) string {
	if len([]rune(s)) > n {
		return string([]rune(s)[:n]) + "…"
	}
	return s
}

// wait lets in-flight sends finish (bounded).
func (ch *chat) wait(d time.Duration) {
	done := make(chan struct{})
	go func() { ch.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func (ch *chat) list() {
	hist, err := ch.c.History(0, 0)
	if err != nil {
		ch.printf("reading local messages: %v\n", err)
		return
	}
	type conv struct {
		peer  string
		count int
		last  client.Message
	}
	convs := map[string]*conv{}
	for _, m := range hist {
		cv := convs[m.ConversationID]
		if cv == nil {
			cv = &conv{peer: peerOf(m.ConversationID, ch.me)}
			convs[m.ConversationID] = cv
		}
		cv.count++
		cv.last = m
	}
	if len(convs) == 0 {
		ch.printf("No conversations yet.\n")
		return
	}
	list := make([]*conv, 0, len(convs))
	for _, cv := range convs {
		list = append(list, cv)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].last.Seq > list[j].last.Seq })
	ch.printf("Conversations:\n")
	for _, cv := range list {
		ch.printf("  %-16s %4d messages  last: %s: %s\n", cv.peer, cv.count, cv.last.From, truncateText(text(cv.last.Body), 40))
	}
}

func (ch *chat) history() {
	if ch.peer == "" {
		ch.printf("choose a conversation first: /to <user>\n")
		return
	}
	conv := string(im.Direct(im.UserID(ch.me), im.UserID(ch.peer)))
	hist, err := ch.c.History(0, 0)
	if err != nil {
		ch.printf("reading local messages: %v\n", err)
		return
	}
	var msgs []client.Message
	for _, m := range hist {
		if m.ConversationID == conv {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) > 20 {
		msgs = msgs[len(msgs)-20:]
	}
	for _, m := range msgs {
		who := m.From
		if who == ch.me {
			who = "you"
		}
		ch.printf("%s [%s] %s: %s\n", m.SentAt.Local().Format("15:04:05"), ch.peer, who, text(m.Body))
	}
	if pending, _ := ch.c.Pending(); len(pending) > 0 {
		ch.printf("(%d message(s) waiting in the outbox)\n", len(pending))
	}
}
