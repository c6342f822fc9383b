package handler

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Histories reads conversation logs.
type Histories interface {
	History(ctx context.Context, c im.ConversationID, after, before int64, limit int) ([]im.Message, bool, error)
}

// History pages back through a conversation's log (1:1, or a group the
// caller is or was a member of), which is kept longer than inboxes ({"action":"history","conversationId":…,"before":N}).
func (h *HistoryRoutes) History(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, f, err := admit(ctx, h.core, req, wire.DecodeHistory, ratelimit.Query)
	if err != nil {
		return h.fail(ctx, c, wire.ActionHistory, err, "")
	}
	conv := im.ConversationID(f.ConversationID)
	if conv.AppConversation() {
		// An app's conversation holds alerts to many users: each sees only
		// their own, in their inbox.
		return h.fail(ctx, c, wire.ActionHistory, wire.Problemf(wire.CodeBadRequest, "history is not available for alert conversations; use sync"), "")
	}
	after, before, earlier := int64(0), f.Before, false
	if conv.IsGroup() {
		// A member sees the log of their memberships: from a join up to
		// the removal that ended it, one membership per page.
		m, err := h.Groups.Member(ctx, conv, c.User)
		if err == nil && !m.Role.Valid() {
			err = im.ErrNotMember
		}
		if err != nil {
			return h.fail(ctx, c, wire.ActionHistory, err, "")
		}
		var ok bool
		if after, before, earlier, ok = m.HistoryWindow(f.Before); !ok {
			return reply(wire.HistoryPage{Type: wire.TypeHistory, Ref: c.Ref, ConversationID: string(conv), Messages: []wire.Message{}})
		}
	} else if _, err := conv.Peer(c.User); err != nil {
		return h.fail(ctx, c, wire.ActionHistory, err, "")
	}
	msgs, more, err := h.Histories.History(ctx, conv, after, before, f.Limit)
	if err != nil {
		return h.fail(ctx, c, wire.ActionHistory, err, "")
	}
	// An earlier membership's messages come on the next pages.
	more = more || earlier
	// Like sync pages, a history page fits API Gateway's 128 KB message
	// limit: the oldest messages that do not fit are the next page's.
	msgs, cut := im.FitNewest(msgs, im.MaxPageBytes, func(m im.Message) int { return wire.EntrySize(im.Entry{Message: m}) })
	more = more || cut
	page := wire.HistoryPage{Type: wire.TypeHistory, Ref: c.Ref, ConversationID: string(conv), Messages: make([]wire.Message, len(msgs)), HasMore: more}
	for i, m := range msgs {
		page.Messages[i] = wire.FromMessage(m)
	}
	if len(msgs) > 0 {
		page.Before = msgs[0].ConvSeq
	} else if more {
		// The membership's messages expired: continue below its start.
		page.Before = after + 1
	}
	return reply(page)
}
