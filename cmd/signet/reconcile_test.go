package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

func TestReconcileReportsMissingDuplicatedAndOutOfOrder(t *testing.T) {
	t.Parallel()
	st := startLocal(t)
	ctx := context.Background()
	for i := range 4 {
		d := im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: im.Direct("alice", "bob"), Body: []byte(fmt.Sprint(i))}
		if _, err := st.Store.Send(ctx, d, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	page, err := st.Store.Page(ctx, "bob", 0, 100, wire.EntrySize)
	if err != nil || len(page.Entries) != 4 {
		t.Fatalf("bob's inbox: %+v, %v", page, err)
	}
	if _, err := st.Store.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: 2, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	journal := func(name string, seqs ...int) string {
		var lines []string
		for _, s := range seqs {
			b, _ := json.Marshal(wire.FromEntry(page.Entries[s-1]))
			lines = append(lines, string(b))
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	base := []string{"reconcile", "--user", "bob", "--device", "phone", "--dynamodb-endpoint", st.DynamoDBEndpoint,
		"--inbox-table", st.Config.InboxTable, "--messages-table", st.Config.MessagesTable}

	var out, errOut syncBuffer
	if code := run(ctx, append(base, "--journal", journal("clean", 1, 2, 3)), &out, &errOut); code != 0 {
		t.Fatalf("clean journal: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"OK: nothing lost", "pending             1", "unconfirmed         1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("clean report lacks %q:\n%s", want, out.String())
		}
	}

	out, errOut = syncBuffer{}, syncBuffer{}
	code := run(ctx, append(base, "--json", "--journal", journal("bad", 1, 3, 1, 4, 2)), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "does not match") {
		t.Fatalf("faulty journal: exit %d, stderr %s", code, errOut.String())
	}
	var rep struct {
		OK         bool                  `json:"ok"`
		Missing    []struct{ Seq int64 } `json:"missing"`
		Duplicated []struct{ Seq int64 } `json:"duplicated"`
		OutOfOrder []struct{ Seq int64 } `json:"outOfOrder"`
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if rep.OK || len(rep.Missing) != 0 || len(rep.Duplicated) != 1 || rep.Duplicated[0].Seq != 1 || len(rep.OutOfOrder) != 1 || rep.OutOfOrder[0].Seq != 2 {
		t.Fatalf("report %+v\n%s", rep, out.String())
	}

	out, errOut = syncBuffer{}, syncBuffer{}
	if code := run(ctx, append(base, "--journal", journal("hole", 1, 2, 4)), &out, &errOut); code != 1 || !strings.Contains(out.String(), "seq 3 ") {
		t.Fatalf("journal with a hole: exit %d\n%s", code, out.String())
	}
	if code := run(ctx, []string{"reconcile", "--user", "bob"}, &out, &errOut); code != 2 {
		t.Fatalf("no journal: exit %d, want 2", code)
	}
}
