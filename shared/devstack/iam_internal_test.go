package devstack

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/signet-im/signet/shared/iam"
)

// A function's role is enforced on the wire, for every table of a
// transaction and every queue and connection, with the error AWS sends;
// a denied request never reaches the emulator.
func TestFunctionRoleIsEnforcedOnEveryCallAsAWSWould(t *testing.T) {
	t.Parallel()
	ddbURL, stop, err := StartMinidyn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sqsURL, err := StartGoaws()
	if err != nil {
		t.Fatal(err)
	}
	a := arns{partition: "aws", region: "us-east-1", account: accountID, apiID: "api"}
	policy := iam.Policy{Statements: []iam.Statement{
		{Effect: iam.Allow, Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem"}, Resource: []string{a.table("allowed")}},
		{Effect: iam.Allow, Actions: []string{"sqs:SendMessage"}, Resource: []string{a.queue("iam-test-allowed")}},
		{Effect: iam.Allow, Actions: []string{"execute-api:ManageConnections"}, Resource: []string{a.connection("prod", "POST", "*")}},
	}}
	var denied []string
	enf := &enforcer{function: "TestFunction", principal: "arn:aws:sts::000000000000:assumed-role/TestRole/TestFunction", policy: policy, arn: a,
		next: http.DefaultTransport, denied: func(fn string, r iam.Request) { denied = append(denied, r.String()) }}
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient: &http.Client{Transport: enf}, RetryMaxAttempts: 1}
	admin := dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: cfg.Credentials, BaseEndpoint: aws.String(ddbURL)})
	ctx := context.Background()
	for _, name := range []string{"allowed", "other"} {
		_, err := admin.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ddbURL) })
	item := func(v string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: v}}
	}
	wantDenied := func(what string, err error) {
		t.Helper()
		var api smithy.APIError
		// SQS's JSON protocol keeps the query protocol's code (AccessDenied,
		// from x-amzn-query-error) for the SDK; the others say AccessDeniedException.
		if !errors.As(err, &api) || (api.ErrorCode() != "AccessDeniedException" && api.ErrorCode() != "AccessDenied") ||
			!strings.Contains(api.ErrorMessage(), "is not authorized to perform") {
			t.Fatalf("%s: err = %v, want AccessDeniedException", what, err)
		}
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("allowed"), Item: item("a")}); err != nil {
		t.Fatalf("allowed PutItem: %v", err)
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("allowed"), Key: item("a"),
		UpdateExpression: aws.String("SET x = :x"), ExpressionAttributeValues: map[string]types.AttributeValue{":x": &types.AttributeValueMemberN{Value: "1"}}})
	wantDenied("UpdateItem (action not granted)", err)
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("other"), Item: item("b")})
	wantDenied("PutItem on another table", err)
	// A transaction is authorized item by item: one denied item refuses it whole.
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("allowed"), Item: item("t1")}},
		{Put: &types.Put{TableName: aws.String("other"), Item: item("t2")}},
	}})
	wantDenied("transaction with an item on another table", err)
	for _, check := range []struct{ table, key string }{{"other", "b"}, {"allowed", "t1"}} {
		out, err := admin.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(check.table), Key: item(check.key)})
		if err != nil || out.Item != nil {
			t.Fatalf("a denied write reached the emulator: %s/%s = %v (%v)", check.table, check.key, out.Item, err)
		}
	}

	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(sqsURL) })
	adminQ := sqs.New(sqs.Options{Region: "us-east-1", Credentials: cfg.Credentials, BaseEndpoint: aws.String(sqsURL)})
	var urls []string
	for _, name := range []string{"iam-test-allowed", "iam-test-other"} {
		out, err := adminQ.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, aws.ToString(out.QueueUrl))
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[0]), MessageBody: aws.String("x")}); err != nil {
		t.Fatalf("allowed SendMessage: %v", err)
	}
	_, err = q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[1]), MessageBody: aws.String("x")})
	wantDenied("SendMessage to another queue", err)
	_, err = q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[0])})
	wantDenied("ReceiveMessage (not granted)", err)

	mgmt := apigatewaymanagementapi.NewFromConfig(cfg, func(o *apigatewaymanagementapi.Options) { o.BaseEndpoint = aws.String("http://127.0.0.1:1/prod") })
	_, err = mgmt.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String("abc")})
	wantDenied("DeleteConnection (only POST granted)", err)

	if len(denied) != 6 {
		t.Fatalf("recorded denials = %d, want 6:\n%s", len(denied), strings.Join(denied, "\n"))
	}
}
