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
