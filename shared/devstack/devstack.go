// Package devstack runs Signet's whole backend on one machine with no AWS
// account and no Docker: DynamoDB (minidyn in-process, or any endpoint),
// SQS (goaws in-process, or any endpoint such as LocalStack or fauxqs), the
// tables and queues of template.yaml, the API Gateway WebSocket emulation
// and the SQS event-source poller, all invoking the Lambda handlers
// in-process through the real AWS SDK clients.
//
// The Lambda binaries never import this package: emulators stay out of
// every functions/* import graph.
package devstack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/app/wakeapp"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/eventsource"
	"github.com/signet-im/signet/shared/gateway"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/iam"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/journal"
	"github.com/signet-im/signet/shared/memsns"
	"github.com/signet-im/signet/shared/openapi"
	"github.com/signet-im/signet/shared/provision"
	"github.com/signet-im/signet/shared/queue"
	"github.com/signet-im/signet/shared/template"
)

// DefaultSecret is the local stack's JWT secret (`signet token` signs with it).
const DefaultSecret = "local-dev-secret"

// DefaultAdminKey is the local stack's HTTP API admin key.
const DefaultAdminKey = "local-admin-key"

// Options configure a local stack. The zero value is a usable test stack on
// a random port with in-process emulators.
type Options struct {
	// Addr is where the WebSocket API and @connections listen (default
	// 127.0.0.1:0; `signet local` uses 127.0.0.1:3001).
	Addr string
	// DynamoDBEndpoint and SQSEndpoint replace the in-process emulators;
	// SNSEndpoint replaces the in-process memsns (e.g. LocalStack's SNS).
	DynamoDBEndpoint, SQSEndpoint, SNSEndpoint string
	// OnWake, when set, is told each wake-up the in-process SNS was asked
	// to send (signet local prints them: what APNs or FCM would get).
	OnWake func(memsns.Message)
	// Emulator picks the in-process DynamoDB when no endpoint is given:
	// "minidyn" (the default) or "memdyn" (see StartDynamoDB); empty reads
	// EnvEmulator.
	Emulator string
	// SQSEmulator picks the in-process SQS when no endpoint is given:
	// "goaws" (the default) or "memsqs" (see StartSQS); empty reads
	// EnvSQSEmulator.
	SQSEmulator string
	// DataDir keeps the in-process emulators' data across restarts (a
	// journal each, see package journal; memdyn and memsqs, the defaults
	// then); "" keeps everything in memory. One stack at a time may use a
	// directory.
	DataDir string
	// DynamoDBAddr and SQSAddr are where the in-process emulators listen
	// (default a free loopback port each).
	DynamoDBAddr, SQSAddr string
	// Region of the SDK clients (default us-east-1).
	Region string
	// Prefix names the tables and queues (default "signet-local"); stacks
	// sharing an emulator need distinct prefixes.
	Prefix string
	// Secret verifies tokens (default DefaultSecret).
	Secret string
	// HTTPAddr is where the HTTP alerts API listens (default 127.0.0.1:0;
	// `signet local` uses 127.0.0.1:3000).
	HTTPAddr string
	// AdminKey is the HTTP API's admin key (default DefaultAdminKey).
	AdminKey string
	// Redelivery is the push timeout and backoff (nil: the template's).
	Redelivery *im.Redelivery
	// SyncInterval admits one new sync per user per interval (0: the template's, 2s).
	SyncInterval time.Duration
	// PollWait is the SQS long-poll wait of the event source (default 1s).
	PollWait time.Duration
	// FanoutBatch, MemberLimit and PresenceDebounce override the defaults
	// of the same settings (see package config).
	FanoutBatch, MemberLimit int
	PresenceDebounce         time.Duration
	// WriteTimeout is how long the gateway waits for a client to take a
	// frame before it disconnects it (default gateway.DefaultWriteTimeout).
	WriteTimeout time.Duration
	// RateLimits replaces the template's per-user limits (SIGNET_RATE_LIMITS,
	// e.g. "send=10/1m" or "off"); "" keeps them. Throughput tests and
	// benchmarks turn them off.
	RateLimits string
	// HTTPReadTimeout is how long the HTTP API waits for a whole request
	// (default gateway.HTTPReadTimeout).
	HTTPReadTimeout time.Duration
	// CallbackBackoff replaces the waits between status callback retries
	// (nil: the template's).
	CallbackBackoff []time.Duration
	// Configure, when set, adjusts each function's handler (named by its
	// template logical id) before anything runs (tests wrap a storage
	// interface to inject faults into one function).
	Configure func(function string, h *handler.Deps)
	// Parameters override template parameters, as `sam deploy
	// --parameter-overrides` does; they are checked against the
	// parameters' constraints and the template's Rules.
	Parameters map[string]string
	// Env overrides environment variables the template sets on a function
	// (like `sam local --env-vars`: a variable the template does not set
	// on a function is not added to it). The typed settings above are
	// applied this way.
	Env map[string]string
	// Concurrency is the account's Lambda concurrency: invocations beyond
	// it are throttled (default DefaultConcurrency, a new account's).
	Concurrency int
	// SerialFrames makes the gateway run one connection's frames one after
	// another. API Gateway does not: a test switch, never the default.
	SerialFrames bool
	// VisibilityTimeout, when set, is every queue's visibility timeout
	// instead of the template's (a message left by a failed invocation
	// returns after it). A queue's below the timeout of a function it
	// triggers is refused, as AWS refuses that event source mapping.
	VisibilityTimeout time.Duration
	// APIOptions are added to every SDK client (e.g. call counters).
	APIOptions []func(*middleware.Stack) error
	// HandlerAPIOptions are added, after APIOptions, only to the clients
	// the functions' own code calls AWS with — not to the event source
	// mappings' polling, which is AWS's machinery (chaos's injected call
	// failures model a function failing between two steps).
	HandlerAPIOptions []func(*middleware.Stack) error
	// Log receives structured logs (discarded when nil).
	Log *slog.Logger
	// Progress receives start-up lines (discarded when nil).
	Progress func(format string, args ...any)
}

// Stack is a running local stack.
type Stack struct {
	// URL is the WebSocket URL clients connect to (ws://host:port/).
	URL string
	// ManagementURL is the @connections endpoint (http://host:port/local).
	ManagementURL string
	// HTTPURL is the HTTP alerts API (http://host:port).
	HTTPURL string
	// DynamoDBEndpoint, SQSEndpoint and SNSEndpoint are the endpoints in use.
	DynamoDBEndpoint, SQSEndpoint, SNSEndpoint string
	// PushApps are the SNS platform applications the stack made (by
	// platform: apns, apns_sandbox, fcm), which devices' tokens go under.
	PushApps map[string]string
	// DynamoDBEmulator and SQSEmulator name the in-process emulators
	// started ("" for an endpoint given).
	DynamoDBEmulator, SQSEmulator string
	// DataDir is where the emulators keep their data ("" in memory);
	// RestoredItems and RestoredMessages count what it held at start.
	DataDir                         string
	RestoredItems, RestoredMessages int
	// DynamoDB and SQS are SDK clients for the stack's emulators.
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	// Store is a DynamoDB store over the stack's tables with full rights
	// (for inspection; the functions each have their own, under their role).
	Store *dynamo.Store
	// Gateway is the WebSocket API emulation.
	Gateway *gateway.Gateway
	// Resources are the provisioned table names and queue URLs.
	Resources provision.Resources
	// Config is the configuration SendFunction runs with.
	Config config.Config

	log       *slog.Logger
	runtime   *runtime
	functions map[string]*function
	mu        sync.Mutex
	denials   []string
	dropped   atomic.Int64 // queue messages a consumer dropped as malformed
	sns       *sns.Client  // as an admin
	cancel    context.CancelFunc

	transportOnce sync.Once
	httpTransport *http.Transport
	stops         []func()
	wg            sync.WaitGroup
}

// Start provisions and starts a local stack.
func Start(ctx context.Context, o Options) (*Stack, error) {
	o = withDefaults(o)
	st := &Stack{}
	o.Log = slog.New(dropCounter{Handler: o.Log.Handler(), n: &st.dropped})
	st.log = o.Log
	ok := false
	defer func() {
		if !ok {
			st.Close()
		}
	}()
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		return nil, err
	}
	// The suites again in the modes that are not the default (make
	// test-send-transaction, make test-group-write).
	for param, env := range map[string]string{"SendMode": EnvTestSendMode, "GroupDelivery": EnvTestGroupDelivery} {
		if m := os.Getenv(env); m != "" && o.Parameters[param] == "" {
			o.Parameters = maps.Clone(o.Parameters)
			if o.Parameters == nil {
				o.Parameters = map[string]string{}
			}
			o.Parameters[param] = m
		}
	}
	// CloudFormation checks parameters and Rules before it creates anything.
	params, err := tmpl.ParameterValues(o.Parameters)
	if err != nil {
		return nil, err
	}
	if err := tmpl.CheckRules(params); err != nil {
		return nil, err
	}
	if err := queueVisibility(tmpl, o.VisibilityTimeout); err != nil {
		return nil, err
	}
	// The named listen addresses are bound before anything takes a port the
	// system picks (the SNS emulator's, the SDK clients' outgoing
	// connections): a caller that found a port free (a test harness) must
	// get it, not lose it to our own emulator.
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	st.stops = append(st.stops, func() { ln.Close() })
	hln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.HTTPAddr, err)
	}
	st.stops = append(st.stops, func() { hln.Close() })
	if err := st.startEmulators(o); err != nil {
		return nil, err
	}
	adminCfg := st.awsConfig(o, nil)
	st.DynamoDB = dynamodb.NewFromConfig(adminCfg, func(opt *dynamodb.Options) { opt.BaseEndpoint = aws.String(st.DynamoDBEndpoint) })
	st.SQS = sqs.NewFromConfig(adminCfg, func(opt *sqs.Options) { opt.BaseEndpoint = aws.String(st.SQSEndpoint) })

	if st.Resources, err = provision.Apply(ctx, tmpl, st.DynamoDB, st.SQS, o.Prefix, o.Progress); err != nil {
		return nil, err
	}
	// SNS platform applications stand for the deployment's APNs and FCM
	// credentials (an operator makes them before deploying): their ARNs
	// are the template's parameters.
	st.sns = wakeapp.SNSClient(adminCfg, aws.String(st.SNSEndpoint))
	if st.PushApps, err = platformApps(ctx, st.sns, o.Prefix); err != nil {
		return nil, err
	}
	for p, name := range map[string]string{im.PlatformAPNS: "ApnsPlatformApplicationArn", im.PlatformAPNSSandbox: "ApnsSandboxPlatformApplicationArn", im.PlatformFCM: "FcmPlatformApplicationArn"} {
		if o.Parameters[name] == "" {
			params[name] = st.PushApps[p]
		}
	}

	host := ln.Addr().String()
	st.URL = "ws://" + host + "/"
	gw := &gateway.Gateway{Routes: map[string]gateway.Route{}, Log: o.Log, Serial: o.SerialFrames, Stage: params["Stage"], WriteTimeout: o.WriteTimeout}
	st.Gateway = gw
	st.ManagementURL = "http://" + host + "/" + gw.StageName()

	res := &resolver{params: params, tables: st.Resources.Tables, queues: st.Resources.Queues, prefix: o.Prefix, region: o.Region, apiID: gw.API()}
	st.runtime = newRuntime(o.Concurrency, func(msg string, args ...any) { o.Log.Warn(msg, args...) })
	fns := map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(tmpl.Functions)) {
		fn, err := st.function(ctx, tmpl, id, res, params, o)
		if err != nil {
			return nil, err
		}
		methods := app.Functions(fn.handler)
		if fns[id], err = wrap(st.runtime, fn, methods[id]); err != nil {
			return nil, err
		}
	}
	// Tests and operators inspect storage with full rights, as an admin would.
	st.Store = dynamo.New(st.DynamoDB, dynamo.Tables{Connections: st.Config.ConnectionsTable, Inbox: st.Config.InboxTable,
		Messages: st.Config.MessagesTable, Trace: st.Config.TraceTable, Alerts: st.Config.AlertsTable})
	st.Store.Retention, st.Store.HistoryRetention, st.Store.CompressBodies = st.Config.InboxRetention, st.Config.HistoryRetention, st.Config.CompressBodies
	st.Store.SendMode, st.Store.GroupReads = st.Config.SendMode, st.Config.GroupReads

	if err := routeGateway(gw, tmpl, fns); err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	st.wg.Go(func() { _ = srv.Serve(ln) })
	st.stops = append(st.stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gw.Close()
		_ = srv.Shutdown(ctx)
	})

	httpAPI := &gateway.HTTPAPI{Routes: map[string]gateway.HTTPLambda{}, Log: o.Log}
	for key, fn := range tmpl.HTTPRoutes {
		h, ok := fns[fn].(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error))
		if !ok {
			return nil, fmt.Errorf("http route %s: function %s has no HTTP handler", key, fn)
		}
		httpAPI.Routes[key] = h
	}
	st.HTTPURL = "http://" + hln.Addr().String()
	hsrv := gateway.NewHTTPServer(httpAPI, o.HTTPReadTimeout)
	st.wg.Go(func() { _ = hsrv.Serve(hln) })
	st.stops = append(st.stops, func() { _ = hsrv.Close() })

	runCtx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	for _, id := range slices.Sorted(maps.Keys(tmpl.Functions)) {
		fn := tmpl.Functions[id]
		for _, q := range fn.SQSEvents {
			h, ok := fns[id].(func(context.Context, events.SQSEvent) (events.SQSEventResponse, error))
			if !ok {
				return nil, fmt.Errorf("function %s is triggered by queue %s but has no SQS handler", id, q)
			}
			url := st.Resources.Queues[q]
			arn, err := queueARN(ctx, st.SQS, url)
			if err != nil {
				return nil, err
			}
			// The event source mapping polls with the function's role, at
			// most MaximumConcurrency batches at once (AWS's minimum is 2).
			p := &eventsource.Poller{Client: st.functions[id].sqs, QueueURL: url, QueueARN: arn, Handler: h, WaitTime: o.PollWait, Log: o.Log, BatchSize: int32(fn.BatchSize[q]),
				Concurrency: max(fn.MaximumConcurrency[q], 2), VisibilityTimeout: time.Duration(cmp.Or(tmpl.Queues[q].VisibilityTimeout, sqsDefaultVisibility)) * time.Second}
			st.wg.Go(func() { p.Run(runCtx) })
			o.Progress("event source: %s -> %s (batch %d, concurrency %d)", q, id, p.BatchSize, p.Concurrency)
		}
	}
	o.Progress("lambda: %d functions, each with its own environment, role and timeout; account concurrency %d", len(fns), o.Concurrency)
	ok = true
	return st, nil
}

// dropCounter passes records on to Handler (as it would) and counts the
// errors queue.Consumer logs for a message it dropped as malformed or
// left for retry as of an unknown kind.
type dropCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (d dropCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || d.Handler.Enabled(ctx, l)
}

func (d dropCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && (strings.HasPrefix(r.Message, queue.DroppedMalformed) || strings.HasPrefix(r.Message, queue.LeftUnknownKind)) {
		d.n.Add(1)
	}
	if !d.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d dropCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return dropCounter{Handler: d.Handler.WithAttrs(as), n: d.n}
}

func (d dropCounter) WithGroup(name string) slog.Handler {
	return dropCounter{Handler: d.Handler.WithGroup(name), n: d.n}
}

// sqsDefaultVisibility is a queue's visibility timeout when its template
// names none.
const sqsDefaultVisibility = 30

// queueVisibility sets every queue's visibility timeout to override (when
// set), and refuses a queue whose visibility timeout is below the timeout
// of a function it triggers: AWS refuses to create that event source
// mapping ("Queue visibility timeout: … seconds is less than Function
// timeout: … seconds").
func queueVisibility(tmpl *template.Template, override time.Duration) error {
	if override > 0 {
		for id, q := range tmpl.Queues {
			q.VisibilityTimeout = int(override.Seconds())
			tmpl.Queues[id] = q
		}
	}
	for _, id := range slices.Sorted(maps.Keys(tmpl.Functions)) {
		fn := tmpl.Functions[id]
		for _, q := range fn.SQSEvents {
			vis := cmp.Or(tmpl.Queues[q].VisibilityTimeout, sqsDefaultVisibility)
			if vis < fn.Timeout {
				return fmt.Errorf("event source %s -> %s: queue visibility timeout: %d seconds is less than function timeout: %d seconds (AWS refuses the mapping)", q, id, vis, fn.Timeout)
			}
		}
	}
	return nil
}

// startEmulators starts the in-process DynamoDB and SQS the options ask
// for (none where an endpoint is given), keeping their data in o.DataDir
// when it is set.
func (st *Stack) startEmulators(o Options) error {
	var dynamoAt, sqsAt Place = Place{Addr: o.DynamoDBAddr}, Place{Addr: o.SQSAddr}
	if o.DataDir != "" {
		if o.DynamoDBEndpoint != "" || o.SQSEndpoint != "" {
			return fmt.Errorf("a data directory keeps the in-process emulators' data; with an endpoint given (AWS_ENDPOINT_URL…) the data is where that service keeps it")
		}
		unlock, err := journal.Lock(o.DataDir)
		if err != nil {
			return err
		}
		st.stops = append(st.stops, unlock)
		st.DataDir = o.DataDir
		dynamoAt.Journal, sqsAt.Journal = filepath.Join(o.DataDir, "dynamodb.jsonl"), filepath.Join(o.DataDir, "sqs.jsonl")
	}
	if st.DynamoDBEndpoint = o.DynamoDBEndpoint; st.DynamoDBEndpoint == "" {
		kind := o.Emulator
		if kind == "" {
			kind = os.Getenv(EnvEmulator)
		}
		e, err := StartDynamoDB(kind, dynamoAt)
		if err != nil {
			return err
		}
		st.stops = append(st.stops, e.Stop)
		st.DynamoDBEndpoint, st.DynamoDBEmulator, st.RestoredItems = e.Endpoint, e.Kind, e.Restored
		o.Progress("dynamodb: %s in-process at %s", e.Kind, e.Endpoint)
	} else {
		o.Progress("dynamodb: %s", st.DynamoDBEndpoint)
	}
	if st.SQSEndpoint = o.SQSEndpoint; st.SQSEndpoint == "" {
		kind := o.SQSEmulator
		if kind == "" {
			kind = os.Getenv(EnvSQSEmulator)
		}
		e, err := StartSQS(kind, sqsAt)
		if err != nil {
			return fmt.Errorf("start sqs: %w", err)
		}
		st.stops = append(st.stops, e.Stop)
		st.SQSEndpoint, st.SQSEmulator, st.RestoredMessages = e.Endpoint, e.Kind, e.Restored
		o.Progress("sqs: %s in-process at %s", e.Kind, e.Endpoint)
	} else {
		o.Progress("sqs: %s", st.SQSEndpoint)
	}
	if st.SNSEndpoint = o.SNSEndpoint; st.SNSEndpoint == "" {
		sns := memsns.New(o.Region)
		if o.OnWake != nil {
			sns.OnPublish(o.OnWake)
		}
		endpoint, stop, err := serve(sns, "127.0.0.1:0", func() error { return nil })
		if err != nil {
			return fmt.Errorf("start sns: %w", err)
		}
		st.stops = append(st.stops, stop)
		st.SNSEndpoint = endpoint
		o.Progress("sns: memsns in-process at %s", endpoint)
	} else {
		o.Progress("sns: %s", st.SNSEndpoint)
	}
	return nil
}

// platformApps makes the stack's SNS platform applications, one per push
// platform, with stand-in credentials (no emulator calls APNs or FCM).
func platformApps(ctx context.Context, c *sns.Client, prefix string) (map[string]string, error) {
	out := map[string]string{}
	for p, platform := range map[string]string{im.PlatformAPNS: "APNS", im.PlatformAPNSSandbox: "APNS_SANDBOX", im.PlatformFCM: "GCM"} {
		// Both attributes for every platform: LocalStack's SNS wants a
		// principal with a credential even for FCM (AWS does not).
		attrs := map[string]string{"PlatformCredential": "local-stand-in", "PlatformPrincipal": "local-stand-in"}
		app, err := c.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{Name: aws.String(prefix + "-" + p), Platform: aws.String(platform), Attributes: attrs})
		if err != nil {
			return nil, fmt.Errorf("sns platform application %s: %w", p, err)
		}
		out[p] = aws.ToString(app.PlatformApplicationArn)
	}
	return out, nil
}

// EndpointToken is the device token the SNS endpoint arn was made for
// (GetEndpointAttributes, as an admin).
func (st *Stack) EndpointToken(ctx context.Context, arn string) (string, error) {
	out, err := st.sns.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
	if err != nil {
		return "", err
	}
	return out.Attributes["Token"], nil
}

// WakeMessages returns what the stack's SNS sent to each of the stack's
// endpoints — each message's content for the endpoint's platform: the
// in-process memsns's or LocalStack's record of it (both serve it at
// memsns.MessagesPath, one SNS perhaps shared by several stacks).
func (st *Stack) WakeMessages(ctx context.Context) (map[string][]memsns.Message, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.SNSEndpoint+memsns.MessagesPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sns messages: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Messages map[string][]memsns.Message `json:"platform_endpoint_messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("sns messages: %w", err)
	}
	mine := map[string][]memsns.Message{}
	for arn, ms := range out.Messages {
		ours := false
		for _, app := range st.PushApps {
			// arn:…:app/APNS/<name> makes arn:…:endpoint/APNS/<name>/<id>.
			ours = ours || strings.HasPrefix(arn, strings.Replace(app, ":app/", ":endpoint/", 1)+"/")
		}
		if !ours {
			continue
		}
		for _, m := range ms {
			var content string
			if m.MessageStructure == "json" && json.Unmarshal([]byte(m.Message), &content) == nil {
				m.Message = content
			}
			mine[arn] = append(mine[arn], m)
		}
	}
	return mine, nil
}

// awsConfig is the SDK configuration of the stack's clients; a non-nil
// transport sits between them and the emulators (a function's IAM policy).
func (st *Stack) awsConfig(o Options, transport http.RoundTripper) aws.Config {
	cfg := aws.Config{
		Region:      o.Region,
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		APIOptions:  o.APIOptions,
		// Emulators under load answer 500 now and then (moto is not
		// thread-safe): retry more, and without the client-side retry
		// quota that would turn a burst of retries into failures.
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = 8
				so.RateLimiter = ratelimit.None
			})
		},
	}
	if transport != nil {
		cfg.HTTPClient = &http.Client{Transport: transport}
	}
	return cfg
}

// function builds one template function as Lambda would run it: its
// environment from the template (with the stack's overrides of variables
// the template sets), its init (configuration load and checks, exactly as
// the Lambda binary does), and SDK clients that carry its IAM policy.
func (st *Stack) function(ctx context.Context, tmpl *template.Template, id string, res *resolver, params map[string]string, o Options) (*function, error) {
	env, err := tmpl.Env(id, res)
	if err != nil {
		return nil, err
	}
	for name, v := range env {
		env[name] = resolveSSM(v, map[string]string{params["JwtSecretParameter"]: o.Secret, params["AdminKeyParameter"]: o.AdminKey})
	}
	if _, set := env[config.EnvWebSocketAPI]; set {
		// The deployed endpoint is the API's execute-api URL; locally it
		// is the gateway's @connections endpoint.
		env[config.EnvWebSocketAPI] = st.ManagementURL
	}
	// Like `sam local --env-vars`: an override replaces a variable the
	// template sets on the function and adds none it does not.
	for name, v := range o.Env {
		if _, set := env[name]; set {
			env[name] = v
		}
	}
	policy, err := tmpl.Policy(id, res)
	if err != nil {
		return nil, err
	}
	cfg, err := config.ForFunction(func(k string) string { return env[k] }, id)
	if err != nil {
		return nil, fmt.Errorf("function %s failed its init (as it would in Lambda): %w", id, err)
	}
	fn := &function{id: id, timeout: time.Duration(tmpl.Functions[id].Timeout) * time.Second, memoryMB: tmpl.Functions[id].MemorySize, env: env, policy: policy,
		arn: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s-%s", o.Region, accountID, o.Prefix, id)}
	transport := &enforcer{function: id, policy: policy, next: st.transport(),
		arn:       arns{partition: "aws", region: o.Region, account: accountID, apiID: res.apiID},
		principal: fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s-%sRole/%s-%s", accountID, o.Prefix, id, o.Prefix, id),
		denied:    st.recordDenial}
	awsCfg := st.awsConfig(o, transport)
	// The event source mapping polls under the function's role but is
	// not the function's code: it gets APIOptions only.
	fn.sqs = sqs.NewFromConfig(awsCfg, func(opt *sqs.Options) { opt.BaseEndpoint = aws.String(st.SQSEndpoint) })
	awsCfg.APIOptions = slices.Concat(o.APIOptions, o.HandlerAPIOptions)
	clients := app.Clients{
		DynamoDB: dynamodb.NewFromConfig(awsCfg, func(opt *dynamodb.Options) { opt.BaseEndpoint = aws.String(st.DynamoDBEndpoint) }),
		SQS:      sqs.NewFromConfig(awsCfg, func(opt *sqs.Options) { opt.BaseEndpoint = aws.String(st.SQSEndpoint) }),
	}
	if cfg.WebSocketEndpoint != "" {
		clients.Management = app.ManagementClient(awsCfg, cfg.WebSocketEndpoint)
	}
	fn.handler = app.New(cfg, clients, o.Log.With("function", id))
	if id == "AlertsFunction" {
		if fn.handler.Validator, err = openapi.Alerts(); err != nil {
			return nil, err
		}
	}
	if id == "HintsFunction" {
		// What the function's main adds (wakeapp.Configure): its SNS client,
		// under its role like the others.
		fn.handler.Waker = wakeapp.Waker(awsCfg, aws.String(st.SNSEndpoint), cfg.PushApps)
	}
	if o.Configure != nil {
		o.Configure(id, fn.handler)
	}
	if st.functions == nil {
		st.functions = map[string]*function{}
	}
	st.functions[id] = fn
	if id == "SendFunction" {
		st.Config = cfg
	}
	return fn, nil
}

// transport is the one HTTP transport under every function's IAM check:
// keep-alive pools large enough for the whole account's concurrency
// (http.DefaultTransport keeps 2 idle connections per host, so a busy
// stack would open and close a TCP connection per call).
func (st *Stack) transport() http.RoundTripper {
	st.transportOnce.Do(func() {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 128
		st.httpTransport = t
	})
	return st.httpTransport
}

// function is one Lambda function of the template as the stack runs it.
type function struct {
	id       string
	arn      string
	timeout  time.Duration
	memoryMB int
	env      map[string]string
	policy   iam.Policy
	handler  *handler.Deps
	sqs      *sqs.Client // the event source mappings' (AWS's polling, not the function's code)
}

func (st *Stack) recordDenial(function string, r iam.Request) {
	st.mu.Lock()
	st.denials = append(st.denials, function+": "+r.String())
	st.mu.Unlock()
	st.log.Error("IAM DENIED: the template does not grant this call; it fails the same way on AWS",
		"function", function, "action", r.Action, "resource", r.Resource)
}

// Denials lists every SDK call a function made that its template policy
// does not allow ("Function: action on resource"), in order.
func (st *Stack) Denials() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.denials...)
}

// Faults lists what AWS would have refused or a client would have choked
// on: every IAM denial, and the empty and oversize frames the backend asked
// the gateway to send; and the queue messages a consumer dropped as
// malformed or left for retry as of a kind it does not know (only the
// stack's functions enqueue, all of one version: one wrote what another
// cannot read). A test that runs a stack fails on any of them.
func (st *Stack) Faults() []string {
	out := st.Denials()
	for i, d := range out {
		out[i] = "IAM denied " + d
	}
	if n := st.dropped.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d queue messages dropped as malformed or of a kind unknown to their consumer (the log says which)", n))
	}
	if st.Gateway != nil {
		if empty, oversize := st.Gateway.Faults(); empty+oversize > 0 {
			out = append(out, fmt.Sprintf("gateway asked to send %d empty and %d oversize (> 128 KB) frames", empty, oversize))
		}
	}
	return out
}

// Running is how many invocations are running now.
func (st *Stack) Running() int { return int(st.runtime.running.Load()) }

// Limits reports the invocations the Lambda runtime throttled or timed out.
func (st *Stack) Limits() Limits { return st.runtime.limits() }

// Metering is what the stack's API Gateway and Lambda would bill, counted
// so far (DynamoDB and SQS are counted from the SDK calls: callcount).
type Metering struct {
	// Invocations by function logical id.
	Invocations map[string]Invocations
	// WebSocketMessages both directions, per started 32 KB.
	WebSocketMessages int64
	ConnectionMinutes float64
}

// Metered returns what has been metered so far.
func (st *Stack) Metered() Metering {
	m := Metering{Invocations: st.runtime.invocations()}
	m.WebSocketMessages, m.ConnectionMinutes = st.Gateway.Metered()
	return m
}

// FunctionEnv returns the environment function id runs with.
func (st *Stack) FunctionEnv(id string) map[string]string {
	fn := st.functions[id]
	if fn == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range fn.env {
		out[k] = v
	}
	return out
}

// routeGateway gives each route of the template the function the template
// integrates it with.
func routeGateway(g *gateway.Gateway, t *template.Template, fns map[string]any) error {
	for key, r := range t.Routes {
		if r.Mock {
			if r.Responds {
				return fmt.Errorf("route %s: the local gateway answers MOCK routes one-way only (no route response)", key)
			}
			g.Routes[key] = gateway.Route{Mock: true}
			continue
		}
		h, ok := fns[r.Function].(func(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error))
		if !ok {
			return fmt.Errorf("route %s: function %s has no WebSocket handler", key, r.Function)
		}
		g.Routes[key] = gateway.Route{Handler: h, Responds: r.Responds}
		if r.Authorizer != "" {
			a, ok := fns[r.Authorizer].(func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error))
			if !ok {
				return fmt.Errorf("route %s: authorizer %s has no authorizer handler", key, r.Authorizer)
			}
			g.Authorizer = a
		}
	}
	return nil
}

func queueARN(ctx context.Context, c *sqs.Client, url string) (string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", fmt.Errorf("queue arn of %s: %w", url, err)
	}
	return out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], nil
}

func withDefaults(o Options) Options {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Prefix == "" {
		o.Prefix = "signet-local"
	}
	if o.Secret == "" {
		o.Secret = DefaultSecret
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = "127.0.0.1:0"
	}
	if o.AdminKey == "" {
		o.AdminKey = DefaultAdminKey
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	// Settings left unset take the template's defaults, which are the
	// code's (TestTheTemplatesDefaultsAreTheCodesDefaults).
	env := map[string]string{}
	if o.Redelivery != nil {
		env[config.EnvPushTimeout], env[config.EnvBackoff] = o.Redelivery.PushTimeout.String(), joinDurations(o.Redelivery.Backoff)
	}
	if o.SyncInterval > 0 {
		env[config.EnvSyncInterval] = o.SyncInterval.String()
	}
	if o.FanoutBatch > 0 {
		env[config.EnvFanoutBatch] = strconv.Itoa(o.FanoutBatch)
	}
	if o.MemberLimit > 0 {
		env[config.EnvMemberLimit] = strconv.Itoa(o.MemberLimit)
	}
	if o.RateLimits != "" {
		env[config.EnvRateLimits] = o.RateLimits
	}
	if o.PresenceDebounce > 0 {
		env[config.EnvPresenceDebounce] = o.PresenceDebounce.String()
	}
	if len(o.CallbackBackoff) > 0 {
		env[config.EnvCallbackBackoff] = joinDurations(o.CallbackBackoff)
	}
	// Webhooks of a local stack are local receivers (http://127.0.0.1:…).
	env[config.EnvWebhookPrivate] = "on"
	for k, v := range o.Env {
		env[k] = v
	}
	o.Env = env
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return o
}

func joinDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// Close stops the poller, closes every connection (running $disconnect) and
// stops the emulators this stack started.
func (st *Stack) Close() {
	if st.cancel != nil {
		st.cancel()
	}
	for i := len(st.stops) - 1; i >= 0; i-- {
		st.stops[i]()
	}
	st.stops = nil
	st.wg.Wait()
	if st.httpTransport != nil {
		st.httpTransport.CloseIdleConnections()
	}
}

// EndpointsFromEnv returns the DynamoDB and SQS endpoints named by
// AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SQS, each falling back to
// AWS_ENDPOINT_URL; "" means the in-process emulator.
func EndpointsFromEnv(getenv func(string) string) (dynamoDB, sqsURL string) {
	base := strings.TrimSpace(getenv("AWS_ENDPOINT_URL"))
	dynamoDB, sqsURL = strings.TrimSpace(getenv("AWS_ENDPOINT_URL_DYNAMODB")), strings.TrimSpace(getenv("AWS_ENDPOINT_URL_SQS"))
	if dynamoDB == "" {
		dynamoDB = base
	}
	if sqsURL == "" {
		sqsURL = base
	}
	return dynamoDB, sqsURL
}
