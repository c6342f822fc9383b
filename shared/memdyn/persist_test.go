package memdyn

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// sdk is an SDK client of s, served by a test server.
func sdk(t *testing.T, s *Server) *dynamodb.Client {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ts.URL) })
}

// Issue 14: every change answered is in the journal, so a server opened
// on it (after a kill: the first is never closed) has the same tables,
// TTL settings and items; a failed condition or transaction changes
// nothing there either.
func TestAJournaledServerComesBackWithEveryAnsweredWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dynamodb.jsonl")
	first, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db, ctx := sdk(t, first), context.Background()
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String("t"), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String("t"),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	put := func(sk, v string) {
		item := key("p", sk)
		item["v"] = s(v)
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	put("b", "2")
	put("gone", "x")
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key("p", "gone")}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key("p", "a"),
		UpdateExpression: aws.String("ADD c :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n("1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("t"), Item: key("p", "tx")}},
		{Update: &types.Update{TableName: aws.String("t"), Key: key("p", "b"), UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": s("3")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	// Refused: a failed condition and a cancelled transaction.
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key("p", "a"), ConditionExpression: aws.String("attribute_not_exists(pk)")}); err == nil {
		t.Fatal("a put over an existing item was not refused")
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("t"), Item: key("p", "never")}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("t"), Key: key("p", "a"), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}}); err == nil {
		t.Fatal("a transaction with a failed check was not cancelled")
	}
	if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"t": {
		{PutRequest: &types.PutRequest{Item: key("q", "1")}}, {DeleteRequest: &types.DeleteRequest{Key: key("p", "tx")}},
	}}}); err != nil {
		t.Fatal(err)
	}

	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	db2 := sdk(t, again)
	ttl, err := db2.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("t")})
	if err != nil || ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" {
		t.Fatalf("ttl %+v, %v", ttl, err)
	}
	want := map[string]string{"p/a": "1+1", "p/b": "3", "q/1": ""}
	got := map[string]string{}
	for _, pk := range []string{"p", "q"} {
		out, err := db2.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("t"), KeyConditionExpression: aws.String("pk = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": s(pk)}})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			v := ""
			if sv, ok := it["v"].(*types.AttributeValueMemberS); ok {
				v = sv.Value
			}
			if c, ok := it["c"].(*types.AttributeValueMemberN); ok {
				v += "+" + c.Value
			}
			got[pk+"/"+it["sk"].(*types.AttributeValueMemberS).Value] = v
		}
	}
	if len(got) != len(want) {
		t.Fatalf("items after reopen %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("items after reopen %v; want %v", got, want)
		}
	}
	if again.Items() != 3 {
		t.Fatalf("Items() = %d, want 3", again.Items())
	}
	// A table read back from the journal keeps journaling.
	if _, err := db2.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": s("q"), "sk": s("2")}}); err != nil {
		t.Fatal(err)
	}
	third, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.Items() != 4 {
		t.Fatalf("Items() = %d after a put to a reopened table, want 4", third.Items())
	}
	first.Close()
}
