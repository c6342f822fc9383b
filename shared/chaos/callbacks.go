package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/webhook"
)

// hookRefuse is the share of status callback POSTs the run's webhook
// answers 503 while the faults last (each is retried after the stack's
// callback backoff).
const hookRefuse = 0.05

// hooks is the run's app's webhook: it verifies each status callback's
// signature and keeps each event once by its id.
type hooks struct {
	r      *runner
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	events map[string]hookEvent // by event id
	posts  int                  // POSTs taken (repeats of an id included)
	bad    []string             // POSTs that were not what the docs promise
}

// hookEvent is one status callback's body (docs/webhooks.md).
type hookEvent struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	App       string `json:"app"`
	MessageID string `json:"messageId"`
	UserID    string `json:"userId"`
	Answer    string `json:"answer"`
}

func (h *hooks) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if h.r.faults.Load() && h.r.float() < hookRefuse {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var e hookEvent
	switch err := webhook.Verify(h.secret, req.Header, body, time.Now(), time.Hour); {
	case err != nil:
		h.bad = append(h.bad, fmt.Sprintf("%v: %s", err, body))
	case json.Unmarshal(body, &e) != nil || e.ID == "" || e.ID != req.Header.Get("Signet-Event-Id"):
		h.bad = append(h.bad, fmt.Sprintf("event id header %q, body %s", req.Header.Get("Signet-Event-Id"), body))
	case h.events[e.ID] != (hookEvent{}) && h.events[e.ID] != e:
		h.bad = append(h.bad, fmt.Sprintf("event %s again with another body: %+v, then %+v", e.ID, h.events[e.ID], e))
	default:
		h.events[e.ID] = e
		h.posts++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusUnauthorized)
}

// registerHook serves the run's webhook and registers it for the run's
// app (PUT /v1/apps/{appId}/webhook).
func (r *runner) registerHook(ctx context.Context) error {
	r.hooks = &hooks{r: r, events: map[string]hookEvent{}}
	r.hooks.srv = httptest.NewServer(r.hooks)
	body, _ := json.Marshal(map[string]string{"url": r.hooks.srv.URL})
	adminKey := cmp.Or(r.cfg.Stack.AdminKey, devstack.DefaultAdminKey)
	return retry(ctx, func(ctx context.Context) error {
		status, raw, err := r.call(ctx, http.MethodPut, "/v1/apps/"+appName+"/webhook", adminKey, nil, body)
		if err != nil {
			return err
		}
		var out struct {
			Secret string `json:"secret"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Secret == "" {
			return fmt.Errorf("register the webhook: %d %s", status, raw)
		}
		r.hooks.mu.Lock()
		r.hooks.secret = out.Secret
		r.hooks.mu.Unlock()
		return nil
	})
}

// verifyCallbacks holds the status callbacks the webhook got to the
// accepted alerts' final status (GET /v1/messages/{id}), as
// docs/webhooks.md promises them: every change at least once — delivered
// for each recipient a device of whom has it, read for each who read it,
// answered for the answer that stands, escalated for each user an
// escalation added, expired for each escalation nobody answered — and
// nothing that did not happen. It waits for the callbacks due (their
// jobs run on the fan-out queue, a refused POST is retried after the
// stack's callback backoff) up to the converge budget.
func (r *runner) verifyCallbacks(ctx context.Context, problem func(string, ...any)) {
	want := map[string]string{} // event id → what it says
	real := map[string]bool{}   // every event id the statuses justify
	for _, a := range r.alerts {
		if !a.accepted {
			continue
		}
		for id := range a.ids {
			st, err := r.alertStatus(ctx, id)
			if err != nil {
				problem("status of alert %s: %v", a.key, err)
				continue
			}
			for _, x := range st.Recipients {
				if x.State == "delivered" || x.State == "read" {
					want[id+":delivered:"+x.UserID] = x.UserID + " has alert " + a.key
				}
				if x.State == "read" {
					want[id+":read:"+x.UserID] = x.UserID + " read alert " + a.key
				}
			}
			if st.Ack.AnsweredBy != "" {
				want[id+":answered:"+st.Ack.AnsweredBy] = st.Ack.AnsweredBy + " answered alert " + a.key + " " + st.Ack.Answer
			}
			for _, u := range a.escalate {
				want[id+":escalated:"+u] = "alert " + a.key + " escalated to " + u
			}
			if len(a.escalate) > 0 && st.Escalation.State == "ended" && st.Ack.AnsweredBy == "" {
				want[id+":expired"] = "alert " + a.key + " expired unanswered"
			}
		}
	}
	for id := range want {
		real[id] = true
	}
	missing := func() []string {
		r.hooks.mu.Lock()
		defer r.hooks.mu.Unlock()
		var out []string
		for id := range want {
			if _, ok := r.hooks.events[id]; !ok {
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out
	}
	for end, last := time.Now().Add(r.cfg.Converge), time.Now(); before(ctx, end); time.Sleep(500 * time.Millisecond) {
		m := missing()
		if len(m) == 0 {
			break
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			r.progress("chaos: waiting for %d status callbacks to reach the webhook (%s: %s)", len(m), m[0], want[m[0]])
		}
	}
	for _, id := range missing() {
		problem("status callback %s (%s) never reached the webhook", id, want[id])
	}
	r.hooks.mu.Lock()
	defer r.hooks.mu.Unlock()
	r.res.Callbacks, r.res.CallbackPosts = len(r.hooks.events), r.hooks.posts
	for _, b := range r.hooks.bad {
		problem("webhook: %s", b)
	}
	for id, e := range r.hooks.events {
		if !real[id] {
			problem("status callback %s (%s %s %s) says what the alert's status does not", id, e.Type, e.UserID, e.Answer)
		}
		if e.App != appName || !strings.HasPrefix(id, e.MessageID+":"+e.Type) {
			problem("status callback %s: body %+v does not match its id", id, e)
		}
	}
}

// alertStatusView is what the run reads of GET /v1/messages/{id}.
type alertStatusView struct {
	Recipients []struct {
		UserID string `json:"userId"`
		State  string `json:"state"`
	} `json:"recipients"`
	Ack struct {
		Answered   int    `json:"answered"`
		Answer     string `json:"answer"`
		AnsweredBy string `json:"answeredBy"`
	} `json:"ack"`
	Escalation struct {
		State string `json:"state"`
	} `json:"escalation"`
}

// alertStatus reads alert id's status.
func (r *runner) alertStatus(ctx context.Context, id string) (alertStatusView, error) {
	var out alertStatusView
	status, raw, err := r.call(ctx, http.MethodGet, "/v1/messages/"+id, r.appKey, nil, nil)
	if err != nil {
		return out, err
	}
	if status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		return out, fmt.Errorf("%d %s", status, raw)
	}
	return out, nil
}
