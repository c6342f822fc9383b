package devstack

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
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

// EnvEmulator names the in-process DynamoDB a stack (and the store
// contract suite) starts when no endpoint is given: minidyn or memdyn.
const EnvEmulator = "SIGNET_DYNAMODB_EMULATOR"

// StartDynamoDB starts the named in-process DynamoDB ("" or "minidyn":
// truora/minidyn; "memdyn": Signet's B-tree emulator, for tables that grow
// past what minidyn scans quickly) and returns its endpoint, a stop
// function and the name it started.
func StartDynamoDB(kind string) (endpoint string, stop func(), started string, err error) {
	switch kind {
	case "", "minidyn":
		endpoint, stop, err = StartMinidyn()
		return endpoint, stop, "minidyn", err
	case "memdyn":
		endpoint, stop, err = memdyn.Start()
		return endpoint, stop, "memdyn", err
	}
	return "", nil, "", fmt.Errorf("%s=%q: want minidyn or memdyn", EnvEmulator, kind)
}

// StartMinidyn serves a fresh in-memory DynamoDB (minidyn, JSON protocol) on
// a loopback port and returns its URL and a stop function.
func StartMinidyn() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: miniserver.NewServer(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// EnvSQSEmulator names the in-process SQS a stack starts when no endpoint
// is given: goaws or memsqs.
const EnvSQSEmulator = "SIGNET_SQS_EMULATOR"

// StartSQS starts the named in-process SQS ("" or "goaws": goaws, shared
// by every stack of the process; "memsqs": Signet's heap-and-map emulator,
// one per stack, for queues that grow past what goaws handles quickly) and
// returns its endpoint, a stop function and the name it started.
func StartSQS(kind string) (endpoint string, stop func(), started string, err error) {
	switch kind {
	case "", "goaws":
		endpoint, err = StartGoaws()
		return endpoint, func() {}, "goaws", err
	case "memsqs":
		endpoint, stop, err = memsqs.Start()
		return endpoint, stop, "memsqs", err
	}
	return "", nil, "", fmt.Errorf("%s=%q: want goaws or memsqs", EnvSQSEmulator, kind)
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
func StartGoaws() (string, error) {
	goawsOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
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
	return goawsOnce.url, goawsOnce.err
}

// serialized runs queue-creating and -deleting requests alone: goaws reads
// its queue map without a lock at the start of some operations, which races
// with a concurrent CreateQueue from another stack in the same process.
func serialized(next http.Handler) http.Handler {
	var mu sync.RWMutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Amz-Target") {
		case "AmazonSQS.CreateQueue", "AmazonSQS.DeleteQueue":
			mu.Lock()
			defer mu.Unlock()
		default:
			mu.RLock()
			defer mu.RUnlock()
		}
		next.ServeHTTP(w, r)
	})
}
