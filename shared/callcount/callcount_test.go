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
		if got := writeUnits(tc.in); got != tc.want {
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
		if got := readUnits(tc.in, tc.out); got != tc.expect {
			t.Errorf("%s: %v RRU, want %v", tc.name, got, tc.expect)
		}
	}
}
