package handler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	ChangeMembers(ctx context.Context, ch im.MemberChange) ([]im.Member, error)
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
	c, f, err := admit(ctx, h.core, req, wire.DecodeGroup, ratelimit.Group)
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	conv := im.ConversationID(f.ConversationID)
	users := make([]im.UserID, len(f.Users))
	for i, u := range f.Users {
		users[i] = im.UserID(u)
	}
	now := h.now()
	var changed []im.Member
	replayed := false
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
		if errors.Is(err, im.ErrAlreadyCreated) {
			// Sent again (its answer was lost, or its first invocation
			// failed after the group was stored): answer as the first
			// time; the members are indexed and told again below.
			replayed, err = true, nil
		}
	case wire.GroupAdd, wire.GroupRemove, wire.GroupLeave, wire.GroupRole:
		ch := im.MemberChange{Group: conv, Actor: c.User, Targets: users, Role: im.Role(f.Role), Limit: h.memberLimit(), At: now, OpID: f.OpID}
		switch f.Op {
		case wire.GroupAdd:
			ch.Op = im.OpAdd
		case wire.GroupRemove:
			ch.Op, ch.Role = im.OpRemove, ""
		case wire.GroupLeave:
			ch.Op, ch.Role, ch.Targets = im.OpRemove, "", []im.UserID{c.User}
		case wire.GroupRole:
			ch.Op = im.OpRole
		}
		changed, err = h.Groups.ChangeMembers(ctx, ch)
	case wire.GroupMembers:
		var me im.Member
		if me, err = h.Groups.Member(ctx, conv, c.User); err == nil && !me.Role.Valid() {
			err = im.ErrNotMember
		}
	}
	if err != nil {
		return h.fail(ctx, c, wire.ActionGroup, err, "")
	}
	// A change sent again (its answer lost, or its first invocation
	// failed after the change was stored and before the index and notices
	// below) changes nothing more, but its users are indexed and told
	// again — both harmless twice — or a connected device of a member who
	// joined in a failed invocation would get no push of the group's
	// messages until it reconnected, and one removed would not learn it.
	// A create sent again and a change with an op id find what they did
	// the first time (changed). An add indexes every user it names (all
	// are members now: one already may be a member whose index write
	// failed before), and one without an op id, which cannot tell its own
	// earlier work from someone else's, tells them all too.
	// A change sent again after later changes of the same members (a late
	// copy) is answered with whom it changed, as they are now: those whom
	// a later change took back (added back after this removal, removed
	// after this add) are neither told nor indexed — the notice would say
	// the opposite of what they are.
	current := slices.DeleteFunc(slices.Clone(changed), func(m im.Member) bool { return !stillAsChanged(f.Op, m) })
	told, indexed := current, current
	if f.Op == wire.GroupAdd {
		indexed = indexed[:0:0]
		for _, u := range users {
			if !slices.ContainsFunc(changed, func(m im.Member) bool { return m.User == u && !m.Active() }) {
				indexed = append(indexed, im.Member{User: u})
			}
		}
		if f.OpID == "" {
			told = indexed
		}
	}
	reads, err := h.indexJoined(ctx, f.Op, conv, indexed)
	if err != nil {
		// Stored, not indexed: a connected device of a member who joined
		// would get no push of the group until it reconnected. The change
		// sent again (the SDKs ask again, with its op id) indexes them.
		return h.fail(ctx, c, wire.ActionGroup, fmt.Errorf("%s %s stored, its members not indexed online: %w", f.Op, conv, err), "")
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
	if len(changed) > 0 && !replayed {
		// A change with an op id sent again logs again (the store answers
		// it as the first, without saying so): the op id names both lines.
		h.log().InfoContext(ctx, "group changed", "op", f.Op, "conversationId", conv, "userId", c.User, "changed", len(changed), "opId", f.OpID, "requestId", c.RequestID)
	}
	if len(told) > 0 {
		h.noticeMembership(ctx, f.Op, conv, name, c.User, told, reads, head)
	}
	return reply(out)
}

// stillAsChanged reports whether member m, changed by a change of op, is
// still as that change left them: added (create, add) and still a member,
// removed (remove, leave) and still out. A role change's members are
// neither told nor indexed.
func stillAsChanged(op string, m im.Member) bool {
	switch op {
	case wire.GroupCreate, wire.GroupAdd:
		return m.Active()
	case wire.GroupRemove, wire.GroupLeave:
		return !m.Active()
	}
	return true
}

// indexJoined puts the connections of users who joined read-diffused
// group conv (a create or an add) in its online index, after the join is
// stored: a connection made meanwhile either is found here or finds the
// group when its $connect lists the user's groups. It reports whether the
// group is read-diffused. A message stored between the join and this
// index is not pushed to those connections: the membership notice, sent
// after, names the head to pull up to. An error means some are not
// indexed: their devices would learn of the group's messages only when
// they reconnect.
func (h *GroupRoutes) indexJoined(ctx context.Context, op string, conv im.ConversationID, joined []im.Member) (bool, error) {
	if h.Online == nil || len(joined) == 0 || (op != wire.GroupCreate && op != wire.GroupAdd) {
		return false, nil
	}
	reads, err := h.Online.GroupReadDiffused(ctx, conv)
	if err != nil || !reads {
		return reads, err
	}
	work := make([]memberMessages, len(joined))
	for i, m := range joined {
		work[i] = memberMessages{user: m.User}
	}
	err = perMember(work, func(u im.UserID, _ []im.Message) error {
		conns, err := h.Connections.Connections(ctx, u)
		if err != nil {
			return err
		}
		for _, conn := range conns {
			if _, err := h.Online.IndexOnline(ctx, conn, []im.ConversationID{conv}); err != nil {
				return err
			}
		}
		return nil
	})
	return true, err
}

// noticeMembership tells the users someone else added (or created the
// group with) or removed, on their live connections: a notice, never a
// delivery (an offline user finds the group in its summary).
func (h *GroupRoutes) noticeMembership(ctx context.Context, op string, conv im.ConversationID, name string, by im.UserID, changed []im.Member, reads bool, head int64) {
	change := map[string]string{wire.GroupCreate: "added", wire.GroupAdd: "added", wire.GroupRemove: "removed"}[op]
	if change == "" {
		return
	}
	notice := wire.Membership{Type: wire.TypeMembership, Change: change, ConversationID: string(conv), Name: name, By: string(by)}
	if reads && change == "added" {
		notice.Head = &head // read diffusion: pull the group up to here
	}
	frame, _ := json.Marshal(notice)
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
