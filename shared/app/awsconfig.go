package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// lambdaAWS is the AWS configuration of a function: what Lambda puts in
// its environment — the region (AWS_REGION) and the execution role's
// credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
// valid for the life of the execution environment) — and, for local runs,
// endpoints (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, each falling
// back to AWS_ENDPOINT_URL). config.LoadDefaultConfig reads the same
// variables but also links the shared-config-file, SSO, STS and instance
// metadata providers a Lambda never uses: about 1.5 MB in every binary and
// their set-up at every cold start (issue 13).
type lambdaAWS struct {
	aws.Config
	dynamoDBEndpoint, sqsEndpoint string
}

func loadLambdaAWS(getenv func(string) string) (lambdaAWS, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		return lambdaAWS{}, fmt.Errorf("AWS_REGION is not set (Lambda sets it)")
	}
	var creds aws.CredentialsProvider = credentials.NewStaticCredentialsProvider(getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"))
	if getenv("AWS_ACCESS_KEY_ID") == "" || getenv("AWS_SECRET_ACCESS_KEY") == "" {
		// A function that makes no AWS call (the authorizer) runs without;
		// one that does fails that call, saying why.
		creds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{}, errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the execution role)")
		})
	}
	base := strings.TrimSpace(getenv("AWS_ENDPOINT_URL"))
	endpoint := func(service string) string {
		if v := strings.TrimSpace(getenv("AWS_ENDPOINT_URL_" + service)); v != "" {
			return v
		}
		return base
	}
	return lambdaAWS{
		Config: aws.Config{
			Region:      region,
			Credentials: aws.NewCredentialsCache(creds),
		},
		dynamoDBEndpoint: endpoint("DYNAMODB"),
		sqsEndpoint:      endpoint("SQS"),
	}, nil
}

// endpointOr returns a pointer to endpoint, or nil for the service's own.
func endpointOr(endpoint string) *string {
	if endpoint == "" {
		return nil
	}
	return aws.String(endpoint)
}

// AWSConfig is the AWS configuration of a function from the environment
// Lambda sets (for a function's own extra clients: the wake function's
// SNS), and Endpoint the endpoint override of service (e.g. "SNS":
// AWS_ENDPOINT_URL_SNS, then AWS_ENDPOINT_URL; nil for the service's own).
func AWSConfig(getenv func(string) string) (aws.Config, error) {
	c, err := loadLambdaAWS(getenv)
	return c.Config, err
}

// Endpoint is the endpoint override of service from the environment.
func Endpoint(getenv func(string) string, service string) *string {
	if v := strings.TrimSpace(getenv("AWS_ENDPOINT_URL_" + service)); v != "" {
		return aws.String(v)
	}
	return endpointOr(strings.TrimSpace(getenv("AWS_ENDPOINT_URL")))
}
