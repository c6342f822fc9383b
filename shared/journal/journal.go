// Package journal is the append-only file in which the in-process
// emulators (memdyn, memsqs) keep their data when `signet local --data`
// asks them to, so that a local stack survives a restart.
//
// A journal is a file of records, one JSON value per line, each describing
// a change already made in memory (an item put or deleted, a message added
// or removed). Records are written with one write(2) per API call, before
// the call is answered: a process killed at any point (kill -9 included)
// loses only calls that were never answered. Every second the file is
// fsynced, so an operating-system crash or power loss can lose up to the
// last second of answered calls. Opening a journal replays its records in
// order and drops a torn last line (a write the kill interrupted, whose
// call was therefore never answered); Compact then rewrites the file as
// the current state, so it grows only with one run's changes.
package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// SyncInterval is how often a journal with unsynced writes is fsynced.
const SyncInterval = time.Second

// Journal is an open journal file.
type Journal struct {
	path string

	mu     sync.Mutex
	f      *os.File
	dirty  bool
	err    error // the first write or sync failure; every later Append returns it
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// Open replays the journal at path (creating an empty one if there is
// none): replay is called with each record in the order written. A last
// line without its newline is a write the process did not finish; it is
// cut off. Any other record replay refuses is an error: the file is not
// this journal's, or it is damaged, and nothing is opened.
func Open(path string, replay func(record []byte) error) (*Journal, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	good, err := replayFile(f, replay)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	j := &Journal{path: path, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go j.syncLoop()
	return j, nil
}

// Load opens the journal at path (Open) and compacts it to the state the
// replay built (Compact): what a server keeping its data in a journal does
// at start.
func Load(path string, replay func(record []byte) error, snapshot func(emit func(record []byte) error) error) (*Journal, error) {
	j, err := Open(path, replay)
	if err != nil {
		return nil, err
	}
	if err := j.Compact(snapshot); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// replayFile feeds every complete line of f to replay and returns the
// length of the complete part.
func replayFile(f *os.File, replay func([]byte) error) (int64, error) {
	r := bufio.NewReaderSize(f, 1<<20)
	var good int64
	for line := 1; ; line++ {
		rec, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return good, nil // a torn last line (or none) is dropped
		}
		if err != nil {
			return 0, err
		}
		if trimmed := bytes.TrimSpace(rec); len(trimmed) > 0 {
			if err := replay(trimmed); err != nil {
				return 0, fmt.Errorf("record %d: %w", line, err)
			}
		}
		good += int64(len(rec))
	}
}

// Append writes records, each one line, in one write. It returns once the
// operating system has them (they survive the process being killed); the
// sync loop makes them durable within SyncInterval.
func (j *Journal) Append(records ...[]byte) error {
	if len(records) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, r := range records {
		if bytes.IndexByte(r, '\n') >= 0 {
			return fmt.Errorf("journal: a record may not contain a newline")
		}
		buf.Write(r)
		buf.WriteByte('\n')
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	if j.closed {
		return fmt.Errorf("journal %s: closed", j.path)
	}
	if _, err := j.f.Write(buf.Bytes()); err != nil {
		j.err = fmt.Errorf("journal %s: %w", j.path, err)
		return j.err
	}
	j.dirty = true
	return nil
}

// Err is the first write or sync failure of the journal (nil if none):
// from then on every Append fails with it.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Compact replaces the journal with the records snapshot emits (the
// current state), written to a temporary file, fsynced and renamed over
// the journal, so a crash during compaction leaves the old journal whole.
// No Append may run concurrently.
func (j *Journal) Compact(snapshot func(emit func(record []byte) error) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	tmp, err := os.CreateTemp(filepath.Dir(j.path), filepath.Base(j.path)+".compact-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	w := bufio.NewWriterSize(tmp, 1<<20)
	err = snapshot(func(r []byte) error {
		if bytes.IndexByte(r, '\n') >= 0 {
			return fmt.Errorf("journal: a record may not contain a newline")
		}
		w.Write(r)
		return w.WriteByte('\n')
	})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("compact %s: %w", j.path, err)
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	j.f.Close()
	j.f = f
	return syncDir(filepath.Dir(j.path))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// syncLoop fsyncs the file when it has unsynced writes.
func (j *Journal) syncLoop() {
	defer close(j.done)
	t := time.NewTicker(SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			j.sync()
		}
	}
}

func (j *Journal) sync() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.dirty || j.closed || j.err != nil {
		return
	}
	if err := j.f.Sync(); err != nil {
		j.err = fmt.Errorf("journal %s: sync: %w", j.path, err)
		return
	}
	j.dirty = false
}

// Encode is record r as a journal record: one line of JSON. A record type
// that does not encode is a programming error, and panics.
func Encode(r any) []byte {
	raw, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("journal: a %T does not encode: %v", r, err))
	}
	return raw
}

// Close syncs and closes the journal; closing none (nil) does nothing.
func (j *Journal) Close() error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.mu.Unlock()
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	err := j.f.Sync()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
