package devstack_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/devstack"
)

// BenchmarkNoisyNeighbour measures alice→bob delivery (send until bob's push
// arrives, one message at a time) alone, and beside mallory, who holds the
// maximum connections (10) and sends and queries from all of them as fast
// as the server answers, under the default per-user limits (issue 11). It
// reports the latency percentiles of alice's messages and what mallory got
// through: with the limits, mallory's extra load is refusals, which cost no
// DynamoDB call, and alice's latency should not move.
//
//	go test ./shared/devstack -run '^$' -bench NoisyNeighbour -benchtime 200x
//
// "alone-limits-off" is the same as "alone" without any per-user limit: the
// difference in ddb-calls/msg is what the limiter costs (one UpdateItem per
// 8 sends of a user).
func BenchmarkNoisyNeighbour(b *testing.B) {
	b.Run("alone-limits-off", func(b *testing.B) { benchNoisy(b, false, "off") })
	b.Run("alone", func(b *testing.B) { benchNoisy(b, false, "") })
	b.Run("beside-abuser", func(b *testing.B) { benchNoisy(b, true, "") })
}

func benchNoisy(b *testing.B, noisy bool, limits string) {
	dynamoEndpoint, sqsEndpoint := testEndpoints()
	counter := callcount.New()
	st, err := devstack.Start(context.Background(), devstack.Options{
		Prefix: fmt.Sprintf("noisy%d", time.Now().UnixNano()), DynamoDBEndpoint: dynamoEndpoint, SQSEndpoint: sqsEndpoint,
		PollWait: 200 * time.Millisecond, SyncInterval: time.Millisecond, Log: testLog(), RateLimits: limits, APIOptions: counter.APIOptions(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	t := &testing.T{}
	alice, bob := dialB(b, t, st, "alice"), dialB(b, t, st, "bob")
	defer alice.conn.CloseNow()
	defer bob.conn.CloseNow()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	if noisy {
		for d := range 10 {
			m := dialNoCleanup(b, st, "mallory", fmt.Sprintf("d%d", d))
			m.t = t
			defer m.conn.CloseNow()
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if i%2 == 0 {
						m.send(fmt.Sprintf("m%d-%d", d, i), "carol", i)
					} else {
						m.write(map[string]any{"action": "presence.query", "users": []string{"alice", "bob"}})
					}
					// One answer per frame (sent, error, presence); pushes
					// to mallory's own devices are skipped.
					for f := range m.frames {
						if f.Type == "sent" {
							admitted.Add(1)
						} else if f.Type == "error" {
							refused.Add(1)
						} else if f.Type != "presence" {
							continue
						}
						break
					}
				}
			})
		}
		time.Sleep(2 * time.Second) // let the flood reach its limits
	}

	lat := make([]time.Duration, 0, b.N)
	before := counter.Snapshot()
	b.ResetTimer()
	for i := range b.N {
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
	close(stop)
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	if !noisy {
		b.ReportMetric(float64(cost.Service("DynamoDB"))/float64(b.N), "ddb-calls/msg")
	}
	if noisy {
		b.ReportMetric(float64(admitted.Load()), "abuser-admitted")
		b.ReportMetric(float64(refused.Load()), "abuser-refused")
	}
}
