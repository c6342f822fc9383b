package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Tables names the DynamoDB tables the store uses.
type Tables struct {
	Connections string
	Inbox       string
	Messages    string
	// Trace is the table of per-message trace events ("" disables tracing).
	Trace string
	// Alerts holds apps, Idempotency-Keys and alert records.
	Alerts string
}

// Store is the DynamoDB implementation of Signet's storage.
type Store struct {
	db     *dynamodb.Client
	tables Tables
	// Retention is how long inbox entries, dedup and idempotency items live
	// (DynamoDB TTL). Default 30 days.
	Retention time.Duration
	// HistoryRetention is how long conversation logs are kept (DynamoDB
	// TTL on the Messages table); 0 keeps them. Default 365 days.
	HistoryRetention time.Duration
	// CompressBodies stores message bodies deflated where that pays
	// (setBody); off, they are stored as sent. Reads take either form.
	CompressBodies bool
	// Now is the clock of decisions the store makes by itself (which inbox
	// entries may have been reaped: heads.go); time.Now when nil. Tests
	// that simulate days set it with the handlers' clock.
	Now func() time.Time
	// SendMode is how a 1:1 message is stored: SendClaim (New's default;
	// see sendClaimed) or SendTransaction (sendItems).
	SendMode string
	// MaxAttempts bounds the optimistic-concurrency retries of one send. Default 25.
	MaxAttempts int
	// SeenWindow bounds the log items a send with Draft.Seen reads looking
	// for an earlier try (newest first; DefaultSeenWindow): a retry is
	// recognised while fewer messages than this were logged in its
	// conversation after its first try, and no send reads more.
	SeenWindow int
	// ReadSpan bounds the inbox entries a read of alerts looks through
	// itself to name the alerts it covers (DefaultReadSpan when 0): those
	// below get their status callbacks from a job it enqueues
	// (ReadAlertsBefore).
	ReadSpan int64
	// GroupReads makes the groups created from now on read-diffused
	// (docs/proposal-group-read-diffusion.md): their messages stay in the
	// group's log, pushed to online members and pulled by the others, and
	// are never copied into inboxes. Groups keep the mode they were
	// created with.
	GroupReads bool

	// proofKey caches the key of group position proofs (proofkey.go).
	proofKey atomic.Pointer[[]byte]
	// ackPage is acksCovering's first page (the ackPage constant when 0;
	// the store suite makes it smaller to reach past it with fewer acks).
	ackPage int32
	// readCover is the convSeqs a read by convSeq alone looks through
	// (maxReadCover when 0; the store suite makes it smaller to reach past
	// it with a few dozen alerts instead of hundreds).
	readCover int64
}

// DefaultSeenWindow is Store.SeenWindow unless set: 1,000 log items of about
// 0.8 KB are about 200 strongly consistent read units, a send's own cost
// again at most, whatever seen a client claims.
const DefaultSeenWindow = 1000

// New returns a store over the given client and tables.
func New(db *dynamodb.Client, tables Tables) *Store {
	return &Store{db: db, tables: tables, Retention: 30 * 24 * time.Hour, HistoryRetention: 365 * 24 * time.Hour, CompressBodies: true, SendMode: SendClaim, MaxAttempts: 25, SeenWindow: DefaultSeenWindow}
}

// Attribute names shared by several item kinds.
const (
	attrUser  = "userId"
	attrSK    = "sk"
	attrConv  = "conversationId"
	attrConn  = "connectionId"
	attrSeq   = "seq"
	attrEpoch = "epoch"
	attrTTL   = "ttl"
	skHead    = "head"
	// A message as log items, inbox entries and idempotency items name it.
	attrMID  = "mid"  // message id
	attrCSeq = "cseq" // convSeq
	attrFrom = "from" // sender
	attrAt   = "at"   // sent at, Unix ms
	// attrTakenBy is, on a read-diffused group's log item, the connection
	// that took the message from its send's "sent" (Message.TakenBy).
	attrTakenBy = "oc"
)

// s and n build string and number attribute values.
func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// Sort keys: an inbox entry, a conversation log item, a dedup item, an
// idempotency item, a device cursor.
func entrySK(seq int64) string         { return fmt.Sprintf("e#%016d", seq) }
func convSK(seq int64) string          { return fmt.Sprintf("s#%016d", seq) }
func dedupSK(id im.MessageID) string   { return "m#" + string(id) }
func idemSK(clientMsgID string) string { return "i#" + clientMsgID }
func deviceSK(d im.DeviceID) string    { return "c#" + string(d) }

// maxConvSeq is the highest convSeq convSK orders correctly.
const maxConvSeq = 9_999_999_999_999_999

// inboxKey is the key of user u's inbox item sk.
func inboxKey(u im.UserID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrUser: s(string(u)), attrSK: s(sk)}
}

// convKey is the key of conversation c's item sk in the Messages table.
func convKey(c im.ConversationID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrConv: s(string(c)), attrSK: s(sk)}
}

// getS, getN and getB read typed attributes, tolerating absence.
func getS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// getN reads the number attribute name of item (0 when absent).
func getN(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(v.Value, 10, 64)
		return i
	}
	return 0
}

// now is the store's clock (Now, or the time).
func (st *Store) now() time.Time {
	if st.Now != nil {
		return st.Now()
	}
	return time.Now()
}

// ttlAt returns the TTL attribute value for an item written at now.
func (st *Store) ttlAt(now time.Time) types.AttributeValue {
	return n(now.Add(st.Retention).Unix())
}

// inboxBatchGet reads inbox items by key, strongly consistent (batchGet).
func (st *Store) inboxBatchGet(ctx context.Context, keys []map[string]types.AttributeValue, visit func(map[string]types.AttributeValue)) error {
	return st.batchGet(ctx, st.tables.Inbox, keys, true, visit)
}

// logPut puts message m as its conversation's log item — the one copy of
// its body (messageFrom reads it back) — with the history retention's TTL,
// on condition that its convSeq is free. cmid is the sender's clientMsgId
// ("" for none).
func (st *Store) logPut(m im.Message, cmid string, now time.Time) *types.Put {
	item := map[string]types.AttributeValue{
		attrConv: s(string(m.Conversation)), attrSK: s(convSK(m.ConvSeq)),
		attrMID: s(string(m.ID)), attrCSeq: n(m.ConvSeq), attrFrom: s(string(m.From)),
		attrAt: n(m.SentAt.UnixMilli()),
	}
	setBody(item, m.Body, st.CompressBodies)
	if cmid != "" {
		item["cmid"] = s(cmid)
	}
	if m.TakenBy != "" {
		item[attrTakenBy] = s(string(m.TakenBy))
	}
	if st.HistoryRetention > 0 {
		item[attrTTL] = n(now.Add(st.HistoryRetention).Unix())
	}
	return &types.Put{
		TableName: aws.String(st.tables.Messages), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	}
}

// sleepJitter waits a random time that grows with attempt (full jitter,
// capped at 100 ms) or until ctx ends.
func sleepJitter(ctx context.Context, attempt int) error {
	ceiling := min(time.Duration(1<<min(attempt, 7))*time.Millisecond, 100*time.Millisecond)
	t := time.NewTimer(rand.N(ceiling) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// txFailure is why a TransactWriteItems call failed.
type txFailure int

const (
	txOther     txFailure = iota // not a cancellation worth retrying: report it
	txCondition                  // the condition of the item asked about failed
	txRace                       // another item's condition failed, or a concurrent transaction or throttling got in the way: read again and retry
)

// classifyTx reads why a transaction failed. at is the position of the
// one item whose failed condition means something of its own (an
// idempotency or dedup item: the write was done before), -1 for none.
func classifyTx(err error, at int) txFailure {
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok {
		if _, ok := errors.AsType[*types.TransactionInProgressException](err); ok {
			return txRace
		}
		return txOther
	}
	race := false
	for i, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			if i == at {
				return txCondition
			}
			race = true
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded":
			race = true
		}
	}
	if race {
		return txRace
	}
	return txOther
}

// failedAt reports whether err is a cancelled transaction whose item at
// position at failed its condition.
func failedAt(err error, at int) bool {
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	return ok && at < len(tce.CancellationReasons) && aws.ToString(tce.CancellationReasons[at].Code) == "ConditionalCheckFailed"
}

// isConditionFailed reports a failed condition on a single-item write.
func isConditionFailed(err error) bool {
	_, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	return ok
}

// headUpdate advances a head item (inbox or conversation) from old to old+1,
// conditionally on old, creating an epoch when the head is new.
func headUpdate(table string, key map[string]types.AttributeValue, old int64, epoch string) *types.Update {
	cond := "#seq = :old"
	values := map[string]types.AttributeValue{":new": n(old + 1), ":epoch": s(epoch), ":old": n(old)}
	if old == 0 {
		// An inbox head is created (seq 0, with its epoch) the first time
		// the inbox is read; a conversation head only by its first message.
		cond = "attribute_not_exists(#seq) OR #seq = :old"
	}
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       key,
		UpdateExpression:          aws.String("SET #seq = :new, #epoch = if_not_exists(#epoch, :epoch)"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#seq": attrSeq, "#epoch": attrEpoch},
		ExpressionAttributeValues: values,
	}
}

// newEpoch returns a fresh random epoch for a new sequence.
func newEpoch(now time.Time) string {
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}
