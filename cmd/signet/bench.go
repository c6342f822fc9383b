package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/cost"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/template"
	"github.com/signet-im/signet/shared/wire"
)

// costScenario is one scenario of `signet bench cost`.
type costScenario struct {
	name, about string
	run         func(ctx context.Context, f costFlags) (cost.Usage, error)
}

// costScenarios are the scenarios `signet bench cost` runs, in order.
var costScenarios = []costScenario{
	{"chat-1dev", "1:1 at chat pace, 1 device per user: each message is delivered and acked before the next",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return chatCost(ctx, "chat-1dev", 1, 1, f.pairs, f.messages, f.emulator)
		}},
	{"chat-2dev", "1:1 at chat pace, 2 devices per user",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return chatCost(ctx, "chat-2dev", 2, 1, f.pairs, f.messages, f.emulator)
		}},
	{"burst-1dev", "1:1 in bursts, 1 device per user: 5 messages at once, delivered and acked before the next burst",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return chatCost(ctx, "burst-1dev", 1, burstSize, f.pairs, f.messages, f.emulator)
		}},
	{"group-online", "a group of --members at chat pace, every member connected, read-diffused (the default: pushed to online members, copied into no inbox); per group message",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return groupCost(ctx, "group-online", f.members, f.members, f.groupMessages, f.emulator, true)
		}},
	{"group-30pct", "the same group with 30 % of the members connected; the offline members' later pull is not in it (about a read unit per 100 messages and an ack each)",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return groupCost(ctx, "group-30pct", f.members, max(1, f.members*3/10), f.groupMessages, f.emulator, true)
		}},
	{"group-online-write", "group-online with the group written into every member's inbox (GroupDelivery write)",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return groupCost(ctx, "group-online-write", f.members, f.members, f.groupMessages, f.emulator, false)
		}},
	{"group-30pct-write", "group-30pct written into every member's inbox (GroupDelivery write)",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return groupCost(ctx, "group-30pct-write", f.members, max(1, f.members*3/10), f.groupMessages, f.emulator, false)
		}},
	{"login", "--logins users connect the device they used the day before to --waiting messages each (the 9:00 login); per login",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return loginCost(ctx, "login", f.logins, f.waiting, false, false, f.emulator)
		}},
	{"login-console", "the same login as the web console makes it: it also asks for the conversation summary and its peers' presence; per login",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return loginCost(ctx, "login-console", f.logins, f.waiting, true, false, f.emulator)
		}},
	{"login-new-device", "the same login from a device that connects for the first time (admitted under the device limit); per login",
		func(ctx context.Context, f costFlags) (cost.Usage, error) {
			return loginCost(ctx, "login-new-device", f.logins, f.waiting, false, true, f.emulator)
		}},
	{"idle-day", "a connected device with nothing to receive for a day (keep-alive pings), scaled from a short run; per device-day",
		func(ctx context.Context, f costFlags) (cost.Usage, error) { return idleCost(ctx, f.emulator) }},
}

// defaultCostFlags are the default sizes, at which shared/cost.Goals'
// ceilings are calibrated.
var defaultCostFlags = costFlags{pairs: 4, messages: 25, members: 200, groupMessages: 5, logins: 5, waiting: 200}

// costFlags are the sizes of the scenarios.
type costFlags struct {
	pairs, messages, members, groupMessages, logins, waiting int
	emulator                                                 string
}

// runBench is `signet bench`: its one benchmark, cost, prices delivered
// messages at AWS list prices through an in-process local stack.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "cost" {
		fmt.Fprint(stderr, `Usage: signet bench cost [flags]

Benchmarks. "cost" prices a delivered message: see signet bench cost --help.
`)
		return errUsage
	}
	fs := flag.NewFlagSet("signet bench cost", flag.ContinueOnError)
	var f costFlags
	d := defaultCostFlags
	fs.IntVar(&f.pairs, "pairs", d.pairs, "1:1 scenarios: sender/receiver pairs")
	fs.IntVar(&f.messages, "messages", d.messages, "1:1 scenarios: messages each sender sends")
	fs.IntVar(&f.members, "members", d.members, "group scenarios: members of the group")
	fs.IntVar(&f.groupMessages, "group-messages", d.groupMessages, "group scenarios: messages sent to the group")
	fs.IntVar(&f.logins, "logins", d.logins, "login: users logging in")
	fs.IntVar(&f.waiting, "waiting", d.waiting, "login: messages waiting for each")
	only := fs.String("scenario", "", "run only the scenarios these names match (separated by commas; a name may be a pattern: group-*)")
	skip := fs.String("skip", "", "run none of the scenarios these names match (as --scenario)")
	asJSON := fs.Bool("json", false, "print the priced usage as JSON lines, one per scenario")
	chart := fs.String("chart", "", "also draw the per-message scenarios (1:1) as an SVG chart into this file, beside the AWS chat sample and the $2 floor (the README's is docs/cost.svg)")
	calls := fs.Bool("calls", false, "also print each scenario's AWS calls and its DynamoDB write and read units by operation and table, per delivered unit")
	check := fs.Bool("check", false, "hold each scenario's figures against issue 12's goals and ceilings (shared/cost.Goals, calibrated at the default sizes); a scenario past a ceiling is measured again, up to 3 times in all (timed lines grow with the machine's load), and exit status 1 if its last measurement still is")
	fs.StringVar(&f.emulator, "dynamodb-emulator", os.Getenv(devstack.EnvEmulator), "in-process DynamoDB: minidyn (default), memdyn or memdyn-stale (env "+devstack.EnvEmulator+")")
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
	if f.pairs < 1 || f.messages < 1 || f.members < 2 || f.groupMessages < 1 || f.logins < 1 || f.waiting < 1 {
		return usageErr("--pairs, --messages, --group-messages, --logins and --waiting must be at least 1, --members at least 2")
	}
	if d.emulator = f.emulator; *check && f != d {
		return usageErr("--check holds the default sizes to their ceilings: drop --pairs, --messages, --members, --group-messages, --logins and --waiting")
	}
	chosen, err := matchScenarios(*only, true)
	if err != nil {
		return usageErr(err.Error())
	}
	skipped, err := matchScenarios(*skip, false)
	if err != nil {
		return usageErr(err.Error())
	}
	var perMessage []cost.Priced
	var verdicts []cost.Verdict
	show := func(p cost.Priced) {
		if *asJSON {
			return
		}
		p.Print(stdout)
		if *calls {
			p.PrintCalls(stdout)
		}
		fmt.Fprintln(stdout)
	}
	tries := 1
	if *check {
		tries = costMeasurements
	}
	for _, sc := range costScenarios {
		if !chosen[sc.name] || skipped[sc.name] {
			continue
		}
		priced, held, err := measureScenario(ctx, sc, f, tries, show, stderr)
		if err != nil {
			return err
		}
		if *asJSON {
			b, _ := json.Marshal(priced)
			fmt.Fprintln(stdout, string(b))
		}
		verdicts = append(verdicts, held...)
		if priced.Unit == "" {
			perMessage = append(perMessage, priced)
		}
	}
	if *chart != "" {
		var b strings.Builder
		title := fmt.Sprintf("Signet: $ per million delivered 1:1 messages (%s list prices, %s)", cost.ListPrices.Region, cost.ListPrices.Date)
		if err := cost.Chart(&b, title, perMessage, cost.Anchors); err != nil {
			return err
		}
		if err := os.WriteFile(*chart, []byte(b.String()), 0o644); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(stderr, "bench cost: chart written to %s\n", *chart)
		}
	}
	if !*check {
		return nil
	}
	var regressed bool
	if *asJSON {
		for _, v := range verdicts {
			b, _ := json.Marshal(v)
			fmt.Fprintln(stdout, string(b))
			regressed = regressed || v.Regressed
		}
	} else {
		fmt.Fprintln(stdout, "goals (issue 12) and ceilings (today's figures; a change may not raise them):")
		regressed = cost.PrintVerdicts(stdout, verdicts)
	}
	if regressed {
		return fmt.Errorf("cost regressed: %s", cost.Regressions(verdicts))
	}
	return nil
}

// measureScenario runs sc and holds its figures against its bounds; past
// a ceiling it runs it again, up to tries runs in all, and returns the
// last. Each run is shown.
func measureScenario(ctx context.Context, sc costScenario, f costFlags, tries int, show func(cost.Priced), stderr io.Writer) (cost.Priced, []cost.Verdict, error) {
	for try := 1; ; try++ {
		fmt.Fprintf(stderr, "bench cost: %s...\n", sc.name)
		u, err := sc.run(ctx, f)
		if err != nil {
			return cost.Priced{}, nil, fmt.Errorf("%s: %w", sc.name, err)
		}
		priced := u.Price(cost.ListPrices)
		held := cost.Check(priced, cost.Goals[sc.name])
		show(priced)
		if try >= tries || !slices.ContainsFunc(held, func(v cost.Verdict) bool { return v.Regressed }) {
			return priced, held, nil
		}
		// The timed lines (GB-seconds, connection minutes, and how many
		// redelivery checks one receive finds) grow with the machine's
		// load; a change that costs more fails every run.
		fmt.Fprintf(stderr, "bench cost: %s past a ceiling (%s); measuring it again (%d of %d): its timed lines grow with this machine's load\n",
			sc.name, cost.Regressions(held), try+1, tries)
	}
}

// costMeasurements is how often --check measures a scenario that is past
// a ceiling before it holds it regressed: the last measurement is the one
// held.
const costMeasurements = 3

// matchScenarios returns the names of the scenarios that list (names or
// path.Match patterns, separated by commas) matches; an empty list
// matches every scenario if all, none otherwise. A name or pattern that
// matches no scenario is an error.
func matchScenarios(list string, all bool) (map[string]bool, error) {
	matched := map[string]bool{}
	if list == "" {
		for _, sc := range costScenarios {
			matched[sc.name] = all
		}
		return matched, nil
	}
	for pattern := range strings.SplitSeq(list, ",") {
		n := 0
		for _, sc := range costScenarios {
			if ok, err := path.Match(pattern, sc.name); err != nil {
				return nil, fmt.Errorf("scenario pattern %q: %v", pattern, err)
			} else if ok {
				matched[sc.name] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("no scenario %q (see --help)", pattern)
		}
	}
	return matched, nil
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n atomic.Int64 }

// Write counts p and discards it.
func (w *countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// platformLogBytes is what Lambda itself logs per invocation (START, END
// and REPORT lines), about 330 bytes, at a system log level of INFO or
// DEBUG; a function whose LoggingConfig keeps WARN writes none of them.
const platformLogBytes = 330

// costRun is one scenario's local stack with its meters.
type costRun struct {
	st      *devstack.Stack
	counter *callcount.Counter
	logs    *countingWriter
	dir     string
	clients []*client.Client

	calls      callcount.Snapshot
	stack      devstack.Metering
	logsBefore int64
}

// newCostRun starts a metered local stack (every SDK call counted, logs
// counted at the template's level) on emulator.
func newCostRun(ctx context.Context, emulator string, params ...map[string]string) (*costRun, error) {
	r := &costRun{counter: callcount.New(), logs: &countingWriter{}}
	ddb, sqsURL := devstack.EndpointsFromEnv(os.Getenv)
	var parameters map[string]string
	if len(params) > 0 {
		parameters = params[0]
	}
	st, err := devstack.Start(ctx, devstack.Options{
		Parameters: parameters,
		Prefix:     fmt.Sprintf("cost%d", time.Now().UnixNano()), DynamoDBEndpoint: ddb, SQSEndpoint: sqsURL, Emulator: emulator,
		Concurrency: 1000, APIOptions: r.counter.APIOptions(), RateLimits: "off", PollWait: 20 * time.Second,
		// What the functions log at the template's level, as CloudWatch
		// would ingest it.
		Log: slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return nil, err
	}
	r.st = st
	if r.dir, err = os.MkdirTemp("", "signet-bench-cost-"); err != nil {
		st.Close()
		return nil, err
	}
	return r, nil
}

// close closes the scenario's clients and stack and removes their files.
func (r *costRun) close() {
	for _, c := range r.clients {
		c.Close()
	}
	r.st.Close()
	os.RemoveAll(r.dir)
}

// dial connects device d of user with the SDK.
func (r *costRun) dial(ctx context.Context, user string, d int) (*client.Client, error) {
	return r.dialWith(ctx, user, d, client.Options{})
}

// dialWith is dial with options (URL, device, store and token are set
// here).
func (r *costRun) dialWith(ctx context.Context, user string, d int, o client.Options) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	o.URL, o.Device, o.Path = r.st.URL, fmt.Sprintf("d%d", d), filepath.Join(r.dir, fmt.Sprintf("%s-d%d.db", user, d))
	o.Token = func(context.Context) (string, error) {
		return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), "", time.Now(), time.Hour)
	}
	c, err := client.Dial(dctx, o)
	if err == nil {
		r.clients = append(r.clients, c)
	}
	return c, err
}

// awaitSynced waits until every client dialled has finished its first
// sync: a device's connect-time sync (and the retries of one the per-user
// sync interval refused, as it does a user's second device connecting just
// after the first) is set-up, not a cost of the messages metered after it.
func (r *costRun) awaitSynced() error {
	deadline := time.Now().Add(time.Minute)
	for _, c := range r.clients {
		for !c.Synced() {
			if time.Now().After(deadline) {
				return fmt.Errorf("a client did not finish its first sync within a minute")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// settle waits for the set-up's queued work to run: the presence changes
// of the devices that just connected, pushed after the debounce (with 200
// members, two writes and a hint invocation per member that belong to
// their connects, not to the messages metered next).
func (r *costRun) settle() {
	time.Sleep(r.st.Config.PresenceDebounce + time.Second)
	r.awaitIdle()
}

// awaitIdle waits until no invocation has run for three looks in a row
// (at most a minute).
func (r *costRun) awaitIdle() {
	for idle, deadline := 0, time.Now().Add(time.Minute); idle < 3 && time.Now().Before(deadline); {
		if r.st.Running() == 0 {
			idle++
		} else {
			idle = 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start begins metering (after the scenario's set-up).
func (r *costRun) start() {
	r.calls, r.stack, r.logsBefore = r.counter.Snapshot(), r.st.Metered(), r.logs.n.Load()
}

// usage waits for the redelivery checks of the run to come due and run,
// and for every invocation under way to end (an invocation is metered when
// it ends: a send still flushing its trace on a loaded machine would be
// missed), and returns what was metered since start.
func (r *costRun) usage(scenario string, delivered int) cost.Usage {
	first, _ := r.st.Config.Redelivery.CheckDelay(0)
	time.Sleep(first + 3*time.Second)
	r.awaitIdle()
	calls := r.counter.Snapshot().Sub(r.calls)
	stack := r.st.Metered()
	u := cost.Usage{
		Scenario: scenario, Delivered: delivered,
		WebSocketMessages: stack.WebSocketMessages - r.stack.WebSocketMessages,
		ConnectionMinutes: stack.ConnectionMinutes - r.stack.ConnectionMinutes,
		WriteUnits:        float64(calls.WCU), ReadUnits: calls.RRU,
		SQSRequests: int64(calls.Service("SQS")),
		Invocations: map[string]int64{},
	}
	for fn, inv := range stack.Invocations {
		was := r.stack.Invocations[fn]
		if n := inv.Requests - was.Requests; n > 0 {
			u.Invocations[fn] = n
			u.LambdaRequests += n
			u.LambdaGBSeconds += inv.GBSeconds - was.GBSeconds
		}
	}
	u.LogBytes = r.logs.n.Load() - r.logsBefore
	tmpl, err := template.Parse(signet.Template)
	for fn, n := range u.Invocations {
		if err != nil || tmpl.Functions[fn].SystemLogLevel != "WARN" {
			u.LogBytes += n * platformLogBytes
		}
	}
	cfg := r.st.Config
	history := cfg.HistoryRetention
	if history == 0 {
		history = 365 * 24 * time.Hour // kept forever: price a year
	}
	retention := map[string]time.Duration{cfg.InboxTable: cfg.InboxRetention, cfg.MessagesTable: history, cfg.TraceTable: dynamo.TraceRetention}
	ia := r.infrequentAccess()
	for table, bytes := range calls.Stored {
		gbMonths := float64(bytes) / 1e9 * retention[table].Hours() / 24 / 30
		u.StoredGBMonths += gbMonths
		if ia[table] {
			u.StoredGBMonthsIA += gbMonths
		}
	}
	for table := range ia {
		u.WriteUnitsIA += float64(calls.WCUBy[table])
		u.ReadUnitsIA += calls.RRUBy[table]
	}
	ids := map[string]string{}
	for id, name := range r.st.Resources.Tables {
		ids[name] = id
	}
	u.Calls, u.WriteUnitsByCall, u.ReadUnitsByCall = floats(calls.Calls, nil), floats(calls.WCUByCall, ids), floats(calls.RRUByCall, ids)
	return u
}

// floats copies m's counts as float64s; in keys "Operation table" a
// table's name becomes its template id when ids has it.
func floats[V int | float64](m map[string]V, ids map[string]string) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if op, table, ok := strings.Cut(k, " "); ok && ids[table] != "" {
			k = op + " " + ids[table]
		}
		out[k] += float64(v)
	}
	return out
}

// infrequentAccess returns the names of the stack's tables that
// template.yaml gives the Standard-IA table class.
func (r *costRun) infrequentAccess() map[string]bool {
	out := map[string]bool{}
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		return out // the stack started from this template: cannot happen
	}
	for id, tab := range tmpl.Tables {
		if tab.Class == "STANDARD_INFREQUENT_ACCESS" {
			out[r.st.Resources.Tables[id]] = true
		}
	}
	return out
}

// awaitAll waits until each client has shown one more message.
func awaitAll(clients []*client.Client, what string) error {
	for _, c := range clients {
		select {
		case <-c.Messages():
		case <-time.After(time.Minute):
			return fmt.Errorf("%s not delivered within a minute", what)
		}
	}
	return nil
}

// ackInterval is the SDK's ack window in a 1:1 scenario sending burst
// messages at once. At chat pace (1) every message is acked alone, before
// the next one is sent, whatever the window: a short one gives the same
// counts as the SDK's 2 s with messages further apart, and spares the
// benchmark the wait. A burst is acked with the SDK's own window.
func ackInterval(burst int) time.Duration {
	if burst == 1 {
		return 250 * time.Millisecond
	}
	return 0 // the SDK's default
}

// awaitDelivered waits for a delivered receipt up to convSeq.
func awaitDelivered(receipts <-chan int64, convSeq int64, what string) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case upTo := <-receipts:
			if upTo >= convSeq {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("%s: no delivered receipt within a minute", what)
		}
	}
}

// chatPace is the pause between two messages of one conversation after the
// first is acked (1:1: after its delivered receipt reached the sender), as
// between two people's messages: each message is acked alone, not in one ack
// with the next (the SDK acks a pushed entry up to 2 s after it arrived; a
// conversation paced faster than that measures bursts, not chat).
const chatPace = 300 * time.Millisecond

// body is a message of about 1 KB: English prose, which the store
// compresses about as well as real chat text (a run of one letter would
// shrink to nothing and flatter every storage figure).
func body(n int) map[string]any { return map[string]any{"text": prose, "n": n} }

// prose is 900 characters of an ordinary status update.
const prose = "Quick update on the payment gateway migration before the nine o'clock call. " +
	"The new cluster took all traffic from Frankfurt at 06:40 and error rates stayed under " +
	"the old baseline for the whole morning peak. Two things are still open. First, the " +
	"settlement export to finance runs against the old database until Thursday, because " +
	"their reconciliation job reads a column we renamed; Priya has a patch ready and needs " +
	"a review from someone on the ledger team. Second, one merchant in Lisbon reported " +
	"duplicate refund notifications yesterday evening. We traced it to a retry in their " +
	"webhook handler, not to our side, but I asked support to call them and confirm. If " +
	"nobody objects I will switch off the old cluster on Friday at noon, after the weekly " +
	"batch has finished and the backups are verified. Please reply here with any concern, " +
	"or approve the change request linked in the channel topic so it can go to the board."

// burstSize is how many messages a burst of burst-1dev sends at once.
const burstSize = 5

// chatCost runs pairs sender→receiver conversations, each user with devices
// devices, and returns what the messages were metered. The sender sends
// burst messages one after the other (1: chat pace), waits until every
// device has them and the recipient's ack is back as a delivered receipt,
// pauses for chatPace and goes on.
func chatCost(ctx context.Context, scenario string, devices, burst, pairs, messages int, emulator string) (cost.Usage, error) {
	r, err := newCostRun(ctx, emulator)
	if err != nil {
		return cost.Usage{}, err
	}
	defer r.close()
	type pair struct {
		sender *client.Client
		shown  []*client.Client // every device of both users: each gets the message
		to     string
		// delivered has the convSeq of each delivered receipt the sender
		// gets: the recipient acked up to it.
		delivered chan int64
	}
	ps := make([]pair, pairs)
	for i := range ps {
		ps[i].to = fmt.Sprintf("bob%d", i)
		ps[i].delivered = make(chan int64, 4*messages)
		for d := range devices {
			o := client.Options{AckInterval: ackInterval(burst)}
			so := o
			if d == 0 {
				so.OnReceipt = func(rc client.Receipt) {
					if rc.Kind == wire.ReceiptDelivered {
						ps[i].delivered <- rc.UpTo
					}
				}
			}
			s, err := r.dialWith(ctx, fmt.Sprintf("alice%d", i), d, so)
			if err != nil {
				return cost.Usage{}, err
			}
			rc, err := r.dialWith(ctx, ps[i].to, d, o)
			if err != nil {
				return cost.Usage{}, err
			}
			if d == 0 {
				ps[i].sender = s
			}
			// The sender's own devices get it too: it is in the
			// sender's inbox.
			ps[i].shown = append(ps[i].shown, s, rc)
		}
	}
	if err := r.awaitSynced(); err != nil {
		return cost.Usage{}, err
	}
	r.start()
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for _, p := range ps {
		wg.Go(func() {
			for first := 0; first < messages; first += burst {
				var last client.Sent
				n := min(burst, messages-first)
				for m := first; m < first+n; m++ {
					sctx, cancel := context.WithTimeout(ctx, time.Minute)
					sent, err := p.sender.Send(sctx, p.to, body(m))
					cancel()
					if err != nil {
						errs <- err
						return
					}
					last = sent
				}
				for m := first; m < first+n; m++ {
					if err := awaitAll(p.shown, fmt.Sprintf("message %d", m)); err != nil {
						errs <- err
						return
					}
				}
				if err := awaitDelivered(p.delivered, last.ConvSeq, fmt.Sprintf("message %d", first+n-1)); err != nil {
					errs <- err
					return
				}
				time.Sleep(chatPace)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return cost.Usage{}, err
	}
	return r.usage(scenario, pairs*messages), nil
}

// groupCost sends messages to a group of members users, of whom online
// (the owner among them) are connected, at chat pace; the cost is per
// group message.
func groupCost(ctx context.Context, scenario string, members, online, messages int, emulator string, reads bool) (cost.Usage, error) {
	delivery := "write"
	if reads {
		delivery = "read"
	}
	r, err := newCostRun(ctx, emulator, map[string]string{"GroupDelivery": delivery})
	if err != nil {
		return cost.Usage{}, err
	}
	defer r.close()
	owner, err := r.dial(ctx, "owner", 0)
	if err != nil {
		return cost.Usage{}, err
	}
	var users []string
	for i := 1; i < members; i++ {
		users = append(users, fmt.Sprintf("m%03d", i))
	}
	gctx, cancel := context.WithTimeout(ctx, time.Minute)
	g, err := owner.CreateGroup(gctx, "all hands", users...)
	cancel()
	if err != nil {
		return cost.Usage{}, fmt.Errorf("create group: %w", err)
	}
	shown := []*client.Client{owner}
	for _, u := range users[:online-1] {
		c, err := r.dial(ctx, u, 0)
		if err != nil {
			return cost.Usage{}, err
		}
		shown = append(shown, c)
	}
	if err := r.awaitSynced(); err != nil {
		return cost.Usage{}, err
	}
	r.settle()
	r.start()
	for m := range messages {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := owner.SendDraft(sctx, client.Draft{ConversationID: g.ConversationID, Body: mustJSON(body(m))})
		cancel()
		if err == nil {
			err = awaitAll(shown, fmt.Sprintf("group message %d", m))
		}
		if err != nil {
			return cost.Usage{}, err
		}
		// The members ack within the SDK's ack window; a group sender
		// gets no delivered receipt to wait for.
		time.Sleep(client.DefaultAckInterval + chatPace)
	}
	u := r.usage(scenario, messages)
	u.Unit = "group message"
	return u, nil
}

// loginCost has a sender leave waiting messages for each of logins users
// who never connected, then meters their first connection: sync, pushes of
// what is left, acks — and with console, the requests the web console
// makes when it opens: the conversation summary and its 1:1 peers'
// presence.
func loginCost(ctx context.Context, scenario string, logins, waiting int, console, newDevice bool, emulator string) (cost.Usage, error) {
	r, err := newCostRun(ctx, emulator)
	if err != nil {
		return cost.Usage{}, err
	}
	defer r.close()
	ops, err := r.dial(ctx, "ops", 0)
	if err != nil {
		return cost.Usage{}, err
	}
	if !newDevice {
		// Each user's device connected the day before (set-up): the login
		// is of a device the user already has.
		for u := range logins {
			c, err := r.dial(ctx, fmt.Sprintf("user%d", u), 0)
			if err != nil {
				return cost.Usage{}, err
			}
			if err := c.Close(); err != nil {
				return cost.Usage{}, err
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, logins)
	for u := range logins {
		wg.Go(func() {
			for m := range waiting {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := ops.Send(sctx, fmt.Sprintf("user%d", u), body(m))
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return cost.Usage{}, err
	}
	drain(ops, logins*waiting)
	time.Sleep(6 * time.Second) // the sender's own redelivery checks are set-up, not the login
	r.start()
	for u := range logins {
		c, err := r.dial(ctx, fmt.Sprintf("user%d", u), 0)
		if err != nil {
			return cost.Usage{}, err
		}
		for m := range waiting {
			if err := awaitAll([]*client.Client{c}, fmt.Sprintf("waiting message %d", m)); err != nil {
				return cost.Usage{}, err
			}
		}
		if console {
			if err := consoleOpens(ctx, c, fmt.Sprintf("user%d", u)); err != nil {
				return cost.Usage{}, err
			}
		}
	}
	u := r.usage(scenario, logins)
	u.Unit = "login"
	return u, nil
}

// consoleOpens makes the requests the web console makes when it opens
// (web/console/src/app.ts): the conversation summary, then the presence of
// the 1:1 peers in it.
func consoleOpens(ctx context.Context, c *client.Client, me string) error {
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sum, err := c.Summary(qctx)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	var peers []string
	for _, s := range sum {
		conv := im.ConversationID(s.ConversationID)
		if peer, err := conv.Peer(im.UserID(me)); err == nil && !conv.IsGroup() && !conv.AppConversation() {
			peers = append(peers, string(peer))
		}
	}
	if len(peers) == 0 {
		return fmt.Errorf("summary of %s: no 1:1 conversation (%d conversations)", me, len(sum))
	}
	if _, err := c.QueryPresence(qctx, peers...); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	return nil
}

// drain takes n messages a client was shown, as far as they have come.
func drain(c *client.Client, n int) {
	for range n {
		select {
		case <-c.Messages():
		case <-time.After(10 * time.Second):
			return
		}
	}
}

// idleCost meters connected devices that receive nothing, pinging every
// idlePing instead of the SDK's client.DefaultPingInterval, and scales it
// to a day at that interval: the keep-alive components by the pings a day
// takes, connection minutes by the day.
func idleCost(ctx context.Context, emulator string) (cost.Usage, error) {
	const devices, idlePing, window = 4, time.Second, 12 * time.Second
	r, err := newCostRun(ctx, emulator)
	if err != nil {
		return cost.Usage{}, err
	}
	defer r.close()
	for d := range devices {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		user := fmt.Sprintf("idle%d", d)
		c, err := client.Dial(dctx, client.Options{
			URL: r.st.URL, Device: "d0", Path: filepath.Join(r.dir, user+".db"), PingInterval: idlePing,
			Token: func(context.Context) (string, error) {
				return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), "", time.Now(), time.Hour)
			},
		})
		cancel()
		if err != nil {
			return cost.Usage{}, err
		}
		r.clients = append(r.clients, c)
	}
	time.Sleep(3 * time.Second) // past the connect's sync
	r.start()
	time.Sleep(window)
	u := r.usage("idle-day", devices)
	u.Unit = "device-day"
	pings := u.Invocations["PingFunction"]
	if pings == 0 {
		return cost.Usage{}, fmt.Errorf("no keep-alive ping in %s", window)
	}
	// Per device: a day holds 180 keep-alive ticks of 8 minutes, every
	// DefaultHeadEvery-th a ping (60), the others keepalive frames.
	scale := float64(devices) * float64(24*time.Hour/client.DefaultPingInterval/client.DefaultHeadEvery) / float64(pings)
	u.Scale(scale)
	u.ConnectionMinutes = float64(devices) * 24 * 60
	return u, nil
}

// mustJSON encodes v, which cannot fail for the benchmark's bodies.
func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
