package handler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Fanouts is the storage side of a group fan-out.
type Fanouts interface {
	Members(ctx context.Context, c im.ConversationID) ([]im.Member, error)
	FanoutMark(ctx context.Context, c im.ConversationID) (head, marked int64, reads bool, err error)
	SetFanoutMark(ctx context.Context, c im.ConversationID, upTo int64) error
	Positions(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.UserID]im.InboxPosition, error)
	Log(ctx context.Context, c im.ConversationID, after, upTo int64) ([]im.Message, error)
	AppendGroup(ctx context.Context, c im.ConversationID, u im.UserID, pos im.InboxPosition, msgs []im.Message, now time.Time) ([]im.Entry, error)
}

// FanoutQueue enqueues fan-out jobs, visible after delay.
type FanoutQueue interface {
	Enqueue(ctx context.Context, delay time.Duration, jobs ...im.FanoutJob) error
}

// RunFanout runs one fan-out job (id: its queue message's id): a group
// message's or group alert's batch of members, or a presence push. An error
// leaves the job for a retry, which appends nothing twice. The queue
// adapter decodes the jobs and runs a batch concurrently, starting a job
// only while the invocation has FanoutReserve left before its deadline
// (queue.Consumer).
func (h *FanoutWorker) RunFanout(ctx context.Context, id string, job im.FanoutJob) error {
	if now := h.now(); now.Before(job.NotBefore) {
		// Not due yet: a hop of a job due past one SQS delay.
		return enqueueAt(ctx, h.FanoutQueue, now, job.NotBefore.Sub(now), job)
	}
	var err error
	switch job.Kind {
	case im.FanoutPresence:
		// Presence pushes run on the presence queue's own function
		// (Hints); one still found here (queued before an upgrade) runs.
		err = h.presence.pushPresence(ctx, job.User)
	case im.FanoutAlert:
		err = h.alerts.fanoutAlert(ctx, job)
	case im.FanoutEscalate:
		err = h.alerts.escalate(ctx, id, job)
	case im.FanoutCallback:
		err = h.alerts.runCallbacks(ctx, job)
	case im.FanoutRepeat:
		err = h.alerts.repeat(ctx, id, job)
	case im.FanoutCoveredAlerts:
		err = h.coveredAlerts(ctx, job)
	default:
		err = h.fanoutMessages(ctx, job)
	}
	if err != nil {
		return fmt.Errorf("fan-out of %s up to #%d to %d members: %w", job.Conversation, job.UpTo, len(job.Members), err)
	}
	return nil
}

// FanoutReserve is the time a fan-out invocation must have left to start a
// job: a batch job of 50 members with a push deadline each fits in it.
const FanoutReserve = 10 * time.Second

// fanoutBatch is how many members one fan-out job fills: n, the
// configured FanoutBatch, or im.DefaultFanoutBatch.
func fanoutBatch(n int) int {
	if n > 0 {
		return n
	}
	return im.DefaultFanoutBatch
}

// coveredAlertsPage is how many inbox entries one FanoutCoveredAlerts job
// reads (one Query page; at 1 KB bodies about 1 MB, a page's most).
const coveredAlertsPage = 1000

// coveredAlerts runs a FanoutCoveredAlerts job: a status callback job for
// each alert (of the job's conversation, when it names one) among the
// next coveredAlertsPage entries of the span, then the rest of the span as
// a job of its own. The callback jobs derive "delivered" from the device
// cursors and "read" from the read watermark, which the ack or read moved
// before this job was due; one enqueued twice (a retried job) records
// nothing twice. A read's job (it names the app conversation) traces each
// alert "read" by the job's device, as the read does those it names (a
// retried job may trace one twice).
func (h *FanoutWorker) coveredAlerts(ctx context.Context, job im.FanoutJob) error {
	ids, reached, err := h.Inbox.AlertsInSpan(ctx, job.User, job.Conversation, job.From, job.UpTo, coveredAlertsPage)
	if err != nil {
		return err
	}
	if err := callbacksAfter(ctx, h.FanoutQueue, 0, job.User, ids); err != nil {
		return err
	}
	if job.Conversation != "" && len(ids) > 0 {
		tr := h.trail("fanout", "")
		for _, id := range ids {
			tr.add(im.Event{Message: id, Type: im.EventRead, User: job.User, Device: job.Device, Detail: string(job.Conversation)})
		}
		tr.flush(ctx)
	}
	if reached < job.UpTo {
		job.From = reached
		return h.FanoutQueue.Enqueue(ctx, 0, job)
	}
	return nil
}

// fanoutMessages runs one message job. A job for the whole group covers
// everything up to the group's current head, not just its own message:
// when jobs pile up (a burst, a backed-up queue) the first one does the
// work in few transactions and the rest find it done (the fan-out mark).
func (h *FanoutWorker) fanoutMessages(ctx context.Context, job im.FanoutJob) error {
	if len(job.Online) > 0 {
		return h.pushBatch(ctx, job)
	}
	whole := len(job.Members) == 0
	if whole {
		head, marked, reads, err := h.Fanouts.FanoutMark(ctx, job.Conversation)
		if err != nil {
			return err
		}
		if job.UpTo <= marked {
			return nil
		}
		job.UpTo = max(job.UpTo, head)
		job.Reads, job.From = reads, marked
	}
	all, err := h.Fanouts.Members(ctx, job.Conversation)
	if err != nil {
		return err
	}
	byUser := make(map[im.UserID]im.Member, len(all))
	var due []im.UserID
	for _, m := range all {
		byUser[m.User] = m
		// Everyone who could still be owed messages up to UpTo: members
		// who joined before it (in a membership they keep: im.Member.Past).
		if m.Role.Valid() && m.Start() < job.UpTo {
			due = append(due, m.User)
		}
	}
	if !whole {
		return h.fillOrPush(ctx, job, job.Members, byUser)
	}
	if job.Reads && h.Online != nil {
		if err := h.pushOnline(ctx, job, due, byUser); err != nil {
			return err
		}
		return h.Fanouts.SetFanoutMark(ctx, job.Conversation, job.UpTo)
	}
	if len(due) > fanoutBatch(h.FanoutBatch) {
		// Enqueue first, mark after: a mark never covers a job not queued.
		batches := job.Batches(due, fanoutBatch(h.FanoutBatch))
		if err := h.FanoutQueue.Enqueue(ctx, 0, batches...); err != nil {
			return err
		}
		h.log().InfoContext(ctx, "fan-out split", "conversationId", job.Conversation, "convSeq", job.UpTo, "members", len(due), "batches", len(batches))
	} else if err := h.fillOrPush(ctx, job, due, byUser); err != nil {
		return err
	}
	return h.Fanouts.SetFanoutMark(ctx, job.Conversation, job.UpTo)
}

// fillOrPush does a job's work for users: fills their inboxes or, for a
// read-diffused group, pushes to their connected devices.
func (h *FanoutWorker) fillOrPush(ctx context.Context, job im.FanoutJob, users []im.UserID, members map[im.UserID]im.Member) error {
	if job.Reads {
		return h.pushReads(ctx, job.Conversation, job.From, job.UpTo, users, members)
	}
	return h.fill(ctx, job.Conversation, job.UpTo, users, members)
}

// pushReads pushes the messages (from, upTo] of read-diffused group conv
// to the connected devices of users — only the newest maxPushedPerFill:
// a device that sees a gap before a message pulls it (group sync) — with
// one redelivery check per connection, of the newest message it was
// pushed. Nothing is written to the members' inboxes: the group's log is
// their copy, and a member with no connection pulls it when back. An error
// listing a member's connections fails the job (SQS retries it; devices
// drop a message they have).
func (h *FanoutWorker) pushReads(ctx context.Context, conv im.ConversationID, from, upTo int64, users []im.UserID, members map[im.UserID]im.Member) error {
	if h.Pusher == nil || from >= upTo {
		return nil
	}
	log, err := h.Fanouts.Log(ctx, conv, max(from, upTo-maxPushedPerFill), upTo)
	if err != nil {
		return err
	}
	tr := h.trail("fanout", "")
	tr.firstPushesOmitted = true // 200 members: ~40 write units of trace per message
	cs := &checks{}
	var work []memberMessages
	for _, u := range users {
		var msgs []im.Message
		for _, msg := range log {
			if members[u].Receives(msg.ConvSeq) {
				msgs = append(msgs, msg)
			}
		}
		if len(msgs) > 0 {
			work = append(work, memberMessages{u, msgs})
		}
	}
	err = perMember(work, func(u im.UserID, msgs []im.Message) error {
		if err := h.pushGroupMessages(ctx, tr, cs, u, msgs); err != nil {
			return fmt.Errorf("push to %s: %w", u, err)
		}
		return nil
	})
	h.scheduleChecks(ctx, tr, cs)
	tr.flush(ctx)
	return err
}

// pushOnline is the whole job of a read-diffused group with an online
// index (Deps.Online): one Query finds the connected members, whose
// devices are pushed the newest maxPushedPerFill messages of (From, UpTo]
// due to them — here, or by batch jobs of pushesPerJob connections that
// carry their connections (pushBatch) when there are more; the members
// with no connection are woken (Deps.WakeQueue), nothing else.
// No connection is pushed a message it took from its own send's "sent"
// (Message.TakenBy).
func (h *FanoutWorker) pushOnline(ctx context.Context, job im.FanoutJob, due []im.UserID, members map[im.UserID]im.Member) error {
	if h.Pusher == nil || job.From >= job.UpTo {
		return nil
	}
	conns, err := h.Online.OnlineIn(ctx, job.Conversation, h.now())
	if err != nil {
		return err
	}
	log, err := h.Fanouts.Log(ctx, job.Conversation, max(job.From, job.UpTo-maxPushedPerFill), job.UpTo)
	if err != nil || len(log) == 0 {
		return err
	}
	isDue := make(map[im.UserID]bool, len(due))
	for _, u := range due {
		isDue[u] = true
	}
	online := map[im.UserID]bool{}
	var whole []im.Connection // due every message of log
	var part []connMessages   // joined or left within it
	for _, c := range conns {
		if !isDue[c.User] {
			continue // not a member (left, removed, or a stale index item)
		}
		var msgs []im.Message
		for _, m := range log {
			if m.TakenBy == c.ID {
				online[c.User] = true // it has its own message: no wake-up
			} else if members[c.User].Receives(m.ConvSeq) {
				msgs = append(msgs, m)
			}
		}
		switch {
		case len(msgs) == len(log):
			whole = append(whole, c)
		case len(msgs) > 0:
			part = append(part, connMessages{c, msgs})
		default:
			continue
		}
		online[c.User] = true
	}
	last := groupEntry(log[len(log)-1])
	for _, u := range due {
		if !online[u] && members[u].Receives(last.Message.ConvSeq) {
			h.wake(ctx, u, last, "")
		}
	}
	if batch := pushesPerJob(h.FanoutBatch); len(whole) > batch {
		var jobs []im.FanoutJob
		for start := 0; start < len(whole); start += batch {
			b := job
			b.Online = whole[start:min(start+batch, len(whole))]
			jobs = append(jobs, b)
		}
		if err := h.FanoutQueue.Enqueue(ctx, 0, jobs...); err != nil {
			return err
		}
		h.log().InfoContext(ctx, "fan-out split", "conversationId", job.Conversation, "convSeq", job.UpTo, "connections", len(whole), "batches", len(jobs))
		whole = nil
	}
	for _, c := range whole {
		part = append(part, connMessages{c, log})
	}
	h.pushConnections(ctx, part)
	return nil
}

// pushBatch runs a batch job of pushOnline: its connections are each
// pushed the newest maxPushedPerFill messages of (From, UpTo].
func (h *FanoutWorker) pushBatch(ctx context.Context, job im.FanoutJob) error {
	if h.Pusher == nil {
		return nil
	}
	log, err := h.Fanouts.Log(ctx, job.Conversation, max(job.From, job.UpTo-maxPushedPerFill), job.UpTo)
	if err != nil || len(log) == 0 {
		return err
	}
	work := make([]connMessages, len(job.Online))
	for i, c := range job.Online {
		work[i] = connMessages{c, log}
	}
	h.pushConnections(ctx, work)
	return nil
}

// connMessages is one connection's part of a read-diffused group's push.
type connMessages struct {
	conn im.Connection
	msgs []im.Message
}

// pushConnections pushes each connection its messages in order,
// pushConcurrency at once, with one redelivery check per connection of
// the newest (its first pushes are not traced: the device cursors say who
// has it).
func (h *FanoutWorker) pushConnections(ctx context.Context, work []connMessages) {
	tr := h.trail("fanout", "")
	tr.firstPushesOmitted = true
	cs := &checks{}
	var wg sync.WaitGroup
	slots := make(chan struct{}, pushConcurrency)
	for _, w := range work {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			h.pushGroupTo(ctx, tr, cs, w.conn, w.msgs)
		})
	}
	wg.Wait()
	h.scheduleChecks(ctx, tr, cs)
	tr.flush(ctx)
}

// memberMessages is one member's part of a fan-out: the messages due.
type memberMessages struct {
	user im.UserID
	msgs []im.Message
}

// perMember runs do for each member's part, fanoutConcurrency at once,
// and joins their errors.
func perMember(work []memberMessages, do func(u im.UserID, msgs []im.Message) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		slots = make(chan struct{}, fanoutConcurrency)
	)
	for _, w := range work {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := do(w.user, w.msgs); err != nil {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fanoutConcurrency bounds the inboxes one invocation fills at once.
const fanoutConcurrency = 8

// pushesPerJob is how many connections of a read-diffused group one
// fan-out invocation pushes: four times the members it fills (a push
// writes nothing), pushConcurrency at once. Its rounds of pushes are as
// many as a fill's (the default 200 at 32: 7), each at most the push
// deadline long (3 s) however stuck a connection, so the invocation stays
// within the function's 30 s; and a 200-member group online is pushed by
// one invocation, with one redelivery check, instead of four batch jobs
// (issue 12: 7 SQS requests and an invocation fewer per message).
func pushesPerJob(fanoutBatchSize int) int { return 4 * fanoutBatch(fanoutBatchSize) }

// pushConcurrency bounds the connections pushConnections pushes at once.
const pushConcurrency = 4 * fanoutConcurrency

// fill brings each user's inbox up to convSeq upTo of group conv.
func (h *FanoutWorker) fill(ctx context.Context, conv im.ConversationID, upTo int64, users []im.UserID, members map[im.UserID]im.Member) error {
	pos, err := h.Fanouts.Positions(ctx, conv, users)
	if err != nil {
		return err
	}
	from, unplaced := upTo, false
	for _, u := range users {
		f, t := members[u].Range(pos[u].Last, upTo)
		if f < t {
			from = min(from, f)
		}
		// A claim whose entry is not known to be in place (a run that
		// failed between the two writes) is completed by AppendGroup.
		unplaced = unplaced || !pos[u].LastInPlace
	}
	if from >= upTo && !unplaced {
		return nil // everyone is there already
	}
	log, err := h.Fanouts.Log(ctx, conv, from, upTo)
	if err != nil {
		return err
	}
	tr := h.trail("fanout", "")
	cs := &checks{}
	var work []memberMessages
	for _, u := range users {
		m := members[u]
		if f, t := m.Range(pos[u].Last, upTo); f >= t && pos[u].LastInPlace {
			continue
		}
		// Every message due above the member's last, in each of their
		// memberships (a member added again: not those sent while out).
		var msgs []im.Message
		for _, msg := range log {
			if msg.ConvSeq > pos[u].Last && m.Receives(msg.ConvSeq) {
				msgs = append(msgs, msg)
			}
		}
		work = append(work, memberMessages{u, msgs})
	}
	err = perMember(work, func(u im.UserID, msgs []im.Message) error {
		entries, err := h.Fanouts.AppendGroup(ctx, conv, u, pos[u], msgs, h.now())
		for _, e := range entries {
			tr.add(im.Event{Message: e.Message.ID, Type: im.EventInboxed, User: u, Seq: e.Seq, Detail: "fan-out"})
		}
		h.deliverAll(ctx, tr, cs, u, entries)
		if err != nil {
			return fmt.Errorf("fan-out to %s: %w", u, err)
		}
		return nil
	})
	h.scheduleChecks(ctx, tr, cs)
	tr.flush(ctx)
	return err
}

// maxPushedPerFill is how many new entries of one inbox a fill pushes one
// by one; beyond it only the newest is pushed and the device, seeing the
// gap, pulls the rest with a sync.
const maxPushedPerFill = 10

// deliverAll pushes new entries of one inbox, adding the pushes' redelivery
// checks to cs.
func (h *FanoutWorker) deliverAll(ctx context.Context, tr *trail, cs *checks, u im.UserID, entries []im.Entry) {
	if len(entries) == 0 || h.Pusher == nil {
		return
	}
	if len(entries) > maxPushedPerFill {
		entries = entries[len(entries)-1:]
	}
	for _, e := range entries {
		h.deliver(ctx, tr, cs, u, e, "")
	}
}

// enqueueAt enqueues job on q to run after delay; past one SQS delay
// (maxJobDelay) it goes as far as one reaches, due at NotBefore, and
// RunFanout sends it on until then.
func enqueueAt(ctx context.Context, q FanoutQueue, now time.Time, delay time.Duration, job im.FanoutJob) error {
	if delay > maxJobDelay {
		job.NotBefore, delay = now.Add(delay), maxJobDelay
	}
	return q.Enqueue(ctx, delay, job)
}
