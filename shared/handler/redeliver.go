package handler

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// RunChecks runs the redelivery checks of one queue message (the checks of
// one invocation's pushes; id is the message's id): for each check it does
// nothing if the device acked the entry, else re-pushes it, and the next
// checks are scheduled together while the policy allows. The checks run
// concurrently: one recipient that stopped reading costs its own push
// deadline, not everyone's. An error (some check failed for a transient
// reason) leaves the message for a retry; its checks that did run may then
// push again: devices drop entries they already have. The queue adapter
// decodes the messages and runs a batch (queue.Consumer).
func (h *Redeliverer) RunChecks(ctx context.Context, id string, list []im.Check) error {
	tr := h.trail("redeliver", id)
	defer tr.flush(ctx)
	cs := &checks{}
	cursors, err := h.groupCursors(ctx, list)
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, check := range list {
		wg.Go(func() {
			if err := h.redeliverOne(ctx, tr, cs, check, cursors[check.Conversation]); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	h.scheduleChecks(ctx, tr, cs)
	return errors.Join(errs...)
}

// groupCursors reads, for the checks of read-diffused groups' messages in
// list, their devices' cursors in each group: one BatchGetItem of the
// members' index items per group (per 100), not one per check (a
// 200-member group's message has 200 checks in one queue message).
func (h *Redeliverer) groupCursors(ctx context.Context, list []im.Check) (map[im.ConversationID]map[im.DeviceKey]im.DeviceCursor, error) {
	users := map[im.ConversationID][]im.UserID{}
	for _, c := range list {
		if c.Conversation != "" && !slices.Contains(users[c.Conversation], c.User) {
			users[c.Conversation] = append(users[c.Conversation], c.User)
		}
	}
	out := make(map[im.ConversationID]map[im.DeviceKey]im.DeviceCursor, len(users))
	if h.GroupLogs == nil {
		return out, nil
	}
	for conv, us := range users {
		cursors, err := h.GroupLogs.GroupCursors(ctx, conv, us)
		if err != nil {
			return nil, err
		}
		out[conv] = cursors
	}
	return out, nil
}

// redeliverOne runs one check, adding the next one (if any) to cs; a
// group's check is decided by cursors, its devices' cursors in the group.
func (h *Redeliverer) redeliverOne(ctx context.Context, tr *trail, cs *checks, check im.Check, cursors map[im.DeviceKey]im.DeviceCursor) error {
	if check.Conversation != "" {
		return h.redeliverGroup(ctx, tr, cs, check, cursors)
	}
	log := h.log().With("userId", check.User, "deviceId", check.Device, "connectionId", check.Connection, "seq", check.Seq, "attempt", check.Attempt)
	// Eventually consistent (half a read unit, issue 12): a cursor read
	// behind an ack that just landed re-pushes an entry the device has,
	// which it drops (it holds each seq once); the check comes due seconds
	// after the push, long after such an ack.
	acked, err := h.Inbox.AckedUpTo(ctx, check.User, check.Device)
	if err != nil {
		return err
	}
	if acked >= check.Seq {
		log.DebugContext(ctx, "acked before redelivery check")
		return nil
	}
	if check.Attempt+1 > h.Redelivery.MaxRetries() {
		log.InfoContext(ctx, "awaiting_pull: redelivery exhausted")
		return nil
	}
	e, err := h.Inbox.Entry(ctx, check.User, check.Seq)
	if errors.Is(err, im.ErrNotFound) {
		log.WarnContext(ctx, "entry expired before redelivery")
		return nil
	}
	if err != nil {
		return err
	}
	push := wire.NewPush(e)
	push.Urgent = urgentEntry(e) // a re-push of an urgent alert is urgent too
	frame, _ := json.Marshal(push)
	conn := im.Connection{User: check.User, Device: check.Device, ID: check.Connection}
	h.pushAndCollect(ctx, tr, cs, conn, e, frame, check.Attempt+1)
	return nil
}
