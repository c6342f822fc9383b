package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/provision"
	"github.com/signet-im/signet/shared/template"
)

// envLookup reads the environment (a variable, so tests can replace it).
func envLookup(name string) string { return os.Getenv(name) }

// runProvision is `signet provision`: create the template's tables and
// queues at a DynamoDB- and SQS-compatible endpoint (LocalStack, emulators).
func runProvision(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet provision", flag.ContinueOnError)
	endpoint := fs.String("endpoint", os.Getenv("AWS_ENDPOINT_URL"), "endpoint for both DynamoDB and SQS (env AWS_ENDPOINT_URL), e.g. http://localhost:4566")
	ddbEndpoint := fs.String("dynamodb-endpoint", os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "DynamoDB endpoint (overrides --endpoint)")
	sqsEndpoint := fs.String("sqs-endpoint", os.Getenv("AWS_ENDPOINT_URL_SQS"), "SQS endpoint (overrides --endpoint)")
	prefix := fs.String("prefix", "signet-local", "name prefix: tables and queues are named <prefix>-<LogicalId>")
	region := fs.String("region", envOr("AWS_REGION", "us-east-1"), "region (env AWS_REGION)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet provision --endpoint URL [flags]

Creates every DynamoDB table and SQS queue of template.yaml at the endpoint
(LocalStack, or any DynamoDB/SQS-compatible server). Idempotent: existing
tables and queues are kept. Credentials come from the usual AWS variables;
without any, dummy ones are used (emulators accept them).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	ddbURL, sqsURL := *ddbEndpoint, *sqsEndpoint
	if ddbURL == "" {
		ddbURL = *endpoint
	}
	if sqsURL == "" {
		sqsURL = *endpoint
	}
	if ddbURL == "" || sqsURL == "" {
		return fmt.Errorf("%w: give --endpoint (or both --dynamodb-endpoint and --sqs-endpoint)", errUsage)
	}
	var opts []func(*awsconfig.LoadOptions) error
	opts = append(opts, awsconfig.WithRegion(*region))
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" && os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") == "" {
		// No credentials configured: emulators accept any, so don't probe
		// the instance metadata service for some.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return err
	}
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ddbURL) })
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(sqsURL) })
	fmt.Fprintf(stdout, "Provisioning template.yaml resources with prefix %q\n", *prefix)
	res, err := provision.Apply(ctx, tmpl, db, q, *prefix, func(format string, a ...any) { fmt.Fprintf(stdout, "  "+format+"\n", a...) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Done: %d tables, %d queues.\n", len(res.Tables), len(res.Queues))
	return nil
}
