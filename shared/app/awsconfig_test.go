package app

import (
	"context"
	"strings"
	"testing"
)

// The Lambda AWS configuration reads what Lambda sets, and the endpoint
// overrides the local runs use, service by service.
func TestLambdaAWSConfigReadsTheEnvironmentLambdaSets(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := loadLambdaAWS(env(nil)); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("no region: %v, want an error naming AWS_REGION", err)
	}
	c, err := loadLambdaAWS(env(map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t",
		"AWS_ENDPOINT_URL": "http://base", "AWS_ENDPOINT_URL_SQS": "http://sqs"}))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := c.Credentials.Retrieve(context.Background())
	if c.Region != "eu-west-1" || err != nil || creds.AccessKeyID != "id" || creds.SessionToken != "t" {
		t.Errorf("region %s, credentials %+v, %v", c.Region, creds, err)
	}
	if c.dynamoDBEndpoint != "http://base" || c.sqsEndpoint != "http://sqs" {
		t.Errorf("endpoints dynamodb %q, sqs %q; want the base URL and SQS's own", c.dynamoDBEndpoint, c.sqsEndpoint)
	}
	c, err = loadLambdaAWS(env(map[string]string{"AWS_REGION": "eu-west-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Credentials.Retrieve(context.Background()); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: %v at the first call, want an error naming AWS_ACCESS_KEY_ID", err)
	}
}
