package dynamo

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// batchGet takes any number of keys (BatchGetItem takes 100, and refuses
// a duplicate), and queryAll reads every page.
func TestBatchGetAndQueryAllReadEverything(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx := context.Background()
	var keys []map[string]types.AttributeValue
	for i := range 250 {
		item := inboxKey("bob", fmt.Sprintf("x#%03d", i))
		item["body"] = s(string(make([]byte, 5000))) // 1.25 MB in all: past one 1 MB Query page
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: item}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, inboxKey("bob", fmt.Sprintf("x#%03d", i)), inboxKey("bob", fmt.Sprintf("x#%03d", i)))
	}
	keys = append(keys, inboxKey("bob", "missing"))
	got := map[string]int{}
	if err := st.batchGet(ctx, st.tables.Inbox, keys, true, func(it map[string]types.AttributeValue) { got[getS(it, attrSK)]++ }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 250 {
		t.Fatalf("batchGet found %d distinct items, want 250", len(got))
	}
	for sk, n := range got {
		if n != 1 {
			t.Fatalf("%s read %d times", sk, n)
		}
	}
	count := 0
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :x)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s("bob"), ":x": s("x#")},
	}, func(map[string]types.AttributeValue) { count++ })
	if err != nil || count != 250 {
		t.Fatalf("queryAll read %d items, %v; want 250", count, err)
	}
}
