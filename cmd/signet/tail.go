package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/wire"
)

// runTail is `signet tail`: print a user's messages as JSON lines as they
// arrive (--count to stop after N).
func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet tail", flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs, "tail")
	count := fs.Int("count", 0, "exit after printing this many messages (0: until Ctrl-C)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: signet tail --user <me> [flags]

Prints one JSON line per message of the user's inbox as this device
persists it: first what arrived since this device last ran, then live
messages, in seq order. The last printed seq is kept in
<data>/<user>/<device>/tail.shown, so a restart continues where the last run
stopped. Only a crash between printing a line and recording it can print
that one line again on the next run; every line carries its "seq", so a
consumer drops a repeat by seq. (A read-diffused group's message —
GroupDelivery=read, experimental — has seq 0, and tail does not replay
those: one persisted by the device and not yet printed when tail stopped
is not printed by the next run.)
`+clientHelpTail+"\nFlags:\n", dataHome())
		fs.PrintDefaults()
	}
	if err := cf.parse(fs, args, stderr); err != nil {
		return err
	}
	shownPath := filepath.Join(cf.dir(), "tail.shown")
	shown := int64(0)
	if b, err := os.ReadFile(shownPath); err == nil {
		shown, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	c, err := cf.dial(ctx, func(o *client.Options) { o.Replay, o.ShownUpTo = true, shown })
	if err != nil {
		return err
	}
	defer c.Close()
	printed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			line, _ := json.Marshal(wire.Entry{Seq: m.Seq, Message: wire.Message{
				MessageID: m.MessageID, ConversationID: m.ConversationID, ConvSeq: m.ConvSeq,
				From: m.From, Body: m.Body, SentAt: wire.Timestamp(m.SentAt),
			}})
			if _, err := fmt.Fprintln(stdout, string(line)); err != nil {
				return err
			}
			// A read-diffused group's message (experimental) has no inbox
			// seq: it leaves the inbox's shown seq where it is.
			if m.Seq > 0 {
				if err := writeShown(shownPath, m.Seq); err != nil {
					return err
				}
			}
			if printed++; *count > 0 && printed >= *count {
				return nil
			}
		}
	}
}

// writeShown records the last printed seq atomically (rename).
func writeShown(path string, seq int64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(seq, 10)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
