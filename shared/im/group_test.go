package im

import (
	"errors"
	"testing"
	"time"
)

func TestMemberRangeAndReceives(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		m              Member
		last, head     int64
		from, to       int64
		receives, not5 bool
	}{
		{"founding member catches up", Member{Role: RoleMember}, 0, 5, 0, 5, true, false},
		{"joined at 3", Member{Role: RoleMember, Joined: 3}, 0, 5, 3, 5, true, false},
		{"already up to date", Member{Role: RoleMember}, 5, 5, 5, 5, true, false},
		{"removed at 4", Member{Role: RoleMember, Removed: true, Left: 4}, 2, 9, 2, 4, false, true},
		// Regression: removed before the first message (Left 0) counted as a member.
		{"removed before any message", Member{Role: RoleMember, Removed: true}, 0, 9, 0, 0, false, true},
	}
	for _, c := range cases {
		from, to := c.m.Range(c.last, c.head)
		if from != c.from || to != c.to {
			t.Errorf("%s: range (%d, %d], want (%d, %d]", c.name, from, to, c.from, c.to)
		}
		if got := c.m.Receives(5); got != c.receives {
			t.Errorf("%s: receives 5 = %v", c.name, got)
		}
	}
	if (Member{}).Receives(1) {
		t.Error("a non-member receives")
	}
}

func TestAuthorizeGroupOperations(t *testing.T) {
	t.Parallel()
	owner := Member{User: "o", Role: RoleOwner}
	admin := Member{User: "a", Role: RoleAdmin}
	member := Member{User: "m", Role: RoleMember}
	outsider := Member{User: "x"}
	cases := []struct {
		name   string
		actor  Member
		op     GroupOp
		target Member
		to     Role
		want   error
	}{
		{"owner adds an owner", owner, OpAdd, outsider, RoleOwner, nil},
		{"admin adds a member", admin, OpAdd, outsider, RoleMember, nil},
		{"admin may not add an owner", admin, OpAdd, outsider, RoleOwner, ErrForbidden},
		{"member may not add", member, OpAdd, outsider, RoleMember, ErrForbidden},
		{"admin removes a member", admin, OpRemove, member, "", nil},
		{"admin may not remove the owner", admin, OpRemove, owner, "", ErrForbidden},
		{"member leaves", member, OpRemove, member, "", nil},
		{"member may not remove another", member, OpRemove, admin, "", ErrForbidden},
		{"only owners change roles", admin, OpRole, member, RoleAdmin, ErrForbidden},
		{"owner promotes", owner, OpRole, member, RoleAdmin, nil},
		{"outsiders do nothing", outsider, OpAdd, outsider, RoleMember, ErrNotMember},
		{"removed member does nothing", Member{User: "r", Role: RoleAdmin, Removed: true, Left: 3}, OpAdd, outsider, RoleMember, ErrNotMember},
	}
	for _, c := range cases {
		err := Authorize(c.actor, c.op, c.target, c.to)
		if (c.want == nil) != (err == nil) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestVisiblePresence(t *testing.T) {
	t.Parallel()
	now := time.Now()
	live := []Connection{{ConnectedAt: now.Add(-time.Hour), LastSeenAt: now.Add(-time.Minute)}}
	stale := []Connection{{ConnectedAt: now.Add(-time.Hour), LastSeenAt: now.Add(-DefaultPresenceStale - time.Minute)}}
	cases := []struct {
		name   string
		chosen Status
		conns  []Connection
		want   Status
	}{
		{"connected, nothing chosen", "", live, StatusOnline},
		{"away", StatusAway, live, StatusAway},
		{"dnd", StatusDND, live, StatusDND},
		{"invisible shows offline", StatusInvisible, live, StatusOffline},
		{"stale record is offline", StatusOnline, stale, StatusOffline},
		{"no connection", StatusAway, nil, StatusOffline},
	}
	for _, c := range cases {
		if got := LivePresence("u", c.chosen, c.conns, now, DefaultPresenceStale).Visible(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestUnreadAndPreview(t *testing.T) {
	t.Parallel()
	if u := (ConversationState{Conversation: "d:a:b", Last: 9, Read: 4}).Unread(); u != 5 {
		t.Errorf("1:1 unread = %d", u)
	}
	if u := (ConversationState{Conversation: "g:x", Last: 9, Base: 7}).Unread(); u != 2 {
		t.Errorf("joined at 7: unread = %d", u)
	}
	if u := (ConversationState{Conversation: "a:app", Last: 90, UnreadAlerts: 2}).Unread(); u != 2 {
		t.Errorf("alerts unread = %d", u)
	}
	long := []byte(`"` + string(make([]byte, 0)) + "ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé" + `"`)
	if p := Preview(long); len(p) > MaxPreviewBytes || !validUTF8(p) {
		t.Errorf("preview %q", p)
	}
}

func validUTF8(s string) bool {
	for _, r := range s {
		if r == 0xFFFD {
			return false
		}
	}
	return true
}
