package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/reconcile"
	"github.com/signet-im/signet/shared/wire"
)

// alertEvery makes every alertEvery-th send of a run an alert that an app
// posts over HTTPS (POST /v1/messages) instead of a device's message; every
// escalateEvery-th alert escalates.
const (
	alertEvery    = 20
	escalateEvery = 3
	// Every answerEvery-th alert (none that escalates) asks its recipients
	// to approve or reject, the first answer winning, and each recipient's
	// device answers at once, through the run's faults.
	answerEvery = 4
	// Every groupAlertEvery-th alert (from the first; none that escalates
	// or asks) goes to one of the run's groups: the API resolves its
	// members and the fan-out queue puts it in their inboxes, in batches,
	// while the members change.
	groupAlertEvery = 5
)

// alert is one alert the run's app posts, retried with its
// Idempotency-Key until the API accepts it, and what came of it.
type alert struct {
	key string   // Idempotency-Key
	to  []string // recipients (of a group alert: as the API answered)
	// group is the group a group alert goes to (its conversation id);
	// fanned says its status showed no recipient still queued.
	group  string
	fanned bool
	// escalate: nobody answers, so one second after the post the alert
	// goes to these users too (in their inboxes, pushed), is pushed again
	// to everyone notified once more, and ends.
	escalate []string
	ended    bool // its status said the escalation ended
	// asks: the alert asks for an answer (first answer wins); answered
	// holds what each recipient's answer got back ("user option" of the
	// answer that stands, or "conflict: …"), answering that it was sent.
	asks      bool
	answered  map[string]string
	answering bool
	mu        sync.Mutex
	ids       map[string]bool // messageIds the API answered (one, unless idempotency broke)
	accepted  bool
	refused   string // a 4xx answer other than 429: the run sends nothing the API may refuse
	lastErr   string // why the last attempt failed
}

func (a *alert) done() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted || a.refused != ""
}

// appName is the run's app.
const appName = "chaos"

// createApp makes the run's app, allowed to alert every user, and keeps
// its key.
func (r *runner) createApp(ctx context.Context) error {
	users := slices.Sorted(maps.Keys(r.byUser))
	body, _ := json.Marshal(map[string]any{"name": appName, "allowUsers": users, "allowGroups": []string{"*"}, "ratePerMinute": 100_000})
	adminKey := cmp.Or(r.cfg.Stack.AdminKey, devstack.DefaultAdminKey)
	return retry(ctx, func(ctx context.Context) error {
		status, raw, err := r.call(ctx, http.MethodPost, "/v1/apps", adminKey, nil, body)
		if err != nil {
			return err
		}
		var out struct {
			Key string `json:"key"`
		}
		if status != http.StatusCreated || json.Unmarshal(raw, &out) != nil || out.Key == "" {
			return fmt.Errorf("create the app: %d %s", status, raw)
		}
		r.appKey = out.Key
		return nil
	})
}

// newAlert makes alert number n, to one to three users or to a group.
func (r *runner) newAlert(n int64) *alert {
	a := &alert{key: fmt.Sprintf("alert-%d", n), ids: map[string]bool{}}
	for range 1 + r.intn(3) {
		if u := fmt.Sprintf("u%03d", r.intn(r.cfg.Users)); !slices.Contains(a.to, u) {
			a.to = append(a.to, u)
		}
	}
	a.asks = n%(alertEvery*answerEvery) == alertEvery*2 && n%(alertEvery*escalateEvery) != 0
	if n%(alertEvery*escalateEvery) == 0 {
		for range 1 + r.intn(2) {
			if u := fmt.Sprintf("u%03d", r.intn(r.cfg.Users)); !slices.Contains(a.to, u) && !slices.Contains(a.escalate, u) {
				a.escalate = append(a.escalate, u)
			}
		}
	}
	if !a.asks && len(a.escalate) == 0 && len(r.groups) > 0 && (n/alertEvery)%groupAlertEvery == 1 {
		a.group, a.to = r.groups[r.intn(len(r.groups))], nil
	}
	r.dmu.Lock()
	r.alerts = append(r.alerts, a)
	r.dmu.Unlock()
	r.count(func(res *Result) {
		res.Alerts++
		if a.group != "" {
			res.GroupAlerts++
		}
	})
	return a
}

// post posts a (again, with the same Idempotency-Key, if it was posted
// before) and records the answer; it returns why a is still not accepted.
func (r *runner) post(ctx context.Context, a *alert) error {
	req := map[string]any{"to": a.to, "title": "chaos " + a.key, "body": "on-call: " + a.key, "priority": "high"}
	if a.group != "" {
		delete(req, "to")
		req["group"] = strings.TrimPrefix(a.group, "g:")
	}
	if a.asks {
		req["ack"] = map[string]any{"options": []string{"approve", "reject"}, "firstAnswerWins": true}
	}
	if len(a.escalate) > 0 {
		req["ack"] = map[string]any{"options": []string{"ack"}}
		req["escalation"] = map[string]any{"everySeconds": 1, "renotify": 1, "steps": []any{map[string]any{"to": a.escalate}}}
	}
	body, _ := json.Marshal(req)
	status, raw, err := r.call(ctx, http.MethodPost, "/v1/messages", r.appKey, map[string]string{"Idempotency-Key": a.key}, body)
	a.mu.Lock()
	defer a.mu.Unlock()
	var out struct {
		MessageID  string `json:"messageId"`
		Recipients []struct {
			UserID string `json:"userId"`
		} `json:"recipients"`
	}
	switch {
	case err != nil:
		a.lastErr = err.Error()
	case status == http.StatusAccepted && json.Unmarshal(raw, &out) == nil && out.MessageID != "":
		a.ids[out.MessageID], a.accepted = true, true
		if a.group != "" && a.to == nil {
			for _, x := range out.Recipients {
				a.to = append(a.to, x.UserID)
			}
		}
		if a.asks && !a.answering {
			a.answering = true
			r.answerAll(ctx, a, out.MessageID)
		}
		return nil
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
		a.refused = fmt.Sprintf("%d %s", status, raw)
		return nil
	default:
		a.lastErr = fmt.Sprintf("%d %s", status, raw)
	}
	return fmt.Errorf("alert %s: %s", a.key, a.lastErr)
}

// answerAll has each recipient of a answer it from their first device,
// concurrently (approve or reject, drawn), retrying through the run's
// faults until the server answers; the results are checked by
// verifyAnswers. The runner's answering group waits for them.
func (r *runner) answerAll(ctx context.Context, a *alert, id string) {
	a.answered = map[string]string{}
	for _, u := range a.to {
		option := []string{"approve", "reject"}[r.intn(2)]
		d := r.byUser[u][0]
		r.answering.Go(func() {
			// Until the server answers: the device may be offline, crashed
			// or cut off for a while (converge brings it back).
			got := "never answered"
			ctx := context.WithoutCancel(ctx) // the storm's ends before the answers may
		answer:
			for end := time.Now().Add(r.cfg.Converge); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				c := d.client()
				if c == nil {
					continue
				}
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				res, err := c.Answer(actx, id, option)
				cancel()
				var se *client.ServerError
				switch {
				case err == nil:
					got = res.UserID + " " + res.Option
				case errors.As(err, &se) && se.Code == wire.CodeConflict:
					got = "conflict: " + se.Message
				case errors.As(err, &se) && se.Code != wire.CodeInternal && se.Code != wire.CodeRateLimited:
					got = fmt.Sprintf("refused %s: %s", se.Code, se.Message)
				default:
					got = "never answered (last: " + err.Error() + ")"
					continue
				}
				break answer
			}
			a.mu.Lock()
			a.answered[u] = got
			a.mu.Unlock()
		})
	}
}

// verifyAnswers holds each alert that asked for an answer to what its
// recipients' answers got back: exactly one answer stands (first answer
// wins), its recipient got their own answer back, and every other got a
// conflict naming it — however the run's faults split, dropped or repeated
// the answer frames.
func (r *runner) verifyAnswers(ctx context.Context, problem func(string, ...any)) {
	for _, a := range r.alerts {
		if !a.asks || !a.accepted {
			continue
		}
		for id := range a.ids {
			out, err := r.alertStatus(ctx, id)
			if err != nil {
				problem("status of alert %s: %v", a.key, err)
				continue
			}
			r.res.Answers++
			stands := out.Ack.AnsweredBy + " " + out.Ack.Answer
			if out.Ack.Answered != 1 || out.Ack.AnsweredBy == "" {
				problem("alert %s (first answer wins) has %d answers, standing %q", a.key, out.Ack.Answered, stands)
				continue
			}
			for _, u := range a.to {
				got := a.answered[u]
				switch {
				case u == out.Ack.AnsweredBy && got != stands:
					problem("alert %s: %s's answer stands (%q), but their answer got back %q", a.key, u, stands, got)
				case u != out.Ack.AnsweredBy && !(strings.HasPrefix(got, "conflict: ") && strings.Contains(got, out.Ack.AnsweredBy)):
					problem("alert %s: %s's answer got back %q, while %q stands", a.key, u, got, stands)
				}
			}
		}
	}
}

// call makes one request of the HTTP API as key, with body, and returns
// its status and body.
func (r *runner) call(ctx context.Context, method, path, key string, headers map[string]string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.st.HTTPURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// settleAlerts posts every alert not yet accepted again until it is, then
// waits for each group alert's fan-out to reach every recipient and for
// each escalation to end, or until the deadline passes (converge).
func (r *runner) settleAlerts(ctx context.Context, deadline time.Time) {
	r.dmu.Lock()
	alerts := slices.Clone(r.alerts)
	r.dmu.Unlock()
	for _, a := range alerts {
		for last := time.Now(); !a.done() && before(ctx, deadline); {
			if err := r.post(ctx, a); err != nil {
				time.Sleep(time.Second)
			}
			if time.Since(last) > 30*time.Second {
				last = time.Now()
				a.mu.Lock()
				r.progress("chaos: waiting for alert %s to be accepted (%s)", a.key, cmp.Or(a.lastErr, "no answer yet"))
				a.mu.Unlock()
			}
		}
	}
	r.answering.Wait()
	for _, a := range alerts {
		if a.group == "" || !a.accepted {
			continue
		}
		for id := range a.ids {
			for last := time.Now(); !a.fanned && before(ctx, deadline); {
				var queued []string
				if a.fanned, queued = r.alertFanned(ctx, id); !a.fanned {
					time.Sleep(500 * time.Millisecond)
				}
				if time.Since(last) > 30*time.Second {
					last = time.Now()
					r.progress("chaos: waiting for the fan-out of group alert %s (%s) to reach every member (still queued: %s)", a.key, id, cmp.Or(strings.Join(queued, " "), "no status yet"))
				}
			}
		}
	}
	for _, a := range alerts {
		if len(a.escalate) == 0 || !a.accepted {
			continue
		}
		for id := range a.ids {
			for last := time.Now(); !a.ended && before(ctx, deadline); {
				if a.ended = r.escalationEnded(ctx, id); !a.ended {
					time.Sleep(500 * time.Millisecond)
				}
				if time.Since(last) > 30*time.Second {
					last = time.Now()
					r.progress("chaos: waiting for the escalation of alert %s (%s) to end", a.key, id)
				}
			}
		}
	}
}

// alertFanned reports whether alert id's status shows every recipient in
// their inbox, and if not, which are still queued for the fan-out (none
// when there is no status to read).
func (r *runner) alertFanned(ctx context.Context, id string) (bool, []string) {
	out, err := r.alertStatus(ctx, id)
	if err != nil || len(out.Recipients) == 0 {
		return false, nil
	}
	var queued []string
	for _, x := range out.Recipients {
		if x.State == "queued" {
			queued = append(queued, x.UserID)
		}
	}
	return len(queued) == 0, queued
}

// escalationEnded reports whether alert id's status says its escalation
// ended.
func (r *runner) escalationEnded(ctx context.Context, id string) bool {
	status, raw, err := r.call(ctx, http.MethodGet, "/v1/messages/"+id, r.appKey, nil, nil)
	var out struct {
		Escalation struct {
			State string `json:"state"`
		} `json:"escalation"`
	}
	return err == nil && status == http.StatusOK && json.Unmarshal(raw, &out) == nil && out.Escalation.State == "ended"
}

// verifyAlerts checks that every alert was accepted once, under one
// messageId, and is in each recipient's inbox exactly once (the devices'
// journals are reconciled with the inboxes beside it).
func (r *runner) verifyAlerts(problem func(string, ...any), inboxes map[string]map[string]int) {
	for _, a := range r.alerts {
		switch {
		case len(a.ids) > 1:
			r.res.IdempotencyViolations++
			problem("alert %s got %d messageIds", a.key, len(a.ids))
			continue
		case a.refused != "":
			problem("alert %s refused: %s", a.key, a.refused)
			continue
		case !a.accepted:
			r.res.Unacked++
			problem("alert %s never accepted (last attempt: %s)", a.key, a.lastErr)
			continue
		}
		r.res.AlertsAccepted++
		if a.group != "" {
			r.verifyGroupAlert(problem, a)
		}
		if len(a.escalate) > 0 {
			r.res.Escalations++
			if !a.ended {
				problem("alert %s: its escalation did not end", a.key)
			}
		}
		for id := range a.ids {
			for _, u := range append(slices.Clone(a.to), a.escalate...) {
				if inboxes[u][id] != 1 {
					problem("accepted alert %s (%s) is in %s's inbox %d times", a.key, id, u, inboxes[u][id])
					r.res.Lost++
				}
			}
		}
	}
}

// verifyGroupAlert holds a group alert's recipients (as the API answered)
// to the group's membership: each was a member at some moment of the run,
// every member who was never added or removed is among them, and the
// fan-out reached them all (the inboxes are checked by verifyAlerts).
func (r *runner) verifyGroupAlert(problem func(string, ...any), a *alert) {
	r.res.GroupAlertsChecked++
	if !a.fanned {
		problem("group alert %s (%s): its status still shows recipients queued for the fan-out", a.key, a.group)
	}
	for _, u := range a.to {
		if !r.members[a.group][u] && !r.changed[a.group+"/"+u] {
			problem("group alert %s (%s) went to %s, never a member", a.key, a.group, u)
		}
	}
	for _, u := range slices.Sorted(maps.Keys(r.members[a.group])) {
		if !r.changed[a.group+"/"+u] && !slices.Contains(a.to, u) {
			problem("group alert %s (%s) did not go to %s, a member throughout", a.key, a.group, u)
		}
	}
}

// alertConversation is the run's app's alert conversation.
const alertConversation = "a:chaos"

// verifyAlertReads has one device of each user who received alerts mark a
// prefix of them read, in the order the device shows them (inbox order,
// MarkAlertsRead naming the inbox seq of the last one read), and holds
// each alert's status for that user to it: read up to there, not read
// beyond. A run's alerts reach inboxes out of convSeq order (posts retried
// after server faults, posts racing), which a convSeq watermark gets
// wrong; LateAlerts counts them. Every read lands first; then each alert's
// status is read once for all the users who showed it.
func (r *runner) verifyAlertReads(ctx context.Context, problem func(string, ...any)) {
	type reader struct {
		user       string
		read       bool  // within the prefix the user read
		seq        int64 // the alert's inbox seq and convSeq for them
		convSeq    int64
		last, upTo int64 // what the user read up to: inbox seq, convSeq
	}
	readers := map[string][]reader{} // messageId → who showed it
	for _, user := range slices.Sorted(maps.Keys(r.byUser)) {
		var d *device
		var shown []reconcile.Entry
		for _, x := range r.byUser[user] {
			x.mu.Lock()
			if d == nil && x.c != nil {
				d = x
				for _, e := range x.journal {
					if e.Conversation == alertConversation {
						shown = append(shown, e)
					}
				}
			}
			x.mu.Unlock()
		}
		if d == nil || len(shown) == 0 {
			continue
		}
		var upTo int64
		for _, e := range shown {
			if e.ConvSeq < upTo {
				r.res.LateAlerts++
			}
			upTo = max(upTo, e.ConvSeq)
		}
		cut := 1 // read shown[:cut]; with two or more, at least one stays unread
		if len(shown) > 1 {
			cut += r.intn(len(shown) - 1)
		}
		upTo = 0
		for _, e := range shown[:cut] {
			upTo = max(upTo, e.ConvSeq)
		}
		last := shown[cut-1].Seq
		err := retry(ctx, func(ctx context.Context) error {
			if err := d.c.MarkAlertsRead(ctx, alertConversation, upTo, last); err != nil {
				return err
			}
			// One-way: wait for it to land (a frame lost on the way is
			// sent again).
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if m, err := r.st.Store.ReadWatermark(ctx, im.UserID(user), alertConversation); err == nil && m.Seq >= last {
					return nil
				}
			}
			return fmt.Errorf("the read of %s's alerts up to inbox seq %d has not landed", user, last)
		})
		if err != nil {
			problem("%v", err)
			continue
		}
		r.res.AlertReads++
		for i, e := range shown {
			readers[e.MessageID] = append(readers[e.MessageID], reader{user: user, read: i < cut, seq: e.Seq, convSeq: e.ConvSeq, last: last, upTo: upTo})
		}
	}
	ids := slices.Sorted(maps.Keys(readers))
	last := time.Now()
	for n, id := range ids {
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			r.progress("chaos: verify: the status of alert %d of %d, against who read it", n+1, len(ids))
		}
		out, err := r.alertStatus(ctx, id)
		if err != nil {
			problem("status of alert %s: %v", id, err)
			continue
		}
		state := map[string]string{}
		for _, x := range out.Recipients {
			state[x.UserID] = x.State
		}
		for _, x := range readers[id] {
			switch s, ok := state[x.user]; {
			case !ok:
				problem("%s is not among the recipients of %s: %+v", x.user, id, out.Recipients)
			case x.read && s != "read":
				problem("alert %s (inbox #%d) is %s for %s, who read up to inbox #%d", id, x.seq, s, x.user, x.last)
			case !x.read && s == "read":
				problem("alert %s (inbox #%d, convSeq %d) is read for %s, who read up to inbox #%d (convSeq %d)", id, x.seq, x.convSeq, x.user, x.last, x.upTo)
			}
		}
	}
}
