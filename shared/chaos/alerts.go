package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/devstack"
)

// alertEvery makes every alertEvery-th send of a run an alert that an app
// posts over HTTPS (POST /v1/messages) instead of a device's message.
const alertEvery = 20

// alert is one alert the run's app posts, retried with its
// Idempotency-Key until the API accepts it, and what came of it.
type alert struct {
	key      string   // Idempotency-Key
	to       []string // recipients
	mu       sync.Mutex
	ids      map[string]bool // messageIds the API answered (one, unless idempotency broke)
	accepted bool
	refused  string // a 4xx answer other than 429: the run sends nothing the API may refuse
	lastErr  string // why the last attempt failed
}

func (a *alert) done() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted || a.refused != ""
}

// createApp makes the run's app, allowed to alert every user, and keeps
// its key.
func (r *runner) createApp(ctx context.Context) error {
	users := slices.Sorted(maps.Keys(r.byUser))
	body, _ := json.Marshal(map[string]any{"name": "chaos", "allowUsers": users, "ratePerMinute": 100_000})
	adminKey := cmp.Or(r.cfg.Stack.AdminKey, devstack.DefaultAdminKey)
	return retry(ctx, func(ctx context.Context) error {
		status, raw, err := r.call(ctx, "/v1/apps", adminKey, nil, body)
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

// newAlert makes alert number n, to one to three users.
func (r *runner) newAlert(n int64) *alert {
	a := &alert{key: fmt.Sprintf("alert-%d", n), ids: map[string]bool{}}
	for range 1 + r.intn(3) {
		if u := fmt.Sprintf("u%03d", r.intn(r.cfg.Users)); !slices.Contains(a.to, u) {
			a.to = append(a.to, u)
		}
	}
	r.dmu.Lock()
	r.alerts = append(r.alerts, a)
	r.dmu.Unlock()
	r.count(func(res *Result) { res.Alerts++ })
	return a
}

// post posts a (again, with the same Idempotency-Key, if it was posted
// before) and records the answer; it returns why a is still not accepted.
func (r *runner) post(ctx context.Context, a *alert) error {
	body, _ := json.Marshal(map[string]any{"to": a.to, "title": "chaos " + a.key, "body": "on-call: " + a.key, "priority": "high"})
	status, raw, err := r.call(ctx, "/v1/messages", r.appKey, map[string]string{"Idempotency-Key": a.key}, body)
	a.mu.Lock()
	defer a.mu.Unlock()
	var out struct {
		MessageID string `json:"messageId"`
	}
	switch {
	case err != nil:
		a.lastErr = err.Error()
	case status == http.StatusAccepted && json.Unmarshal(raw, &out) == nil && out.MessageID != "":
		a.ids[out.MessageID], a.accepted = true, true
		return nil
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
		a.refused = fmt.Sprintf("%d %s", status, raw)
		return nil
	default:
		a.lastErr = fmt.Sprintf("%d %s", status, raw)
	}
	return fmt.Errorf("alert %s: %s", a.key, a.lastErr)
}

// call makes one request of the HTTP API as key, with body, and returns
// its status and body.
func (r *runner) call(ctx context.Context, path, key string, headers map[string]string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.st.HTTPURL+path, bytes.NewReader(body))
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

// settleAlerts posts every alert not yet accepted again until it is, or
// the deadline passes (converge).
func (r *runner) settleAlerts(ctx context.Context, deadline time.Time) {
	r.dmu.Lock()
	alerts := slices.Clone(r.alerts)
	r.dmu.Unlock()
	for _, a := range alerts {
		for !a.done() && time.Now().Before(deadline) {
			if err := r.post(ctx, a); err != nil {
				time.Sleep(time.Second)
			}
		}
	}
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
		for id := range a.ids {
			for _, u := range a.to {
				if inboxes[u][id] != 1 {
					problem("accepted alert %s (%s) is in %s's inbox %d times", a.key, id, u, inboxes[u][id])
					r.res.Lost++
				}
			}
		}
	}
}
