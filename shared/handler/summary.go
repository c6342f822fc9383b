package handler

import (
	"context"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// ConversationIndex is the per-user conversation index.
type ConversationIndex interface {
	Conversations(ctx context.Context, u im.UserID, after im.ConversationID, limit int) ([]im.ConversationState, im.ConversationID, error)
	ConversationState(ctx context.Context, u im.UserID, c im.ConversationID) (im.ConversationState, error)
	ConversationStates(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.UserID]im.ConversationState, error)
}

// Summary serves {"action":"summary","after":…,"limit":…}: one page of
// the caller's conversations with unread counts, the last message's
// preview and the caller's read and delivered positions. It reads one
// DynamoDB Query page per answer, whatever the inbox holds, so a login
// shows it before pulling anything.
func (h *SummaryRoutes) Summary(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, f, err := admit(ctx, h.core, req, wire.DecodeSummary, ratelimit.Query)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSummary, err, "")
	}
	states, next, err := h.Index.Conversations(ctx, c.User, im.ConversationID(f.After), f.Limit)
	if err != nil {
		return h.fail(ctx, c, wire.ActionSummary, err, "")
	}
	out := wire.SummaryPage{Type: wire.TypeSummary, Ref: c.Ref, Conversations: make([]wire.ConversationSummary, len(states)), Next: string(next)}
	for i, s := range states {
		out.Conversations[i] = wire.FromState(s)
	}
	return reply(out)
}

// Receipts serves {"action":"receipts","conversationId":…,"convSeq":N}: how
// many and which of the users message N went to have it delivered (one of
// their devices acked it) and read. Both derive from per-member watermarks,
// so they only move forward and cost no write per message.
func (h *SummaryRoutes) Receipts(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, f, err := admit(ctx, h.core, req, wire.DecodeReceipts, ratelimit.Query)
	if err != nil {
		return h.fail(ctx, c, wire.ActionReceipts, err, "")
	}
	conv, seq := im.ConversationID(f.ConversationID), *f.ConvSeq
	var recipients []im.UserID
	switch {
	case conv.IsGroup():
		if !conv.ValidGroup() {
			return h.fail(ctx, c, wire.ActionReceipts, im.ErrMalformedConversation, "")
		}
		members, err := h.Groups.Members(ctx, conv)
		if err != nil {
			return h.fail(ctx, c, wire.ActionReceipts, err, "")
		}
		// As in history, a member sees only the messages of their own
		// membership: not those sent before they joined or after they left.
		mine := false
		for _, m := range members {
			mine = mine || m.User == c.User && m.Receives(seq)
			if m.Receives(seq) {
				recipients = append(recipients, m.User)
			}
		}
		if !mine {
			return h.fail(ctx, c, wire.ActionReceipts, im.ErrNotMember, "")
		}
	case conv.AppConversation():
		return h.fail(ctx, c, wire.ActionReceipts, wire.Problemf(wire.CodeBadRequest, "receipts of alerts are in the HTTP API: GET /v1/messages/{id}"), "")
	default:
		a, b, err := conv.Members()
		if err == nil {
			_, err = conv.Peer(c.User)
		}
		if err != nil {
			return h.fail(ctx, c, wire.ActionReceipts, err, "")
		}
		recipients = []im.UserID{a, b}
	}
	msg, err := h.Reads.Message(ctx, conv, seq)
	if err != nil {
		return h.fail(ctx, c, wire.ActionReceipts, wire.Problemf(wire.CodeBadRequest, "no message %d in this conversation", seq), "")
	}
	recipients = slices.DeleteFunc(recipients, func(u im.UserID) bool { return u == msg.From })
	states, err := h.Index.ConversationStates(ctx, conv, recipients)
	if err != nil {
		return h.fail(ctx, c, wire.ActionReceipts, err, "")
	}
	out := wire.ReceiptsAnswer{Type: wire.TypeReceipts, Ref: c.Ref, ConversationID: string(conv), ConvSeq: seq, From: string(msg.From),
		Members: len(recipients), DeliveredBy: []string{}, ReadBy: []string{}}
	slices.Sort(recipients)
	for _, u := range recipients {
		s := states[u]
		// Read implies delivered: a device showed it.
		if s.Read >= seq || s.Delivered >= seq {
			out.DeliveredBy = append(out.DeliveredBy, string(u))
		}
		if s.Read >= seq {
			out.ReadBy = append(out.ReadBy, string(u))
		}
	}
	out.Delivered, out.Read = len(out.DeliveredBy), len(out.ReadBy)
	return reply(out)
}
