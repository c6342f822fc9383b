package handler

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Groups under read diffusion (docs/proposal-group-read-diffusion.md): a
// device acks a group's log and pulls it by convSeq, with the group's id
// on the ack and sync frames.

// errNoGroupLogs refuses group acks and syncs where read diffusion is not
// served (Deps.GroupLogs nil).
var errNoGroupLogs = wire.Problemf(wire.CodeBadRequest, "this server has no groups under read diffusion: ack and sync without conversationId")

// groupPosition turns a store's HeadError about a group (a position above
// the last message due to the caller) into a bad_request: unlike an inbox
// position above its head it does not mean the data was reset, and the
// error frame's head and epoch are the inbox's.
func groupPosition(err error, what string, c im.ConversationID) error {
	if h, ok := errors.AsType[*im.HeadError](err); ok {
		return wire.Problemf(wire.CodeBadRequest, "%s %d is beyond the last message of %s due to you (%d)", what, h.Position, c, h.Head)
	}
	return err
}

// ackGroup moves the caller's device cursor in group c to upTo (one-way,
// as every ack: nothing answers a success). With a valid proof of upTo
// (the one the server gave with that message) the store need not read the
// log to know upTo is not beyond the head; an invalid one only costs that
// read.
func (h *Messages) ackGroup(ctx context.Context, c caller, conv im.ConversationID, upTo int64, proof string) (events.APIGatewayProxyResponse, error) {
	if h.GroupLogs == nil {
		return h.failOneWay(ctx, c, wire.ActionAck, errNoGroupLogs)
	}
	a := im.AckRange{User: c.User, Device: c.Device, Connection: c.Connection, RequestID: c.RequestID, UpTo: upTo, At: h.now()}
	if proof != "" {
		a.Proven = im.ValidGroupProof(h.proofKey(ctx), conv, upTo, proof)
	}
	res, err := h.GroupLogs.AckGroup(ctx, conv, a)
	if err != nil {
		return h.failOneWay(ctx, c, wire.ActionAck, groupPosition(err, "upTo", conv))
	}
	if res.Moved {
		h.log().DebugContext(ctx, "group acked", "userId", c.User, "deviceId", c.Device, "conversationId", conv, "convSeq", upTo)
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// syncGroup answers a pull of group c's log above cursor with one page. It
// counts as a query (ratelimit.Query), not as a new inbox sync: a device
// back from a day offline pulls every group it is behind in at once.
func (h *Messages) syncGroup(ctx context.Context, c caller, conv im.ConversationID, cursor int64, limit int) (events.APIGatewayProxyResponse, error) {
	if h.GroupLogs == nil {
		return h.fail(ctx, c, wire.ActionSync, errNoGroupLogs, "")
	}
	if err := h.limit(ctx, c, ratelimit.Query); err != nil {
		return h.fail(ctx, c, wire.ActionSync, err, "")
	}
	page, err := h.GroupLogs.GroupPage(ctx, conv, c.User, cursor, limit, wire.MessageSize)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSync, groupPosition(err, "cursor", conv), "")
	}
	out := wire.NewGroupSyncPage(conv, page, h.Redelivery.PushTimeout, h.proofKey(ctx))
	out.Ref = c.Ref
	return reply(out)
}

// proofKey is the key of group position proofs, nil when there is none or
// it cannot be read (frames then go without proofs: acks cost a read).
func (h *delivery) proofKey(ctx context.Context) []byte {
	if h.GroupLogs == nil {
		return nil
	}
	key, err := h.GroupLogs.GroupProofKey(ctx)
	if err != nil {
		h.log().WarnContext(ctx, "group proofs off: no key", "err", err.Error())
	}
	return key
}

// groupEntry is how a read-diffused group's message goes through the
// push and redelivery paths made for inbox entries: no inbox seq (0).
func groupEntry(m im.Message) im.Entry { return im.Entry{Message: m} }

// pushGroupMessages pushes msgs (ascending convSeqs of one read-diffused
// group) to every connection of u, in order, adding a redelivery check of
// the last one per connection to cs (pushAndCollect).
func (h *delivery) pushGroupMessages(ctx context.Context, tr *trail, cs *checks, u im.UserID, msgs []im.Message) error {
	conns, err := h.Connections.Connections(ctx, u)
	if err != nil {
		return err
	}
	if len(conns) == 0 {
		// No "awaiting pull" event: with 70 % of 200 members offline that
		// would be 12 write units of trace per message; a member's device
		// cursors say who has it.
		h.wake(ctx, u, groupEntry(msgs[len(msgs)-1]), "")
		return nil
	}
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() { h.pushGroupTo(ctx, tr, cs, conn, msgs) })
	}
	wg.Wait()
	return nil
}

// pushGroupTo pushes msgs (ascending convSeqs of one read-diffused group)
// to conn in order, adding a redelivery check of the last one to cs.
func (h *delivery) pushGroupTo(ctx context.Context, tr *trail, cs *checks, conn im.Connection, msgs []im.Message) {
	key := h.proofKey(ctx)
	for _, m := range msgs[:len(msgs)-1] {
		frame, _ := json.Marshal(wire.NewGroupPush(m, key))
		if err := h.push(ctx, conn.ID, frame); err != nil {
			break // the last one's check re-pushes it; the device pulls the gap
		}
	}
	last := groupEntry(msgs[len(msgs)-1])
	frame, _ := json.Marshal(wire.NewGroupPush(last.Message, key))
	h.pushAndCollect(ctx, tr, cs, conn, last, frame, 0)
}

// redeliverGroup runs one check of a read-diffused group's message: if the
// device's cursor in the group has not reached it, the message is pushed
// again (and the next check collected, or, the policy exhausted, the
// connection told to pull: notify).
func (h *Redeliverer) redeliverGroup(ctx context.Context, tr *trail, cs *checks, check im.Check, cursors map[im.DeviceKey]im.DeviceCursor) error {
	if h.GroupLogs == nil {
		return nil
	}
	if cursors[im.DeviceKey{User: check.User, Device: check.Device}].Acked >= check.Seq {
		return nil
	}
	if check.Attempt+1 > h.Redelivery.MaxRetries() {
		return nil
	}
	msgs, err := h.GroupLogs.Log(ctx, check.Conversation, check.Seq-1, check.Seq)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		h.log().WarnContext(ctx, "group message expired before redelivery", "conversationId", check.Conversation, "convSeq", check.Seq)
		return nil
	}
	frame, _ := json.Marshal(wire.NewGroupPush(msgs[0], h.proofKey(ctx)))
	conn := im.Connection{User: check.User, Device: check.Device, ID: check.Connection}
	h.pushAndCollect(ctx, tr, cs, conn, groupEntry(msgs[0]), frame, check.Attempt+1)
	return nil
}
