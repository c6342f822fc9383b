package callcount

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestWriteUnits(t *testing.T) {
	t.Parallel()
	small := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u"}}
	big := map[string]types.AttributeValue{"body": &types.AttributeValueMemberS{Value: strings.Repeat("x", 1500)}}
	cases := []struct {
		name string
		in   any
		want int
	}{
		{"small put", &dynamodb.PutItemInput{Item: small}, 1},
		{"1.5 KB put", &dynamodb.PutItemInput{Item: big}, 2},
		{"transaction doubles", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String("t"), Item: big}},
			{Update: &types.Update{Key: small}},
		}}, 2*2 + 2*1},
		{"reads cost no write units", &dynamodb.GetItemInput{Key: small}, 0},
	}
	for _, tc := range cases {
		if got := sumWrite(tc.in); got != tc.want {
			t.Errorf("%s: %d units, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReadUnits(t *testing.T) {
	big := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u#alice"}, "body": &types.AttributeValueMemberS{Value: strings.Repeat("x", 5000)}}
	small := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u#alice"}}
	for _, tc := range []struct {
		name   string
		in     any
		out    any
		expect float64
	}{
		{"get, eventually consistent", &dynamodb.GetItemInput{}, &dynamodb.GetItemOutput{Item: small}, 0.5},
		{"get, strongly consistent, 5 KB", &dynamodb.GetItemInput{ConsistentRead: aws.Bool(true)}, &dynamodb.GetItemOutput{Item: big}, 2},
		{"get of nothing still costs", &dynamodb.GetItemInput{ConsistentRead: aws.Bool(true)}, &dynamodb.GetItemOutput{}, 1},
		{"query sums the page", &dynamodb.QueryInput{ConsistentRead: aws.Bool(true)}, &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{small, small, small}}, 1},
		{"query of 5 KB, eventually consistent", &dynamodb.QueryInput{}, &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{big}}, 1},
		{"transactional get doubles", &dynamodb.TransactGetItemsInput{}, &dynamodb.TransactGetItemsOutput{Responses: []types.ItemResponse{{Item: small}, {Item: big}}}, 2 + 4},
		{"a write reads nothing", &dynamodb.PutItemInput{}, &dynamodb.PutItemOutput{}, 0},
	} {
		if got := sumRead(tc.in, tc.out); got != tc.expect {
			t.Errorf("%s: %v RRU, want %v", tc.name, got, tc.expect)
		}
	}
}

func sumWrite(params any) int {
	n := 0
	writeUnits(params, func(_ string, wcu int) { n += wcu })
	return n
}

func sumRead(params, result any) float64 {
	n := 0.0
	readUnits(params, result, func(_ string, rru float64) { n += rru })
	return n
}

// Units are attributed to the table they were spent on: a table of another
// class (Standard-IA) is priced apart.
func TestUnitsByTable(t *testing.T) {
	t.Parallel()
	small := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u"}}
	big := map[string]types.AttributeValue{"body": &types.AttributeValueMemberS{Value: strings.Repeat("x", 1500)}}
	wcu := map[string]int{}
	writeUnits(&dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("log"), Item: big}},
		{Update: &types.Update{TableName: aws.String("inbox"), Key: small}},
		{Put: &types.Put{TableName: aws.String("inbox"), Item: small}},
	}}, func(table string, n int) { wcu[table] += n })
	if wcu["log"] != 4 || wcu["inbox"] != 4 || len(wcu) != 2 {
		t.Errorf("write units by table %v, want log 4, inbox 4", wcu)
	}
	rru := map[string]float64{}
	readUnits(&dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"inbox": {ConsistentRead: aws.Bool(true)}}},
		&dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{"log": {big, big}, "inbox": {small}}},
		func(table string, n float64) { rru[table] += n })
	if rru["log"] != 1 || rru["inbox"] != 1 {
		t.Errorf("read units by table %v, want log 1 (two eventually consistent), inbox 1", rru)
	}
}

func TestUnitsByOperationAndTable(t *testing.T) {
	t.Parallel()
	item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u"}}
	c := New()
	before := c.Snapshot()
	c.record("DynamoDB", "PutItem", &dynamodb.PutItemInput{TableName: aws.String("inbox"), Item: item})
	c.record("DynamoDB", "PutItem", &dynamodb.PutItemInput{TableName: aws.String("inbox"), Item: item})
	c.record("DynamoDB", "TransactWriteItems", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("inbox"), Item: item}},
	}})
	c.recordRead("GetItem", &dynamodb.GetItemInput{TableName: aws.String("log"), ConsistentRead: aws.Bool(true)},
		&dynamodb.GetItemOutput{Item: item})
	got := c.Snapshot().Sub(before)
	if got.WCUByCall["PutItem inbox"] != 2 || got.WCUByCall["TransactWriteItems inbox"] != 2 || len(got.WCUByCall) != 2 {
		t.Errorf("write units by call %v, want PutItem inbox 2, TransactWriteItems inbox 2", got.WCUByCall)
	}
	if got.RRUByCall["GetItem log"] != 1 || len(got.RRUByCall) != 1 {
		t.Errorf("read units by call %v, want GetItem log 1", got.RRUByCall)
	}
	if got.Calls["DynamoDB.PutItem"] != 2 || got.WCU != 4 {
		t.Errorf("calls %v and %d write units, want 2 PutItems and 4", got.Calls, got.WCU)
	}
}

// An UpdateItem is billed by the larger of the item before and after:
// where it returns the item as it was (ALL_OLD), that size counts.
func TestAnUpdateReturningTheOldItemCountsItsSize(t *testing.T) {
	t.Parallel()
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u"}}
	vals := map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "7"}}
	old := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "u"}, "acks": &types.AttributeValueMemberS{Value: strings.Repeat("x", 1100)}}
	for _, tc := range []struct {
		name string
		in   *dynamodb.UpdateItemInput
		out  *dynamodb.UpdateItemOutput
		want int
	}{
		{"small item", &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllOld},
			&dynamodb.UpdateItemOutput{Attributes: key}, 1},
		{"1.1 KB item", &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllOld},
			&dynamodb.UpdateItemOutput{Attributes: old}, 2},
		{"not returned: key and values", &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: key, ExpressionAttributeValues: vals},
			&dynamodb.UpdateItemOutput{}, 1},
	} {
		c := New()
		c.record("DynamoDB", "UpdateItem", tc.in)
		c.recordUpdatedItem("UpdateItem", tc.in, tc.out)
		if got := c.Snapshot().WCU; got != tc.want {
			t.Errorf("%s: %d write units, want %d", tc.name, got, tc.want)
		}
	}
}
