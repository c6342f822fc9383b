package dynamo

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/signet-im/signet/shared/im"
)

// History returns up to limit messages of conversation c with after <
// convSeq < before (before 0: the newest), ascending, and whether older ones
// (still after `after`) exist.
func (st *Store) History(ctx context.Context, c im.ConversationID, after, before int64, limit int) ([]im.Message, bool, error) {
	if before == 0 {
		// The newest: every convSeq there can be (a 1:1 conversation has
		// no head item to read it from; the log items are its head).
		before = maxConvSeq + 1
	}
	if before <= after+1 {
		return nil, false, nil
	}
	q := st.logSpan(c, after+1, before-1)
	q.ScanIndexForward, q.Limit, q.ConsistentRead = aws.Bool(false), aws.Int32(int32(limit)), aws.Bool(true)
	res, err := st.db.Query(ctx, q)
	if err != nil {
		return nil, false, fmt.Errorf("history %s before %d: %w", c, before, err)
	}
	msgs := make([]im.Message, 0, len(res.Items))
	for _, it := range res.Items {
		m, err := messageFrom(c, it)
		if err != nil {
			return nil, false, fmt.Errorf("history %s: %w", c, err)
		}
		msgs = append(msgs, m)
	}
	slices.Reverse(msgs)
	more := len(msgs) > 0 && msgs[0].ConvSeq > after+1
	return msgs, more, nil
}
