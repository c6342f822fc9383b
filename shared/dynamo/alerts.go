package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Alerts table items (pk / sk):
//
//	app#<id>  / app           the app: key hash, scope, rate, revoked
//	app#<id>  / rl#<minute>   posts in that minute (TTL)
//	app#<id>  / idem#<key>    Idempotency-Key: payload fingerprint, message, final response (TTL 48 h)
//	msg#<id>  / alert         the alert: app, recipients, conversation position, the answer it asks for,
//	                          its escalation or urgent repeat and the last tick run (escTick)
//	msg#<id>  / answer#<user> a recipient's answer: option, device, time
//	msg#<id>  / answer        first answer wins: the alert's one answer (put by the first to answer)
//
// and the status callbacks' webhook and events (callbacks.go).

// IdempotencyRetention is how long an Idempotency-Key is remembered.
const IdempotencyRetention = 48 * time.Hour

// alertKey is the key of an Alerts table item.
func alertKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), attrSK: s(sk)}
}

// strList stores v as a list of strings.
func strList(v []string) types.AttributeValue {
	l := make([]types.AttributeValue, len(v))
	for i, x := range v {
		l[i] = s(x)
	}
	return &types.AttributeValueMemberL{Value: l}
}

// getList reads the list of strings name of item (nil when absent).
func getList(item map[string]types.AttributeValue, name string) []string {
	l, _ := item[name].(*types.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for _, v := range l.Value {
		if x, ok := v.(*types.AttributeValueMemberS); ok {
			out = append(out, x.Value)
		}
	}
	return out
}

// CreateApp stores a new app; ErrAppExists if the id is taken by an app
// that is not revoked. A revoked app's id may be taken again: the new app
// replaces it (new key and scope; its Idempotency-Keys of the last 48 h
// still answer, as the app's name is their namespace).
func (st *Store) CreateApp(ctx context.Context, a im.App) error {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.tables.Alerts),
		Item: map[string]types.AttributeValue{
			"pk": s("app#" + a.ID), attrSK: s(skApp), "keyHash": s(a.KeyHash),
			"allowUsers": strList(a.AllowUsers), "allowGroups": strList(a.AllowGroups),
			"rate": n(int64(a.RatePerMinute)), "createdAt": n(a.CreatedAt.UnixMilli()),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#sk) OR attribute_exists(revokedAt)"),
		ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("create app %s: %w", a.ID, im.ErrAppExists)
	}
	if err != nil {
		return fmt.Errorf("create app %s: %w", a.ID, err)
	}
	return nil
}

// skApp is the sort key of an app's own item.
const skApp = "app"

// App reads an app; im.ErrNotFound when there is none.
func (st *Store) App(ctx context.Context, id string) (im.App, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+id, skApp), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return im.App{}, fmt.Errorf("app %s: %w", id, err)
	}
	if out.Item == nil {
		return im.App{}, fmt.Errorf("app %s: %w", id, im.ErrNotFound)
	}
	return appOf(id, out.Item), nil
}

// appOf decodes an app item.
func appOf(id string, it map[string]types.AttributeValue) im.App {
	a := im.App{
		ID: id, KeyHash: getS(it, "keyHash"), AllowUsers: getList(it, "allowUsers"), AllowGroups: getList(it, "allowGroups"),
		RatePerMinute: int(getN(it, "rate")), CreatedAt: time.UnixMilli(getN(it, "createdAt")).UTC(), Webhook: webhookOf(it),
	}
	if _, ok := it["revokedAt"]; ok {
		a.Revoked, a.RevokedAt = true, time.UnixMilli(getN(it, "revokedAt")).UTC()
	}
	if _, ok := it["keyRotatedAt"]; ok {
		a.KeyRotatedAt = time.UnixMilli(getN(it, "keyRotatedAt")).UTC()
	}
	return a
}

// Apps lists every app, revoked ones too, by id. It scans the alerts
// table for app items: an admin's occasional call, whose read units grow
// with the table (about 1 RRU per 8 KB of alerts, idempotency and rate
// items), not a path any message takes.
func (st *Store) Apps(ctx context.Context) ([]im.App, error) {
	p := dynamodb.NewScanPaginator(st.db, &dynamodb.ScanInput{
		TableName:                 aws.String(st.tables.Alerts),
		FilterExpression:          aws.String("#sk = :app"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":app": s(skApp)},
		ConsistentRead:            aws.Bool(true), // an app just created is listed
	})
	var apps []im.App
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list apps: %w", err)
		}
		for _, it := range out.Items {
			apps = append(apps, appOf(strings.TrimPrefix(getS(it, "pk"), "app#"), it))
		}
	}
	sort.Slice(apps, func(i, j int) bool { return apps[i].ID < apps[j].ID })
	return apps, nil
}

// RotateAppKey replaces an app's key hash: the old key stops working at
// once. im.ErrNotFound for an app that does not exist or is revoked.
func (st *Store) RotateAppKey(ctx context.Context, id, keyHash string, now time.Time) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+id, skApp),
		UpdateExpression:          aws.String("SET keyHash = :h, keyRotatedAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(#sk) AND attribute_not_exists(revokedAt)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": s(keyHash), ":now": n(now.UnixMilli())},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("rotate key of app %s: %w", id, im.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("rotate key of app %s: %w", id, err)
	}
	return nil
}

// RevokeApp marks an app revoked; its key stops working at once.
func (st *Store) RevokeApp(ctx context.Context, id string, now time.Time) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+id, skApp),
		UpdateExpression:          aws.String("SET revokedAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(#sk)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.UnixMilli())},
	})
	if isConditionFailed(err) {
		return fmt.Errorf("revoke app %s: %w", id, im.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("revoke app %s: %w", id, err)
	}
	return nil
}

// TakeAppSlot counts one post in the app's current minute; beyond
// perMinute it returns im.ErrRateLimited and the wait until the next minute.
func (st *Store) TakeAppSlot(ctx context.Context, id string, now time.Time, perMinute int) (time.Duration, error) {
	minute := now.Truncate(time.Minute)
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+id, fmt.Sprintf("rl#%d", minute.Unix()/60)),
		UpdateExpression:          aws.String("ADD #n :one SET #ttl = :ttl"),
		ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n < :max"),
		ExpressionAttributeNames:  map[string]string{"#n": "n", "#ttl": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":max": n(int64(perMinute)), ":ttl": n(minute.Add(2 * time.Minute).Unix())},
	})
	if isConditionFailed(err) {
		return minute.Add(time.Minute).Sub(now), fmt.Errorf("app %s: %w", id, im.ErrRateLimited)
	}
	if err != nil {
		return 0, fmt.Errorf("app %s rate: %w", id, err)
	}
	return 0, nil
}

// BeginAlert stores an alert's message in the app's conversation log, the
// alert record and the Idempotency-Key item in one transaction. A reused key
// returns the earlier alert (Replayed), or im.ErrIdempotencyConflict when the
// payload fingerprint differs.
func (st *Store) BeginAlert(ctx context.Context, appID, key, fingerprint string, a im.Alert, now time.Time) (im.AlertStart, error) {
	for attempt := range st.MaxAttempts {
		h, err := st.readHeads(ctx, a.Message.Conversation)
		if err != nil {
			return im.AlertStart{}, err
		}
		m := a.Message
		m.ID, m.ConvSeq, m.SentAt = im.NewMessageID(now), h.conv+1, now
		recipients := make([]string, len(a.Recipients))
		for i, u := range a.Recipients {
			recipients[i] = string(u)
		}
		items := []types.TransactWriteItem{
			{Update: headUpdate(st.tables.Messages, convKey(m.Conversation, skHead), h.conv, newEpoch(now))},
			{Put: st.logPut(m, "", now)},
			{Put: &types.Put{
				TableName: aws.String(st.tables.Alerts),
				Item: map[string]types.AttributeValue{
					"pk": s("app#" + appID), attrSK: s("idem#" + key), "fp": s(fingerprint), attrMID: s(string(m.ID)),
					attrTTL: n(now.Add(IdempotencyRetention).Unix()),
				},
				ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
			}},
			{Put: &types.Put{
				TableName: aws.String(st.tables.Alerts),
				Item: map[string]types.AttributeValue{
					"pk": s("msg#" + string(m.ID)), attrSK: s("alert"), "app": s(appID), "to": strList(recipients),
					attrConv: s(string(m.Conversation)), attrCSeq: n(m.ConvSeq), "title": s(a.Title), "priority": s(a.Priority),
					"expiryS": n(int64(a.Expiry / time.Second)),
				},
			}},
		}
		if a.Ack != nil {
			alert := items[len(items)-1].Put.Item
			alert["ackOpts"], alert["ackReq"], alert["ackFirst"] = strList(a.Ack.Options), flag(a.Ack.Required), flag(a.Ack.FirstWins)
		}
		if r := a.Repeat; r != nil {
			alert := items[len(items)-1].Put.Item
			alert["rpEvery"], alert["rpTimes"], alert["escTick"] = n(r.Every.Milliseconds()), n(int64(r.Times)), n(0)
		}
		if e := a.Escalation; e != nil {
			alert := items[len(items)-1].Put.Item
			steps, _ := json.Marshal(e.Steps)
			alert["escEvery"], alert["escRenotify"], alert["escSteps"], alert["escTick"] = n(e.Every.Milliseconds()), n(int64(e.Renotify)), s(string(steps)), n(0)
		}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			a.Message = m
			return im.AlertStart{Alert: a}, nil
		}
		switch classifyTx(err, 2) { // 2: the Idempotency-Key item
		case txOther:
			return im.AlertStart{}, fmt.Errorf("begin alert %s/%s: %w", appID, key, err)
		case txCondition:
			return st.resumeAlert(ctx, appID, key, fingerprint)
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return im.AlertStart{}, err
		}
	}
	return im.AlertStart{}, fmt.Errorf("begin alert %s/%s: %w", appID, key, im.ErrContention)
}

// resumeAlert returns the alert an Idempotency-Key already started, after
// BeginAlert lost the race to create it (ErrContention if it vanished:
// the caller retries).
func (st *Store) resumeAlert(ctx context.Context, appID, key, fingerprint string) (im.AlertStart, error) {
	a, err := st.KeyedAlert(ctx, appID, key, fingerprint)
	if errors.Is(err, im.ErrNotFound) {
		return im.AlertStart{}, fmt.Errorf("idempotency key %s vanished: %w", key, im.ErrContention)
	}
	return a, err
}

// KeyedAlert returns the alert an earlier request with this Idempotency-Key
// began (Replayed, with its response once finished): im.ErrNotFound when
// the key is new, im.ErrIdempotencyConflict when the payload differs. One
// strongly consistent read: the handler answers a replay before it spends
// a rate-limit slot.
func (st *Store) KeyedAlert(ctx context.Context, appID, key, fingerprint string) (im.AlertStart, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+appID, "idem#"+key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return im.AlertStart{}, fmt.Errorf("idempotency key %s: %w", key, err)
	}
	if out.Item == nil {
		return im.AlertStart{}, fmt.Errorf("idempotency key %s: %w", key, im.ErrNotFound)
	}
	if getS(out.Item, "fp") != fingerprint {
		return im.AlertStart{}, fmt.Errorf("idempotency key %s: %w", key, im.ErrIdempotencyConflict)
	}
	a, err := st.Alert(ctx, im.MessageID(getS(out.Item, attrMID)))
	if err != nil {
		return im.AlertStart{}, err
	}
	return im.AlertStart{Alert: a, Response: getS(out.Item, "resp"), Replayed: true}, nil
}

// FinishAlert records the response of a completed request for its key.
func (st *Store) FinishAlert(ctx context.Context, appID, key, response string) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("app#"+appID, "idem#"+key),
		UpdateExpression:          aws.String("SET resp = :r"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(response)},
	})
	if err != nil {
		return fmt.Errorf("finish alert %s/%s: %w", appID, key, err)
	}
	return nil
}

// Alert reads an alert and its message.
func (st *Store) Alert(ctx context.Context, id im.MessageID) (im.Alert, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Alerts), Key: alertKey("msg#"+string(id), "alert"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return im.Alert{}, fmt.Errorf("alert %s: %w", id, err)
	}
	if out.Item == nil {
		return im.Alert{}, fmt.Errorf("alert %s: %w", id, im.ErrNotFound)
	}
	it := out.Item
	m, err := st.Message(ctx, im.ConversationID(getS(it, attrConv)), getN(it, attrCSeq))
	if err != nil {
		return im.Alert{}, err
	}
	var to []im.UserID
	for _, u := range getList(it, "to") {
		to = append(to, im.UserID(u))
	}
	a := im.Alert{Message: m, App: getS(it, "app"), Recipients: to, Title: getS(it, "title"), Priority: getS(it, "priority"),
		Expiry: time.Duration(getN(it, "expiryS")) * time.Second}
	if opts := getList(it, "ackOpts"); len(opts) > 0 {
		a.Ack = &im.AckSpec{Options: opts, Required: getBool(it, "ackReq"), FirstWins: getBool(it, "ackFirst")}
	}
	if times := getN(it, "rpTimes"); times > 0 {
		a.Repeat = &im.Repeat{Every: time.Duration(getN(it, "rpEvery")) * time.Millisecond, Times: int(times)}
	}
	if steps := getS(it, "escSteps"); steps != "" {
		e := &im.Escalation{Every: time.Duration(getN(it, "escEvery")) * time.Millisecond, Renotify: int(getN(it, "escRenotify"))}
		if err := json.Unmarshal([]byte(steps), &e.Steps); err != nil {
			return im.Alert{}, fmt.Errorf("alert %s: escalation steps: %w", id, err)
		}
		a.Escalation = e
		if ss, ok := it["esc"].(*types.AttributeValueMemberSS); ok {
			for _, u := range ss.Value {
				a.Escalated = append(a.Escalated, im.UserID(u))
			}
			slices.Sort(a.Escalated)
		}
	}
	return a, nil
}

// EscalationTick returns how far alert id's escalation went: the last
// tick claimed (ClaimTick), or im.EscalationEnded.
func (st *Store) EscalationTick(ctx context.Context, id im.MessageID) (int, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Alerts), Key: alertKey("msg#"+string(id), "alert"),
		ProjectionExpression: aws.String("escTick"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("escalation of %s: %w", id, err)
	}
	return int(getN(out.Item, "escTick")), nil
}

// ClaimTick makes job (an SQS message id) the one that runs tick t of
// alert id's escalation: on condition that tick t-1 was the last claimed,
// or that this job claimed t already (its own retry). false: another job
// ran t (a duplicate delivery), or the escalation ended or went past it.
// t = im.EscalationEnded ends it, after any tick.
func (st *Store) ClaimTick(ctx context.Context, id im.MessageID, t int, job string) (bool, error) {
	cond := "(escTick = :prev) OR (escTick = :t AND escJob = :j)"
	vals := map[string]types.AttributeValue{":t": n(int64(t)), ":j": s(job), ":prev": n(int64(t - 1))}
	if t == im.EscalationEnded {
		cond = "escTick <> :t"
		delete(vals, ":prev")
		delete(vals, ":j")
	}
	upd := "SET escTick = :t, escJob = :j"
	if t == im.EscalationEnded {
		upd = "SET escTick = :t"
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("msg#"+string(id), "alert"),
		UpdateExpression: aws.String(upd), ConditionExpression: aws.String(cond), ExpressionAttributeValues: vals,
	})
	if isConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim tick %d of %s: %w", t, id, err)
	}
	return true, nil
}

// AddEscalated records users an escalation step added to alert id (a
// string set: adding a user twice changes nothing).
func (st *Store) AddEscalated(ctx context.Context, id im.MessageID, users []im.UserID) error {
	set := make([]string, len(users))
	for i, u := range users {
		set[i] = string(u)
	}
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Alerts), Key: alertKey("msg#"+string(id), "alert"),
		UpdateExpression: aws.String("ADD esc :u"), ExpressionAttributeValues: map[string]types.AttributeValue{":u": &types.AttributeValueMemberSS{Value: set}},
	})
	if err != nil {
		return fmt.Errorf("escalate %s to %v: %w", id, users, err)
	}
	return nil
}

// flag stores a boolean as the number 1 or 0 (minidyn cannot query a
// partition that holds a false BOOL).
func flag(b bool) types.AttributeValue {
	if b {
		return n(1)
	}
	return n(0)
}

// getBool reads a flag (false when absent).
func getBool(item map[string]types.AttributeValue, name string) bool { return getN(item, name) == 1 }

// answerItem is the item of a recipient's answer to alert id: one per
// recipient (answer#<user>), or with first answer wins the alert's one
// answer (answer), which the first recipient to answer puts.
func answerItem(id im.MessageID, a im.Answer, firstWins bool) map[string]types.AttributeValue {
	sk := "answer#" + string(a.User)
	if firstWins {
		sk = "answer"
	}
	return map[string]types.AttributeValue{
		"pk": s("msg#" + string(id)), attrSK: s(sk), attrUser: s(string(a.User)),
		"opt": s(a.Option), "dev": s(string(a.Device)), attrAt: n(a.At.UnixMilli()),
	}
}

func answerFrom(it map[string]types.AttributeValue) im.Answer {
	return im.Answer{User: im.UserID(getS(it, attrUser)), Device: im.DeviceID(getS(it, "dev")), Option: getS(it, "opt"), At: time.UnixMilli(getN(it, attrAt)).UTC()}
}

// Answer records recipient a.User's answer to alert id, once: a repeat of
// the same answer returns the recorded one (recorded false), another
// option is refused with im.ErrAlreadyAnswered — an answer is
// forward-only. With firstWins the alert has one answer item, which the
// first recipient to answer puts on condition that it is absent: of
// recipients answering at once exactly one wins and the others are
// refused. One conditional put either way.
func (st *Store) Answer(ctx context.Context, id im.MessageID, a im.Answer, firstWins bool) (im.Answer, bool, error) {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.tables.Alerts), Item: answerItem(id, a, firstWins),
		ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
	})
	if isConditionFailed(err) {
		return st.answeredBefore(ctx, id, a)
	}
	if err != nil {
		return im.Answer{}, false, fmt.Errorf("answer %s by %s: %w", id, a.User, err)
	}
	return a, true, nil
}

// answeredBefore resolves an answer whose write found one there: the same
// user's same option is that answer again; anything else is refused,
// naming the answer that stands.
func (st *Store) answeredBefore(ctx context.Context, id im.MessageID, a im.Answer) (im.Answer, bool, error) {
	answers, err := st.Answers(ctx, id)
	if err != nil {
		return im.Answer{}, false, err
	}
	for _, b := range answers {
		if b.User == a.User && b.Option == a.Option {
			return b, false, nil
		}
	}
	for _, b := range answers {
		if b.User == a.User {
			return b, false, fmt.Errorf("%s answered %q already: %w", b.User, b.Option, im.ErrAlreadyAnswered)
		}
	}
	if len(answers) > 0 {
		return answers[0], false, fmt.Errorf("%s answered %q first: %w", answers[0].User, answers[0].Option, im.ErrAlreadyAnswered)
	}
	return im.Answer{}, false, fmt.Errorf("answer %s by %s: %w", id, a.User, im.ErrContention)
}

// Answers lists the answers to alert id, oldest first.
func (st *Store) Answers(ctx context.Context, id im.MessageID) ([]im.Answer, error) {
	var out []im.Answer
	err := st.queryUntil(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Alerts),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(#sk, :a)"),
		ExpressionAttributeNames:  map[string]string{"#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s("msg#" + string(id)), ":a": s("answer")},
		ConsistentRead:            aws.Bool(true),
	}, func(it map[string]types.AttributeValue) bool {
		out = append(out, answerFrom(it))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("answers of %s: %w", id, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// AppendInbox puts message m into user u's inbox exactly once (a dedup item
// keyed by message id in the same transaction as the entry, which is put at
// the head + 1 on condition that the seq is free) and returns its inbox seq,
// the existing one when it was already there. A positive expiry shorter
// than the inbox retention becomes the entry's TTL, and the head item's
// floor is raised to the entry in the same transaction. The conversation
// index names m as the conversation's last message only if it is later
// than the one it names: an alert can reach an inbox after a later alert of
// its app (a post retried after a failure, an escalation), and the later
// one stays the last (the entry's inbox seq and the unread count move
// either way).
func (st *Store) AppendInbox(ctx context.Context, u im.UserID, m im.Message, expiry time.Duration, now time.Time) (int64, error) {
	ttl := st.ttlAt(now)
	short := expiry > 0 && expiry < st.Retention
	if short {
		ttl = n(now.Add(expiry).Unix())
	}
	place := newer
	for attempt := range st.MaxAttempts {
		heads, err := st.inboxHeads(ctx, []im.UserID{u}, nil, nil)
		if err != nil {
			return 0, err
		}
		head := heads[u]
		seq := head.top + 1
		items := []types.TransactWriteItem{
			{Put: &types.Put{
				TableName:           aws.String(st.tables.Inbox),
				Item:                map[string]types.AttributeValue{attrUser: s(string(u)), attrSK: s(dedupSK(m.ID)), attrSeq: n(seq), attrTTL: ttl},
				ConditionExpression: aws.String("attribute_not_exists(#sk)"), ExpressionAttributeNames: map[string]string{"#sk": attrSK},
			}},
			{Put: st.entryPut(u, im.Entry{Seq: seq, Message: m}, ttl)},
			{Update: appendedIndex(st.tables.Inbox, u, m, seq, place)},
		}
		switch {
		case short:
			// It may expire before older entries: the head item's floor
			// covers it (see inboxHead). It also creates the epoch.
			items = append(items, types.TransactWriteItem{Update: floorUpdate(st.tables.Inbox, u, head.floor, seq, now)})
		case head.epoch == "":
			items = append(items, types.TransactWriteItem{Update: epochCreate(st.tables.Inbox, u, now)})
		}
		_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return seq, nil
		}
		switch classifyTx(err, 0) { // 0: the dedup item
		case txOther:
			return 0, fmt.Errorf("append %s to %s: %w", m.ID, u, err)
		case txCondition:
			return st.InboxSeq(ctx, u, m.ID)
		}
		if failedAt(err, 2) && place < olderUnlisted { // 2: the index item
			place++
		}
		if err := sleepJitter(ctx, attempt); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("append %s to %s: %w", m.ID, u, im.ErrContention)
}

// placement is how AppendInbox updates the conversation index for an alert.
type placement int

const (
	// newer: the alert becomes the last message (on condition that it is
	// later than the last).
	newer placement = iota
	// older: a later alert is the last; this one is listed as late (on
	// condition that fewer than maxLate are), so that the read that
	// covers it can name it for its trace.
	older
	// olderUnlisted: the list is full; the alert is read all the same
	// when the inbox seq watermark passes it.
	olderUnlisted
)

// appendedIndex is AppendInbox's update of u's conversation index for m at
// inbox seq: by place, m becomes the last message, or only the inbox seq
// and the unread count move (and m is listed late).
func appendedIndex(table string, u im.UserID, m im.Message, seq int64, place placement) *types.Update {
	switch place {
	case older:
		return &types.Update{
			TableName: aws.String(table), Key: inboxKey(u, convIndexSK(m.Conversation)),
			UpdateExpression:          aws.String("SET #iseq = :iseq ADD #unread :one, #late :e, #lateN :one"),
			ConditionExpression:       aws.String("attribute_not_exists(#lateN) OR #lateN < :max"),
			ExpressionAttributeNames:  map[string]string{"#iseq": attrInboxSeq, "#unread": attrUnread, "#late": attrLate, "#lateN": attrLateN},
			ExpressionAttributeValues: map[string]types.AttributeValue{":iseq": n(seq), ":one": n(1), ":e": &types.AttributeValueMemberSS{Value: []string{"0", fmt.Sprintf("%d %s", seq, m.ID)}}, ":max": n(maxLate)},
		}
	case olderUnlisted:
		return &types.Update{
			TableName: aws.String(table), Key: inboxKey(u, convIndexSK(m.Conversation)),
			UpdateExpression:          aws.String("SET #iseq = :iseq ADD #unread :one"),
			ExpressionAttributeNames:  map[string]string{"#iseq": attrInboxSeq, "#unread": attrUnread},
			ExpressionAttributeValues: map[string]types.AttributeValue{":iseq": n(seq), ":one": n(1)},
		}
	}
	up := indexUpdate(table, u, m, seq).add(attrUnread, 1).Update
	up.ConditionExpression = aws.String("attribute_not_exists(#last) OR #last < :last")
	return up
}

// InboxSeq returns the seq of message id in u's inbox, or im.ErrNotFound.
func (st *Store) InboxSeq(ctx context.Context, u im.UserID, id im.MessageID) (int64, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, dedupSK(id)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("inbox seq of %s for %s: %w", id, u, err)
	}
	if out.Item == nil {
		return 0, fmt.Errorf("inbox seq of %s for %s: %w", id, u, im.ErrNotFound)
	}
	return getN(out.Item, attrSeq), nil
}
