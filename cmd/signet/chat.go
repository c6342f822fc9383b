package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

// Chat's timings: how long a send waits before it is reported as queued,
// how often the connection state is looked at, and how long a quitting
// chat waits for sends in flight.
const (
	queuedAfter   = 10 * time.Second
	stateInterval = 200 * time.Millisecond
	quitWait      = 5 * time.Second
)

// terminalLineLimit is the longest line a terminal in canonical mode
// passes to a program (Linux's N_TTY: 4095 characters and the newline);
// a pasted line that long may have been cut.
const terminalLineLimit = 4095

// runChat is `signet chat`: an interactive terminal chat of one user's
// device through the Go SDK.
func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	in := stdin
	fs := flag.NewFlagSet("signet chat", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "default")
	to := fs.String("to", "", "start in this conversation: a user, #group, g:<id> or a:<app>")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: signet chat --user <me> [flags]

Interactive terminal chat. Lines you type are sent to the current
conversation; commands:
  /to <user|#group|g:id|a:app>  switch to a 1:1 conversation, a group (by
                             name or id) or an app's alerts
  /group <name> <user>...    create a group with these members and switch to it
  /add <user>...             add members to the current group (admins, owners)
  /remove <user>...          remove members from the current group
  /leave                     leave the current group (back to the previous conversation)
  /members                   list the current group's members and roles
  /list                      your conversations with their ids: unread counts, last message
  /receipts [#N]             who has message #N (default: your last) delivered/read
  /status <online|away|dnd|invisible>   what others see of you
  /who <user>...             what those users show (online, away, dnd, offline)
  /answer <option>           answer the latest alert here that asks for one (e.g. /answer ack)
  /history                   the current conversation's last 20 messages
  /quit                      leave (also Ctrl-D)
Your messages show "…" until the server ACKs them (✓: stored in the
conversation; in 1:1 also in the recipient's inbox), then in 1:1
"✓✓ delivered to <user> up to #N" when a device of theirs has them and
"✓✓ read by <user>" when they read them; in groups ask with /receipts.
A message the server has not ACKed within 10 s is shown as queued: it
stays in this device's outbox and is sent when the server answers (its ✓
follows, also after a reconnect); one the server refuses is shown as
refused and is not sent. While the connection is down the chat says so
and queues what you type. Messages you see in the current conversation
are marked read (your other devices follow); alerts show their priority
and title. Messages survive restarts: they are kept on this device and
unsent ones are retried.
`+clientHelpTail+"\nFlags:\n", dataHome())
		fs.PrintDefaults()
	}
	if err := cf.parse(fs, args, stderr); err != nil {
		return err
	}
	ch := &chat{me: cf.user, out: stdout, titles: map[string]string{}, seen: map[string]bool{}, lastSent: map[string]int64{}, asks: map[string]askingAlert{}}
	c, err := cf.dial(ctx, func(o *client.Options) {
		o.OnAnswer = func(a client.AnswerResult) {
			ch.printf("You answered %s on another device (%s).\n", a.Option, a.MessageID)
		}
		o.OnRenotify = func(m client.Message) {
			ch.printf("%s [%s] again: %s\n", time.Now().Format("15:04:05"), ch.label(m.ConversationID), alertText(m.Body))
		}
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
		o.OnMembership = ch.membership
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ch.c = c
	sends, stopSends := context.WithCancel(ctx)
	defer stopSends()
	ch.sends = sends
	ch.printf("Connected as %s (device %s) to %s\n", cf.user, cf.device, cf.url)
	ch.list(ctx)
	ch.printf("Commands: /to, /group, /add, /remove, /leave, /members, /list, /receipts, /status, /who, /answer, /history, /quit. Anything else is sent to the current conversation.\n")
	if *to != "" {
		ch.switchTo(ctx, *to)
	}
	go ch.watchConnection(sends)

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		if err := sc.Err(); err != nil {
			ch.printf("  ✗ input: %v\n", err)
		}
	}()
	fromTerminal := isTerminal(in)
	for {
		select {
		case <-ctx.Done():
			ch.quit()
			return nil
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			ch.incoming(ctx, m)
		case line, ok := <-lines:
			if !ok {
				ch.quit()
				return nil
			}
			if fromTerminal && len([]rune(line)) == terminalLineLimit {
				ch.printf("  ✗ not sent: this line is %d characters, the most a terminal passes in one line, so the rest of it may have been cut; send long text in shorter lines or with signet send\n", terminalLineLimit)
				continue
			}
			if quit := ch.command(ctx, strings.TrimSpace(line)); quit {
				ch.quit()
				return nil
			}
		}
	}
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// chat is one `signet chat` session.
type chat struct {
	c   *client.Client
	me  string
	out io.Writer
	// sends is the context sends wait for their ACK in: until the chat
	// ends (a send still waiting then stays in the outbox).
	sends context.Context
	wg    sync.WaitGroup

	mu sync.Mutex // guards what follows and the output
	// conv is the current conversation ("" before /to), prev the one
	// before it (/leave returns there).
	conv, prev string
	// mine are this session's sends whose own inbox copy is not shown again.
	mine []string
	// titles are group names by conversation id; seen are users met
	// (peers, senders); lastSent is the convSeq of this session's last
	// ACKed send per conversation.
	titles   map[string]string
	seen     map[string]bool
	lastSent map[string]int64
	// inFlight counts sends not yet ACKed or refused.
	inFlight int
	// asks is, per app conversation, the latest alert that asks for an
	// answer (/answer answers it).
	asks map[string]askingAlert
}

// askingAlert is an alert that asks for an answer.
type askingAlert struct {
	id      string
	title   string
	options []string
}

// printf prints a line of the chat (one writer at a time).
func (ch *chat) printf(format string, a ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	fmt.Fprintf(ch.out, format, a...)
}

// current is the current conversation.
func (ch *chat) current() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.conv
}

// open makes conv the current conversation, remembering the one before.
func (ch *chat) open(conv string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if conv != ch.conv {
		ch.prev, ch.conv = ch.conv, conv
	}
}

// watchConnection says when the connection drops and when it is back: what
// is typed meanwhile is queued, not lost and not refused.
func (ch *chat) watchConnection(ctx context.Context) {
	up := true
	t := time.NewTicker(stateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch now := ch.c.Connected(); {
		case up && !now:
			ch.printf("  * disconnected; reconnecting (what you type is queued and sent when the connection is back)\n")
		case !up && now:
			ch.printf("  * connected again\n")
		}
		up = ch.c.Connected()
	}
}

// membership prints a notice that someone added or removed this user.
func (ch *chat) membership(m client.Membership) {
	ch.remember(m.ConversationID, m.Name)
	if m.Change == "removed" {
		ch.printf("  * %s removed you from #%s (%s)\n", m.By, m.Name, m.ConversationID)
		return
	}
	ch.printf("  * %s added you to #%s (%s): /to #%s to talk there\n", m.By, m.Name, m.ConversationID, m.Name)
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

// alertText renders an app's alert body: its priority, title and body.
func alertText(body json.RawMessage) string {
	var a struct {
		Title, Body, Priority string
	}
	if json.Unmarshal(body, &a) != nil || a.Title == "" {
		return text(body)
	}
	prio := ""
	if a.Priority != "" && a.Priority != "normal" {
		prio = strings.ToUpper(a.Priority) + " "
	}
	if a.Body == "" {
		return fmt.Sprintf("%s⚑ %s", prio, a.Title)
	}
	return fmt.Sprintf("%s⚑ %s — %s", prio, a.Title, a.Body)
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

// label names a conversation for people: the peer, "#name" for a group
// whose name is known, the id otherwise.
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
// (from another device, or the echo of this one), an alert, or someone
// else's message.
func (ch *chat) incoming(ctx context.Context, m client.Message) {
	label := ch.label(m.ConversationID)
	at := m.SentAt.Local().Format("15:04:05")
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
		ch.printf("%s [%s] you (another device): %s ✓\n", at, label, text(m.Body))
		return
	}
	ch.mu.Lock()
	ch.seen[m.From] = true
	ch.mu.Unlock()
	if im.ConversationID(m.ConversationID).AppConversation() {
		ch.printf("%s [%s] %s\n", at, label, alertText(m.Body))
		var a struct {
			Title string
			Ack   *struct{ Options []string }
		}
		if json.Unmarshal(m.Body, &a) == nil && a.Ack != nil && len(a.Ack.Options) > 0 {
			ch.mu.Lock()
			ch.asks[m.ConversationID] = askingAlert{id: m.MessageID, title: a.Title, options: a.Ack.Options}
			ch.mu.Unlock()
			ch.printf("         it asks for an answer: /to %s, then /answer %s\n", m.ConversationID, strings.Join(a.Ack.Options, "|"))
		}
	} else {
		ch.printf("%s [%s] %s: %s\n", at, label, m.From, text(m.Body))
	}
	if m.ConversationID == ch.current() {
		// Shown in the open conversation: read.
		ch.async(ctx, func(qctx context.Context) error {
			read := func() error { return ch.c.MarkRead(qctx, m.ConversationID, m.ConvSeq) }
			if im.ConversationID(m.ConversationID).AppConversation() {
				// An alert can come after a later one (below the read
				// watermark): its inbox seq marks it read.
				read = func() error { return ch.c.MarkAlertsRead(qctx, m.ConversationID, m.ConvSeq, m.Seq) }
			}
			if err := read(); err != nil {
				return fmt.Errorf("read mark not sent: %w", err)
			}
			return nil
		})
	}
}

// command handles one input line; it reports whether to quit. Nothing
// here waits for the network: queries run in the background and print
// their answer when it comes.
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
		ch.async(ctx, func(qctx context.Context) error {
			g, err := ch.c.CreateGroup(qctx, fields[1], fields[2:]...)
			if err == nil {
				ch.remember(g.ConversationID, g.Name)
				ch.printf("Created #%s (%s) with %d members.\n", g.Name, g.ConversationID, g.Count)
				ch.open(g.ConversationID)
				ch.printf("Talking in #%s.\n", g.Name)
			}
			return err
		})
	case fields[0] == "/add" || fields[0] == "/remove" || fields[0] == "/leave" || fields[0] == "/members":
		ch.groupCommand(ctx, fields[0], fields[1:])
	case fields[0] == "/receipts":
		ch.receipts(ctx, arg())
	case fields[0] == "/status":
		ch.async(ctx, func(qctx context.Context) error {
			shown, err := ch.c.SetPresence(qctx, arg())
			if errors.Is(err, client.ErrSuperseded) {
				return nil // a later /status sets it, and says so
			}
			if err == nil {
				ch.printf("Others now see you as %s.\n", shown)
			}
			return err
		})
	case fields[0] == "/answer":
		ch.answer(ctx, arg())
	case fields[0] == "/who":
		ch.async(ctx, func(qctx context.Context) error {
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
	case ch.current() == "":
		ch.printf("choose a conversation first: /to <user>, /to #group or /to g:<id>\n")
	case im.ConversationID(ch.current()).AppConversation():
		ch.printf("an app's alerts are read here, not written to: /answer <option> answers one that asks; /to <user> to write\n")
	default:
		ch.send(ch.current(), line)
	}
	return false
}

// answer gives this user's answer to the latest alert of the current app
// conversation that asks for one.
func (ch *chat) answer(ctx context.Context, option string) {
	ch.mu.Lock()
	a, ok := ch.asks[ch.conv]
	ch.mu.Unlock()
	switch {
	case !ok:
		ch.printf("no alert here asks for an answer (/to a:<app> opens an app's alerts)\n")
		return
	case option == "":
		ch.printf("usage: /answer %s\n", strings.Join(a.options, "|"))
		return
	}
	ch.async(ctx, func(qctx context.Context) error {
		r, err := ch.c.Answer(qctx, a.id, option)
		if err == nil {
			ch.printf("Answered %s to %q.\n", r.Option, a.title)
		}
		return err
	})
}

// async runs one server query in the background with a timeout (a query
// waits for a connection) and prints its error.
func (ch *chat) async(ctx context.Context, q func(context.Context) error) {
	ch.wg.Go(func() {
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := q(qctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && !ch.c.Connected() {
				err = errors.New("no connection to the server; try again when it is back")
			}
			ch.printf("  ✗ %v\n", err)
		}
	})
}

// remember keeps a conversation's title (a group's name) for its label.
func (ch *chat) remember(conv, title string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if title != "" {
		ch.titles[conv] = title
	}
}

// groupsNamed returns the ids of the known groups called name.
func (ch *chat) groupsNamed(name string) []string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var ids []string
	for id, t := range ch.titles {
		if t == name && im.ConversationID(id).IsGroup() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// resolve turns what /to names into a conversation id, or says why not.
func (ch *chat) resolve(target string) (string, error) {
	c := im.ConversationID(target)
	switch {
	case strings.HasPrefix(target, "#"):
		name := target[1:]
		switch ids := ch.groupsNamed(name); len(ids) {
		case 0:
			return "", fmt.Errorf("no group #%s among your conversations (/list shows them; /to g:<id> opens one by id)", name)
		case 1:
			return ids[0], nil
		default:
			return "", fmt.Errorf("%d groups are called #%s: /to one of %s", len(ids), name, strings.Join(ids, ", "))
		}
	case c.IsGroup():
		if !c.ValidGroup() {
			return "", fmt.Errorf("%s is not a group id (g:<id>)", target)
		}
		return target, nil
	case c.AppConversation():
		return target, nil
	case im.UserID(target).Valid():
		ch.mu.Lock()
		seen := ch.seen[target]
		ch.mu.Unlock()
		if !seen {
			if ids := ch.groupsNamed(target); len(ids) > 0 {
				ch.printf("  ! no user %q has written to you, and you have a group #%s: for the group use /to #%s. Opening a 1:1 with user %q.\n", target, target, target, target)
			}
		}
		return string(im.Direct(im.UserID(ch.me), im.UserID(target))), nil
	}
	return "", errors.New("usage: /to <user>, /to #group, /to g:<id> or /to a:<app>")
}

// switchTo opens a conversation and marks what it holds read.
func (ch *chat) switchTo(ctx context.Context, target string) {
	conv, err := ch.resolve(target)
	if err != nil {
		ch.printf("  ✗ %v\n", err)
		return
	}
	ch.open(conv)
	if im.ConversationID(conv).IsGroup() {
		ch.printf("Talking in %s (%s).\n", ch.label(conv), conv)
	} else {
		ch.printf("Talking in %s.\n", ch.label(conv))
	}
	ch.async(ctx, func(qctx context.Context) error {
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
	conv := ch.current()
	if !im.ConversationID(conv).IsGroup() {
		ch.printf("%s works in a group: /to #group or /to g:<id> first\n", cmd)
		return
	}
	ch.async(ctx, func(qctx context.Context) error {
		var g client.GroupInfo
		var err error
		switch cmd {
		case "/add":
			g, err = ch.c.AddMembers(qctx, conv, "", users...)
		case "/remove":
			g, err = ch.c.RemoveMembers(qctx, conv, users...)
		case "/leave":
			g, err = ch.c.LeaveGroup(qctx, conv)
		default:
			g, err = ch.c.Members(qctx, conv)
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
		case "/leave":
			ch.leftGroup(conv, g.Name)
		default:
			ch.printf("#%s: %s %s; %d members now\n", g.Name, strings.TrimPrefix(cmd, "/"), strings.Join(g.Changed, ", "), g.Count)
		}
		return nil
	})
}

// leftGroup returns from a group just left to the conversation before it.
func (ch *chat) leftGroup(conv, name string) {
	ch.mu.Lock()
	back := ""
	if ch.conv == conv {
		back = ch.prev
		if back == conv {
			back = ""
		}
		ch.conv, ch.prev = back, ""
	}
	ch.mu.Unlock()
	if back == "" {
		ch.printf("You left #%s. Choose a conversation: /to <user> or /to #group\n", name)
		return
	}
	ch.printf("You left #%s. Talking in %s again.\n", name, ch.label(back))
}

// receipts prints who has a message of the current conversation delivered
// and read (/receipts [convSeq]; default the last one sent).
func (ch *chat) receipts(ctx context.Context, arg string) {
	conv := ch.current()
	if conv == "" {
		ch.printf("choose a conversation first\n")
		return
	}
	ch.mu.Lock()
	seq := ch.lastSent[conv]
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
	ch.async(ctx, func(qctx context.Context) error {
		r, err := ch.c.Receipts(qctx, conv, seq)
		if err == nil {
			line := fmt.Sprintf("  #%d: delivered %d/%d, read %d/%d", seq, r.Delivered, r.Members, r.Read, r.Members)
			if len(r.ReadBy) > 0 {
				line += fmt.Sprintf(" (read by %s)", strings.Join(r.ReadBy, ", "))
			}
			ch.printf("%s\n", line)
		}
		return err
	})
}

// send queues a line as a message to conv and follows it to the end: ✓
// when the server ACKs it (whenever that is, while the chat runs), a
// "queued" line when no ACK came within queuedAfter (it stays in the
// outbox), ✗ when the server refused it (the SDK dropped it: not sent).
func (ch *chat) send(conv, line string) {
	body, _ := json.Marshal(map[string]string{"text": line})
	if len(body) > im.MaxBodyBytes {
		ch.printf("  ✗ not sent: the message is %d bytes encoded; the limit is %d\n", len(body), im.MaxBodyBytes)
		return
	}
	label := ch.label(conv)
	ch.mu.Lock()
	ch.mine = append(ch.mine, conv+"\x00"+string(body))
	ch.inFlight++
	ch.mu.Unlock()
	ch.printf("%s [%s] you: %s …\n", time.Now().Format("15:04:05"), label, line)
	short := truncateText(line, 40)
	ch.wg.Go(func() {
		defer func() { ch.mu.Lock(); ch.inFlight--; ch.mu.Unlock() }()
		queued := time.AfterFunc(queuedAfter, func() {
			ch.printf("  … %q not acknowledged yet: queued in this device's outbox, sent when the server answers\n", short)
		})
		sent, err := ch.c.SendDraft(ch.sends, client.Draft{ConversationID: conv, Body: body})
		late := !queued.Stop()
		var refused *client.ServerError
		switch {
		case errors.As(err, &refused):
			ch.printf("  ✗ %q refused by the server, not sent: %s\n", short, refused.Message)
			return
		case err != nil:
			return // the chat ended: it stays in the outbox (quit says so)
		}
		ch.mu.Lock()
		ch.lastSent[conv] = sent.ConvSeq
		ch.mu.Unlock()
		after := ""
		if late {
			after = " (at last)"
		}
		ch.printf("  ✓ %q stored for %s (#%d in the conversation)%s\n", short, label, sent.ConvSeq, after)
	})
}

// truncateText shortens s to n characters, marking the cut.
func truncateText(s string, n int) string {
	if len([]rune(s)) > n {
		return string([]rune(s)[:n]) + "…"
	}
	return s
}

// quit lets sends in flight finish (bounded) and says what stays queued.
func (ch *chat) quit() {
	done := make(chan struct{})
	go func() { ch.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(quitWait):
	}
	if pending, err := ch.c.Pending(); err == nil && len(pending) > 0 {
		ch.printf("  %d message(s) not acknowledged yet stay in this device's outbox: they are sent the next time this device connects (signet chat, send or tail)\n", len(pending))
	}
}

// list shows the server's summary of this user's conversations, with the
// ids /to takes.
func (ch *chat) list(ctx context.Context) {
	ch.async(ctx, func(qctx context.Context) error {
		sum, err := ch.c.Summary(qctx)
		if err != nil {
			return err
		}
		if len(sum) == 0 {
			ch.printf("No conversations yet.\n")
			return nil
		}
		sort.Slice(sum, func(i, j int) bool { return sum[i].LastAt > sum[j].LastAt })
		var b strings.Builder
		b.WriteString("Conversations:\n")
		for _, s := range sum {
			ch.remember(s.ConversationID, s.Title)
			conv := im.ConversationID(s.ConversationID)
			if !conv.IsGroup() && !conv.AppConversation() {
				ch.mu.Lock()
				ch.seen[peerOf(s.ConversationID, ch.me)] = true
				ch.mu.Unlock()
			}
			unread := ""
			if s.Unread > 0 {
				unread = fmt.Sprintf("%d unread", s.Unread)
			}
			last := ""
			switch {
			case conv.AppConversation() && s.LastFrom != "":
				last = "last: " + truncateText(alertText(json.RawMessage(s.Preview)), 40)
			case s.LastFrom != "":
				last = fmt.Sprintf("last: %s: %s", s.LastFrom, truncateText(text(json.RawMessage(s.Preview)), 40))
			}
			left := ""
			if s.Removed {
				left = " (you left)"
			}
			id := ""
			if conv.IsGroup() || conv.AppConversation() {
				id = "  /to " + s.ConversationID
			}
			fmt.Fprintf(&b, "  %-20s #%-5d %-10s %s%s%s\n", ch.label(s.ConversationID), s.Last, unread, last, left, id)
		}
		ch.printf("%s", b.String())
		return nil
	})
}

// history prints the current conversation's messages stored on this device.
func (ch *chat) history() {
	conv := ch.current()
	if conv == "" {
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
		body := text(m.Body)
		if im.ConversationID(conv).AppConversation() {
			body = alertText(m.Body)
		}
		ch.printf("%s [%s] #%d %s: %s\n", m.SentAt.Local().Format("15:04:05"), ch.label(conv), m.ConvSeq, who, body)
	}
	if pending, _ := ch.c.Pending(); len(pending) > 0 {
		ch.printf("(%d message(s) waiting in the outbox)\n", len(pending))
	}
}
