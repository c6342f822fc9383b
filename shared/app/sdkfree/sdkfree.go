// Package sdkfree builds and starts the functions that call no AWS service
// — the $connect authorizer and $default — from their configuration
// alone, without SDK clients, so that their binaries link no SDK service
// (issue 13: the authorizer runs on every $connect). app.New starts from
// the same Deps and adds the stores, queues and @connections.
package sdkfree

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
)

// Deps are the handlers' dependencies that come from configuration alone.
func Deps(cfg config.Config, log *slog.Logger) *handler.Deps {
	d := &handler.Deps{
		MemberLimit:      cfg.MemberLimit,
		MaxConnections:   cfg.MaxConnections,
		MaxDevices:       cfg.MaxDevices,
		FanoutBatch:      cfg.FanoutBatch,
		PresenceStale:    cfg.PresenceStale,
		PresenceDebounce: cfg.PresenceDebounce,
		Secret:           []byte(cfg.JWTSecret),
		TokenPolicy:      auth.Policy{Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, MaxLifetime: cfg.MaxTokenLifetime},
		Redelivery:       cfg.Redelivery,
		SyncInterval:     cfg.SyncInterval,
		TraceSample:      cfg.TraceSample,
		CallbackBackoff:  cfg.CallbackBackoff,
		WakeWindow:       cfg.WakeWindow,
		WebhookPrivate:   cfg.WebhookAllowPrivate,
		Log:              log,
	}
	if cfg.OIDCIssuer != "" {
		d.OIDC = &auth.OIDC{Issuer: cfg.OIDCIssuer, Audience: cfg.OIDCAudience, UserClaim: cfg.OIDCUserClaim, JWKSURL: cfg.OIDCJWKSURL,
			Policy: auth.Policy{MaxLifetime: cfg.MaxTokenLifetime}}
	}
	for _, p := range []string{im.PlatformAPNS, im.PlatformAPNSSandbox, im.PlatformFCM} {
		if cfg.PushApps[p] != "" {
			d.PushPlatforms = append(d.PushPlatforms, p)
		}
	}
	if cfg.AdminKey != "" {
		d.AdminKeyHash = im.HashSecret(cfg.AdminKey)
	}
	return d
}

// Logger is a Lambda function's logger: JSON lines on stdout (which
// CloudWatch collects) at the configured level.
func Logger(cfg config.Config) *slog.Logger {
	return slog.New(slog.NewJSONHandler(lambdaStdout{}, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

// lambdaStdout is where Lambda functions log: stdout, looked up at each
// write.
type lambdaStdout struct{}

// Write writes p to stdout.
func (lambdaStdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }

// Start is the whole main of a function that calls no AWS service: it
// reads the configuration of the template function logicalID and starts
// the Lambda runtime with the handler method method picks. A
// configuration error exits the process before the runtime starts, as
// app.Start does.
func Start(logicalID string, method func(*handler.Deps) any) {
	cfg, err := config.ForFunction(os.Getenv, logicalID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", logicalID, err)
		os.Exit(1)
	}
	lambda.Start(method(Deps(cfg, Logger(cfg))))
}
