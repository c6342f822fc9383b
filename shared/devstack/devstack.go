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
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/eventsource"
	"github.com/signet-im/signet/shared/gateway"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
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
	// DynamoDBEndpoint and SQSEndpoint replace the in-process emulators.
	DynamoDBEndpoint, SQSEndpoint string
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
	// Redelivery is the push timeout and backoff (default im.DefaultRedelivery()).
	Redelivery *im.Redelivery
	// SyncInterval admits one new sync per user per interval (default 2s).
	SyncInterval time.Duration
	// PollWait is the SQS long-poll wait of the event source (default 1s).
	PollWait time.Duration
	// RetryAfter makes failed queue messages return after it rather than
	// the queue's visibility timeout (0: the queue's, as in AWS).
	RetryAfter time.Duration
	// FanoutBatch, MemberLimit and PresenceDebounce override the defaults
	// of the same settings (see package config).
	FanoutBatch, MemberLimit int
	PresenceDebounce         time.Duration
	// Configure, when set, adjusts the handler before anything runs
	// (tests wrap a storage interface to inject faults).
	Configure func(*handler.Handler)
	// APIOptions are added to every SDK client (e.g. call counters).
	APIOptions []func(*middleware.Stack) error
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
	// DynamoDBEndpoint and SQSEndpoint are the endpoints in use.
	DynamoDBEndpoint, SQSEndpoint string
	// DynamoDB and SQS are SDK clients for the stack's emulators.
	DynamoDB *dynamodb.Client
	SQS      *sqs.Client
	// Store is the DynamoDB store the handlers use.
	Store *dynamo.Store
	// Handler is the handler set every route and the poller invoke.
	Handler *handler.Handler
	// Gateway is the WebSocket API emulation.
	Gateway *gateway.Gateway
	// Resources are the provisioned table names and queue URLs.
	Resources provision.Resources
	// Config is the configuration the handlers run with.
	Config config.Config

	cancel context.CancelFunc
	stops  []func()
	wg     sync.WaitGroup
}

// Start provisions and starts a local stack.
func Start(ctx context.Context, o Options) (*Stack, error) {
	o = withDefaults(o)
	st := &Stack{}
	ok := false
	defer func() {
		if !ok {
			st.Close()
		}
	}()
	var err error
	if st.DynamoDBEndpoint = o.DynamoDBEndpoint; st.DynamoDBEndpoint == "" {
		var stop func()
		if st.DynamoDBEndpoint, stop, err = StartMinidyn(); err != nil {
			return nil, fmt.Errorf("start minidyn: %w", err)
		}
		st.stops = append(st.stops, stop)
		o.Progress("dynamodb: minidyn in-process at %s", st.DynamoDBEndpoint)
	} else {
		o.Progress("dynamodb: %s", st.DynamoDBEndpoint)
	}
	if st.SQSEndpoint = o.SQSEndpoint; st.SQSEndpoint == "" {
		if st.SQSEndpoint, err = StartGoaws(); err != nil {
			return nil, fmt.Errorf("start goaws: %w", err)
		}
		o.Progress("sqs: goaws in-process at %s", st.SQSEndpoint)
	} else {
		o.Progress("sqs: %s", st.SQSEndpoint)
	}
	awsCfg := aws.Config{
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
	st.DynamoDB = dynamodb.NewFromConfig(awsCfg, func(opt *dynamodb.Options) { opt.BaseEndpoint = aws.String(st.DynamoDBEndpoint) })
	st.SQS = sqs.NewFromConfig(awsCfg, func(opt *sqs.Options) { opt.BaseEndpoint = aws.String(st.SQSEndpoint) })

	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		return nil, err
	}
	if st.Resources, err = provision.Apply(ctx, tmpl, st.DynamoDB, st.SQS, o.Prefix, o.Progress); err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	host := ln.Addr().String()
	st.URL = "ws://" + host + "/"
	st.ManagementURL = "http://" + host + "/local"

	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		ln.Close()
		return nil, err
	}
	cfg.ConnectionsTable = st.Resources.Tables["ConnectionsTable"]
	cfg.InboxTable = st.Resources.Tables["InboxTable"]
	cfg.MessagesTable = st.Resources.Tables["MessagesTable"]
	cfg.TraceTable = st.Resources.Tables["TraceTable"]
	cfg.AlertsTable = st.Resources.Tables["AlertsTable"]
	cfg.AdminKey = o.AdminKey
	cfg.RedeliveryQueueURL = st.Resources.Queues["RedeliveryQueue"]
	cfg.WebSocketEndpoint = st.ManagementURL
	cfg.JWTSecret = o.Secret
	cfg.Redelivery = *o.Redelivery
	cfg.SyncInterval = o.SyncInterval
	cfg.FanoutQueueURL = st.Resources.Queues["FanoutQueue"]
	if o.FanoutBatch > 0 {
		cfg.FanoutBatch = o.FanoutBatch
	}
	if o.MemberLimit > 0 {
		cfg.MemberLimit = o.MemberLimit
	}
	if o.PresenceDebounce > 0 {
		cfg.PresenceDebounce = o.PresenceDebounce
	}
	st.Config = cfg
	st.Handler = app.New(cfg, app.Clients{DynamoDB: st.DynamoDB, SQS: st.SQS, Management: app.ManagementClient(awsCfg, st.ManagementURL)}, o.Log)
	st.Store = st.Handler.Inbox.(*dynamo.Store)
	if o.Configure != nil {
		o.Configure(st.Handler)
	}

	fns := app.Functions(st.Handler)
	st.Gateway, err = newGateway(tmpl, fns, o.Log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: st.Gateway, ReadHeaderTimeout: 10 * time.Second}
	st.wg.Go(func() { _ = srv.Serve(ln) })
	st.stops = append(st.stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st.Gateway.Close()
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
	hln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.HTTPAddr, err)
	}
	st.HTTPURL = "http://" + hln.Addr().String()
	hsrv := &http.Server{Handler: httpAPI, ReadHeaderTimeout: 10 * time.Second}
	st.wg.Go(func() { _ = hsrv.Serve(hln) })
	st.stops = append(st.stops, func() { _ = hsrv.Close() })

	runCtx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	for id, fn := range tmpl.Functions {
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
			p := &eventsource.Poller{Client: st.SQS, QueueURL: url, QueueARN: arn, Handler: h, WaitTime: o.PollWait, RetryAfter: o.RetryAfter, Log: o.Log}
			st.wg.Go(func() { p.Run(runCtx) })
			o.Progress("event source: %s -> %s", q, id)
		}
	}
	ok = true
	return st, nil
}

// newGateway builds the WebSocket API from the template's routes, each
// invoking the function the template integrates it with.
func newGateway(t *template.Template, fns map[string]any, log *slog.Logger) (*gateway.Gateway, error) {
	g := &gateway.Gateway{Routes: map[string]gateway.Route{}, Log: log}
	for key, r := range t.Routes {
		h, ok := fns[r.Function].(func(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error))
		if !ok {
			return nil, fmt.Errorf("route %s: function %s has no WebSocket handler", key, r.Function)
		}
		g.Routes[key] = gateway.Route{Handler: h, Responds: r.Responds}
		if r.Authorizer != "" {
			a, ok := fns[r.Authorizer].(func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error))
			if !ok {
				return nil, fmt.Errorf("route %s: authorizer %s has no authorizer handler", key, r.Authorizer)
			}
			g.Authorizer = a
		}
	}
	return g, nil
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
	if o.Redelivery == nil {
		r := im.DefaultRedelivery()
		o.Redelivery = &r
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return o
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
