// Package wakeapp gives the hints function its SNS client: only that
// function's main imports it, so no other binary links the SNS SDK
// (issue 13's 9 MB per function).
package wakeapp

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/signet-im/signet/shared/app"
	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/wake"
)

var _ handler.Waker = (*wake.SNS)(nil)

// Configure returns the hints function's configure step (app.Start): an
// SNS client from the environment Lambda sets (AWS_ENDPOINT_URL_SNS for a
// local SNS) wakes devices under the configured platform applications.
func Configure(getenv func(string) string) func(*handler.Deps) error {
	return func(d *handler.Deps) error {
		cfg, err := signetcfg.Load(getenv)
		if err != nil {
			return err
		}
		awsCfg, err := app.AWSConfig(getenv)
		if err != nil {
			return fmt.Errorf("aws config: %w", err)
		}
		d.Waker = Waker(awsCfg, app.Endpoint(getenv, "SNS"), cfg.PushApps)
		return nil
	}
}

// Waker is the SNS wake-up adapter over awsCfg (endpoint nil: SNS's own).
func Waker(awsCfg aws.Config, endpoint *string, apps map[string]string) *wake.SNS {
	return wake.New(SNSClient(awsCfg, endpoint), apps)
}

// SNSClient is an SNS client over awsCfg (endpoint nil: SNS's own).
func SNSClient(awsCfg aws.Config, endpoint *string) *sns.Client {
	return sns.NewFromConfig(awsCfg, func(o *sns.Options) { o.BaseEndpoint = endpoint })
}
