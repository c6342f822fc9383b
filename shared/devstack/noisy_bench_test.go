package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/wire"
)

// BenchmarkNoisyNeighbour measures alice→bob delivery (send until bob's push
// arrives, one message at a time, from ten senders in turn) alone and beside mallory, who holds the
// maximum connections (10), under the default per-user limits (issue 11):
//
//   - "beside-abuser-at-limit": mallory spends her whole budget, spread over
//     her 10 connections: 120 sends, 300 queries and 60 presence changes a
//     minute, the most the limits let her do.
//   - "beside-flooder": mallory sends and queries from all 10 as fast as the
//     server answers, ignores every refusal, and redials at once whenever a
//     connection is closed or refused. The server closes each connection
//     that keeps sending after its refusal (rate_limit_ignored) and refuses
//     her new ones (429) for the rest of the connect window.
//
// It reports the latency percentiles of alice's messages and what mallory
// got through (frames admitted, refused, connections closed, dials refused).
//
//	go test ./shared/devstack -run '^$' -bench NoisyNeighbour -benchtime 200x
//
// "alone-limits-off" is the same as "alone" without any per-user limit: the
// difference in ddb-calls/msg is what the limiter costs (one UpdateItem per
// 8 sends of a user).
func BenchmarkNoisyNeighbour(b *testing.B) {
	b.Run("alone-limits-off", func(b *testing.B) { benchNoisy(b, "", "off") })
	b.Run("alone", func(b *testing.B) { benchNoisy(b, "", "") })
	b.Run("beside-abuser-at-limit", func(b *testing.B) { benchNoisy(b, "at-limit", "") })
	b.Run("beside-flooder", func(b *testing.B) { benchNoisy(b, "flood", "") })
}

// abuse is what mallory got through.
type abuse struct {
	admitted, refused, closed, dialsRefused atomic.Int64
}

func benchNoisy(b *testing.B, mallory string, limits string) {
	dynamoEndpoint, sqsEndpoint := testEndpoints()
	counter := callcount.New()
	st, err := devstack.Start(context.Background(), devstack.Options{
		Prefix: fmt.Sprintf("noisy%d", time.Now().UnixNano()), DynamoDBEndpoint: dynamoEndpoint, SQSEndpoint: sqsEndpoint,
		PollWait: 200 * time.Millisecond, SyncInterval: time.Millisecond, Log: testLog(), RateLimits: limits, APIOptions: counter.APIOptions(),
		// The standard account quota (1,000 concurrent executions): a new
		// account's 10 are shared by every user, and mallory's ten devices
		// sending in step throttle alice's sends there whatever the
		// per-user limits say (README, "Limits and bad input").
		Concurrency: 1000,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	t := &testing.T{}
	// Message i comes from senders[i%10]: each of them stays well within
	// the send limit for up to 1,000 messages a minute.
	var senders []*wsClient
	for s := range 10 {
		c := dialB(b, t, st, fmt.Sprintf("alice%d", s))
		defer c.conn.CloseNow()
		senders = append(senders, c)
	}
	bob := dialB(b, t, st, "bob")
	defer bob.conn.CloseNow()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var got abuse
	if mallory != "" {
		for d := range 10 {
			tok := token(b, "mallory", fmt.Sprintf("d%d", d))
			wg.Go(func() { abuser(ctx, st.URL+"?token="+tok, d, mallory == "flood", &got) })
		}
		// Measure mallory's steady state: at the limit once she is at it;
		// flooding once the server has closed each of her connections
		// (it waits ratelimit.Grace after the first refusal).
		time.Sleep(2 * time.Second)
		for wait := time.Now(); mallory == "flood" && got.closed.Load() < 10 && time.Since(wait) < time.Minute; {
			time.Sleep(100 * time.Millisecond)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	before := counter.Snapshot()
	b.ResetTimer()
	for i := range b.N {
		alice := senders[i%len(senders)]
		start := time.Now()
		alice.send(fmt.Sprintf("a%d", i), "bob", i)
		for {
			f := bob.next("message", 30*time.Second)
			if f.Seq == int64(i+1) {
				break
			}
		}
		lat = append(lat, time.Since(start))
		alice.next("sent", 30*time.Second)
		if i%10 == 9 {
			bob.write(map[string]any{"action": "ack", "upTo": i + 1})
		}
	}
	b.StopTimer()
	cost := counter.Snapshot().Sub(before)
	stop()
	wg.Wait()
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	if mallory == "" {
		b.ReportMetric(float64(cost.Service("DynamoDB"))/float64(b.N), "ddb-calls/msg")
		return
	}
	b.ReportMetric(float64(got.admitted.Load()), "abuser-admitted")
	b.ReportMetric(float64(got.refused.Load()), "abuser-refused")
	b.ReportMetric(float64(got.closed.Load()), "abuser-closed")
	b.ReportMetric(float64(got.dialsRefused.Load()), "abuser-dials-refused")
}

// abuser is one of mallory's devices until ctx ends. At the limit it paces
// itself to its tenth of mallory's per-minute budgets (12 sends, 30 queries,
// 6 presence changes); flooding, it writes its next frame as soon as the
// last is answered, whatever the answer, and redials at once.
func abuser(ctx context.Context, url string, d int, flood bool, got *abuse) {
	frames := []string{}
	if flood {
		frames = append(frames, `{"action":"send","clientMsgId":"m%d-%d","to":"carol","body":1}`,
			`{"action":"presence.query","users":["alice","bob"]}`)
	} else {
		// One minute's share, evenly mixed: 12 sends, 6 presence
		// changes, 30 queries.
		for i := range 48 {
			switch {
			case i%4 == 0:
				frames = append(frames, `{"action":"send","clientMsgId":"m%d-%d","to":"carol","body":1}`)
			case i%16 == 1:
				frames = append(frames, `{"action":"presence","status":"away"}`)
			case i%16 == 9:
				frames = append(frames, `{"action":"presence","status":"online"}`)
			default:
				frames = append(frames, `{"action":"presence.query","users":["alice","bob"]}`)
			}
		}
	}
	pace := time.Duration(0)
	if !flood {
		pace = time.Minute / time.Duration(len(frames))
	}
	n := 0
	for ctx.Err() == nil {
		conn, resp, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
				got.dialsRefused.Add(1)
			}
			continue
		}
		conn.SetReadLimit(1 << 20)
		for ctx.Err() == nil {
			f := frames[n%len(frames)]
			if strings.Contains(f, "%d") {
				f = fmt.Sprintf(f, d, n)
			}
			n++
			if conn.Write(ctx, websocket.MessageText, []byte(f)) != nil {
				break
			}
			answered := false
			for !answered {
				_, data, err := conn.Read(ctx)
				if err != nil {
					break
				}
				var m struct{ Type, Code string }
				_ = json.Unmarshal(data, &m)
				switch {
				case m.Type == "sent":
					got.admitted.Add(1)
					answered = true
				case m.Type == "error" && m.Code == string(wire.CodeRateLimitIgnored):
					got.closed.Add(1)
				case m.Type == "error":
					got.refused.Add(1)
					answered = true
				case m.Type == "presence":
					answered = true
				case m.Type == "" && strings.Contains(string(data), "Internal server error"):
					answered = true
				}
			}
			if !answered {
				break
			}
			if pace > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(pace):
				}
			}
		}
		conn.CloseNow()
	}
}
