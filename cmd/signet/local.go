package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/console"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/memsns"
)

// runLocal is `signet local`: the whole backend on this machine (the
// template's functions in-process, emulators, a local API Gateway).
func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet local", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:3001", "listen address of the WebSocket API and @connections")
	httpAddr := fs.String("http-addr", "127.0.0.1:3000", "listen address of the HTTP alerts API")
	adminKey := fs.String("admin-key", envOr("SIGNET_ADMIN_KEY", devstack.DefaultAdminKey), "HTTP API admin key (env SIGNET_ADMIN_KEY)")
	prefix := fs.String("prefix", "signet-local", "name prefix of tables and queues")
	secret := fs.String("secret", envOr("SIGNET_JWT_SECRET", devstack.DefaultSecret), "HS256 secret for client tokens (env SIGNET_JWT_SECRET)")
	quiet := fs.Bool("quiet", false, "log warnings and errors only")
	emulator := fs.String("dynamodb-emulator", os.Getenv(devstack.EnvEmulator), "in-process DynamoDB when no endpoint is set: minidyn (default), memdyn, the B-tree emulator for large tables, or memdyn-stale, memdyn whose eventually consistent reads may be a second behind as DynamoDB's (env "+devstack.EnvEmulator+")")
	sqsEmulator := fs.String("sqs-emulator", os.Getenv(devstack.EnvSQSEmulator), "in-process SQS when no endpoint is set: goaws (default) or memsqs, for queues with large backlogs (env "+devstack.EnvSQSEmulator+")")
	data := fs.String("data", "", "keep messages, cursors, groups, apps and traces in this directory across restarts (memdyn and memsqs journals); default: in memory, lost when the stack stops")
	dynamoAddr := fs.String("dynamodb-addr", defaultDynamoDBAddr, "listen address of the in-process DynamoDB (aws dynamodb … --endpoint-url http://<it>)")
	sqsAddr := fs.String("sqs-addr", defaultSQSAddr, "listen address of the in-process SQS")
	consoleAddr := fs.String("console-addr", defaultConsoleAddr, `listen address of the web console (chat, delivery marks, a message's path as a timeline; "off": none)`)
	concurrency := fs.Int("concurrency", devstack.DefaultConcurrency, "account Lambda concurrency: invocations beyond it are throttled (a new AWS account has 10)")
	var params paramFlags
	fs.Var(&params, "parameter", "template parameter override Name=Value, as sam deploy --parameter-overrides (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet local [flags]

Runs Signet's whole backend on this machine with no AWS account and no
Docker: DynamoDB (minidyn, in-process, on --dynamodb-addr), SQS (goaws,
in-process, on --sqs-addr), the tables and queues of template.yaml, an API
Gateway WebSocket emulation on --addr and the SQS event sources.

Data lives in memory unless --data DIR is given: then DynamoDB and SQS are
memdyn and memsqs, which journal every change to DIR before answering it,
so a restart — also after kill -9 — keeps every acknowledged message,
cursor, group, app key and trace (an OS crash or power loss can lose the
last second). make run uses --data .signet/data.

It is as strict as AWS: each function runs with the environment, IAM
policy and timeout template.yaml gives it, within a shared account
concurrency (--concurrency); a call its policy does not allow fails with
AccessDeniedException and is logged as "IAM DENIED". Frames of one
connection are dispatched concurrently, as API Gateway does. Handlers are
the same code the Lambdas run. Stop with Ctrl-C.

It also serves the web console on --console-addr: sign in as any user and
device, chat 1:1 and in groups with delivery marks, see presence and
alerts, and draw any message's path to each device as a timeline. It is
local only: its token endpoint signs tokens for anyone who asks.

Environment:
  AWS_ENDPOINT_URL_DYNAMODB  use this DynamoDB endpoint instead of minidyn
  AWS_ENDPOINT_URL_SQS       use this SQS endpoint instead of goaws
  AWS_ENDPOINT_URL_SNS       use this SNS endpoint instead of the in-process memsns
  AWS_ENDPOINT_URL           all of the above (e.g. LocalStack, http://localhost:4566)
  SIGNET_PUSH_TIMEOUT, SIGNET_REDELIVERY_BACKOFF, SIGNET_SYNC_INTERVAL
                             redelivery and sync timings (see README)
  SIGNET_LOG_LEVEL           debug adds a log line per push, redelivery check
                             and ack (default info; --quiet is warn)

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	cfg, err := loadTimings()
	if err != nil {
		return err
	}
	level := cfg.LogLevel // SIGNET_LOG_LEVEL, parsed with the rest of the configuration
	if *quiet {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	ddb, sqsURL := devstack.EndpointsFromEnv(os.Getenv)
	progress := func(format string, a ...any) { fmt.Fprintf(stdout, "  "+format+"\n", a...) }
	fmt.Fprintln(stdout, "Starting Signet local stack...")
	// Offline push is on locally (SNS is memsns): a wake-up is printed, as
	// what APNs or FCM would have been sent.
	values := maps.Clone(params.values)
	if values == nil {
		values = map[string]string{}
	}
	if values["OfflinePush"] == "" {
		values["OfflinePush"] = "on"
	}
	var outMu sync.Mutex
	onWake := func(m memsns.Message) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, "  SNS wake-up (not sent: local) → %s\n    %s\n", m.TargetArn, m.Message)
	}
	st, err := devstack.Start(ctx, devstack.Options{
		Addr: *addr, HTTPAddr: *httpAddr, AdminKey: *adminKey, DynamoDBEndpoint: ddb, SQSEndpoint: sqsURL, Prefix: *prefix, Secret: *secret,
		Redelivery: &cfg.Redelivery, SyncInterval: cfg.SyncInterval, Log: log, Progress: progress,
		Concurrency: *concurrency, Parameters: values, Emulator: *emulator, SNSEndpoint: snsEndpoint(os.Getenv), OnWake: onWake,
		SQSEmulator: *sqsEmulator, DataDir: *data, DynamoDBAddr: *dynamoAddr, SQSAddr: *sqsAddr,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	consoleURL := ""
	if *consoleAddr != "off" && *consoleAddr != "" {
		stop, url, err := serveConsole(*consoleAddr, console.Config{WebSocketURL: st.URL, APIURL: st.HTTPURL, AdminKey: *adminKey, Secret: []byte(*secret)})
		if err != nil {
			return err
		}
		defer stop()
		consoleURL = url
	}
	printBanner(stdout, st, consoleURL)
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nStopping: closing connections...")
	done := make(chan struct{})
	go func() { st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop timed out")
	}
	fmt.Fprintln(stdout, "Stopped.")
	return nil
}

// snsEndpoint is AWS_ENDPOINT_URL_SNS, then AWS_ENDPOINT_URL ("" for the
// in-process memsns).
func snsEndpoint(getenv func(string) string) string {
	if v := strings.TrimSpace(getenv("AWS_ENDPOINT_URL_SNS")); v != "" {
		return v
	}
	return strings.TrimSpace(getenv("AWS_ENDPOINT_URL"))
}

// The in-process emulators' default ports, beside the API's 3000 and 3001,
// so that scripts can reach them (aws dynamodb scan --endpoint-url …).
const (
	defaultDynamoDBAddr = "127.0.0.1:3002"
	defaultSQSAddr      = "127.0.0.1:3003"
	defaultConsoleAddr  = "127.0.0.1:3004"
)

// serveConsole serves the web console on addr until stop is called, and
// returns its URL.
func serveConsole(addr string, cfg console.Config) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("web console on %s: %w (choose another with --console-addr, or --console-addr off)", addr, err)
	}
	srv := &http.Server{Handler: console.Handler(cfg), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, "http://" + ln.Addr().String() + "/", nil
}

// printBanner tells what runs where, and how to use it: the hints carry
// --url and --api when the stack is not where the client commands look
// by default.
func printBanner(w io.Writer, st *devstack.Stack, consoleURL string) {
	urlFlag, apiFlag := "", ""
	if st.URL != defaultWebSocketURL {
		urlFlag = " --url " + st.URL
	}
	if st.HTTPURL != defaultAPIURL {
		apiFlag = " --api " + st.HTTPURL
	}
	fmt.Fprintf(w, `
Signet is running.
  WebSocket API   %s?token=<token>
  @connections    %s/@connections/{connectionId}
  HTTP alerts API %s  (admin key: --admin-key / SIGNET_ADMIN_KEY)
`, st.URL, st.ManagementURL, st.HTTPURL)
	if consoleURL != "" {
		fmt.Fprintf(w, "  Web console     %s  (sign in as any user and device: local only)\n", consoleURL)
	}
	if st.DynamoDBEmulator != "" {
		fmt.Fprintf(w, "  DynamoDB        %s  (%s; aws dynamodb list-tables --endpoint-url %s)\n", st.DynamoDBEndpoint, st.DynamoDBEmulator, st.DynamoDBEndpoint)
	}
	if st.SQSEmulator != "" {
		fmt.Fprintf(w, "  SQS             %s  (%s)\n", st.SQSEndpoint, st.SQSEmulator)
	}
	fmt.Fprintf(w, "  SNS             %s  (offline devices' wake-ups are printed here, not sent)\n", st.SNSEndpoint)
	switch {
	case st.DataDir != "":
		fmt.Fprintf(w, "  Data            %s, kept across restarts (%d items and %d queued messages from before)\n", st.DataDir, st.RestoredItems, st.RestoredMessages)
	case st.DynamoDBEmulator != "":
		fmt.Fprintln(w, "  Data            in memory: lost when the stack stops (keep it with --data DIR; make run does)")
	}
	if urlFlag != "" || apiFlag != "" {
		fmt.Fprintf(w, "  Clients         export SIGNET_URL=%s SIGNET_API_URL=%s  (or the flags below)\n", st.URL, st.HTTPURL)
	}
	fmt.Fprintf(w, `  Tokens          signet token <userId> [--device <deviceId>]
  Chat            signet chat --user alice%[1]s   (another terminal: signet chat --user bob%[1]s)
  Alerts          KEY=$(signet apps create --name monitoring --allow-user bob%[2]s)
                  curl --retry 5 -X POST %[3]s/v1/messages -H "Authorization: Bearer $KEY" \
                    -H "Idempotency-Key: inc-1" -d '{"to":["bob"],"title":"DB down","body":"failover"}'
                  then: curl -H "Authorization: Bearer $KEY" %[3]s/v1/messages/<messageId>;  signet trace <messageId>%[2]s
  Try             websocat "%[4]s?token=$(go run ./cmd/signet token alice)"
                  then send {"action":"send","clientMsgId":"1","to":"bob","body":{"text":"hi"}}
Press Ctrl-C to stop.
`, urlFlag, apiFlag, st.HTTPURL, st.URL)
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// paramFlags collects repeated --parameter Name=Value flags.
type paramFlags struct{ values map[string]string }

// String and Set make paramFlags a repeatable Name=Value flag.
func (p *paramFlags) String() string { return "" }

func (p *paramFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want Name=Value, got %q", v)
	}
	if p.values == nil {
		p.values = map[string]string{}
	}
	p.values[name] = value
	return nil
}
