package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/devstack"
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
func BenchmarkDirectMessages(b *testing.B) {
	const pairs = 4
	counter := callcount.New()
	st, err := devstack.Start(context.Background(), devstack.Options{
		Prefix:     fmt.Sprintf("bench%d", time.Now().UnixNano()),
		APIOptions: counter.APIOptions(),
		PollWait:   time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()

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
	for p := range pairs {
		senders = append(senders, dialB(b, t, st, fmt.Sprintf("s%d", p)))
		receivers = append(receivers, dialB(b, t, st, fmt.Sprintf("r%d", p)))
	}
	// Receivers: record latency from the send time in the body on first
	// receipt of each seq; ack every 10 messages and once at the end.
	var rwg sync.WaitGroup
	finalAck := make(chan struct{})
	for _, r := range receivers {
		rwg.Go(func() {
			n, highest := 0, int64(0)
			defer func() {
				<-finalAck
				r.write(map[string]any{"action": "ack", "upTo": highest})
			}()
			for f := range r.frames {
				if f.Type != "message" || f.Seq <= highest {
					continue
				}
				highest = f.Seq
				var m struct {
					Body struct {
						SentNs int64 `json:"t"`
					} `json:"body"`
				}
				_ = json.Unmarshal(f.Message, &m)
				lat := time.Since(time.Unix(0, m.Body.SentNs))
				n++
				if n%10 == 0 {
					r.write(map[string]any{"action": "ack", "upTo": f.Seq})
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
	for p, s := range senders {
		share := b.N / pairs
		if p < b.N%pairs {
			share++
		}
		to := fmt.Sprintf("r%d", p)
		swg.Go(func() {
			own := 0
			for i := range share {
				s.send(fmt.Sprintf("b-%d", i), to, map[string]int64{"t": time.Now().UnixNano()})
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
					if f.Type != "sent" {
						b.Errorf("sender got %+v", f)
					}
					break
				}
			}
		})
	}
	swg.Wait()
	select {
	case <-allIn:
	case <-time.After(60 * time.Second):
		b.Fatalf("only %d of %d messages delivered", rec.got, b.N)
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
