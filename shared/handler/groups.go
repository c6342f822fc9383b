package handler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Groups is the storage of groups: membership, the group log and fan-out.
type Groups interface {
	CreateGroup(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, now time.Time) ([]im.Member, error)
	ChangeMembers(ctx context.Context, c im.ConversationID, actor im.UserID, op im.GroupOp, targets []im.UserID, role im.Role, limit int, now time.Time) ([]im.Member, error)
	Members(ctx context.Context, c im.ConversationID) ([]im.Member, error)
	Member(ctx context.Context, c im.ConversationID, u im.UserID) (im.Member, error)
	GroupInfo(ctx context.Context, c im.ConversationID) (name string, head, count int64, err error)
	SendGroup(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error)
}

// Group serves {"action":"group","op":…}: create, add, remove, leave, role
// and members. Every change is ordered against the group's messages: a
// member added receives the messages sent after the change, a member
// removed none sent after it.
func (h *GroupRoutes) Group(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	f, err := wire.DecodeGroup(req.Body)
	c.useRef(f.Query)
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	if err := h.limit(ctx, c, ratelimit.Group); err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	conv := im.ConversationID(f.ConversationID)
	users := make([]im.UserID, len(f.Users))
	for i, u := range f.Users {
		users[i] = im.UserID(u)
	}
	now := h.now()
	var changed []im.Member
	switch f.Op {
	case wire.GroupCreate:
		if conv == "" {
			conv = newGroupID()
		}
		// Everything that can refuse a create is checked before anything
		// is stored (the wire decoder removed duplicate users).
		others := slices.DeleteFunc(users, func(u im.UserID) bool { return u == c.User })
		if 1+len(others) > h.memberLimit() {
			return h.fail(ctx, c, wire.ActionGroup, fmt.Errorf("create %s with %d members: %w", conv, 1+len(others), im.ErrGroupFull), "")
		}
		changed, err = h.Groups.CreateGroup(ctx, conv, f.Name, c.User, others, now)
	case wire.GroupAdd:
		changed, err = h.Groups.ChangeMembers(ctx, conv, c.User, im.OpAdd, users, im.Role(f.Role), h.memberLimit(), now)
	case wire.GroupRemove:
		changed, err = h.Groups.ChangeMembers(ctx, conv, c.User, im.OpRemove, users, "", h.memberLimit(), now)
	case wire.GroupLeave:
		changed, err = h.Groups.ChangeMembers(ctx, conv, c.User, im.OpRemove, []im.UserID{c.User}, "", h.memberLimit(), now)
	case wire.GroupRole:
		changed, err = h.Groups.ChangeMembers(ctx, conv, c.User, im.OpRole, users, im.Role(f.Role), h.memberLimit(), now)
	case wire.GroupMembers:
		var me im.Member
		if me, err = h.Groups.Member(ctx, conv, c.User); err == nil && !me.Role.Valid() {
			err = im.ErrNotMember
		}
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	name, head, count, err := h.Groups.GroupInfo(ctx, conv)
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	out := wire.GroupInfo{Type: wire.TypeGroup, Ref: c.Ref, Op: f.Op, ConversationID: string(conv), Name: name, Head: head, Count: count}
	for _, m := range changed {
		out.Changed = append(out.Changed, string(m.User))
	}
	if f.Op == wire.GroupMembers {
		members, err := h.Groups.Members(ctx, conv)
		if err != nil {
			return h.fail(ctx, c, wire.ActionGroup, err, "")
		}
		for _, m := range members {
			out.Members = append(out.Members, wire.FromMember(m))
		}
	}
	if len(changed) > 0 {
		h.log().InfoContext(ctx, "group changed", "op", f.Op, "conversationId", conv, "userId", c.User, "changed", len(changed), "requestId", c.RequestID)
		h.noticeMembership(ctx, f.Op, conv, name, c.User, changed)
	}
	return reply(out)
}

// noticeMembership tells the users someone else added (or created the
// group with) or removed, on their live connections: a notice, never a
// delivery (an offline user finds the group in its summary).
func (h *GroupRoutes) noticeMembership(ctx context.Context, op string, conv im.ConversationID, name string, by im.UserID, changed []im.Member) {
	change := map[string]string{wire.GroupCreate: "added", wire.GroupAdd: "added", wire.GroupRemove: "removed"}[op]
	if change == "" {
		return
	}
	frame, _ := json.Marshal(wire.Membership{Type: wire.TypeMembership, Change: change, ConversationID: string(conv), Name: name, By: string(by)})
	for _, m := range changed {
		if m.User != by {
			h.pushAll(ctx, "membership", m.User, "", frame)
		}
	}
}

// newGroupID returns a fresh random group conversation id.
func newGroupID() im.ConversationID {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return im.Group(hex.EncodeToString(b))
}

// memberLimit is the most members of a group (MemberLimit or
// im.DefaultMemberLimit).
func (h *GroupRoutes) memberLimit() int {
	if h.MemberLimit > 0 {
		return h.MemberLimit
	}
	return im.DefaultMemberLimit
}
