package chaos

import (
	"context"
	"slices"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Each user's first device now and then chooses a display state
// (SetPresence) during the storm, one call at a time, and verifyPresence
// holds the state stored at the end to the answers: the state whose frame
// API Gateway received last stands, so a frame that ran late (or a retry
// after a fault) must not undo a choice the server confirmed. Only one
// device per user chooses, one call at a time: overlapping choices are
// ordered by when API Gateway received each frame, which the run does not
// see, and netem reorders frames within a connection, which TCP never
// does (the Go SDK's own tests cover overlapping choices).

// A presenceChoice is one SetPresence call and its answer.
type presenceChoice struct {
	status    im.Status
	confirmed bool // answered, with the state chosen standing
}

var presenceStates = []im.Status{im.StatusOnline, im.StatusAway, im.StatusDND, im.StatusInvisible}

// presence has d choose a display state for its user, if d is the user's
// first device.
func (r *runner) presence(ctx context.Context, d *device) {
	if d != r.byUser[d.user][0] {
		return
	}
	c := d.client()
	if c == nil {
		return
	}
	status := presenceStates[r.intn(len(presenceStates))]
	r.dmu.Lock()
	i := len(r.chosen[d.user])
	r.chosen[d.user] = append(r.chosen[d.user], presenceChoice{status: status})
	r.dmu.Unlock()
	r.count(func(res *Result) { res.PresenceChoices++ })
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	seen, err := c.SetPresence(pctx, string(status))
	if err != nil {
		return // not answered: it may have been stored, or be stored later
	}
	// The answer is what others see: offline for an invisible user (or
	// for one whose connections the server no longer counts as live, which
	// confirms nothing).
	want := im.Presence{Chosen: status, Live: true}.Visible()
	if im.Status(seen) != want {
		return
	}
	r.dmu.Lock()
	r.chosen[d.user][i].confirmed = true
	r.dmu.Unlock()
	r.count(func(res *Result) { res.PresenceConfirmed++ })
}

// verifyPresence holds each choosing user's stored display state to their
// choices: it is the last confirmed choice's, or that of a choice made
// after it (unanswered, it may still have been stored); with no confirmed
// choice, any choice's or none (online).
func (r *runner) verifyPresence(ctx context.Context, problem func(string, ...any)) {
	r.dmu.Lock()
	chosen := make(map[im.UserID][]presenceChoice, len(r.chosen))
	for u, cs := range r.chosen {
		chosen[im.UserID(u)] = slices.Clone(cs)
	}
	r.dmu.Unlock()
	users := make([]im.UserID, 0, len(chosen))
	for u := range chosen {
		users = append(users, u)
	}
	slices.Sort(users)
	ps, err := r.st.Store.Presences(ctx, users, time.Now(), time.Hour)
	if err != nil {
		problem("read presence: %v", err)
		return
	}
	for _, p := range ps {
		cs := chosen[p.User]
		last := -1
		for i, c := range cs {
			if c.confirmed {
				last = i
			}
		}
		allowed := []im.Status{im.StatusOnline} // never stored
		if last >= 0 {
			allowed = []im.Status{cs[last].status}
		}
		for _, c := range cs[last+1:] {
			allowed = append(allowed, c.status)
		}
		stored := p.Chosen
		if stored == "" {
			stored = im.StatusOnline
		}
		r.res.PresenceChecked++
		if !slices.Contains(allowed, stored) {
			problem("%s's stored display state is %s after %d choices; the last the server confirmed was choice %d (%s), and it allows only %v",
				p.User, stored, len(cs), last+1, statusOf(cs, last), allowed)
		}
	}
}

// statusOf is choice i's state ("none" for -1).
func statusOf(cs []presenceChoice, i int) im.Status {
	if i < 0 {
		return "none"
	}
	return cs[i].status
}
