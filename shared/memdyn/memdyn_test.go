package memdyn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func client(t *testing.T) *dynamodb.Client {
	t.Helper()
	return clientOf(t, New())
}

// clientOf serves srv and returns a client with table "t" (pk, sk) made.
func clientOf(t *testing.T, srv *Server) *dynamodb.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	endpoint := "http://" + ln.Addr().String()
	db := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	_, err = db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: aws.String("t"), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
}

func TestQueryReadsOnlyItsPartitionRangeWithPaging(t *testing.T) {
	t.Parallel()
	db, ctx := client(t), context.Background()
	for _, pk := range []string{"a", "b", "c"} {
		for i := range 30 {
			item := key(pk, fmt.Sprintf("e#%03d", i))
			item["v"] = n(fmt.Sprint(i))
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key(pk, "head")}); err != nil {
			t.Fatal(err)
		}
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String("t"), KeyConditionExpression: aws.String("pk = :p AND sk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("b"), ":lo": s("e#005"), ":hi": s("e#024")},
		Limit:                     aws.Int32(7),
	}
	var got []string
	pages := 0
	for p := dynamodb.NewQueryPaginator(db, in); p.HasMorePages(); pages++ {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			got = append(got, it["sk"].(*types.AttributeValueMemberS).Value)
		}
	}
	if len(got) != 20 || got[0] != "e#005" || got[19] != "e#024" || pages != 3 {
		t.Fatalf("%d pages: %v", pages, got)
	}
	// Descending, begins_with, a filter and a projection.
	out, err := db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String("t"), KeyConditionExpression: aws.String("#p = :p AND begins_with(#s, :e)"),
		FilterExpression: aws.String("v >= :min"), ProjectionExpression: aws.String("#s"),
		ExpressionAttributeNames:  map[string]string{"#p": "pk", "#s": "sk"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("c"), ":e": s("e#"), ":min": n("27")},
		ScanIndexForward:          aws.Bool(false),
	})
	if err != nil || len(out.Items) != 3 || out.ScannedCount != 30 || out.Items[0]["sk"].(*types.AttributeValueMemberS).Value != "e#029" || out.Items[0]["v"] != nil {
		t.Fatalf("descending query: %+v, %v", out, err)
	}
}

func TestConditionsUpdatesAndTransactionsAsDynamoDB(t *testing.T) {
	t.Parallel()
	db, ctx := client(t), context.Background()
	// if_not_exists, ADD and UPDATED_OLD.
	up := func(expr string, cond *string, vals map[string]types.AttributeValue) (*dynamodb.UpdateItemOutput, error) {
		return db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key("u", "head"), UpdateExpression: aws.String(expr),
			ConditionExpression: cond, ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueUpdatedOld})
	}
	if _, err := up("SET seq = if_not_exists(seq, :z) ADD n :one", nil, map[string]types.AttributeValue{":z": n("0"), ":one": n("1")}); err != nil {
		t.Fatal(err)
	}
	out, err := up("SET seq = seq + :one", aws.String("seq = :z"), map[string]types.AttributeValue{":z": n("0"), ":one": n("1")})
	if err != nil || out.Attributes["seq"].(*types.AttributeValueMemberN).Value != "0" {
		t.Fatalf("UPDATED_OLD: %+v, %v", out, err)
	}
	_, err = up("SET seq = :z", aws.String("seq = :z"), map[string]types.AttributeValue{":z": n("0")})
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); !ok {
		t.Fatalf("failed condition: %v", err)
	}
	// Every operand reads the item as it was before the update, and REMOVE
	// of several list elements names them by their indexes before it.
	if _, err := up("SET a = :l, b = :two", nil, map[string]types.AttributeValue{":two": n("2"),
		":l": &types.AttributeValueMemberL{Value: []types.AttributeValue{n("10"), n("11"), n("12"), n("13")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := up("SET b = seq, seq = b REMOVE a[0], a[2]", nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key("u", "head")})
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	for _, v := range got.Item["a"].(*types.AttributeValueMemberL).Value {
		list = append(list, v.(*types.AttributeValueMemberN).Value)
	}
	if strings.Join(list, ",") != "11,13" || got.Item["b"].(*types.AttributeValueMemberN).Value != "1" || got.Item["seq"].(*types.AttributeValueMemberN).Value != "2" {
		t.Fatalf("after SET b = seq, seq = b REMOVE a[0], a[2]: a=%v b=%v seq=%v (want a=[11 13], b=1, seq=2)", list, got.Item["b"], got.Item["seq"])
	}
	// Unused values are refused, as DynamoDB refuses them.
	_, err = up("SET seq = :z", nil, map[string]types.AttributeValue{":z": n("0"), ":extra": n("1")})
	if err == nil {
		t.Fatal("an unused expression attribute value was accepted")
	}
	// A cancelled transaction changes nothing and names the failed action.
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("t"), Item: key("u", "e#1")}},
		{Update: &types.Update{TableName: aws.String("t"), Key: key("u", "head"), UpdateExpression: aws.String("SET seq = :n"),
			ConditionExpression: aws.String("seq = :old"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": n("5"), ":old": n("4")}}},
	}})
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok || len(tce.CancellationReasons) != 2 || aws.ToString(tce.CancellationReasons[0].Code) != "None" || aws.ToString(tce.CancellationReasons[1].Code) != "ConditionalCheckFailed" {
		t.Fatalf("cancelled transaction: %v", err)
	}
	if got, _ := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key("u", "e#1")}); got.Item != nil {
		t.Fatal("a cancelled transaction wrote its put")
	}
	// Two actions on one item are refused.
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("t"), Item: key("u", "e#1")}},
		{Delete: &types.Delete{TableName: aws.String("t"), Key: key("u", "e#1")}},
	}})
	if err == nil {
		t.Fatal("two actions on one item were accepted")
	}
	// Keys must match the schema; key attributes cannot be updated.
	if _, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": s("u")}}); err == nil {
		t.Fatal("a key without its sort key was accepted")
	}
	if _, err := up("SET sk = :z", nil, map[string]types.AttributeValue{":z": s("x")}); err == nil {
		t.Fatal("a key attribute was updated")
	}
}

// Scan reads every partition a page at a time; the filter applies after
// the limit (a page may hold fewer items than it read), as in DynamoDB.
func TestScanPagesThroughEveryPartitionWithAFilter(t *testing.T) {
	t.Parallel()
	db, ctx := client(t), context.Background()
	for _, pk := range []string{"a", "b", "c"} {
		for i := range 5 {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key(pk, fmt.Sprintf("e#%d", i))}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key(pk, "head")}); err != nil {
			t.Fatal(err)
		}
	}
	in := &dynamodb.ScanInput{TableName: aws.String("t"), FilterExpression: aws.String("sk = :h"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": s("head")}, Limit: aws.Int32(4)}
	var heads []string
	pages, scanned := 0, 0
	p := dynamodb.NewScanPaginator(db, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		scanned += int(out.ScannedCount)
		for _, it := range out.Items {
			heads = append(heads, it["pk"].(*types.AttributeValueMemberS).Value)
		}
	}
	if fmt.Sprint(heads) != "[a b c]" || scanned != 18 || pages < 5 {
		t.Fatalf("heads %v, scanned %d in %d pages; want [a b c], 18, at least 5 pages of 4", heads, scanned, pages)
	}
}

// A stale server answers eventually consistent reads, one in two, from a
// replica lag behind (DynamoDB: such a read "might not reflect the results
// of a recently completed write"); strongly consistent reads and writes'
// conditions always see the latest write, and once lag has passed every
// read does.
func TestAStaleServerAnswersEventuallyConsistentReadsFromALaggingReplica(t *testing.T) {
	t.Parallel()
	const lag = 300 * time.Millisecond
	db, ctx := clientOf(t, NewStale(lag, 1)), context.Background()
	put := func(sk, v string) {
		t.Helper()
		item := key("a", sk)
		item["v"] = s(v)
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(sk string, consistent bool) string {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key("a", sk), ConsistentRead: aws.Bool(consistent)})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := out.Item["v"].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return "none"
	}
	query := func(consistent bool) int {
		t.Helper()
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("t"), KeyConditionExpression: aws.String("pk = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": s("a")}, ConsistentRead: aws.Bool(consistent)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Items)
	}
	put("x", "1")
	time.Sleep(lag + 50*time.Millisecond)
	start := time.Now()
	put("x", "2")
	put("y", "1")
	seen := map[string]int{}
	counts := map[int]int{}
	for range 40 {
		if got := get("x", true); got != "2" {
			t.Fatalf("a strongly consistent read of x: %s, want 2", got)
		}
		if got := query(true); got != 2 {
			t.Fatalf("a strongly consistent query: %d items, want 2", got)
		}
		seen[get("x", false)]++
		counts[query(false)]++
	}
	if time.Since(start) < lag && (seen["1"] == 0 || seen["2"] == 0 || counts[1] == 0 || counts[2] == 0) {
		t.Errorf("eventually consistent reads within the lag: x %v, query sizes %v; want both the old and the new", seen, counts)
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: key("a", "x"),
		ConditionExpression: aws.String("v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": s("2")}}); err != nil {
		t.Fatalf("a condition on the latest write: %v", err)
	}
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key("a", "y")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag + 50*time.Millisecond)
	for range 10 {
		if got := get("x", false); got != "none" {
			t.Fatalf("an eventually consistent read after the lag: x is %s, want none (the last put has no v)", got)
		}
		if got := query(false); got != 1 {
			t.Fatalf("an eventually consistent query after the lag: %d items, want 1 (y deleted)", got)
		}
	}
}
