package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replayAll opens the journal at path and returns its records.
func replayAll(t *testing.T, path string) (*Journal, []string) {
	t.Helper()
	var got []string
	j, err := Open(path, func(r []byte) error { got = append(got, string(r)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return j, got
}

func TestRecordsComeBackInOrderAfterAReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, got := replayAll(t, path)
	if len(got) != 0 {
		t.Fatalf("a new journal replayed %q", got)
	}
	for i := range 5 {
		if err := j.Append([]byte(fmt.Sprintf(`{"n":%d}`, i)), []byte(fmt.Sprintf(`{"m":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	// No Close: a killed process closes nothing; what Append returned for
	// is in the file.
	j2, got := replayAll(t, path)
	defer j2.Close()
	if len(got) != 10 || got[0] != `{"n":0}` || got[9] != `{"m":4}` {
		t.Fatalf("replayed %q", got)
	}
	j.Close()
}

// A write the process did not finish (no newline) belonged to a call that
// was never answered: it is cut off, and appends go on after the last
// whole record.
func TestATornLastRecordIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, []byte("{\"a\":1}\n{\"b\":2}\n{\"c\":"), 0o644); err != nil {
		t.Fatal(err)
	}
	j, got := replayAll(t, path)
	if strings.Join(got, ",") != `{"a":1},{"b":2}` {
		t.Fatalf("replayed %q", got)
	}
	if err := j.Append([]byte(`{"d":4}`)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	data, _ := os.ReadFile(path)
	if string(data) != "{\"a\":1}\n{\"b\":2}\n{\"d\":4}\n" {
		t.Fatalf("file %q", data)
	}
}

// A record the replay refuses in the middle of the file is damage, not a
// torn write: nothing is opened, and the file is left as it was.
func TestADamagedRecordRefusesToOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	content := "{\"a\":1}\nnot json\n{\"b\":2}\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, func(r []byte) error {
		if r[0] != '{' {
			return fmt.Errorf("bad record")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Fatalf("err %v; want the damaged record named", err)
	}
	if data, _ := os.ReadFile(path); string(data) != content {
		t.Fatalf("file changed to %q", data)
	}
}

func TestCompactionKeepsOnlyTheSnapshotAndAppendsAfterIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, _ := replayAll(t, path)
	for i := range 100 {
		if err := j.Append([]byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Compact(func(emit func([]byte) error) error { return emit([]byte(`{"state":99}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte(`{"n":100}`)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2, got := replayAll(t, path)
	defer j2.Close()
	if strings.Join(got, ",") != `{"state":99},{"n":100}` {
		t.Fatalf("replayed %q", got)
	}
	if left, _ := filepath.Glob(path + ".compact-*"); len(left) != 0 {
		t.Fatalf("compaction left %v", left)
	}
}

func TestASecondLockOfOneDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second lock: %v; want in use", err)
	}
	unlock()
	unlock2, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
