package dynamo

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// The key of group position proofs (im.GroupProof) is one item of the
// Connections table, in a partition no user has ('#' is not in user ids):
// 32 random bytes, put once by the first $connect of a deployment that
// keeps read-diffused groups (EnsureGroupProofKey, a conditional put: of
// two at once one wins and both use it), read by the functions that sign
// and check proofs, and kept by each process once read. It never changes:
// deleting it makes every proof signed so far fail, which costs the acks
// that bring them a read each, nothing else.

// proofKeyItem is the key of the proof key's item.
func proofKeyItem() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrUser: s("k#group-proof"), attrConn: s("key")}
}

// GroupProofKey returns the key of group position proofs, nil while there
// is none (no $connect has made it yet).
func (st *Store) GroupProofKey(ctx context.Context) ([]byte, error) {
	if k := st.proofKey.Load(); k != nil {
		return *k, nil
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Connections), Key: proofKeyItem(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("group proof key: %w", err)
	}
	b, _ := out.Item["key"].(*types.AttributeValueMemberB)
	if b == nil || len(b.Value) != im.GroupProofKeySize {
		return nil, nil
	}
	st.proofKey.Store(&b.Value)
	return b.Value, nil
}

// EnsureGroupProofKey makes the key of group position proofs if there is
// none yet.
func (st *Store) EnsureGroupProofKey(ctx context.Context) error {
	if k, err := st.GroupProofKey(ctx); err != nil || k != nil {
		return err
	}
	key := make([]byte, im.GroupProofKeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	it := proofKeyItem()
	it["key"] = &types.AttributeValueMemberB{Value: key}
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.tables.Connections), Item: it,
		ConditionExpression: aws.String("attribute_not_exists(#u)"), ExpressionAttributeNames: map[string]string{"#u": attrUser},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("make the group proof key: %w", err)
	}
	_, err = st.GroupProofKey(ctx) // this one, or the one that won
	return err
}
