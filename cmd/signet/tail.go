package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
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
consumer drops a repeat by seq. A read-diffused group's message (the
default for groups) has seq 0: its "conversationId" and "convSeq" say it,
and the highest convSeq printed of each group is kept in
<data>/<user>/<device>/tail.shown-groups (JSON), so that a restart prints
the group's later messages, not those already printed.
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
	groupsPath := filepath.Join(cf.dir(), "tail.shown-groups")
	shownGroups := map[string]int64{}
	if b, err := os.ReadFile(groupsPath); err == nil {
		if err := json.Unmarshal(b, &shownGroups); err != nil {
			return fmt.Errorf("%s: %w", groupsPath, err)
		}
	}
	c, err := cf.dial(ctx, func(o *client.Options) {
		o.Replay, o.ShownUpTo, o.ShownGroups = true, shown, maps.Clone(shownGroups)
	})
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
			// A read-diffused group's message has no inbox seq: it moves
			// its group's shown convSeq, not the inbox's shown seq.
			var err error
			if m.Seq > 0 {
				err = writeAtomically(shownPath, []byte(strconv.FormatInt(m.Seq, 10)))
			} else if m.ConvSeq > shownGroups[m.ConversationID] {
				shownGroups[m.ConversationID] = m.ConvSeq
				b, _ := json.Marshal(shownGroups)
				err = writeAtomically(groupsPath, b)
			}
			if err != nil {
				return err
			}
			if printed++; *count > 0 && printed >= *count {
				return nil
			}
		}
	}
}

// writeAtomically replaces path's content with b (write, then rename).
func writeAtomically(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
