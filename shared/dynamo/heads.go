package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Inbox heads. An inbox entry is its own sequence head (issue 12: a head
// item updated in every append cost two write units per inbox, doubled by
// the transaction): entry N+1 is put on condition that it does not exist,
// and only by a writer that read N as the newest entry, so the entries are
// gap-free by construction and of two writers that read the same head only
// one commits. The head is therefore the newest entry — as long as no entry
// above it can have been deleted, which DynamoDB's TTL does only to expired
// items. Entries expire in seq order (their TTL is the time they were
// written plus the retention; a newer entry was written after the older
// one committed), so when the newest entry found is still far from its own
// expiry (warm), nothing above it was reaped.
//
// Otherwise (no entry, or the newest near or past its expiry: the inbox was
// idle for about the retention) the head is read from what outlives the
// entries: each conversation index item records the inbox seq of that
// conversation's newest entry (attrInboxSeq, set in the transaction that
// writes the entry, or by the claim just before a group entry is put), so
// the highest of them is the head. The head item
// keeps the inbox's epoch, and its seq is a floor: the head of inboxes
// written before entries were their own heads, and of every entry whose TTL
// is shorter than the retention (an alert's ttlSeconds), which an append
// raises in its transaction.
type inboxHead struct {
	// top is the inbox head: the highest seq ever allocated (0: none).
	top int64
	// floor is the seq of the head item; epoch its epoch ("" if none).
	floor int64
	epoch string
	// newest is the conversation and convSeq of the newest entry (when
	// the head was read from it).
	newest logRef
}

// attrInboxSeq is, on a conversation index item, the user's inbox seq of
// the newest entry of that conversation (for a group, of the newest claimed
// one: it may be ahead of the entries for a moment, never behind — as a
// head it can only overstate, never hand out a seq twice).
const attrInboxSeq = "iseq"

// warmMargin is how far from its expiry the newest entry must be for the
// head to be read from it: far beyond any clock skew between writers.
func (st *Store) warmMargin() time.Duration {
	return min(time.Hour, st.Retention/10)
}

// Head returns the user's inbox head (0 for an empty inbox) and its epoch.
func (st *Store) Head(ctx context.Context, u im.UserID) (int64, string, error) {
	heads, err := st.inboxHeads(ctx, []im.UserID{u}, nil, nil)
	if err != nil {
		return 0, "", err
	}
	return heads[u].top, heads[u].epoch, nil
}

// inboxHeads returns the head of each user's inbox. It reads their head
// items in BatchGetItem calls of 100 keys — with extra keys of the inbox
// table (never head items), each item found handed to visit — and each
// inbox's newest entry with a Query of one item (at most 16 at once), all
// strongly consistent.
func (st *Store) inboxHeads(ctx context.Context, users []im.UserID, extra []map[string]types.AttributeValue, visit func(map[string]types.AttributeValue)) (map[im.UserID]inboxHead, error) {
	heads := make(map[im.UserID]inboxHead, len(users))
	keys := make([]map[string]types.AttributeValue, 0, len(users)+len(extra))
	for _, u := range users {
		keys = append(keys, inboxKey(u, skHead))
		heads[u] = inboxHead{}
	}
	keys = append(keys, extra...)
	err := st.inboxBatchGet(ctx, keys, func(it map[string]types.AttributeValue) {
		if getS(it, attrSK) == skHead {
			heads[im.UserID(getS(it, attrUser))] = inboxHead{floor: getN(it, attrSeq), epoch: getS(it, attrEpoch)}
		} else if visit != nil {
			visit(it)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("inbox heads: %w", err)
	}
	now := st.now()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		slots    = make(chan struct{}, 16)
	)
	for _, u := range users {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			top, newest, err := st.newestSeq(ctx, u, now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				return
			}
			h := heads[u]
			h.top = max(top, h.floor)
			if h.top == top {
				h.newest = newest
			}
			heads[u] = h
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return heads, nil
}

// newestSeq returns the highest seq allocated in u's inbox as far as its
// entries and conversation index show (the head item's floor aside): the
// newest entry's seq when it is warm, else the highest attrInboxSeq of
// u's conversation index items.
func (st *Store) newestSeq(ctx context.Context, u im.UserID, now time.Time) (int64, logRef, error) {
	e, expires, found, err := st.newestEntry(ctx, u, false)
	if err != nil {
		return 0, logRef{}, err
	}
	if found && (expires.IsZero() || expires.After(now.Add(st.warmMargin()))) {
		return e.seq, e.ref, nil
	}
	seq, err := st.indexedSeq(ctx, u, now)
	return seq, logRef{}, err
}

// newest is what newestEntry reads of an entry.
type newest struct {
	seq int64
	ref logRef // its conversation and convSeq
}

// newestEntry reads the seq and expiry (zero: none) of u's newest inbox
// entry: a Query of one item, newest first, strongly consistent unless
// eventually (half a read unit: the newest entry may be missed, never one
// that is not there).
func (st *Store) newestEntry(ctx context.Context, u im.UserID, eventually bool) (e newest, expires time.Time, found bool, err error) {
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :e)"),
		ProjectionExpression:      aws.String("#seq, #ttl, #conv, cseq"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK, "#seq": attrSeq, "#ttl": attrTTL, "#conv": attrConv},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":e": s("e#")},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(1),
		ConsistentRead:            aws.Bool(!eventually),
	})
	if err != nil {
		return newest{}, time.Time{}, false, fmt.Errorf("newest entry of %s: %w", u, err)
	}
	if len(out.Items) == 0 {
		return newest{}, time.Time{}, false, nil
	}
	it := out.Items[0]
	expires, _ = entryExpiry(it)
	return newest{getN(it, attrSeq), logRef{im.ConversationID(getS(it, attrConv)), getN(it, attrCSeq)}}, expires, true, nil
}

// indexedSeq returns the highest inbox seq u's conversation index shows
// taken: the highest attrInboxSeq whose entry is there, or may have been
// reaped (its message is about the retention old). A recent one whose entry
// is not there is a claim not yet placed (AppendGroup puts the entry just
// after the claim): it does not count, or the next append would go above
// it and readers would see a gap until it is placed — the next append
// takes that seq instead, and the claim moves above it when its run
// comes back (placeClaimed), as it does when the newest entry is the head.
func (st *Store) indexedSeq(ctx context.Context, u im.UserID, now time.Time) (int64, error) {
	type claimed struct {
		seq int64
		at  time.Time
	}
	var all []claimed
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :v)"),
		ProjectionExpression:      aws.String("#iseq, lastAt"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK, "#iseq": attrInboxSeq},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s(string(u)), ":v": s("v#")},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) {
		if seq := getN(it, attrInboxSeq); seq > 0 {
			all = append(all, claimed{seq, time.UnixMilli(getN(it, "lastAt"))})
		}
	})
	if err != nil {
		return 0, fmt.Errorf("conversation index of %s: %w", u, err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seq > all[j].seq })
	mayBeReaped := now.Add(-(st.Retention - st.warmMargin()))
	for _, c := range all {
		if c.at.Before(mayBeReaped) {
			return c.seq, nil
		}
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(c.seq)),
			ProjectionExpression: aws.String("#seq"), ExpressionAttributeNames: map[string]string{"#seq": attrSeq}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, fmt.Errorf("entry #%d of %s: %w", c.seq, u, err)
		}
		if out.Item != nil {
			return c.seq, nil
		}
	}
	return 0, nil
}

// entryPut puts u's entry e on condition that its seq is free: with the
// seq one above the head the writer read, that is what orders appends.
func (st *Store) entryPut(u im.UserID, e im.Entry, ttl types.AttributeValue) *types.Put {
	return &types.Put{
		TableName:                aws.String(st.tables.Inbox),
		Item:                     entryItem(u, e, ttl),
		ConditionExpression:      aws.String("attribute_not_exists(#sk)"),
		ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	}
}

// floorUpdate raises u's head item seq from floor (what the writer read)
// to seq, with a fresh epoch if the item has none: for an entry that may
// expire before older ones.
func floorUpdate(table string, u im.UserID, floor, seq int64, now time.Time) *types.Update {
	up := headUpdate(table, inboxKey(u, skHead), floor, newEpoch(now))
	up.ExpressionAttributeValues[":new"] = n(seq)
	return up
}

// epochCreate gives u's inbox its head item (seq 0, a fresh epoch) if it
// has none: the first entry of an inbox never read creates its epoch.
func epochCreate(table string, u im.UserID, now time.Time) *types.Update {
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       inboxKey(u, skHead),
		UpdateExpression:          aws.String("SET #seq = if_not_exists(#seq, :zero), #epoch = if_not_exists(#epoch, :epoch)"),
		ExpressionAttributeNames:  map[string]string{"#seq": attrSeq, "#epoch": attrEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": n(0), ":epoch": s(newEpoch(now))},
	}
}
