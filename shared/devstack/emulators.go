package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/sirupsen/logrus"
	miniserver "github.com/truora/minidyn/server"

	"github.com/signet-im/signet/shared/memdyn"
	"github.com/signet-im/signet/shared/memsqs"
)

// EnvTestSendMode, when set, gives every stack that does not choose one
// this 1:1 send mode (template parameter SendMode): the suites run again
// in the mode that is not the default.
const EnvTestSendMode = "SIGNET_TEST_SEND_MODE"

// EnvTestGroupDelivery, when set, gives every stack that does not choose
// one this group delivery (template parameter GroupDelivery), as
// EnvTestSendMode does the send mode; the store contract suite reads it too.
const EnvTestGroupDelivery = "SIGNET_TEST_GROUP_DELIVERY"

// EnvEmulator names the in-process DynamoDB a stack (and the store
// contract suite) starts when no endpoint is given: minidyn or memdyn.
const EnvEmulator = "SIGNET_DYNAMODB_EMULATOR"

// Place is where an in-process emulator listens and keeps its data.
type Place struct {
	// Addr is its listen address (default 127.0.0.1:0, a free port).
	Addr string
	// Journal is the file that keeps its data across restarts (see package
	// journal); "" keeps it in memory. memdyn and memsqs only.
	Journal string
}

func (p Place) addr() string {
	if p.Addr == "" {
		return "127.0.0.1:0"
	}
	return p.Addr
}

// Emulator is a started in-process emulator.
type Emulator struct {
	// Kind is the emulator started (minidyn, memdyn, goaws, memsqs).
	Kind string
	// Endpoint is its URL; Stop stops it (and closes its journal).
	Endpoint string
	Stop     func()
	// Restored counts what its journal held at start (items or messages).
	Restored int
}

// StartDynamoDB starts the named in-process DynamoDB ("" or "minidyn":
// truora/minidyn; "memdyn": Signet's B-tree emulator, for tables that grow
// past what minidyn scans quickly and for data kept across restarts; ""
// means memdyn when at keeps a journal; "memdyn-stale": memdyn answering
// eventually consistent reads, one in two, from a replica StaleReadLag
// behind, as DynamoDB may — the other emulators never read stale).
func StartDynamoDB(kind string, at Place) (Emulator, error) {
	if kind == "" && at.Journal != "" {
		kind = "memdyn"
	}
	switch kind {
	case "", "minidyn":
		if at.Journal != "" {
			return Emulator{}, fmt.Errorf("minidyn keeps its data in memory only: keeping data across restarts takes memdyn (the default then)")
		}
		endpoint, stop, err := StartMinidyn(at.addr())
		return Emulator{Kind: "minidyn", Endpoint: endpoint, Stop: stop}, err
	case "memdyn":
		s := memdyn.New()
		if at.Journal != "" {
			var err error
			if s, err = memdyn.Open(at.Journal); err != nil {
				return Emulator{}, fmt.Errorf("memdyn data: %w", err)
			}
		}
		endpoint, stop, err := serve(s, at.addr(), s.Close)
		if err != nil {
			return Emulator{}, fmt.Errorf("memdyn: %w", err)
		}
		return Emulator{Kind: "memdyn", Endpoint: endpoint, Stop: stop, Restored: s.Items()}, nil
	case "memdyn-stale":
		if at.Journal != "" {
			return Emulator{}, fmt.Errorf("memdyn-stale keeps its data in memory only")
		}
		s := memdyn.NewStale(StaleReadLag, uint64(time.Now().UnixNano()))
		endpoint, stop, err := serve(s, at.addr(), s.Close)
		if err != nil {
			return Emulator{}, fmt.Errorf("memdyn-stale: %w", err)
		}
		return Emulator{Kind: "memdyn-stale", Endpoint: endpoint, Stop: stop}, nil
	}
	return Emulator{}, fmt.Errorf("%s=%q: want minidyn, memdyn or memdyn-stale", EnvEmulator, kind)
}

// StaleReadLag is how far behind memdyn-stale's replicas are: a second
// (DynamoDB: "all copies of data usually reach consistency within a
// second").
const StaleReadLag = time.Second

// StartMinidyn serves a fresh in-memory DynamoDB (minidyn, JSON protocol) on
// addr and returns its URL and a stop function.
func StartMinidyn(addr string) (string, func(), error) {
	return serve(miniserver.NewServer(), addr, func() error { return nil })
}

// serve serves an emulator on addr and returns its URL and a stop
// function that stops serving, then closes the emulator (its journal). A
// failure to listen closes it at once.
func serve(h http.Handler, addr string, closeEmulator func() error) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		closeEmulator()
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close(); closeEmulator() }, nil
}

// EnvSQSEmulator names the in-process SQS a stack starts when no endpoint
// is given: goaws or memsqs.
const EnvSQSEmulator = "SIGNET_SQS_EMULATOR"

// StartSQS starts the named in-process SQS ("" or "goaws": goaws, shared
// by every stack of the process; "memsqs": Signet's heap-and-map emulator,
// one per stack, for queues that grow past what goaws handles quickly and
// for messages kept across restarts; "" means memsqs when at keeps a
// journal).
func StartSQS(kind string, at Place) (Emulator, error) {
	if kind == "" && at.Journal != "" {
		kind = "memsqs"
	}
	switch kind {
	case "", "goaws":
		if at.Journal != "" {
			return Emulator{}, fmt.Errorf("goaws keeps its messages in memory only: keeping data across restarts takes memsqs (the default then)")
		}
		endpoint, err := StartGoawsAt(at.addr())
		return Emulator{Kind: "goaws", Endpoint: endpoint, Stop: func() {}}, err
	case "memsqs":
		s := memsqs.New()
		if at.Journal != "" {
			var err error
			if s, err = memsqs.Open(at.Journal); err != nil {
				return Emulator{}, fmt.Errorf("memsqs data: %w", err)
			}
		}
		endpoint, stop, err := serve(s, at.addr(), s.Close)
		if err != nil {
			return Emulator{}, fmt.Errorf("memsqs: %w", err)
		}
		return Emulator{Kind: "memsqs", Endpoint: endpoint, Stop: stop, Restored: s.Messages()}, nil
	}
	return Emulator{}, fmt.Errorf("%s=%q: want goaws or memsqs", EnvSQSEmulator, kind)
}

// goaws keeps its queues in package-level state, so one process runs one
// goaws; stacks in the same process share it and keep apart by queue name.
var goawsOnce struct {
	sync.Once
	url string
	err error
}

// StartGoaws serves goaws (SQS, JSON protocol) on a loopback port, once per
// process, and returns its URL.
func StartGoaws() (string, error) { return StartGoawsAt("127.0.0.1:0") }

// StartGoawsAt is StartGoaws on addr. The process's one goaws listens where
// the first call asked; a later call naming another fixed port fails.
func StartGoawsAt(addr string) (string, error) {
	goawsOnce.Do(func() {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			goawsOnce.err = err
			return
		}
		port := ln.Addr().(*net.TCPAddr).Port
		logrus.SetLevel(logrus.ErrorLevel)
		models.CurrentEnvironment = models.Environment{
			Host:      "127.0.0.1",
			Port:      strconv.Itoa(port),
			Region:    "us-east-1",
			AccountID: "000000000000",
			QueueAttributeDefaults: models.EnvQueueAttributes{
				VisibilityTimeout:  30,
				MaximumMessageSize: 262144,
			},
		}
		go gosqs.PeriodicTasks(time.Second, make(chan bool))
		srv := &http.Server{Handler: serialized(router.New()), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		goawsOnce.url = "http://" + ln.Addr().String()
	})
	if _, port, _ := net.SplitHostPort(addr); goawsOnce.err == nil && port != "0" && !strings.HasSuffix(goawsOnce.url, ":"+port) {
		return "", fmt.Errorf("goaws already serves this process at %s, not %s", goawsOnce.url, addr)
	}
	return goawsOnce.url, goawsOnce.err
}

// serialized runs queue-creating and -deleting requests alone: goaws reads
// its queue map without a lock at the start of some operations, which races
// with a concurrent CreateQueue from another stack in the same process.
// A queue change waits for the requests under way, and a long poll would
// hold it (and every request queued behind it, every stack's) for up to
// its wait time: a change wakes the long polls under way, which answer
// with no message as goaws answers a poll whose caller went away.
func serialized(next http.Handler) http.Handler {
	var mu sync.RWMutex
	var wakeMu sync.Mutex
	wake := make(chan struct{}) // closed when a queue change waits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Amz-Target") {
		case "AmazonSQS.CreateQueue", "AmazonSQS.DeleteQueue":
			wakeMu.Lock()
			close(wake)
			mu.Lock()
			wake = make(chan struct{})
			wakeMu.Unlock()
			defer mu.Unlock()
		case "AmazonSQS.ReceiveMessage":
			wakeMu.Lock()
			woken := wake
			wakeMu.Unlock()
			mu.RLock()
			defer mu.RUnlock()
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			go func() {
				select {
				case <-woken:
					cancel()
				case <-ctx.Done():
				}
			}()
			r = r.WithContext(ctx)
		default:
			mu.RLock()
			defer mu.RUnlock()
		}
		next.ServeHTTP(w, r)
	})
}
