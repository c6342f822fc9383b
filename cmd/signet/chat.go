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

// runChat is `signet chat`: an interactive terminal chat of one user's
// device through the Go SDK.
func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	in := stdin
	fs := flag.NewFlagSet("signet chat", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "default")
	to := fs.String("to", "", "start in this conversation: a user, or a group id g:<id>")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: signet chat --user <me> [flags]

Interactive terminal chat. Lines you type are sent to the current
conversation; commands:
  /to <user|g:id>            switch to a 1:1 conversation or a group
  /group <name> <user>...    create a group with these members and switch to it
  /add <user>...             add members to the current group (admins, owners)
  /remove <user>...          remove members from the current group
  /leave                     leave the current group
  /members                   list the current group's members and roles
  /list                      your conversations: unread counts, last message
  /receipts [#N]             who has message #N (default: your last) delivered/read
  /status <online|away|dnd|invisible>   what others see of you
  /who <user>...             what those users show (online, away, dnd, offline)
  /history                   the current conversation's last 20 messages
  /quit                      leave (also Ctrl-D)
Your messages show "…" until the server ACKs them (✓: stored in the
conversation; in 1:1 also in the recipient's inbox), then in 1:1
"✓✓ delivered to <user> up to #N" when a device of theirs has them and
"✓✓ read by <user>" when they read them; in groups ask with /receipts.
Messages you see in the current conversation are marked read (your other
devices follow). Messages survive restarts: they are kept on this device
and unsent ones are retried.
`+clientHelpTail+"\nFlags:\n", dataHome())
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	ch := &chat{me: cf.user, out: stdout, titles: map[string]string{}}
	c, err := cf.dial(ctx, func(o *client.Options) {
		o.OnReceipt = func(r client.Receipt) {
			mark := "✓✓ delivered to"
			if r.Kind == "read" {
				mark = "✓✓ read by"
			}
			ch.printf("  %s %s up to #%d\n", mark, r.UserID, r.UpTo)
		}
		o.OnRead = func(conv string, upTo int64) {
			ch.printf("  (%s read up to #%d on another device)\n", ch.label(conv), upTo)
		}
		o.OnPresence = func(user, status string) {
			ch.printf("  * %s is %s\n", user, status)
		}
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ch.c = c
	ch.printf("Connected as %s (device %s) to %s\n", cf.user, cf.device, cf.url)
	ch.list(ctx)
	ch.printf("Commands: /to, /group, /add, /remove, /leave, /members, /list, /receipts, /status, /who, /history, /quit. Anything else is sent to the current conversation.\n")
	if *to != "" {
		ch.switchTo(ctx, *to)
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
			ch.incoming(ctx, m)
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
	c  *client.Client
	me string
	// conv is the current conversation ("" before /to).
	conv string
	mu   sync.Mutex
	out  io.Writer
	wg   sync.WaitGroup
	// mine are this session's sends whose own inbox copy is not shown again.
	mine []string
	// titles are group names by conversation id; lastSent is the convSeq of
	// this session's last ACKed send per conversation.
	titles   map[string]string
	lastSent map[string]int64
}

// printf prints a line of the chat (one writer at a time).
func (ch *chat) printf(format string, a ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	fmt.Fprintf(ch.out, format, a...)
}

// text returns a body's "text" field, or the body itself when it has none.
func text(body json.RawMessage) string {
	var b struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(body, &b) == nil && b.Text != nil {
		return *b.Text
	}
	return string(body)
}

// peerOf names the other user of a 1:1 conversation (the id itself for
// any other conversation).
func peerOf(conv, me string) string {
	p, err := im.ConversationID(conv).Peer(im.UserID(me))
	if err != nil {
		return conv
	}
	return string(p)
}

// label names a conversation for people: the peer, or "#name" for a group.
func (ch *chat) label(conv string) string {
	if im.ConversationID(conv).IsGroup() {
		ch.mu.Lock()
		title := ch.titles[conv]
		ch.mu.Unlock()
		if title != "" {
			return "#" + title
		}
		return conv
	}
	return peerOf(conv, ch.me)
}

// incoming prints a message that arrived: one of this user's own sends
// (from another device, or the echo of this one) or someone else's.
func (ch *chat) incoming(ctx context.Context, m client.Message) {
	label := ch.label(m.ConversationID)
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
		ch.printf("%s [%s] you (another device): %s ✓\n", m.SentAt.Local().Format("15:04:05"), label, text(m.Body))
		return
	}
	ch.printf("%s [%s] %s: %s\n", m.SentAt.Local().Format("15:04:05"), label, m.From, text(m.Body))
	if m.ConversationID == ch.conv {
		// Shown in the open conversation: read.
		if err := ch.c.MarkRead(ctx, m.ConversationID, m.ConvSeq); err != nil {
			ch.printf("  (read mark not sent: %v)\n", err)
		}
	}
}

// command handles one input line; it reports whether to quit.
func (ch *chat) command(ctx context.Context, line string) bool {
	fields := strings.Fields(line)
	arg := func() string { return strings.TrimSpace(strings.TrimPrefix(line, fields[0])) }
	switch {
	case line == "":
	case line == "/quit" || line == "/exit":
		return true
	case line == "/list":
		ch.list(ctx)
	case line == "/history":
		ch.history()
	case fields[0] == "/to":
		ch.switchTo(ctx, arg())
	case fields[0] == "/group":
		if len(fields) < 2 {
			ch.printf("usage: /group <name> <user>...\n")
			break
		}
		ch.query(ctx, func(qctx context.Context) error {
			g, err := ch.c.CreateGroup(qctx, fields[1], fields[2:]...)
			if err == nil {
				ch.remember(g.ConversationID, g.Name)
				ch.printf("Created #%s (%s) with %d members.\n", g.Name, g.ConversationID, g.Count)
				ch.conv = g.ConversationID
				ch.printf("Talking in #%s.\n", g.Name)
			}
			return err
		})
	case fields[0] == "/add" || fields[0] == "/remove" || fields[0] == "/leave" || fields[0] == "/members":
		ch.groupCommand(ctx, fields[0], fields[1:])
	case fields[0] == "/receipts":
		ch.receipts(ctx, arg())
	case fields[0] == "/status":
		ch.query(ctx, func(qctx context.Context) error {
			shown, err := ch.c.SetPresence(qctx, arg())
			if err == nil {
				ch.printf("Others now see you as %s.\n", shown)
			}
			return err
		})
	case fields[0] == "/who":
		ch.query(ctx, func(qctx context.Context) error {
			p, err := ch.c.QueryPresence(qctx, fields[1:]...)
			for _, u := range fields[1:] {
				if err == nil {
					ch.printf("  %-16s %s\n", u, p[u])
				}
			}
			return err
		})
	case strings.HasPrefix(line, "/"):
		ch.printf("unknown command %s (see signet chat --help)\n", fields[0])
	case ch.conv == "":
		ch.printf("choose a conversation first: /to <user> or /to g:<id>\n")
	default:
		ch.send(ctx, ch.conv, line)
	}
	return false
}

// query runs one server query with a timeout and prints its error.
func (ch *chat) query(ctx context.Context, q func(context.Context) error) {
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := q(qctx); err != nil {
		ch.printf("  ✗ %v\n", err)
	}
}

// remember keeps a conversation's title (a group's name) for its label.
func (ch *chat) remember(conv, title string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if title != "" {
		ch.titles[conv] = title
	}
}

// switchTo opens a conversation and marks what it holds read.
func (ch *chat) switchTo(ctx context.Context, target string) {
	conv := target
	switch {
	case im.ConversationID(target).IsGroup():
		if !im.ConversationID(target).ValidGroup() {
			ch.printf("usage: /to <user> or /to g:<id>\n")
			return
		}
	case im.UserID(target).Valid():
		conv = string(im.Direct(im.UserID(ch.me), im.UserID(target)))
	default:
		ch.printf("usage: /to <user> or /to g:<id>\n")
		return
	}
	ch.conv = conv
	ch.printf("Talking in %s.\n", ch.label(conv))
	ch.query(ctx, func(qctx context.Context) error {
		sum, err := ch.c.Summary(qctx)
		for _, s := range sum {
			ch.remember(s.ConversationID, s.Title)
			if s.ConversationID == conv && s.Unread > 0 {
				ch.printf("  (%d unread; marked read)\n", s.Unread)
				return ch.c.MarkRead(qctx, conv, s.Last)
			}
		}
		return err
	})
}

// groupCommand runs /add, /remove, /leave or /members in the current group.
func (ch *chat) groupCommand(ctx context.Context, cmd string, users []string) {
	if !im.ConversationID(ch.conv).IsGroup() {
		ch.printf("%s works in a group: /to g:<id> first\n", cmd)
		return
	}
	ch.query(ctx, func(qctx context.Context) error {
		var g client.GroupInfo
		var err error
		switch cmd {
		case "/add":
			g, err = ch.c.AddMembers(qctx, ch.conv, "", users...)
		case "/remove":
			g, err = ch.c.RemoveMembers(qctx, ch.conv, users...)
		case "/leave":
			g, err = ch.c.LeaveGroup(qctx, ch.conv)
		default:
			g, err = ch.c.Members(qctx, ch.conv)
		}
		if err != nil {
			return err
		}
		ch.remember(g.ConversationID, g.Name)
		switch cmd {
		case "/members":
			ch.printf("#%s: %d members\n", g.Name, g.Count)
			for _, m := range g.Members {
				if !m.Removed {
					ch.printf("  %-16s %s\n", m.UserID, m.Role)
				}
			}
		default:
			ch.printf("#%s: %s %s; %d members now\n", g.Name, strings.TrimPrefix(cmd, "/"), strings.Join(g.Changed, ", "), g.Count)
		}
		return nil
	})
}

// receipts prints who has a message of the current conversation delivered
// and read (/receipts [convSeq]; default the last one sent).
func (ch *chat) receipts(ctx context.Context, arg string) {
	if ch.conv == "" {
		ch.printf("choose a conversation first\n")
		return
	}
	ch.mu.Lock()
	seq := ch.lastSent[ch.conv]
	ch.mu.Unlock()
	if arg != "" {
		if _, err := fmt.Sscanf(strings.TrimPrefix(arg, "#"), "%d", &seq); err != nil {
			ch.printf("usage: /receipts [#N]\n")
			return
		}
	}
	if seq == 0 {
		ch.printf("no message of yours here yet: /receipts #N\n")
		return
	}
	ch.query(ctx, func(qctx context.Context) error {
		r, err := ch.c.Receipts(qctx, ch.conv, seq)
		if err == nil {
			ch.printf("  #%d: delivered %d/%d, read %d/%d", seq, r.Delivered, r.Members, r.Read, r.Members)
			if len(r.ReadBy) > 0 {
				ch.printf(" (read by %s)", strings.Join(r.ReadBy, ", "))
			}
			ch.printf("\n")
		}
		return err
	})
}

// send queues a line as a message to conv and prints its ✓ when the
// server ACKs it, or a ✗ when no ACK came within 30 s (the SDK keeps
// retrying it from the outbox).
func (ch *chat) send(ctx context.Context, conv, line string) {
	body, _ := json.Marshal(map[string]string{"text": line})
	label := ch.label(conv)
	ch.mu.Lock()
	ch.mine = append(ch.mine, conv+"\x00"+string(body))
	ch.mu.Unlock()
	ch.printf("%s [%s] you: %s …\n", time.Now().Format("15:04:05"), label, line)
	ch.wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		sent, err := ch.c.SendDraft(sctx, client.Draft{ConversationID: conv, Body: body})
		if err != nil {
			ch.printf("  ✗ not acknowledged yet (%v); it stays in the outbox and is retried\n", err)
			return
		}
		ch.mu.Lock()
		if ch.lastSent == nil {
			ch.lastSent = map[string]int64{}
		}
		ch.lastSent[conv] = sent.ConvSeq
		ch.mu.Unlock()
		ch.printf("  ✓ %q stored for %s (#%d in the conversation)\n", truncateText(line, 40), label, sent.ConvSeq)
	})
}

// truncateText shortens s to n characters, marking the cut.
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

// list shows the server's summary of this user's conversations.
func (ch *chat) list(ctx context.Context) {
	ch.query(ctx, func(qctx context.Context) error {
		sum, err := ch.c.Summary(qctx)
		if err != nil {
			return err
		}
		if len(sum) == 0 {
			ch.printf("No conversations yet.\n")
			return nil
		}
		sort.Slice(sum, func(i, j int) bool { return sum[i].LastAt > sum[j].LastAt })
		ch.printf("Conversations:\n")
		for _, s := range sum {
			ch.remember(s.ConversationID, s.Title)
			unread := ""
			if s.Unread > 0 {
				unread = fmt.Sprintf("%d unread", s.Unread)
			}
			last := ""
			if s.LastFrom != "" {
				last = fmt.Sprintf("last: %s: %s", s.LastFrom, truncateText(text(json.RawMessage(s.Preview)), 40))
			}
			left := ""
			if s.Removed {
				left = " (you left)"
			}
			ch.printf("  %-20s #%-5d %-10s %s%s\n", ch.label(s.ConversationID), s.Last, unread, last, left)
		}
		return nil
	})
}

// history prints the current conversation's messages stored on this device.
func (ch *chat) history() {
	if ch.conv == "" {
		ch.printf("choose a conversation first: /to <user>\n")
		return
	}
	hist, err := ch.c.History(0, 0)
	if err != nil {
		ch.printf("reading local messages: %v\n", err)
		return
	}
	var msgs []client.Message
	for _, m := range hist {
		if m.ConversationID == ch.conv {
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
		ch.printf("%s [%s] #%d %s: %s\n", m.SentAt.Local().Format("15:04:05"), ch.label(ch.conv), m.ConvSeq, who, text(m.Body))
	}
	if pending, _ := ch.c.Pending(); len(pending) > 0 {
		ch.printf("(%d message(s) waiting in the outbox)\n", len(pending))
	}
}
