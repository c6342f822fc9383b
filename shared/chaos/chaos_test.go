package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/netem"
	"github.com/signet-im/signet/shared/testkit"
)

var network = netem.Profile{Loss: 0.05, Duplicate: 0.02, Reorder: 0.05, Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond,
	CutEvery: 10 * time.Second, BlackholeEvery: 20 * time.Second, BlackholeFor: 2 * time.Second}

// runSmall is Run on testkit.LargeTableEmulator (memdyn unless the
// environment names one) when the config names no emulator: a run's tables
// grow to thousands of items, and minidyn scans its table for every Query
// (this package took 175 s of make test on it, about 100 on memdyn). The
// run's progress goes to the test log, and its final catch-up is bounded
// by smallConverge unless the config says otherwise: a run that does not
// converge then fails listing what it waited for and what verify found,
// instead of the test binary's timeout (a small run converges in seconds;
// CI once saw one wait out the 10-minute default and the binary panic,
// saying nothing of why).
func runSmall(t *testing.T, cfg Config) (Result, error) {
	if cfg.Stack.Emulator == "" {
		cfg.Stack.Emulator = testkit.LargeTableEmulator()
	}
	if cfg.Converge == 0 {
		cfg.Converge = smallConverge
	}
	if cfg.Progress == nil {
		cfg.Progress = func(format string, a ...any) { t.Logf(format, a...) }
	}
	return Run(context.Background(), cfg)
}

// smallConverge bounds a small run's final catch-up.
const smallConverge = 4 * time.Minute

// A run interrupted (Ctrl-C, SIGTERM: its context canceled) stops and
// says so, whatever phase it was in: no verdict. Before, the sends stopped
// but the converge phase waited out its deadline re-sending with the
// canceled context, and the verification then reported its failed store
// reads as lost messages.
func TestAnInterruptedRunStopsWithoutAVerdict(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ at, phase string }{
		{"chaos: 2 users", "during the sends"},
		{"chaos: sends done", "during the converge phase"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		res, err := Run(ctx, Config{Seed: 5, Users: 2, MaxDevices: 1, Messages: 40, Network: netem.Profiles["perfect"], Converge: smallConverge,
			Stack: devstack.Options{Emulator: testkit.LargeTableEmulator()},
			Progress: func(format string, a ...any) {
				line := fmt.Sprintf(format, a...)
				t.Log(line)
				if strings.HasPrefix(line, c.at) {
					cancel()
				}
			}})
		cancel()
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), c.phase) || !strings.Contains(err.Error(), "no verdict") || len(res.Problems) > 0 {
			t.Fatalf("canceled at %q: %v (%s, problems %v); want interrupted %s, no verdict", c.at, err, res, res.Problems, c.phase)
		}
	}
}

// A small run (make chaos runs a bigger one) ends clean.
func TestSmallChaosRunReconcilesClean(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 11, Users: 5, MaxDevices: 2, Groups: 1, Messages: 60, Network: network,
		ServerFaults: 0.02, Crashes: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.OK() {
		t.Fatalf("problems:\n%s", strings.Join(res.Problems, "\n"))
	}
	if res.Acked == 0 || res.Deliveries < res.Acked || res.ServerFaults == 0 || res.Network.Dropped == 0 {
		t.Fatalf("the run exercised too little: %s", res)
	}
}

// lossyInbox acknowledges one send without storing it: the server bug the
// chaos run exists to catch.
type lossyInbox struct {
	handler.Inbox
	lost atomic.Bool
}

func (l *lossyInbox) Send(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	if !d.Conversation.IsGroup() && l.lost.CompareAndSwap(false, true) {
		m := im.Message{ID: "m-never-stored", Conversation: d.Conversation, ConvSeq: 1, From: d.From, Body: d.Body, SentAt: now}
		return im.Stored{Message: m}, nil
	}
	return l.Inbox.Send(ctx, d, now)
}

func TestChaosRunCatchesAnAckedMessageThatWasNeverStored(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 3, Users: 3, MaxDevices: 1, Messages: 15, Network: netem.Profiles["perfect"],
		Stack: devstack.Options{Configure: testkit.On("SendFunction", func(h *handler.Deps) {
			h.Inbox = &lossyInbox{Inbox: h.Inbox}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || res.Lost == 0 || !strings.Contains(strings.Join(res.Problems, "\n"), "m-never-stored") {
		t.Fatalf("the lost message went unnoticed: %s\n%v", res, res.Problems)
	}
}

// wrongGroups refuses one group send of the group's owner (whom the run's
// churn never removes) as if they were not a member: the server bug a
// refusal check exists to catch (a run counts refusals, and must not count
// that one as the churn's). Every retry of that send (its clientMsgId) is
// refused too, as such a bug would: a refusal lost with its connection (a
// reconnect storm) once let the retry be stored, and the run saw nothing.
type wrongGroups struct {
	handler.Groups
	refused *atomic.Bool            // shared by every instance of the function
	victim  *atomic.Pointer[string] // the refused send's clientMsgId
}

func (w *wrongGroups) SendGroup(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error) {
	if v := w.victim.Load(); v != nil && *v == d.ClientMsgID {
		return im.Stored{}, fmt.Errorf("chaos test, again: %w", im.ErrNotMember)
	}
	if m, err := w.Member(ctx, d.Conversation, d.From); err == nil && m.Active() && m.Role == im.RoleOwner && w.refused.CompareAndSwap(false, true) {
		w.victim.Store(&d.ClientMsgID)
		return im.Stored{}, fmt.Errorf("chaos test: %w", im.ErrNotMember)
	}
	return w.Groups.SendGroup(ctx, d, now)
}

func TestChaosRunCatchesAMemberRefusedAsANonMember(t *testing.T) {
	t.Parallel()
	// Which device makes which send depends on timing (the devices draw
	// from one generator and one send budget), and an owner whose device
	// spends the short run offline may make no group send at all (about
	// one run in ten): such a run proves nothing, and the next seed runs.
	for seed := uint64(5); seed < 10; seed++ {
		var refused atomic.Bool
		var victim atomic.Pointer[string]
		res, err := runSmall(t, Config{Seed: seed, Users: 3, MaxDevices: 1, Groups: 1, Messages: 80, Network: netem.Profiles["perfect"],
			Stack: devstack.Options{Configure: testkit.On("SendFunction", func(h *handler.Deps) {
				h.Groups = &wrongGroups{Groups: h.Groups, refused: &refused, victim: &victim}
			})}})
		if err != nil {
			t.Fatal(err)
		}
		if !refused.Load() {
			t.Logf("seed %d: the owner made no group send", seed)
			continue
		}
		if res.OK() || !strings.Contains(strings.Join(res.Problems, "\n"), "a member since the group was created") {
			t.Fatalf("the wrong refusal went unnoticed: %s\n%v", res, res.Problems)
		}
		return
	}
	t.Fatal("no run had the owner make a group send")
}

// ghostAcks stores one device's acks as another device's: the devices'
// cursors move, but the trace (derived from the ack ranges) names a device
// that has nothing and misses the one that acked.
type ghostAcks struct {
	handler.Inbox
}

func (g ghostAcks) Ack(ctx context.Context, a im.AckRange) (im.AckResult, error) {
	if a.Device == "d0" {
		if _, err := g.Inbox.Ack(ctx, a); err != nil {
			return im.AckResult{}, err
		}
		a.Device = "ghost"
	}
	return g.Inbox.Ack(ctx, a)
}

func TestChaosRunCatchesATraceThatMisnamesWhoAcked(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 3, Users: 3, MaxDevices: 1, Messages: 15, Network: netem.Profiles["perfect"],
		Stack: devstack.Options{Configure: testkit.On("AckFunction", func(h *handler.Deps) {
			h.Inbox = ghostAcks{Inbox: h.Inbox}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	problems := strings.Join(res.Problems, "\n")
	if res.OK() || res.Traces == 0 || !strings.Contains(problems, "/ghost acked it, not a device of") {
		t.Fatalf("the misnamed acks went unnoticed: %s\n%v", res, res.Problems)
	}
}

// The same with the groups read-diffused (GroupDelivery read): every
// device of every member shows each group message due to its user once,
// in order.
func TestSmallChaosRunWithReadDiffusedGroupsReconcilesClean(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 12, Users: 5, MaxDevices: 2, Groups: 2, Messages: 80, Network: network,
		ServerFaults: 0.02, Crashes: 0.02, GroupReads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.OK() {
		t.Fatalf("problems:\n%s", strings.Join(res.Problems, "\n"))
	}
	if res.Acked == 0 || res.ServerFaults == 0 || res.Network.Dropped == 0 {
		t.Fatalf("the run exercised too little: %s", res)
	}
}

// greedyReads reads every alert a user has whatever inbox seq the device
// names: alerts the user has not seen reported read, the false
// confirmation the run's alert reads exist to catch.
type greedyReads struct {
	handler.Reads
}

func (g greedyReads) ReadAlertsBefore(ctx context.Context, u im.UserID, c im.ConversationID, upTo, inboxSeq int64, now time.Time, before func([]im.MessageID, int64, int64) error) (im.AlertsRead, error) {
	return g.Reads.ReadAlertsBefore(ctx, u, c, upTo, 1<<62, now, before)
}

func TestChaosRunCatchesAlertsReadThatWereNot(t *testing.T) {
	t.Parallel()
	// Two users and four alerts: one of them has two or more, and reads
	// fewer than all.
	res, err := runSmall(t, Config{Seed: 7, Users: 2, MaxDevices: 1, Messages: 80, Network: netem.Profiles["perfect"],
		Stack: devstack.Options{Configure: testkit.On("ReadFunction", func(h *handler.Deps) {
			h.Reads = greedyReads{Reads: h.Reads}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || res.AlertReads == 0 || !strings.Contains(strings.Join(res.Problems, "\n"), "who read up to inbox") {
		t.Fatalf("alerts read beyond what the user read went unnoticed: %s\n%v", res, res.Problems)
	}
}

// skippingFanout has the fan-out function read a group alert without its
// first recipient, so its jobs skip them (as not a recipient): the fan-out
// bug the run's group alerts exist to catch. The rest of the store stays
// whole — its callback events and escalations (the fan-out function runs
// those jobs too: a wrapper that hid them failed every callback job, and
// the run then waited as long again as it converged for callbacks that
// never came) and the alert that asks for an answer (the alerts function
// puts it in inboxes itself; its callbacks are due to every recipient).
type skippingFanout struct {
	handler.AlertStore
	handler.Callbacks
	handler.Escalations
	skipped *atomic.Bool // shared by every instance of the function
}

func (s skippingFanout) Alert(ctx context.Context, id im.MessageID) (im.Alert, error) {
	a, err := s.AlertStore.Alert(ctx, id)
	if err == nil && a.Ack == nil && len(a.Recipients) > 0 {

		a.Recipients = a.Recipients[1:]
		s.skipped.Store(true)
	}
	return a, err
}

func TestChaosRunCatchesAGroupAlertTheFanoutSkipped(t *testing.T) {
	t.Parallel()
	// Alert 1 (send number 20) goes to the group; alert 2 asks for an
	// answer and is put in inboxes by the alerts function itself. The
	// skipped recipient stays queued: a short converge ends the wait.
	var skipped atomic.Bool
	res, err := runSmall(t, Config{Seed: 3, Users: 3, MaxDevices: 1, Groups: 1, Messages: 40, Network: netem.Profiles["perfect"],
		Converge: 15 * time.Second,
		Stack: devstack.Options{Configure: func(fn string, h *handler.Deps) {
			if fn == "FanoutFunction" {
				cb, _ := h.AlertStore.(handler.Callbacks)
				esc, _ := h.AlertStore.(handler.Escalations)
				h.AlertStore = skippingFanout{AlertStore: h.AlertStore, Callbacks: cb, Escalations: esc, skipped: &skipped}
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if !skipped.Load() || res.GroupAlertsChecked == 0 {
		t.Fatalf("no group alert was fanned out: %s", res)
	}
	problems := strings.Join(res.Problems, "\n")
	if res.OK() || !strings.Contains(problems, "inbox 0 times") || !strings.Contains(problems, "queued for the fan-out") {
		t.Fatalf("the skipped recipient went unnoticed: %s\n%v", res, res.Problems)
	}
}

// silentReceipts never queues the status callback jobs of acks and reads:
// the app's webhook is not told that a recipient has an alert unless the
// alert is answered or escalates (their jobs bring every event up to
// date). Dropping only the acks' jobs is not enough: a read's job, queued
// after the ack, posts the delivered event too, and whether some alert is
// acked but never read depends on the run's timing.
type silentReceipts struct{ handler.FanoutQueue }

func (s silentReceipts) Enqueue(ctx context.Context, delay time.Duration, jobs ...im.FanoutJob) error {
	jobs = slices.DeleteFunc(slices.Clone(jobs), func(j im.FanoutJob) bool { return j.Kind == im.FanoutCallback })
	if len(jobs) == 0 {
		return nil
	}
	return s.FanoutQueue.Enqueue(ctx, delay, jobs...)
}

func TestChaosRunCatchesAStatusCallbackNeverSent(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 7, Users: 2, MaxDevices: 1, Messages: 40, Network: netem.Profiles["perfect"],
		Converge: 15 * time.Second,
		Stack: devstack.Options{Configure: func(fn string, h *handler.Deps) {
			if (fn == "AckFunction" || fn == "ReadFunction") && h.FanoutQueue != nil {
				h.FanoutQueue = silentReceipts{h.FanoutQueue}
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || !strings.Contains(strings.Join(res.Problems, "\n"), ":delivered:") {
		t.Fatalf("delivered callbacks never sent went unnoticed: %s\n%v", res, res.Problems)
	}
}

// everyoneAMember makes the fan-out count every user of the run as a
// member of every group: group messages reach the inboxes of users who
// were never members, the leak the run's membership check exists to catch
// (membership churn is random; a fake that needed a removal caught
// nothing in a run that made none).
type everyoneAMember struct{ handler.Fanouts }

func (m everyoneAMember) Members(ctx context.Context, c im.ConversationID) ([]im.Member, error) {
	ms, err := m.Fanouts.Members(ctx, c)
	for i := range 4 {
		u := im.UserID(fmt.Sprintf("u%03d", i))
		if !slices.ContainsFunc(ms, func(m im.Member) bool { return m.User == u }) {
			ms = append(ms, im.Member{User: u, Role: im.RoleMember})
		}
	}
	return ms, err
}

func TestChaosRunCatchesAGroupMessageHeldOutsideAMembership(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 4, Users: 4, MaxDevices: 1, Groups: 2, Messages: 80, Network: netem.Profiles["perfect"],
		Stack: devstack.Options{Parameters: map[string]string{"GroupDelivery": "write"}, Configure: testkit.On("FanoutFunction", func(h *handler.Deps) {
			h.Fanouts = everyoneAMember{h.Fanouts}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.OK() || res.Leaked == 0 || !slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "was not a member") }) {
		t.Fatalf("the leak went unnoticed (%d group changes): %s", res.GroupOps, res)
	}
}

// Every group change of the run fails once after it was stored: with op
// ids each asked again is answered as the first and the run is clean;
// stored without them, the run catches the answers that name nobody.
func TestChaosRunHoldsGroupChangeAnswersToWhomTheyChanged(t *testing.T) {
	t.Parallel()
	for _, withoutOpID := range []bool{false, true} {
		var failed sync.Map
		res, err := runSmall(t, Config{Seed: 5, Users: 4, MaxDevices: 1, Groups: 4, Messages: 60, Churn: 0.3, Network: netem.Profiles["perfect"],
			Stack: devstack.Options{Configure: testkit.On("GroupFunction", func(h *handler.Deps) {
				h.Groups = testkit.GroupChangeStoredThenFailed{Groups: h.Groups, Failed: &failed, WithoutOpID: withoutOpID}
			})}})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res)
		caught := slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "group change answer") })
		switch {
		case res.GroupAnswers == 0:
			t.Fatalf("no group change answer was checked (%d changes): %s", res.GroupOps, res)
		case !withoutOpID && !res.OK():
			t.Fatalf("with op ids: %s\n%v", res, res.Problems)
		case withoutOpID && !caught:
			t.Fatalf("answers of changes stored without their op id went unnoticed: %s\n%v", res, res.Problems)
		}
	}
}

// undoingPresence stores each display state chosen, then, a moment after
// the answer, another one (the one it replaced, or away or dnd when that
// was none or the same): what a late copy of an older presence frame would
// do if the server did not keep the state received last.
type undoingPresence struct {
	handler.PresenceStore
}

func (p *undoingPresence) SetStatus(ctx context.Context, u im.UserID, status im.Status, at time.Time) (im.Status, bool, error) {
	old, applied, err := p.PresenceStore.SetStatus(ctx, u, status, at)
	if err == nil && applied {
		undo := old
		if undo == "" || undo == status {
			undo = im.StatusAway
			if status == im.StatusAway {
				undo = im.StatusDND
			}
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			_, _, _ = p.PresenceStore.SetStatus(context.Background(), u, undo, time.Now())
		}()
	}
	return old, applied, err
}

// The run holds each user's stored display state to the choices the
// server confirmed: a state undone after its answer is caught.
func TestChaosRunCatchesADisplayStateUndoneAfterItsAnswer(t *testing.T) {
	t.Parallel()
	res, err := runSmall(t, Config{Seed: 5, Users: 2, MaxDevices: 1, Messages: 30, Presence: 0.3, Network: netem.Profiles["perfect"],
		Stack: devstack.Options{Configure: testkit.On("PresenceFunction", func(h *handler.Deps) {
			h.Presences = &undoingPresence{PresenceStore: h.Presences}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.OK() || res.PresenceChoices == 0 || !strings.Contains(strings.Join(res.Problems, "\n"), "stored display state") {
		t.Fatalf("the undone display state went unnoticed: %s\n%v", res, res.Problems)
	}
}
