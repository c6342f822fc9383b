// Package chaos runs a seeded chaos test of the whole system: many users
// and devices on the Go SDK, 1:1 conversations and groups with membership
// churn, behind a weak network (netem) that drops, delays, duplicates and
// reorders frames, cuts connections and blackholes them; devices that go
// offline, crash between persisting and acking, retry sends (the same
// clientMsgId before and after the ACK, from another device), reconnect
// storms; and faults on the server side through the local stack's seams
// (AWS calls failing mid-handler as a crash between two steps would, lost,
// gone and failing pushes, duplicated and delayed queue messages).
//
// It ends by reconciling (消息流水核对) every ACKed message against every
// device's journal: 0 lost, 0 shown twice, 0 out of order (per inbox seq
// and per conversation), every retry one messageId.
package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/netem"
	"github.com/signet-im/signet/shared/reconcile"
	"github.com/signet-im/signet/shared/wire"
)

// Config sizes a run.
type Config struct {
	// Seed drives every random choice (faults, actions, network).
	Seed uint64
	// Users, MaxDevices (1..MaxDevices per user, drawn) and Groups.
	Users, MaxDevices, Groups int
	// Messages is how many distinct sends the run makes.
	Messages int
	// Network is the netem profile between devices and the API.
	Network netem.Profile
	// ServerFaults is the probability that an AWS call or a push of a
	// function fails (injected); Crashes the probability per received
	// entry that the device crashes at one of its crash points.
	ServerFaults, Crashes float64
	// Stack configures the local stack (endpoints, concurrency); the run
	// adds its fault seams.
	Stack devstack.Options
	// Dir is where the run's temporary directory of device stores goes
	// (os.TempDir when empty); it is removed at the end.
	Dir string
	// GroupReads runs the stack with GroupDelivery read (without it,
	// write): the run's groups are read-diffused
	// (docs/proposal-group-read-diffusion.md), and each device's group
	// messages are reconciled against the group's log and membership
	// instead of its inbox.
	GroupReads bool
	// Converge bounds the final catch-up (default 10 min).
	Converge time.Duration
	// Churn is the share of a device's actions that change a group (an
	// owner's add, removal or role change, a member's leave), besides the
	// 6 % every run makes (0: none more), for runs that need many group
	// changes.
	Churn float64
	// Presence is the share of a device's actions that choose a display
	// state (each user's first device only), besides the 2 % every run
	// makes (0: none more), for runs that need many choices.
	Presence float64
	// MemProfile, when set, is where a heap profile is written after the
	// verification, with the stack still up.
	MemProfile string
	// Progress receives a line now and then (nil: quiet).
	Progress func(format string, a ...any)
}

// Result is what a run did and found.
type Result struct {
	Seed                               uint64
	Users, Devices, Groups             int
	Sent, Acked, Refused, Retries      int
	Deliveries                         int // entries shown on devices
	WakeUps                            int // wake-ups published to the devices' SNS endpoints
	Crashes, Offline, Storms, GroupOps int
	// AddedBack counts the group changes that added a removed member back,
	// Leaves those by which a member left, RoleChanges those of a role.
	AddedBack, Leaves, RoleChanges int
	// GroupAnswers counts the group changes whose answer was held to what
	// the run knew of the member before (changed names them exactly when
	// the change was theirs: also when it was asked again after a fault).
	GroupAnswers                         int
	ServerFaults                         int64
	Network                              netem.Snapshot
	Lost, Duplicated, Reordered, Unacked int
	IdempotencyViolations                int
	// Leaked counts group messages an inbox or a device held that were
	// sent while the user was not a member.
	Leaked int
	// Traces is how many ACKed 1:1 messages' traces were held to the
	// devices' acks (verifyTraces), TraceAcks the acked events they named.
	Traces, TraceAcks int
	// Alerts is how many alerts the run's app posted over HTTPS,
	// AlertsAccepted how many the API accepted (each verified as a send).
	Alerts, AlertsAccepted int
	// Escalations is how many accepted alerts escalated (to more users,
	// pushed again, ended), each verified in every inbox it reached.
	Escalations int
	// GroupAlerts is how many alerts went to a group (through the fan-out
	// queue), GroupAlertsChecked how many accepted ones were held to the
	// group's membership and found in every recipient's inbox.
	GroupAlerts, GroupAlertsChecked int
	// Answers is how many alerts that asked for an answer (first answer
	// wins) had every recipient answer at once, checked (verifyAnswers).
	Answers int
	// AlertReads is how many users marked a prefix of their alerts read
	// (verifyAlertReads), LateAlerts how many alerts their devices showed
	// after an alert with a higher convSeq.
	AlertReads, LateAlerts int
	// Callbacks is how many distinct status callbacks the app's webhook
	// took (each verified: signed, justified by the alert's status, every
	// one due received), CallbackPosts how many POSTs it took in all.
	Callbacks, CallbackPosts int
	// PresenceChoices is how many display states the users' first devices
	// chose, PresenceConfirmed how many the server's answer said stood,
	// PresenceChecked how many users' stored state was held to the answers
	// (verifyPresence).
	PresenceChoices, PresenceConfirmed, PresenceChecked int
	Elapsed                                             time.Duration
	// Problems lists each fault found (empty on success).
	Problems []string
}

// OK reports a clean run.
func (r Result) OK() bool { return len(r.Problems) == 0 }

func (r Result) String() string {
	verdict := "OK"
	if !r.OK() {
		verdict = fmt.Sprintf("FAILED (%d problems)", len(r.Problems))
	}
	return fmt.Sprintf(`chaos seed %d: %s in %s
  %d users, %d devices, %d groups
  sends: %d made, %d ACKed, %d refused, %d retried with the same clientMsgId; alerts: %d posted over HTTPS, %d accepted, %d escalated, %d answered by every recipient at once, %d to a group (%d checked)
  deliveries: %d shown on devices, %d wake-ups of offline devices
  faults: %d device crashes, %d offline periods, %d reconnect storms, %d group changes (%d added a removed member back, %d leaves, %d role changes; %d answers checked), %d server-side faults
  network: %s
  reconciled: %d lost, %d duplicated, %d reordered, %d unACKed, %d idempotency violations, %d held outside a membership
  traces: %d checked against the devices' cursors, naming %d device acks
  alert reads: %d users read a prefix of their alerts (%d alerts came after a later one), statuses checked
  status callbacks: %d events (%d POSTs taken), each due one received
  presence: %d display states chosen (%d confirmed by the answer); %d users' stored state held to the answers`,
		r.Seed, verdict, r.Elapsed.Round(time.Second), r.Users, r.Devices, r.Groups, r.Sent, r.Acked, r.Refused, r.Retries, r.Alerts, r.AlertsAccepted, r.Escalations, r.Answers, r.GroupAlerts, r.GroupAlertsChecked,
		r.Deliveries, r.WakeUps, r.Crashes, r.Offline, r.Storms, r.GroupOps, r.AddedBack, r.Leaves, r.RoleChanges, r.GroupAnswers, r.ServerFaults, r.Network,
		r.Lost, r.Duplicated, r.Reordered, r.Unacked, r.IdempotencyViolations, r.Leaked, r.Traces, r.TraceAcks, r.AlertReads, r.LateAlerts, r.Callbacks, r.CallbackPosts,
		r.PresenceChoices, r.PresenceConfirmed, r.PresenceChecked)
}

// draft is one distinct send and what came of it.
type draft struct {
	d    client.Draft
	user string
	// dev, for a DeviceOnly draft (its id is only ever sent from one
	// device: the send says "seen" and the server keeps no idempotency
	// item), is the device that sends and retries it; nil: any device of
	// the user may retry it.
	dev     *device
	mu      sync.Mutex
	ids     map[string]bool // messageIds the server answered (one, unless idempotency broke)
	sent    client.Sent
	acked   bool
	refused *client.ServerError // the server's refusal, if it refused the send before any ACK
	// refusedAfterAck is a refusal of a retry of the send after it was
	// ACKed: the server answers such a retry with what it stored.
	refusedAfterAck *client.ServerError
	lastErr         string // why the last settling attempt failed (converge)
}

func (d *draft) done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked || d.refused != nil
}

func (d *draft) settle(s client.Sent, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var se *client.ServerError
	switch {
	case err == nil:
		d.ids[s.MessageID] = true
		d.sent, d.acked = s, true
	case errors.As(err, &se) && d.acked:
		d.refusedAfterAck = se
	case errors.As(err, &se):
		d.refused = se // e.g. sending into a group one was removed from (verify checks why)
	}
}

// device is one device of a user, restarted as often as it crashes.
type device struct {
	run     *runner
	user    string
	name    string
	path    string
	mu      sync.Mutex
	c       *client.Client
	shown   int64 // highest seq shown: Options.ShownUpTo on restart
	journal []reconcile.Entry
	// groups holds what the device showed of each read-diffused group
	// (messages without an inbox seq), in the order shown.
	groups map[string][]reconcile.Entry
	// shownGroups is the highest convSeq shown of each such group:
	// Options.ShownGroups on restart.
	shownGroups map[string]int64
	exited      chan struct{} // closed when the current client's Messages closes
	registered  bool          // registered for wake-ups (once: the server keeps it)
}

type runner struct {
	cfg   Config
	st    *devstack.Stack
	proxy *netem.Proxy
	// proxySrv serves the proxy to the devices (closed when Run returns).
	proxySrv *httptest.Server
	url      string
	faults   atomic.Bool // server-side faults on
	// answering waits for the recipients answering alerts (answerAll).
	answering sync.WaitGroup
	nfaults   atomic.Int64
	rngMu     sync.Mutex
	rng       *rand.Rand
	devices   []*device
	byUser    map[string][]*device
	groups    []string
	owners    map[string]string // group → owner
	// members are each group's members at its creation; changed holds
	// "group/user" for every membership change the run asked for (made
	// or not: an answer lost on the network may hide one that was made).
	members map[string]map[string]bool
	changed map[string]bool
	// member holds "group/user" → whether they are a member, as the
	// server's answers to the run's changes of them say (none: as at the
	// group's creation; false: removed, or left — churn adds such members
	// back half the time: a member removed and added again keeps what was
	// sent to them before); roles the role the run last gave them (none:
	// member).
	member map[string]bool
	roles  map[string]string
	// groupMu serializes the run's changes of each group, so that what it
	// knew of a member before a change still holds when it is answered;
	// unsure holds "group/user" once a change of theirs went unanswered
	// (it may still be made later), and their answers are no longer held
	// to what the run knew; answerFaults are the answers that were not.
	groupMu      map[string]*sync.Mutex
	unsure       map[string]bool
	answerFaults []string
	drafts       []*draft
	mine         map[string][]*draft         // user → their drafts (retries pick from these)
	chosen       map[string][]presenceChoice // user → the display states their first device chose, in order
	alerts       []*alert
	appKey       string
	hooks        *hooks // the app's webhook
	dmu          sync.Mutex
	res          Result
	rmu          sync.Mutex
	next         atomic.Int64 // next message number
}

func (r *runner) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *runner) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *runner) count(f func(*Result)) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	f(&r.res)
}

// result is the run's result so far, read under its lock: a run that
// returns early (an interrupt) returns while its devices still count what
// they are shown (they stop after, deferred).
func (r *runner) result() Result {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.res
}

func (r *runner) progress(format string, a ...any) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(format, a...)
	}
}

// Run runs the chaos test described by cfg.
func Run(ctx context.Context, cfg Config) (Result, error) {
	start := time.Now()
	cfg.defaults()
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 1)), byUser: map[string][]*device{}, mine: map[string][]*draft{}, chosen: map[string][]presenceChoice{}, owners: map[string]string{},
		members: map[string]map[string]bool{}, changed: map[string]bool{}, member: map[string]bool{}, roles: map[string]string{}, groupMu: map[string]*sync.Mutex{}, unsure: map[string]bool{}}
	r.res.Seed = cfg.Seed
	{
		dir, err := os.MkdirTemp(cfg.Dir, "signet-chaos-")
		if err != nil {
			return r.result(), err
		}
		defer os.RemoveAll(dir)
		r.cfg.Dir = dir
	}
	if err := r.start(ctx); err != nil {
		return r.result(), err
	}
	defer r.st.Close()
	defer r.proxySrv.Close()
	// However Run returns (an interrupt too), no device goes on
	// reconnecting after it.
	defer func() {
		for _, d := range r.devices {
			d.stop()
		}
	}()
	err := r.populate(ctx)
	if r.hooks != nil {
		defer r.hooks.srv.Close()
	}
	if err != nil {
		return r.result(), err
	}
	r.progress("chaos: %d users, %d devices, %d groups; %d messages under %s", len(r.byUser), len(r.devices), len(r.groups), cfg.Messages, cfg.Network)
	r.faults.Store(true)
	r.storm(ctx)
	r.faults.Store(false)
	if err := interrupted(ctx, "the sends", start); err != nil {
		return r.result(), err
	}
	r.proxy.SetProfile(netem.Profiles["perfect"])
	r.progress("chaos: sends done; faults off; converging")
	r.converge(ctx)
	if err := interrupted(ctx, "the converge phase", start); err != nil {
		return r.result(), err
	}
	r.verify(ctx)
	if err := interrupted(ctx, "the verification", start); err != nil {
		return r.result(), err
	}
	if cfg.MemProfile != "" {
		if err := writeHeap(cfg.MemProfile); err != nil {
			return r.result(), err
		}
	}
	for _, d := range r.devices {
		d.stop()
	}
	r.res.Network = r.proxy.Stats()
	r.res.ServerFaults = r.nfaults.Load()
	for _, f := range r.st.Faults() {
		r.res.Problems = append(r.res.Problems, "stack fault: "+f)
	}
	r.res.Elapsed = time.Since(start)
	return r.res, nil
}

// interrupted is the error of a run whose ctx ended during phase (an
// interrupt, SIGTERM): what it had checked by then is no verdict, and its
// store reads fail with the context.
func interrupted(ctx context.Context, phase string, start time.Time) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("interrupted during %s, %s after the start: no verdict: %w", phase, time.Since(start).Round(time.Second), context.Cause(ctx))
}

// before reports whether a wait until deadline may go on: the deadline
// has not passed and the run was not interrupted.
func before(ctx context.Context, deadline time.Time) bool {
	return ctx.Err() == nil && time.Now().Before(deadline)
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

func (c *Config) defaults() {
	if c.Users <= 0 {
		c.Users = 8
	}
	if c.MaxDevices <= 0 {
		c.MaxDevices = 2
	}
	if c.Messages <= 0 {
		c.Messages = 200
	}
	if c.Converge <= 0 {
		c.Converge = 10 * time.Minute
	}
}

// start runs the local stack with fault seams and the netem proxy.
func (r *runner) start(ctx context.Context) error {
	o := r.cfg.Stack
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("chaos%d", time.Now().UnixNano())
	}
	if o.Redelivery == nil {
		o.Redelivery = &im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}}
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = 50 * time.Millisecond
	}
	// Offline push on, as signet local has it: every message to a user
	// with no connection, and every redelivery that gives up, enqueues a
	// wake job, and a job its consumer cannot read is a stack fault (a
	// read-diffused group's wake job once was, unnoticed).
	params := map[string]string{"GroupDelivery": "write", "OfflinePush": "on"}
	if r.cfg.GroupReads {
		params["GroupDelivery"] = "read"
	}
	maps.Copy(params, o.Parameters)
	o.Parameters = params
	if o.PollWait == 0 {
		o.PollWait = 200 * time.Millisecond
	}
	if o.VisibilityTimeout == 0 {
		// A job a failed invocation left (its retry wait not set: an
		// injected failure of the function's ChangeMessageVisibility)
		// returns after 30 s, not the template's 3 minutes: the least AWS
		// allows with the fan-out function's 30 s timeout.
		o.VisibilityTimeout = 30 * time.Second
	}
	if o.CallbackBackoff == nil {
		// A webhook POST refused during the faults is tried again within
		// seconds (the template's waits start at 10 s and grow to hours).
		o.CallbackBackoff = []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	}
	if o.RateLimits == "" {
		// The run's users act far faster than people: a user's devices
		// send 2–3 messages a second without pause and reconnect dozens of
		// times a minute (offline periods, crashes, storms). The per-user
		// abuse limits (send 120/min, connect 60/min) would hold their
		// sends past the harness's 20 s wait, and refuse their handshakes,
		// and the run would measure the limits, not delivery. They are
		// tested on their own (devstack abuse tests); Config.Stack.RateLimits
		// (signet chaos --rate-limits) keeps them.
		o.RateLimits = "off"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.HandlerAPIOptions = append(o.HandlerAPIOptions, r.failCalls)
	prev := o.Configure
	o.Configure = func(fn string, h *handler.Deps) {
		if prev != nil {
			prev(fn, h)
		}
		if h.Pusher != nil {
			h.Pusher = &faultyPusher{Pusher: h.Pusher, r: r}
		}
		if h.Scheduler != nil {
			h.Scheduler = &faultyScheduler{Scheduler: h.Scheduler, r: r}
		}
		if h.FanoutQueue != nil {
			h.FanoutQueue = &faultyQueue{FanoutQueue: h.FanoutQueue, r: r}
		}
	}
	st, err := devstack.Start(ctx, o)
	if err != nil {
		return err
	}
	r.st = st
	r.proxy = netem.New(st.URL, r.cfg.Network, r.cfg.Seed)
	r.proxy.Log = o.Log
	r.proxySrv = httptest.NewServer(r.proxy)
	r.url = "ws" + strings.TrimPrefix(r.proxySrv.URL, "http") + "/"
	return nil
}

// inject decides whether this call or push fails.
func (r *runner) inject() bool {
	if r.faults.Load() && r.float() < r.cfg.ServerFaults {
		r.nfaults.Add(1)
		return true
	}
	return false
}

var errInjected = errors.New("chaos: injected fault")

// failCalls makes AWS calls fail before they are sent, as if the handler
// crashed (or its call timed out) between two steps: every step after it
// is not done.
func (r *runner) failCalls(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("chaos-fault",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if r.inject() {
				return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// faultyPusher loses, refuses (410) or fails pushes.
type faultyPusher struct {
	handler.Pusher
	r *runner
}

func (p *faultyPusher) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	if p.r.inject() {
		switch p.r.intn(3) {
		case 0:
			return nil // lost on the way
		case 1:
			return fmt.Errorf("chaos: %w", im.ErrGone)
		default:
			return errInjected
		}
	}
	return p.Pusher.Push(ctx, id, data)
}

// faultyScheduler delivers redelivery checks twice or late.
type faultyScheduler struct {
	handler.Scheduler
	r *runner
}

func (s *faultyScheduler) Schedule(ctx context.Context, c []im.Check, delay time.Duration) error {
	if s.r.inject() {
		if s.r.intn(2) == 0 {
			_ = s.Scheduler.Schedule(ctx, c, delay) // an SQS duplicate
		} else {
			delay += time.Duration(1+s.r.intn(3)) * time.Second // delayed
		}
	}
	return s.Scheduler.Schedule(ctx, c, delay)
}

// faultyQueue delivers fan-out jobs twice or late.
type faultyQueue struct {
	handler.FanoutQueue
	r *runner
}

func (q *faultyQueue) Enqueue(ctx context.Context, delay time.Duration, jobs ...im.FanoutJob) error {
	if q.r.inject() {
		if q.r.intn(2) == 0 {
			_ = q.FanoutQueue.Enqueue(ctx, delay, jobs...)
		} else {
			delay += time.Duration(1+q.r.intn(3)) * time.Second
		}
	}
	return q.FanoutQueue.Enqueue(ctx, delay, jobs...)
}

// populate creates devices and groups.
func (r *runner) populate(ctx context.Context) error {
	for i := range r.cfg.Users {
		user := fmt.Sprintf("u%03d", i)
		for j := range 1 + r.intn(r.cfg.MaxDevices) {
			d := &device{run: r, user: user, name: fmt.Sprintf("d%d", j), path: filepath.Join(r.cfg.Dir, user, fmt.Sprintf("d%d.db", j))}
			r.devices = append(r.devices, d)
			r.byUser[user] = append(r.byUser[user], d)
		}
	}
	r.res.Users, r.res.Devices = len(r.byUser), len(r.devices)
	for _, d := range r.devices {
		if err := d.start(ctx); err != nil {
			return err
		}
	}
	for g := range r.cfg.Groups {
		owner := fmt.Sprintf("u%03d", r.intn(r.cfg.Users))
		var members []string
		for i := range r.cfg.Users {
			if u := fmt.Sprintf("u%03d", i); u != owner && r.intn(2) == 0 {
				members = append(members, u)
			}
		}
		// One id for every try: a try that timed out after the server
		// created the group is answered as the first, not made again.
		var info client.GroupInfo
		id := client.NewGroupID()
		err := retry(ctx, func(ctx context.Context) (err error) {
			info, err = r.byUser[owner][0].client().CreateGroupWithID(ctx, id, fmt.Sprintf("chaos-%d", g), members...)
			return err
		})
		if err != nil {
			return fmt.Errorf("create group: %w", err)
		}
		r.groups = append(r.groups, info.ConversationID)
		r.owners[info.ConversationID] = owner
		r.members[info.ConversationID] = map[string]bool{owner: true}
		for _, u := range members {
			r.members[info.ConversationID][u] = true
		}
	}
	r.res.Groups = len(r.groups)
	if err := r.createApp(ctx); err != nil {
		return err
	}
	return r.registerHook(ctx)
}

// retry retries a query until it succeeds (the network drops frames).
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for range 20 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (d *device) options() client.Options {
	return client.Options{
		URL: d.run.url, Device: d.name, Path: d.path,
		Token: func(context.Context) (string, error) {
			return auth.Mint([]byte(devstack.DefaultSecret), im.UserID(d.user), im.DeviceID(d.name), time.Now(), time.Hour)
		},
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 2 * time.Second, ResendAfter: 2 * time.Second,
		PingInterval: 10 * time.Second, PongTimeout: 5 * time.Second,
		Replay: true, ShownUpTo: d.shown, ShownGroups: maps.Clone(d.shownGroups),
		CrashAt: func(client.CrashPoint, int64) bool {
			return d.run.faults.Load() && d.run.float() < d.run.cfg.Crashes
		},
	}
}

// start opens the device's client and records what it shows. It first
// waits until the previous client's messages are all recorded: stop
// clears d.c before that client is closed and drained, and a restart in
// between (an answer or a send from another goroutine) could open the
// same store with a ShownUpTo below what the old one was still handing
// over, and replay a message the old one then showed too: the likely
// cause (read from the code, not reproduced) of the device that showed
// its seq 1 twice in a 20,000-message chaos run.
func (d *device) start(ctx context.Context) error {
	d.mu.Lock()
	prev := d.exited
	running := d.c != nil
	d.mu.Unlock()
	if running {
		return nil
	}
	if prev != nil {
		<-prev
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c != nil {
		return nil
	}
	var c *client.Client
	err := retry(ctx, func(ctx context.Context) (err error) {
		c, err = client.Dial(ctx, d.options())
		return err
	})
	if err != nil {
		return fmt.Errorf("device %s/%s: %w", d.user, d.name, err)
	}
	d.c, d.exited = c, make(chan struct{})
	exited := d.exited
	if !d.registered {
		// Registered for wake-ups, best effort (again on the next start
		// if the faults cut it): the hints function then publishes to
		// the device's SNS endpoint while it is offline.
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.Register(rctx, "fcm", d.token()) == nil {
				d.mu.Lock()
				d.registered = true
				d.mu.Unlock()
			}
		}()
	}
	go func() {
		defer close(exited)
		for m := range c.Messages() {
			e := reconcile.Entry{Seq: m.Seq, MessageID: m.MessageID, Conversation: m.ConversationID, ConvSeq: m.ConvSeq, From: m.From}
			d.mu.Lock()
			if m.Seq == 0 {
				if d.groups == nil {
					d.groups = map[string][]reconcile.Entry{}
				}
				d.groups[m.ConversationID] = append(d.groups[m.ConversationID], e)
				if d.shownGroups == nil {
					d.shownGroups = map[string]int64{}
				}
				d.shownGroups[m.ConversationID] = max(d.shownGroups[m.ConversationID], m.ConvSeq)
			} else {
				d.journal = append(d.journal, e)
			}
			d.shown = max(d.shown, m.Seq)
			d.mu.Unlock()
			d.run.count(func(r *Result) { r.Deliveries++ })
		}
	}()
	return nil
}

// token is the device token the device registers for wake-ups.
func (d *device) token() string { return "chaos-" + d.user + "-" + d.name }

// client returns the running client, restarting the device if it crashed.
func (d *device) client() *client.Client {
	d.mu.Lock()
	c, exited := d.c, d.exited
	d.mu.Unlock()
	if c != nil {
		select {
		case <-exited:
			// Crashed (CrashAt): restart from the same store.
			d.mu.Lock()
			if d.c == c {
				d.c = nil
			}
			d.mu.Unlock()
			d.run.count(func(r *Result) { r.Crashes++ })
			c = nil
		default:
			return c
		}
	}
	if err := d.start(context.Background()); err != nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.c
}

func (d *device) stop() {
	d.mu.Lock()
	c, exited := d.c, d.exited
	d.c = nil
	d.mu.Unlock()
	if c != nil {
		c.Close()
		<-exited
	}
}

// storm runs every device's actions until all messages are sent.
func (r *runner) storm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range r.devices {
		wg.Go(func() { r.act(ctx, d) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			r.rmu.Lock()
			deliveries, crashes := r.res.Deliveries, r.res.Crashes
			r.rmu.Unlock()
			r.progress("chaos: %d/%d sends started, %d shown on devices, %d crashes, %d server faults; network %s",
				min(r.next.Load(), int64(r.cfg.Messages)), r.cfg.Messages, deliveries, crashes, r.nfaults.Load(), r.proxy.Stats())
		}
	}
}

// act is one device's life: mostly sends, sometimes a retry of an earlier
// send, an offline period, a display state chosen, a reconnect storm or a
// group change.
func (r *runner) act(ctx context.Context, d *device) {
	for ctx.Err() == nil {
		if r.cfg.Churn > 0 && r.float() < r.cfg.Churn {
			r.churn(ctx, d)
			continue
		}
		if r.cfg.Presence > 0 && r.float() < r.cfg.Presence {
			r.presence(ctx, d)
			continue
		}
		switch p := r.float(); {
		case p < 0.80:
			n := r.next.Add(1)
			if n > int64(r.cfg.Messages) {
				return
			}
			if n%alertEvery == 0 {
				_ = r.post(ctx, r.newAlert(n))
				continue
			}
			_ = r.send(ctx, d, r.newDraft(d, n))
		case p < 0.87:
			if dr := r.pastDraft(d.user); dr != nil {
				r.count(func(res *Result) { res.Retries++ })
				_ = r.send(ctx, dr.sender(d), dr)
			}
		case p < 0.91:
			d.stop()
			r.count(func(res *Result) { res.Offline++ })
			time.Sleep(time.Duration(200+r.intn(3000)) * time.Millisecond)
		case p < 0.93:
			r.presence(ctx, d)
		case p < 0.94:
			r.proxy.CutAll()
			r.count(func(res *Result) { res.Storms++ })
		default:
			r.churn(ctx, d)
		}
	}
}

// newDraft makes send number n, from device d's user. Every other one is
// DeviceOnly: retried from d alone, as an SDK-made clientMsgId is.
func (r *runner) newDraft(d *device, n int64) *draft {
	user := d.user
	dr := &draft{user: user, ids: map[string]bool{}, d: client.Draft{ClientMsgID: fmt.Sprintf("%s-%d", user, n), Body: []byte(fmt.Sprintf(`{"n":%d}`, n))}}
	if n%2 == 0 {
		dr.d.DeviceOnly, dr.dev = true, d
	}
	if len(r.groups) > 0 && r.intn(3) == 0 {
		dr.d.ConversationID = r.groups[r.intn(len(r.groups))]
	} else {
		for {
			if peer := fmt.Sprintf("u%03d", r.intn(r.cfg.Users)); peer != user || r.cfg.Users == 1 {
				dr.d.To = peer
				break
			}
		}
	}
	r.dmu.Lock()
	r.drafts = append(r.drafts, dr)
	r.mine[user] = append(r.mine[user], dr)
	r.dmu.Unlock()
	r.count(func(res *Result) { res.Sent++ })
	return dr
}

// sender is the device that sends dr now: its own device if it has one,
// else d.
func (dr *draft) sender(d *device) *device {
	if dr.dev != nil {
		return dr.dev
	}
	return d
}

// pastDraft picks an earlier send of user (to retry, ACKed or not).
func (r *runner) pastDraft(user string) *draft {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	mine := r.mine[user]
	if len(mine) == 0 {
		return nil
	}
	return mine[r.intn(len(mine))]
}

// send sends (or re-sends) a draft from device d and records the answer;
// it returns why the draft is still not settled, if it is not.
func (r *runner) send(ctx context.Context, d *device, dr *draft) error {
	c := d.client()
	if c == nil {
		return errors.New("device not running")
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := c.SendDraft(sctx, dr.d)
	if err == nil || errors.As(err, new(*client.ServerError)) {
		dr.settle(s, err)
		return nil
	}
	return err
}

// isMember reports whether u is a member of g as far as the run knows:
// as the answer to its last change of them said, or as at the group's
// creation. The caller holds dmu.
func (r *runner) isMember(g, u string) bool {
	if m, ok := r.member[g+"/"+u]; ok {
		return m
	}
	return r.members[g][u]
}

// A groupChange is one kind of change churn asks for.
type groupChange string

const (
	churnAdd    groupChange = "add"
	churnRemove groupChange = "remove"
	churnLeave  groupChange = "leave"
	churnRole   groupChange = "role"
)

// churn changes a group: mostly its owner adds or removes a member, now
// and then makes a member an admin or a member again, or a member who does
// not own it leaves it.
func (r *runner) churn(ctx context.Context, d *device) {
	var mine, others []string // others: groups d's user is a member of and does not own
	r.dmu.Lock()
	for _, g := range r.groups {
		switch {
		case r.owners[g] == d.user:
			mine = append(mine, g)
		case r.isMember(g, d.user):
			others = append(others, g)
		}
	}
	r.dmu.Unlock()
	kind := churnRemove
	switch p := r.intn(8); {
	case p == 0:
		kind = churnLeave
	case p == 1:
		kind = churnRole
	case p < 5:
		kind = churnAdd
	}
	if kind == churnLeave {
		if len(others) > 0 {
			r.changeGroup(ctx, d, others[r.intn(len(others))], d.user, kind, "")
		}
		return
	}
	if len(mine) == 0 {
		return
	}
	g := mine[r.intn(len(mine))]
	peer := fmt.Sprintf("u%03d", r.intn(r.cfg.Users))
	r.dmu.Lock()
	var gone []string
	for k, m := range r.member {
		if u, ok := strings.CutPrefix(k, g+"/"); ok && !m {
			gone = append(gone, u)
		}
	}
	r.dmu.Unlock()
	if kind == churnAdd && len(gone) > 0 && r.intn(4) != 0 {
		// Mostly someone removed, back again: the member record's earlier
		// memberships are where a fan-out or a device can go wrong.
		slices.Sort(gone)
		peer = gone[r.intn(len(gone))]
	}
	if peer == d.user {
		return
	}
	role := ""
	if kind == churnRole {
		// Of a member, as far as the run knows: a role change of anyone
		// else is refused.
		r.dmu.Lock()
		var now []string
		for i := range r.cfg.Users {
			if u := fmt.Sprintf("u%03d", i); u != d.user && r.isMember(g, u) {
				now = append(now, u)
			}
		}
		r.dmu.Unlock()
		if len(now) == 0 {
			return
		}
		slices.Sort(now)
		peer, role = now[r.intn(len(now))], []string{"admin", "member"}[r.intn(2)]
	}
	r.changeGroup(ctx, d, g, peer, kind, role)
}

// changeGroup asks for one change of peer's membership of g from device d
// (role: the role a role change gives) and holds its answer to what the
// run knew of peer before: changed names peer exactly when the change was
// theirs to make (an add of a non-member, a removal or leave of a member,
// a role change of a member who had another role), also when the SDK
// asked again after a fault; a leave of a member is not refused.
func (r *runner) changeGroup(ctx context.Context, d *device, g, peer string, kind groupChange, role string) {
	c := d.client()
	if c == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := g + "/" + peer
	r.dmu.Lock()
	mu := r.groupMu[g]
	if mu == nil {
		mu = &sync.Mutex{}
		r.groupMu[g] = mu
	}
	r.dmu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	r.dmu.Lock()
	sure, wasMember := !r.unsure[key], r.isMember(g, peer)
	wasRole := cmp.Or(r.roles[key], "member")
	if kind != churnRole {
		r.changed[key] = true // a role change leaves membership as it was
	}
	r.dmu.Unlock()
	var (
		ans client.GroupInfo
		err error
	)
	switch kind {
	case churnAdd:
		ans, err = c.AddMembers(cctx, g, "member", peer)
	case churnRemove:
		ans, err = c.RemoveMembers(cctx, g, peer)
	case churnLeave:
		ans, err = c.LeaveGroup(cctx, g)
	case churnRole:
		ans, err = c.SetRole(cctx, g, role, peer)
	}
	// Refused (forbidden, not_member, bad_request), the change was not
	// made; failed (internal, rate_limited after the SDK's retries) or
	// unanswered, it may have been.
	var se *client.ServerError
	refused := errors.As(err, &se) && se.Code != wire.CodeInternal && se.Code != wire.CodeRateLimited
	if err != nil && !refused {
		r.dmu.Lock()
		r.unsure[key] = true
		r.dmu.Unlock()
	}
	fault := func(format string, a ...any) {
		r.dmu.Lock()
		r.answerFaults = append(r.answerFaults, fmt.Sprintf("group change answer: %s of %s in %s ", kind, peer, g)+fmt.Sprintf(format, a...))
		r.dmu.Unlock()
	}
	if sure {
		var want bool
		switch kind {
		case churnAdd:
			want = !wasMember
		case churnRemove, churnLeave:
			want = wasMember
		case churnRole:
			want = wasMember && wasRole != role
		}
		switch {
		case err == nil:
			if got := slices.Contains(ans.Changed, peer); got != want {
				fault("answered changed %v; %s was a member before: %v (role %s)", ans.Changed, peer, wasMember, wasRole)
			}
			r.count(func(res *Result) { res.GroupAnswers++ })
		case refused && kind == churnLeave && wasMember:
			fault("refused (%v) although %s was a member", err, peer)
		}
	}
	if err != nil {
		return
	}
	r.dmu.Lock()
	m, known := r.member[key]
	back := kind == churnAdd && known && !m
	switch kind {
	case churnAdd:
		r.member[key], r.roles[key] = true, "member"
	case churnRemove, churnLeave:
		r.member[key] = false
	case churnRole:
		if slices.Contains(ans.Changed, peer) {
			r.roles[key] = role
		}
	}
	r.dmu.Unlock()
	r.count(func(res *Result) {
		res.GroupOps++
		switch {
		case back:
			res.AddedBack++
		case kind == churnLeave:
			res.Leaves++
		case kind == churnRole:
			res.RoleChanges++
		}
	})
}

// converge brings every device online, settles every send and waits until
// every device shows its whole inbox.
func (r *runner) converge(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	deadline := time.Now().Add(r.cfg.Converge)
	for _, d := range r.devices {
		d.client()
	}
	// Settle every send: a draft not yet ACKed is sent again from its
	// own device (a DeviceOnly one) or the user's first device (it may
	// sit in that device's outbox already).
	r.dmu.Lock()
	drafts := append([]*draft(nil), r.drafts...)
	r.dmu.Unlock()
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	settled := make(chan struct{})
	go r.sayUnsettled(settled, drafts)
	for _, dr := range drafts {
		if dr.done() {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for !dr.done() && before(ctx, deadline) {
				// A send that fails at once (a device restarting, its client
				// closing) waits a second: spinning would starve the stack
				// whose fan-out the run is waiting for.
				start := time.Now()
				if err := r.send(ctx, dr.sender(r.byUser[dr.user][0]), dr); err != nil {
					dr.mu.Lock()
					dr.lastErr = err.Error()
					dr.mu.Unlock()
					if time.Since(start) < time.Second {
						time.Sleep(time.Second)
					}
				}
			}
		})
	}
	wg.Wait()
	close(settled)
	r.settleAlerts(ctx, deadline)
	// Wait until every group's fan-out has reached every member it owes
	// (the queue may still hold jobs: inbox heads alone would look settled),
	// then until each device shows its inbox head and heads stay put.
	for last := time.Now(); before(ctx, deadline); time.Sleep(time.Second) {
		behind := r.fanoutBehind(ctx)
		if len(behind) == 0 {
			break
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			r.progress("chaos: waiting for group fan-out: %s", strings.Join(behind, "; "))
		}
	}
	stable := 0
	for last := time.Now(); before(ctx, deadline) && stable < 3; {
		time.Sleep(time.Second)
		groups := r.groupsBehind(ctx)
		var devices []string
		for _, d := range r.devices {
			d.client()
			head, _, err := r.st.Store.Head(ctx, im.UserID(d.user))
			d.mu.Lock()
			shown := d.shown
			d.mu.Unlock()
			if err != nil || shown < head {
				devices = append(devices, fmt.Sprintf("%s/%s shows %d of %d", d.user, d.name, shown, head))
			}
		}
		if len(groups)+len(devices) == 0 {
			stable++
			continue
		}
		stable = 0
		if time.Since(last) > 30*time.Second {
			// A device behind its inbox this long after the faults
			// stopped is waiting for a re-push, a notify or a ping: say
			// which, so a slow run can be read.
			last = time.Now()
			r.progress("chaos: waiting for devices to catch up: %s", strings.Join(firstN(append(devices, groups...), 5), "; "))
		}
	}
}

// sayUnsettled says every 30 s, until done is closed, how many of drafts
// are still not ACKed and why the last try of the first of them failed.
func (r *runner) sayUnsettled(done <-chan struct{}, drafts []*draft) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		n, why := 0, ""
		for _, dr := range drafts {
			if dr.done() {
				continue
			}
			if n++; why == "" {
				dr.mu.Lock()
				why = fmt.Sprintf("%s's %s: %s", dr.user, dr.d.ClientMsgID, cmp.Or(dr.lastErr, "no answer yet"))
				dr.mu.Unlock()
			}
		}
		r.progress("chaos: waiting for %d sends to be ACKed (%s)", n, why)
	}
}

// firstN is the first n of ss, and how many more there are.
func firstN(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(slices.Clone(ss[:n]), fmt.Sprintf("%d more", len(ss)-n))
}

// unjustified says what is wrong with the server's refusal of dr ("" when
// nothing): the run's only refusals are of group sends by a user who was
// not a member at some moment of the send — never a member, or added or
// removed during the run.
func (r *runner) unjustified(dr *draft) string {
	g := dr.d.ConversationID
	switch {
	case !strings.HasPrefix(g, "g:"):
		return "a 1:1 send"
	case dr.refused.Code != wire.CodeForbidden:
		return "a group send refused with " + string(dr.refused.Code)
	case r.members[g][dr.user] && !r.changed[g+"/"+dr.user]:
		return "its sender has been a member since the group was created"
	}
	return ""
}

// groupState reads group g's head, fan-out mark and members.
func (r *runner) groupState(ctx context.Context, g string) (head, marked int64, members []im.Member, err error) {
	head, marked, _, err = r.st.Store.FanoutMark(ctx, im.ConversationID(g))
	if err == nil {
		members, err = r.st.Store.Members(ctx, im.ConversationID(g))
	}
	return head, marked, members, err
}

// groupsBehind describes each device that has not shown every message of
// a read-diffused group due to its user (none unless Config.GroupReads).
func (r *runner) groupsBehind(ctx context.Context) []string {
	if !r.cfg.GroupReads {
		return nil
	}
	var out []string
	for _, g := range r.groups {
		head, _, members, err := r.groupState(ctx, g)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		for _, m := range members {
			due := m.LastDue(head)
			if due == 0 {
				continue // nothing due
			}
			for _, d := range r.byUser[string(m.User)] {
				d.mu.Lock()
				shown := d.groups[g]
				d.mu.Unlock()
				if len(shown) == 0 || shown[len(shown)-1].ConvSeq < due {
					out = append(out, fmt.Sprintf("%s: device %s/%s behind %d", g, d.user, d.name, due))
				}
			}
		}
	}
	return out
}

// fanoutBehind describes each group whose fan-out has not reached every
// member it owes: its head, fan-out mark and the members behind (none of
// a read-diffused group: it has no fan-out into inboxes).
func (r *runner) fanoutBehind(ctx context.Context) []string {
	if r.cfg.GroupReads {
		return nil
	}
	var out []string
	for _, g := range r.groups {
		conv := im.ConversationID(g)
		head, marked, members, err := r.groupState(ctx, g)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		users := make([]im.UserID, len(members))
		for i, m := range members {
			users[i] = m.User
		}
		pos, err := r.st.Store.Positions(ctx, conv, users)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		var behind []string
		for _, m := range members {
			if from, to := m.Range(pos[m.User].Last, head); from < to {
				behind = append(behind, fmt.Sprintf("%s at %d (owed to %d)", m.User, pos[m.User].Last, to))
			}
		}
		if len(behind) > 0 {
			out = append(out, fmt.Sprintf("%s: head %d, fan-out mark %d, %d members behind: %s", g, head, marked, len(behind), strings.Join(behind[:min(len(behind), 5)], ", ")))
		}
	}
	return out
}

// heldMessage is a group message an inbox or a device holds.
type heldMessage struct {
	where, user, group string
	convSeq            int64
}

// verifyWakeUps holds every wake-up the stack published to what it may
// say: a device registered by the run, of the user it woke, naming an
// entry of that user's inbox at its seq — or, with seq 0, a message of a
// read-diffused group, returned to be held to the user's memberships like
// a message they hold. seqOf is each user's inbox (messageId → seq).
func (r *runner) verifyWakeUps(ctx context.Context, problem func(string, ...any), seqOf map[string]map[string]int64) []heldMessage {
	all, err := r.st.WakeMessages(ctx)
	if err != nil {
		problem("wake-ups not read: %v", err)
		return nil
	}
	// Each device registered the token device.token names it by. An
	// endpoint is found by its token, not by the registrations: one the
	// hints function could not record (a fault), or a registration made
	// again, leaves a registration without the endpoint it was woken at.
	owner := map[string]string{} // token → user
	for _, d := range r.devices {
		owner[d.token()] = d.user
	}
	var held []heldMessage
	for arn, ms := range all {
		r.res.WakeUps += len(ms)
		token, err := r.st.EndpointToken(ctx, arn)
		if err != nil {
			problem("the token of SNS endpoint %s: %v", arn, err)
			continue
		}
		user, ok := owner[token]
		if !ok {
			problem("%d wake-ups to %s, made for token %q, which no device of the run registered", len(ms), arn, token)
			continue
		}
		for _, m := range ms {
			var p struct {
				FCM struct {
					Message struct {
						Data struct{ MessageID, ConversationID, Seq string }
					}
				} `json:"fcmV1Message"`
			}
			if err := json.Unmarshal([]byte(m.Message), &p); err != nil || p.FCM.Message.Data.MessageID == "" {
				problem("wake-up of %s is not an FCM data message naming a message: %s", user, m.Message)
				continue
			}
			d := p.FCM.Message.Data
			seq, _ := strconv.ParseInt(d.Seq, 10, 64)
			if seq > 0 {
				if got, in := seqOf[user][d.MessageID]; !in || got != seq {
					problem("wake-up of %s names %s at seq %d; their inbox holds it at %d (0: not at all)", user, d.MessageID, seq, got)
				}
				continue
			}
			g, convSeq, ok := im.MessageID(d.MessageID).Locate()
			if !ok || !g.ValidGroup() || string(g) != d.ConversationID {
				problem("wake-up of %s names %s of %s with seq 0: not a group's message", user, d.MessageID, d.ConversationID)
				continue
			}
			held = append(held, heldMessage{"a wake-up of " + user, user, string(g), convSeq})
		}
	}
	return held
}

// verify reconciles every device and every ACKed message.
func (r *runner) verify(ctx context.Context) {
	problem := func(format string, a ...any) {
		if len(r.res.Problems) < 50 {
			r.res.Problems = append(r.res.Problems, fmt.Sprintf(format, a...))
		}
	}
	r.dmu.Lock()
	for _, f := range r.answerFaults {
		problem("%s", f)
	}
	r.dmu.Unlock()
	for _, b := range r.fanoutBehind(ctx) {
		problem("fan-out incomplete: %s", b)
	}
	inboxes := map[string]map[string]int{} // user → messageId → count
	seqOf := map[string]map[string]int64{} // user → messageId → inbox seq
	var held []heldMessage                 // group messages in inboxes and on devices
	r.progress("chaos: verify: reconciling %d users' inboxes with their devices", len(r.byUser))
	for user := range r.byUser {
		srv, err := reconcile.ReadServer(ctx, r.st.Store, im.UserID(user), "")
		if err != nil {
			problem("read %s's inbox: %v", user, err)
			continue
		}
		inboxes[user], seqOf[user] = map[string]int{}, map[string]int64{}
		for _, e := range srv.Entries {
			inboxes[user][e.MessageID]++
			seqOf[user][e.MessageID] = e.Seq
			if strings.HasPrefix(e.Conversation, "g:") {
				held = append(held, heldMessage{user + "'s inbox", user, e.Conversation, e.ConvSeq})
			}
			if inboxes[user][e.MessageID] == 2 {
				problem("%s's inbox holds %s twice", user, e.MessageID)
			}
		}
		for _, e := range srv.LogMismatches {
			problem("%s's inbox entry %s contradicts its conversation log", user, e)
		}
		for _, d := range r.byUser[user] {
			d.mu.Lock()
			journal := append([]reconcile.Entry(nil), d.journal...)
			d.mu.Unlock()
			rep := reconcile.Compare(srv, journal)
			r.res.Lost += len(rep.Missing) + len(rep.Pending)
			r.res.Duplicated += len(rep.Duplicated)
			r.res.Reordered += len(rep.OutOfOrder)
			if !rep.OK() || len(rep.Pending) > 0 {
				problem("device %s/%s: %d missing, %d not delivered, %d shown twice, %d out of order, %d mismatched (highest %d, head %d)%s",
					user, d.name, len(rep.Missing), len(rep.Pending), len(rep.Duplicated), len(rep.OutOfOrder), len(rep.Mismatched), rep.Highest, rep.Head, firstOf(rep))
			}
		}
	}
	for _, b := range r.groupsBehind(ctx) {
		problem("read-diffused group behind: %s", b)
	}
	held = append(held, r.verifyWakeUps(ctx, problem, seqOf)...)
	// A device shows each message of a read-diffused group once, in
	// convSeq order.
	shownInGroup := map[string]map[string]int{} // user/device → messageId → times
	for _, d := range r.devices {
		key := d.user + "/" + d.name
		shownInGroup[key] = map[string]int{}
		d.mu.Lock()
		for g, es := range d.groups {
			for i, e := range es {
				held = append(held, heldMessage{"device " + key, d.user, g, e.ConvSeq})
				if shownInGroup[key][e.MessageID]++; shownInGroup[key][e.MessageID] == 2 {
					r.res.Duplicated++
					problem("device %s showed %s of %s twice", key, e.MessageID, g)
				}
				if i > 0 && e.ConvSeq <= es[i-1].ConvSeq {
					r.res.Reordered++
					problem("device %s showed %s #%d after #%d", key, g, e.ConvSeq, es[i-1].ConvSeq)
				}
			}
		}
		d.mu.Unlock()
	}
	members := map[string][]im.Member{}
	for _, g := range r.groups {
		ms, err := r.st.Store.Members(ctx, im.ConversationID(g))
		if err != nil {
			problem("members of %s: %v", g, err)
		}
		members[g] = ms
	}
	// Nobody holds a group message sent while they were not a member
	// (unless their oldest memberships may have been dropped:
	// im.MaxPastSpans).
	for _, h := range held {
		i := slices.IndexFunc(members[h.group], func(m im.Member) bool { return string(m.User) == h.user })
		if i >= 0 && len(members[h.group][i].Past) >= im.MaxPastSpans {
			continue
		}
		if i < 0 || !members[h.group][i].Receives(h.convSeq) {
			r.res.Leaked++
			problem("%s holds %s #%d, sent while %s was not a member", h.where, h.group, h.convSeq, h.user)
		}
	}
	for _, dr := range r.drafts {
		// A refusal needs a cause, also when a retry was ACKed later (its
		// user added back meanwhile).
		if dr.refused != nil {
			if why := r.unjustified(dr); why != "" {
				problem("send %s to %s%s refused (%v): %s", dr.d.ClientMsgID, dr.d.To, dr.d.ConversationID, dr.refused, why)
			}
		}
		switch {
		case len(dr.ids) > 1:
			r.res.IdempotencyViolations++
			problem("clientMsgId %s got %d messageIds", dr.d.ClientMsgID, len(dr.ids))
		case dr.refusedAfterAck != nil:
			// A retry of a send the server ACKed is answered with what it
			// stored (from another device of the user; the device that
			// has the ACK answers from its own store). A send refused
			// first may be ACKed later (its user added back meanwhile).
			r.res.IdempotencyViolations++
			problem("send %s was ACKed as %s, then a retry was refused (%v)", dr.d.ClientMsgID, dr.sent.MessageID, dr.refusedAfterAck)
		case dr.refused != nil && !dr.acked:
			r.res.Refused++
			continue
		case !dr.acked:
			r.res.Unacked++
			problem("send %s never ACKed (last attempt: %s)", dr.d.ClientMsgID, dr.lastErr)
			continue
		}
		r.res.Acked++
		id := dr.sent.MessageID
		var want []string
		if strings.HasPrefix(dr.sent.ConversationID, "g:") {
			for _, m := range members[dr.sent.ConversationID] {
				if m.Receives(dr.sent.ConvSeq) {
					want = append(want, string(m.User))
				}
			}
		} else {
			want = []string{dr.user, dr.d.To}
		}
		if r.cfg.GroupReads && strings.HasPrefix(dr.sent.ConversationID, "g:") {
			// In the group's log only: every device of every member due it shows it.
			for _, u := range want {
				for _, d := range r.byUser[u] {
					if n := shownInGroup[d.user+"/"+d.name][id]; n != 1 {
						problem("ACKed %s (%s #%d from %s) shown %d times on %s/%s", id, dr.sent.ConversationID, dr.sent.ConvSeq, dr.user, n, d.user, d.name)
						r.res.Lost++
					}
				}
			}
			continue
		}
		for _, u := range want {
			if inboxes[u][id] != 1 {
				problem("ACKed %s (%s #%d from %s) is in %s's inbox %d times", id, dr.sent.ConversationID, dr.sent.ConvSeq, dr.user, u, inboxes[u][id])
				r.res.Lost++
			}
		}
	}
	r.verifyAlerts(problem, inboxes)
	r.progress("chaos: verify: traces")
	r.verifyTraces(ctx, problem, seqOf)
	r.progress("chaos: verify: reads of alerts")
	r.verifyAlertReads(ctx, problem)
	r.progress("chaos: verify: answers and callbacks")
	r.verifyAnswers(ctx, problem)
	r.verifyCallbacks(ctx, problem)
	r.verifyPresence(ctx, problem)
	sort.Strings(r.res.Problems)
}

// traceSample is how many ACKed 1:1 messages verifyTraces reads the trace
// of, spread over the run.
const traceSample = 300

// verifyTraces holds the traces of ACKed 1:1 messages (traceSample of
// them at most) to what the devices did — the trace is how an operator
// sees who has a message, derived for most messages from the devices' ack
// ranges, which the run's server faults interrupt between their steps. A
// trace names as having acked a message only devices of its participants,
// at its seq in that user's inbox and within the device's cursor; and it
// names every device of theirs whose cursor covers that seq.
func (r *runner) verifyTraces(ctx context.Context, problem func(string, ...any), seqOf map[string]map[string]int64) {
	// The cursors first: a range that moved one is in the trace by then.
	cursors := map[string]int64{} // user/device → ack cursor
	cursor := func(u, d string) (int64, error) {
		c, err := r.st.Store.Device(ctx, im.UserID(u), im.DeviceID(d))
		return c.Acked, err
	}
	for _, d := range r.devices {
		c, err := cursor(d.user, d.name)
		if err != nil {
			problem("cursor of %s/%s: %v", d.user, d.name, err)
			return
		}
		cursors[d.user+"/"+d.name] = c
	}
	var direct []*draft
	for _, dr := range r.drafts {
		if dr.acked && len(dr.ids) == 1 && !strings.HasPrefix(dr.sent.ConversationID, "g:") {
			direct = append(direct, dr)
		}
	}
	for i := 0; i < len(direct); i += (len(direct) + traceSample - 1) / traceSample {
		dr := direct[i]
		id := dr.sent.MessageID
		events, err := r.st.Store.Events(ctx, im.MessageID(id))
		if err != nil {
			problem("trace of %s: %v", id, err)
			continue
		}
		r.res.Traces++
		acked := map[string]bool{}
		for _, e := range events {
			if e.Type != im.EventAcked {
				continue
			}
			r.res.TraceAcks++
			u, key := string(e.User), string(e.User)+"/"+string(e.Device)
			acked[key] = true
			_, known := cursors[key]
			seq, ok := seqOf[u][id]
			switch {
			case !ok || (u != dr.user && u != dr.d.To) || !known:
				problem("trace of %s: %s acked it, not a device of %s or %s", id, key, dr.user, dr.d.To)
			case e.Seq != seq:
				problem("trace of %s: %s acked it at seq %d; it is at %d", id, key, e.Seq, seq)
			case cursors[key] < seq: // read before the traces: an ack may have landed since
				if c, err := cursor(u, string(e.Device)); err != nil || c < seq {
					problem("trace of %s: %s acked it (seq %d) beyond the device's cursor %d (%v)", id, key, seq, c, err)
				}
			}
		}
		for _, u := range []string{dr.user, dr.d.To} {
			for _, d := range r.byUser[u] {
				if c, seq := cursors[u+"/"+d.name], seqOf[u][id]; seq > 0 && c >= seq && !acked[u+"/"+d.name] {
					problem("trace of %s: no ack of %s/%s, whose cursor %d covers its seq %d", id, u, d.name, c, seq)
				}
			}
		}
	}
}

// firstOf names the first fault of each kind a reconciliation found.
func firstOf(rep reconcile.Report) string {
	var out []string
	for _, k := range []struct {
		name    string
		entries []reconcile.Entry
	}{{"missing", rep.Missing}, {"shown twice", rep.Duplicated}, {"out of order", rep.OutOfOrder}, {"mismatched", rep.Mismatched}} {
		if len(k.entries) > 0 {
			out = append(out, fmt.Sprintf("first %s: %s", k.name, k.entries[0]))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, ", ")
}
