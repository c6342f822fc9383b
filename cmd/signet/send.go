package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/client"
)

// runSend is `signet send`: send one message and print the server's ACK as
// a JSON line (unACKed, it stays in the device's outbox for the next run).
func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet send", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "cli")
	to := fs.String("to", "", "recipient user id, or a group's conversation id g:<id> (required)")
	raw := fs.Bool("json", false, "the text is a JSON body, sent as is (default: {\"text\": <text>})")
	id := fs.String("id", "", "clientMsgId (default: random); repeat a send safely with the same id (other text under a used id is refused)")
	timeout := fs.Duration("timeout", 15*time.Second, "how long to wait to connect and for the server's ACK, in all")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: signet send --user <me> --to <user|g:id> [flags] <text>

Sends one message and prints the server's ACK as one JSON line. The message
is written to the device's outbox first: if it cannot connect or no ACK
arrives in time, it stays there and is sent again (same clientMsgId) the
next time this user/device runs a client command.
`+clientHelpTail+"\nFlags:\n", dataHome())
		fs.PrintDefaults()
	}
	flags, pos := interleaved(fs, args)
	if err := cf.parse(fs, flags, stderr); err != nil {
		return err
	}
	if *to == "" || len(pos) == 0 {
		return fmt.Errorf("%w: give --to and the text", errUsage)
	}
	text := strings.Join(pos, " ")
	body := json.RawMessage(text)
	if !*raw {
		body, _ = json.Marshal(map[string]string{"text": text})
	} else if !json.Valid(body) {
		return fmt.Errorf("%w: --json text is not valid JSON", errUsage)
	}
	d := client.Draft{ClientMsgID: *id, To: *to, Body: body}
	if strings.HasPrefix(*to, "g:") {
		d.To, d.ConversationID = "", *to
	}
	// The outbox first: a send that cannot connect is not lost.
	d, err := client.Queue(cf.storePath(), d)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cf.timeout = *timeout
	c, err := cf.dial(sctx, nil)
	if err != nil {
		return fmt.Errorf("%w; the message (clientMsgId %s) stays in the outbox of %s and is sent the next time this user/device runs a client command", err, d.ClientMsgID, cf.dir())
	}
	defer c.Close()
	sent, err := c.SendDraft(sctx, d)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no ACK within %s; the message stays in the outbox of %s and is retried on the next run", *timeout, cf.dir())
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(sent)
	fmt.Fprintln(stdout, string(b))
	return nil
}
