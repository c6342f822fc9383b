package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// BenchmarkDirectMessages sends 1:1 messages through the whole local stack
// (real WebSockets, gateway, handlers, SDK, emulators) and reports delivered
// messages per second, send→push latency percentiles and, per message, the
// AWS calls and estimated DynamoDB write units it cost, including the
// recipient's and sender's acks (batched every 10 messages, as a client
// would) and the redelivery checks that run PushTimeout later. SQS
// ReceiveMessage calls are the poller's long polls, per batch or per idle
// second, not per message.
//
// Run: make bench (go test -run '^$' -bench DirectMessages -benchtime 2000x ./shared/devstack/)
// Figures measured on minidyn/goaws describe the code path, not AWS
// throughput: the emulators' cost grows with table size.
func BenchmarkDirectMessages(b *testing.B) { benchDirect(b, 4, 0, devstack.Options{}) }

// BenchmarkDirectMessagesAt100kStored is the same with 100,000 messages
// already stored (SIGNET_BENCH_STORED overrides the count; 1:1 between 500
// users, the benchmark's pairs among them) and 32 sending pairs at AWS's
// standard concurrency quota, so it measures what the emulators sustain
// with tables of that size: the local stack's ceiling for testing at
// scale.
//
// Run: make bench-100k (SIGNET_DYNAMODB_EMULATOR=memdyn; minidyn reads
// every item of a table per Query and takes hours to seed 100,000)
func BenchmarkDirectMessagesAt100kStored(b *testing.B) {
	stored := 100_000
	if v, err := strconv.Atoi(os.Getenv("SIGNET_BENCH_STORED")); err == nil && v >= 0 {
		stored = v
	}
	benchDirect(b, 32, stored, devstack.Options{Concurrency: 1000})
}

// seeded keeps the seeded stack of the 100k benchmark across the
// framework's calls (a probe with N=1, then the run): seeding is minutes.
var seeded struct {
	sync.Mutex
	stored  int
	st      *devstack.Stack
	counter *callcount.Counter
}

// seed stores n 1:1 messages among users u000..u499 through the store, 16
// at a time, printing progress.
func seed(b *testing.B, st *devstack.Stack, n int) {
	b.Helper()
	start := time.Now()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		fail atomic.Value
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || fail.Load() != nil {
					return
				}
				from, to := im.UserID(fmt.Sprintf("u%03d", i%500)), im.UserID(fmt.Sprintf("u%03d", (i*7+1)%500))
				if from == to {
					to = "u999"
				}
				d := im.Draft{From: from, ClientMsgID: fmt.Sprintf("seed-%d", i), Conversation: im.Direct(from, to), Body: []byte(`{"text":"history"}`)}
				if _, err := st.Store.Send(context.Background(), d, time.Now()); err != nil {
					fail.Store(err)
					return
				}
				if i > 0 && i%20000 == 0 {
					fmt.Printf("seeded %d of %d messages (%s)\n", i, n, time.Since(start).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		b.Fatalf("seeding: %v", err)
	}
	fmt.Printf("seeded %d messages in %s\n", n, time.Since(start).Round(time.Second))
}

// benchDirect measures 1:1 delivery between pairs of raw clients, after
// storing `stored` messages first.
func benchDirect(b *testing.B, pairs, stored int, o devstack.Options) {
	counter := callcount.New()
	o.Prefix = fmt.Sprintf("bench%d", time.Now().UnixNano())
	o.APIOptions = counter.APIOptions()
	o.PollWait = time.Second
	o.RateLimits = "off" // a benchmark pair sends as fast as it can
	var st *devstack.Stack
	if stored > 0 {
		b.StopTimer()
		seeded.Lock()
		if seeded.st == nil || seeded.stored != stored {
			var err error
			if seeded.st, err = devstack.Start(context.Background(), o); err != nil {
				b.Fatal(err)
			}
			seed(b, seeded.st, stored)
			seeded.stored, seeded.counter = stored, counter
		}
		st, counter = seeded.st, seeded.counter
		seeded.Unlock()
		b.StartTimer()
	} else {
		var err error
		if st, err = devstack.Start(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		defer st.Close()
	}

	type rx struct {
		mu   sync.Mutex
		lat  []time.Duration
		got  int
		want int
	}
	var rec rx
	rec.want = b.N
	allIn := make(chan struct{})
	t := &testing.T{}
	var senders, receivers []*wsClient
	// The pairs are users of the seeded history (u000, u001, …).
	for p := range pairs {
		senders = append(senders, dialB(b, t, st, fmt.Sprintf("u%03d", 2*p)))
		receivers = append(receivers, dialB(b, t, st, fmt.Sprintf("u%03d", 2*p+1)))
	}
	// Receivers: record latency from the send time in the body on first
	// receipt of each seq (pushes of consecutive messages may arrive in
	// either order); ack the contiguous prefix every 10 messages and once
	// at the end.
	var rwg sync.WaitGroup
	finalAck := make(chan struct{})
	for i, r := range receivers {
		// The receiver's inbox may hold seeded history: count from its head.
		start, _, err := st.Store.Head(context.Background(), im.UserID(fmt.Sprintf("u%03d", 2*i+1)))
		if err != nil {
			b.Fatal(err)
		}
		rwg.Go(func() {
			n, contiguous, seen := 0, start, map[int64]bool{}
			defer func() {
				<-finalAck
				r.write(map[string]any{"action": "ack", "upTo": contiguous})
			}()
			for f := range r.frames {
				if f.Type != "message" || seen[f.Seq] {
					continue
				}
				seen[f.Seq] = true
				for seen[contiguous+1] {
					contiguous++
				}
				var m struct {
					Body struct {
						SentNs int64 `json:"t,string"` // a string: nanoseconds are beyond what a JSON number (a double) holds exactly, and the server refuses such bodies
					} `json:"body"`
				}
				_ = json.Unmarshal(f.Message, &m)
				lat := time.Since(time.Unix(0, m.Body.SentNs))
				n++
				if n%10 == 0 {
					r.write(map[string]any{"action": "ack", "upTo": contiguous})
				}
				rec.mu.Lock()
				rec.lat = append(rec.lat, lat)
				rec.got++
				done := rec.got == rec.want
				rec.mu.Unlock()
				if done {
					close(allIn)
				}
				if rec.got >= rec.want {
					return
				}
			}
		})
	}

	before := counter.Snapshot()
	b.ResetTimer()
	start := time.Now()
	var swg sync.WaitGroup
	ownHighest := make([]int64, pairs)
	run := time.Now().UnixNano() // clientMsgIds unique across the framework's calls
	for p, s := range senders {
		share := b.N / pairs
		if p < b.N%pairs {
			share++
		}
		to := fmt.Sprintf("u%03d", 2*p+1)
		swg.Go(func() {
			own := 0
			for i := range share {
				id, body := fmt.Sprintf("b%d-%d", run, i), map[string]string{"t": strconv.FormatInt(time.Now().UnixNano(), 10)}
				s.send(id, to, body)
				for {
					f := <-s.frames
					if f.Type == "message" {
						ownHighest[p] = max(ownHighest[p], f.Seq)
						if own++; own%10 == 0 {
							s.write(map[string]any{"action": "ack", "upTo": f.Seq})
						}
						continue
					}
					if f.Type == "receipt" || f.Type == "presence" {
						continue // the receiver's delivered receipts; peers' presence
					}
					if f.Type == "" && string(f.Message) == `"Internal server error"` {
						// Throttled (the account's concurrency): retry the
						// send with the same clientMsgId after a pause, as
						// the SDK does (the frame names no request: it may
						// also have been an ack).
						time.Sleep(200 * time.Millisecond)
						s.send(id, to, body)
						continue
					}
					if f.Type != "sent" {
						b.Errorf("sender got %+v", f)
					}
					if f.ClientMsgID != id {
						continue // a replayed ACK of an earlier send
					}
					break
				}
			}
		})
	}
	swg.Wait()
	select {
	case <-allIn:
	case <-time.After(60*time.Second + time.Duration(b.N)*10*time.Millisecond):
		l := st.Limits()
		b.Fatalf("only %d of %d messages delivered (throttles %v, timeouts %v, faults %v)", rec.got, b.N, l.Throttles, l.Timeouts, st.Faults())
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(finalAck)
	for p, s := range senders {
		s.write(map[string]any{"action": "ack", "upTo": ownHighest[p]})
	}
	// Let the redelivery checks scheduled for these pushes run: they become
	// visible PushTimeout after each push and the poller takes them within
	// its wait.
	time.Sleep(st.Config.Redelivery.PushTimeout + 3*time.Second)
	cost := counter.Snapshot().Sub(before)

	slices.Sort(rec.lat)
	pct := func(q float64) time.Duration { return rec.lat[min(len(rec.lat)-1, int(q*float64(len(rec.lat))))] }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cost.Service("DynamoDB"))/float64(b.N), "ddb-calls/msg")
	b.ReportMetric(float64(cost.Calls["SQS.SendMessage"])/float64(b.N), "sqs-sends/msg")
	b.ReportMetric(float64(cost.Service("ApiGatewayManagementApi"))/float64(b.N), "push-calls/msg")
	b.ReportMetric(float64(cost.WCU)/float64(b.N), "wcu/msg")
	if b.N > 1 {
		fmt.Printf("N=%d in %s; calls:\n%s", b.N, elapsed.Round(time.Millisecond), cost.Table(b.N, "message"))
	}
	for _, c := range append(senders, receivers...) {
		c.conn.CloseNow()
	}
	rwg.Wait()
}

// dialB dials a client for a benchmark (the helpers take a *testing.T).
func dialB(b *testing.B, t *testing.T, st *devstack.Stack, user string) *wsClient {
	b.Helper()
	c := dialNoCleanup(b, st, user, "bench")
	c.t = t
	return c
}
