package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/cost"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
)

// costScenarios are the scenarios `signet bench cost` runs, in order.
var costScenarios = []struct {
	name, about string
	devices     int
}{
	{"chat-1dev", "1:1 at chat pace, 1 device per user: each message is delivered and acked before the next", 1},
	{"chat-2dev", "1:1 at chat pace, 2 devices per user", 2},
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "cost" {
		fmt.Fprint(stderr, `Usage: signet bench cost [flags]

Benchmarks. "cost" prices a delivered message: see signet bench cost --help.
`)
		return errUsage
	}
	fs := flag.NewFlagSet("signet bench cost", flag.ContinueOnError)
	pairs := fs.Int("pairs", 4, "sender/receiver pairs (users) per scenario")
	messages := fs.Int("messages", 25, "messages each sender sends")
	only := fs.String("scenario", "", "run only this scenario")
	asJSON := fs.Bool("json", false, "print the priced usage as JSON lines, one per scenario")
	emulator := fs.String("dynamodb-emulator", os.Getenv(devstack.EnvEmulator), "in-process DynamoDB: minidyn (default) or memdyn (env "+devstack.EnvEmulator+")")
	fs.Usage = func() {
		var names []string
		for _, s := range costScenarios {
			names = append(names, fmt.Sprintf("  %-10s %s", s.name, s.about))
		}
		fmt.Fprintf(fs.Output(), `Usage: signet bench cost [flags]

Runs each scenario through an in-process local stack over real WebSockets
with SDK clients, meters every billed unit where it is spent (API Gateway
messages both directions per 32 KB and connection minutes, Lambda requests
and GB-seconds of the handlers' own duration, DynamoDB write and read units
from the requests and the items they return, SQS requests, bytes stored
times each table's retention, log bytes) and prices them at the list prices
of shared/cost (%s, %s): a line per component, per delivered message.

Scenarios:
%s

Handler durations are those of this machine against an emulator: the
GB-second line is indicative; every other line is a count.

Flags:
`, cost.ListPrices.Region, cost.ListPrices.Date, strings.Join(names, "\n"))
		fs.PrintDefaults()
	}
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	usageErr := func(msg string) error { return fmt.Errorf("%w: cost: %s", errUsage, msg) }
	if *pairs < 1 || *messages < 1 {
		return usageErr("--pairs and --messages must be at least 1")
	}
	known := *only == ""
	for _, sc := range costScenarios {
		known = known || sc.name == *only
	}
	if !known {
		return usageErr(fmt.Sprintf("no scenario %q (see --help)", *only))
	}
	for _, sc := range costScenarios {
		if *only != "" && sc.name != *only {
			continue
		}
		if !*asJSON {
			fmt.Fprintf(stderr, "bench cost: %s: %d pairs × %d messages...\n", sc.name, *pairs, *messages)
		}
		u, err := chatCost(ctx, sc.name, sc.devices, *pairs, *messages, *emulator)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		priced := u.Price(cost.ListPrices)
		if *asJSON {
			b, _ := json.Marshal(priced)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		priced.Print(stdout)
		fmt.Fprintln(stdout)
	}
	return nil
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// platformLogBytes is what Lambda itself logs per invocation (START, END
// and REPORT lines), about 330 bytes.
const platformLogBytes = 330

// chatCost runs pairs sender→receiver conversations at chat pace, each user
// with devices devices, and returns what the messages were metered.
func chatCost(ctx context.Context, scenario string, devices, pairs, messages int, emulator string) (cost.Usage, error) {
	counter := callcount.New()
	logs := &countingWriter{}
	ddb, sqsURL := devstack.EndpointsFromEnv(os.Getenv)
	st, err := devstack.Start(ctx, devstack.Options{
		Prefix: fmt.Sprintf("cost%d", time.Now().UnixNano()), DynamoDBEndpoint: ddb, SQSEndpoint: sqsURL, Emulator: emulator,
		Concurrency: 1000, APIOptions: counter.APIOptions(), RateLimits: "off",
		// What the functions log at the template's level, as CloudWatch
		// would ingest it.
		Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return cost.Usage{}, err
	}
	defer st.Close()
	dir, err := os.MkdirTemp("", "signet-bench-cost-")
	if err != nil {
		return cost.Usage{}, err
	}
	defer os.RemoveAll(dir)

	dial := func(user string, d int) (*client.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return client.Dial(dctx, client.Options{
			URL: st.URL, Device: fmt.Sprintf("d%d", d), Path: filepath.Join(dir, fmt.Sprintf("%s-d%d.db", user, d)),
			Token: func(context.Context) (string, error) {
				return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), "", time.Now(), time.Hour)
			},
		})
	}
	type pair struct {
		sender   *client.Client
		others   []*client.Client // the sender's other devices
		receiver []*client.Client
		to       string
	}
	var all []*client.Client
	defer func() {
		for _, c := range all {
			c.Close()
		}
	}()
	ps := make([]pair, pairs)
	for i := range ps {
		ps[i].to = fmt.Sprintf("bob%d", i)
		for d := range devices {
			s, err := dial(fmt.Sprintf("alice%d", i), d)
			if err != nil {
				return cost.Usage{}, err
			}
			r, err := dial(ps[i].to, d)
			if err != nil {
				return cost.Usage{}, err
			}
			all = append(all, s, r)
			if d == 0 {
				ps[i].sender = s
			} else {
				ps[i].others = append(ps[i].others, s)
			}
			ps[i].receiver = append(ps[i].receiver, r)
		}
	}

	beforeCalls, beforeStack, beforeLogs := counter.Snapshot(), st.Metered(), logs.n.Load()
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for _, p := range ps {
		wg.Go(func() {
			for m := range messages {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := p.sender.Send(sctx, p.to, map[string]any{"text": strings.Repeat("x", 900), "n": m})
				cancel()
				if err != nil {
					errs <- err
					return
				}
				// Chat pace: every device has it (and acks it alone)
				// before the next message.
				// (the sender's own devices get it too: it is in the
				// sender's inbox).
				for _, c := range append(append([]*client.Client{p.sender}, p.receiver...), p.others...) {
					select {
					case <-c.Messages():
					case <-time.After(time.Minute):
						errs <- fmt.Errorf("message %d not delivered within a minute", m)
						return
					}
				}
				time.Sleep(300 * time.Millisecond) // past the SDK's 100 ms ack batching
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return cost.Usage{}, err
	}
	// Let every redelivery check of the run come due and run.
	first, _ := st.Config.Redelivery.CheckDelay(0)
	time.Sleep(first + 3*time.Second)

	calls := counter.Snapshot().Sub(beforeCalls)
	stack := st.Metered()
	u := cost.Usage{
		Scenario: scenario, Delivered: pairs * messages,
		WebSocketMessages: stack.WebSocketMessages - beforeStack.WebSocketMessages,
		ConnectionMinutes: stack.ConnectionMinutes - beforeStack.ConnectionMinutes,
		WriteUnits:        float64(calls.WCU), ReadUnits: calls.RRU,
		SQSRequests: int64(calls.Service("SQS")),
		Invocations: map[string]int64{},
	}
	for fn, inv := range stack.Invocations {
		was := beforeStack.Invocations[fn]
		if n := inv.Requests - was.Requests; n > 0 {
			u.Invocations[fn] = n
			u.LambdaRequests += n
			u.LambdaGBSeconds += inv.GBSeconds - was.GBSeconds
		}
	}
	u.LogBytes = logs.n.Load() - beforeLogs + u.LambdaRequests*platformLogBytes
	history := st.Config.HistoryRetention
	if history == 0 {
		history = 365 * 24 * time.Hour // kept forever: price a year
	}
	retention := map[string]time.Duration{
		st.Config.InboxTable: st.Config.InboxRetention, st.Config.MessagesTable: history, st.Config.TraceTable: dynamo.TraceRetention,
	}
	for table, bytes := range calls.Stored {
		months := retention[table].Hours() / 24 / 30
		u.StoredGBMonths += float64(bytes) / 1e9 * months
	}
	return u, nil
}
