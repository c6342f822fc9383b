// Package app builds handler.Deps from configuration and AWS SDK
// clients. Lambda mains call FromEnv; the local stack calls New with clients
// pointed at its emulators. Both run the same handler code.
package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/signet-im/signet/shared/app/sdkfree"
	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/push"
	"github.com/signet-im/signet/shared/queue"
	"github.com/signet-im/signet/shared/ratelimit"
)

// The adapters implement the handler's interfaces (a method missing would
// otherwise only turn a feature off where New type-asserts it).
var (
	_ handler.AlertStore     = (*dynamo.Store)(nil)
	_ handler.Escalations    = (*dynamo.Store)(nil)
	_ handler.Callbacks      = (*dynamo.Store)(nil)
	_ handler.WakeStore      = (*dynamo.Store)(nil)
	_ handler.CallbackSender = (*queue.Callbacks)(nil)
	_ handler.FanoutQueue    = (*queue.Fanout)(nil)
	_ handler.Retrier        = (*queue.Backoff)(nil)
	_ handler.OnlineIndex    = (*dynamo.Store)(nil)
)

// Clients are the AWS SDK clients a handler uses.
type Clients struct {
	DynamoDB   *dynamodb.Client
	SQS        *sqs.Client
	Management *apigatewaymanagementapi.Client
}

// New wires the handlers' dependencies over clients and configuration.
func New(cfg signetcfg.Config, c Clients, log *slog.Logger) *handler.Deps {
	store := dynamo.New(c.DynamoDB, dynamo.Tables{Connections: cfg.ConnectionsTable, Inbox: cfg.InboxTable, Messages: cfg.MessagesTable, Trace: cfg.TraceTable, Alerts: cfg.AlertsTable})
	store.Retention = cfg.InboxRetention
	store.HistoryRetention = cfg.HistoryRetention
	store.CompressBodies = cfg.CompressBodies
	store.SendMode = cfg.SendMode
	store.GroupReads = cfg.GroupReads
	h := sdkfree.Deps(cfg, log)
	h.Inbox, h.Connections, h.Tracer, h.Traces, h.Reads, h.Histories = store, store, store, store, store, store
	h.Groups, h.Fanouts, h.Index, h.Presences, h.Wakes, h.GroupLogs = store, store, store, store, store, store
	if cfg.GroupReads {
		h.Online = store
	}
	h.Limits = &ratelimit.Limiter{Limits: cfg.RateLimits, Counter: store, OnError: func(err error) {
		log.Warn("rate limit counter failed; frame admitted", "err", err.Error())
	}}
	if cfg.AlertsTable != "" {
		h.AlertStore = store // its Validator: openapi.Alerts, set by the alerts main
	}
	if c.SQS != nil {
		h.Scheduler = queue.NewRedelivery(c.SQS, cfg.RedeliveryQueueURL)
		h.CallbackQueues = queue.NewCallbacks(c.SQS)
		h.Retries = queue.NewBackoff(c.SQS, cfg.RedeliveryQueueURL, cfg.FanoutQueueURL, cfg.PresenceQueueURL)
		if cfg.FanoutQueueURL != "" {
			h.FanoutQueue = queue.NewFanout(c.SQS, cfg.FanoutQueueURL)
		}
		if cfg.PresenceQueueURL != "" {
			h.PresenceQueue = queue.NewFanout(c.SQS, cfg.PresenceQueueURL)
		}
		if cfg.OfflinePush && cfg.PresenceQueueURL != "" {
			h.WakeQueue = h.PresenceQueue // wake jobs share the hints' queue
		}
	}
	if c.Management != nil {
		gw := push.New(c.Management)
		h.Pusher, h.Disconnector = gw, gw
	}
	return h
}

// ManagementClient returns an @connections client for endpoint.
func ManagementClient(awsCfg aws.Config, endpoint string) *apigatewaymanagementapi.Client {
	return apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	})
}

// FromEnv reads the configuration from the environment, checks that the
// variables the function needs are set, and builds the handler with SDK
// clients from the environment Lambda sets (loadLambdaAWS; it honours
// AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SQS).
func FromEnv(ctx context.Context, getenv func(string) string, logicalID string) (*handler.Deps, error) {
	cfg, err := signetcfg.ForFunction(getenv, logicalID)
	if err != nil {
		return nil, err
	}
	awsCfg, err := loadLambdaAWS(getenv)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	c := Clients{
		DynamoDB: dynamodb.NewFromConfig(awsCfg.Config, func(o *dynamodb.Options) { o.BaseEndpoint = endpointOr(awsCfg.dynamoDBEndpoint) }),
		SQS:      sqs.NewFromConfig(awsCfg.Config, func(o *sqs.Options) { o.BaseEndpoint = endpointOr(awsCfg.sqsEndpoint) }),
	}
	if cfg.WebSocketEndpoint != "" {
		c.Management = ManagementClient(awsCfg.Config, cfg.WebSocketEndpoint)
	}
	return New(cfg, c, sdkfree.Logger(cfg)), nil
}
