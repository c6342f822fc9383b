package devstack_test

import (
	"context"
	"errors"

	"fmt"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkLogin measures the 9:00 login: U users, each with W messages
// waiting in 10 groups every user is in (W/10 messages each), all log in at
// once with the Go SDK: connect, summary, sync everything, persist, ack.
// It checks that every device ends with exactly W messages, each once, in
// seq order, acked on the server; and reports the login's wall time,
// per-user login latency and the DynamoDB calls and write units of the
// login phase.
//
// Seeding is not measured and not the product path: the U×W inbox entries
// (and each user's conversation index) are written with plain batch writes
// (Store.SeedInbox), as the fan-out would have left them, because both
// emulators implement a transaction by copying whole tables (moto
// deep-copies each table a transaction touches, once per item), which
// makes the real group routes and fan-out of 100,000 entries take hours
// there. Those are tested in groups_test.go; the login does not read the
// group logs.
//
// Defaults: 500 users × 200 messages against the DynamoDB endpoint in
// SIGNET_TEST_DYNAMODB_ENDPOINT (make bench-login starts moto for it);
// with no endpoint (in-process minidyn) 50 × 20. SIGNET_BENCH_USERS /
// SIGNET_BENCH_WAITING override. SIGNET_BENCH_SHARDS (default 1) spreads
// the users round-robin over that many complete stacks (gateway, handlers,
// own tables) on the same emulator: moto sorts a whole table on every
// Query, so 100,000 entries in one table make every call slow, while on
// DynamoDB a query's cost does not depend on the table's size. The calls
// and write units per user do not depend on the sharding. Run once:
// -benchtime 1x.
func BenchmarkLogin(b *testing.B) {
	dynamoEndpoint, sqsEndpoint := testEndpoints()
	users, waiting, backend := 500, 200, dynamoEndpoint
	if dynamoEndpoint == "" {
		users, waiting, backend = 50, 20, "minidyn (in-process)"
	}
	users, waiting = envInt("SIGNET_BENCH_USERS", users), envInt("SIGNET_BENCH_WAITING", waiting)
	const groups = 10
	if waiting%groups != 0 {
		b.Fatalf("SIGNET_BENCH_WAITING must be a multiple of %d", groups)
	}
	shards := envInt("SIGNET_BENCH_SHARDS", 1)
	counter := callcount.New()
	// Each shard is a whole stack (gateway, handlers, tables) on the same
	// emulators; users are spread over them round-robin.
	stacks := make([]*devstack.Stack, shards)
	watches := make([]*dynamo.Store, shards)
	for i := range stacks {
		st, err := devstack.Start(context.Background(), devstack.Options{
			Prefix: fmt.Sprintf("login%d-%d", time.Now().UnixNano(), i), DynamoDBEndpoint: dynamoEndpoint, SQSEndpoint: sqsEndpoint,
			APIOptions: counter.APIOptions(), PollWait: 200 * time.Millisecond, Log: testLog(),
		})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		stacks[i] = st
		// The benchmark watches acks through an uncounted client.
		watches[i] = dynamo.New(dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")},
			func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(st.DynamoDBEndpoint) }),
			dynamo.Tables{Inbox: st.Resources.Tables["InboxTable"]})
	}
	b.Logf("backend: DynamoDB %s; %d users × %d waiting messages in %d groups; %d stack(s)", backend, users, waiting, groups, shards)

	ids := make([]string, users)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%04d", i)
	}
	seedStart := time.Now()
	ctx := context.Background()
	// Every user's inbox: W/10 messages from each of 10 groups, interleaved
	// as they were posted overnight, as the fan-out writes them.
	var entries []im.Entry
	posted := time.Now().Add(-10 * time.Hour)
	for i := range waiting / groups {
		for g := range groups {
			at := posted.Add(time.Duration(len(entries)) * time.Minute)
			entries = append(entries, im.Entry{Seq: int64(len(entries) + 1), Message: im.Message{
				ID: im.NewMessageID(at), Conversation: im.Group(fmt.Sprintf("shift%d", g)), ConvSeq: int64(i + 1),
				From: "poster", Body: []byte(fmt.Sprintf(`{"text":"overnight update","n":%d}`, i)), SentAt: at,
			}})
		}
	}
	var swg sync.WaitGroup
	seedErrs := make(chan error, users)
	slots := make(chan struct{}, 8)
	for i, u := range ids {
		slots <- struct{}{}
		swg.Go(func() {
			defer func() { <-slots }()
			if err := stacks[i%shards].Store.SeedInbox(ctx, im.UserID(u), entries, time.Now()); err != nil {
				seedErrs <- err
			}
		})
	}
	swg.Wait()
	close(seedErrs)
	for err := range seedErrs {
		b.Fatal(err)
	}
	b.Logf("seeded %d inbox entries in %s", users*waiting, time.Since(seedStart).Round(time.Millisecond))

	dir := b.TempDir()
	for b.Loop() {
		before := counter.Snapshot()
		start := time.Now()
		lat := make([]time.Duration, users)
		errs := make(chan error, users)
		// One watcher per stack sweeps the device ack cursors of the users
		// still waiting (a BatchGetItem per 100 users, once a second, on an
		// uncounted client) and tells each login when the server has its ack.
		done := make([]chan struct{}, users)
		for i := range done {
			done[i] = make(chan struct{})
		}
		wctx, stopWatch := context.WithCancel(context.Background())
		for sh := range stacks {
			go func() {
				pending := map[im.UserID]int{}
				for i, u := range ids {
					if i%shards == sh {
						pending[im.UserID(u)] = i
					}
				}
				for len(pending) > 0 && wctx.Err() == nil {
					time.Sleep(time.Second)
					us := make([]im.UserID, 0, len(pending))
					for u := range pending {
						us = append(us, u)
					}
					acked, err := watches[sh].AckCursors(wctx, "laptop", us)
					if err != nil {
						continue
					}
					for u, i := range pending {
						if acked[u] == int64(waiting) {
							close(done[i])
							delete(pending, u)
						}
					}
				}
			}()
		}
		var wg sync.WaitGroup
		for i, u := range ids {
			wg.Go(func() {
				t0 := time.Now()
				err := login(u, filepath.Join(dir, u+".db"), stacks[i%shards].URL, waiting, groups, done[i])
				lat[i] = time.Since(t0)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", u, err)
				}
			})
		}
		wg.Wait()
		stopWatch()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		// Count what the logins set off too: $disconnect and the debounced
		// presence pushes land shortly after the clients close.
		time.Sleep(3 * time.Second)
		cost := counter.Snapshot().Sub(before)
		slices.Sort(lat)
		b.ReportMetric(elapsed.Seconds(), "login-wall-s")
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "user-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "user-p99-ms")
		b.ReportMetric(float64(cost.Service("DynamoDB"))/float64(users), "ddb-calls/user")
		b.ReportMetric(float64(cost.WCU)/float64(users), "wcu/user")
		// Printed, not logged: the testing package truncates benchmark logs.
		fmt.Printf("login of %d users with %d waiting messages each: %s wall, per user p50 %s p99 %s; backend %s, %d stack(s)\nAWS calls of the login phase (per user):\n%s",
			users, waiting, elapsed.Round(time.Millisecond), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), backend, shards, cost.Table(users, "user"))
	}
}

// login is one user's 9:00: connect, summary, then every waiting message
// through the SDK (which syncs on connect, persists and acks), until the
// server has the device's ack of all of them (acked is closed then).
func login(user, path, url string, waiting, convs int, acked <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{
		URL: url, Device: "laptop", Path: path,
		Token: func(context.Context) (string, error) {
			return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), "", time.Now(), time.Hour)
		},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	// As a client should, retry a summary the server could not answer.
	var sum []client.ConversationSummary
	for attempt := 0; ; attempt++ {
		sum, err = c.Summary(ctx)
		var se *client.ServerError
		if err == nil || !errors.As(err, &se) || se.Code != wire.CodeInternal || attempt == 5 {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	unread := int64(0)
	for _, s := range sum {
		unread += s.Unread
	}
	if len(sum) != convs || unread != int64(waiting) {
		return fmt.Errorf("summary: %d conversations, %d unread; want %d, %d", len(sum), unread, convs, waiting)
	}
	seen := map[string]bool{}
	for n := int64(1); n <= int64(waiting); n++ {
		select {
		case m := <-c.Messages():
			if m.Seq != n || seen[m.MessageID] {
				return fmt.Errorf("message %d: seq %d (duplicate %v)", n, m.Seq, seen[m.MessageID])
			}
			seen[m.MessageID] = true
		case <-ctx.Done():
			return fmt.Errorf("got %d of %d messages", n-1, waiting)
		}
	}
	// Delivered means acked: stay connected until the server has the ack.
	select {
	case <-acked:
	case <-ctx.Done():
		cur, _ := c.Cursor()
		return fmt.Errorf("server never got the ack of %d messages (device cursor %d)", waiting, cur)
	}
	return nil
}
