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

// A member removed and added again keeps their earlier membership: what
// was sent to them then stays due (to a device that had not pulled it),
// what was sent while they were out never is.
func TestARejoinedMemberKeepsTheEarlierMembership(t *testing.T) {
	t.Parallel()
	m := Member{User: "b", Role: RoleMember, Joined: 2}
	m.Removed, m.Left = true, 5
	m = m.Rejoined(8, RoleAdmin) // out for 6–8
	if !m.Active() || m.Role != RoleAdmin || m.Joined != 8 || len(m.Past) != 1 || m.Past[0] != (Span{2, 5}) {
		t.Fatalf("rejoined = %+v", m)
	}
	for seq, want := range map[int64]bool{2: false, 3: true, 5: true, 6: false, 8: false, 9: true} {
		if m.Receives(seq) != want {
			t.Errorf("receives %d = %v, want %v", seq, !want, want)
		}
	}
	ranges := []struct{ last, head, from, to int64 }{
		{0, 12, 2, 5},    // the earlier membership first
		{4, 12, 4, 5},    // its rest
		{5, 12, 8, 12},   // then the current one, past the gap
		{6, 12, 8, 12},   // a cursor in the gap
		{12, 12, 12, 12}, // nothing due
		{0, 8, 2, 5},
		{5, 8, 8, 8}, // rejoined, nothing sent since
	}
	for _, r := range ranges {
		if from, to := m.Range(r.last, r.head); from != r.from || to != r.to {
			t.Errorf("range above %d at head %d = (%d, %d], want (%d, %d]", r.last, r.head, from, to, r.from, r.to)
		}
	}
	if got := m.LastDue(8); got != 5 {
		t.Errorf("last due at head 8 = %d, want 5 (6–8 were sent while out)", got)
	}
	if got := m.LastDue(10); got != 10 {
		t.Errorf("last due at head 10 = %d", got)
	}
	if m.Start() != 2 || m.End(12) != 12 {
		t.Errorf("start %d, end %d", m.Start(), m.End(12))
	}
	// Removed again before anything was sent: that membership held nothing.
	m.Removed, m.Left = true, 8
	if again := m.Rejoined(9, RoleMember); len(again.Past) != 1 {
		t.Errorf("an empty membership kept: %+v", again.Past)
	}
	// The oldest memberships go beyond MaxPastSpans.
	for i := range int64(MaxPastSpans + 2) {
		m.Removed, m.Left = true, m.Joined+1
		m = m.Rejoined(m.Joined+3, RoleMember)
		if i == 0 && m.Past[len(m.Past)-1] != (Span{8, 9}) {
			t.Fatalf("past = %+v", m.Past)
		}
	}
	if len(m.Past) != MaxPastSpans || m.Past[0].Joined == 2 {
		t.Errorf("past = %+v, want the newest %d", m.Past, MaxPastSpans)
	}
	// History pages one membership at a time, newest first.
	h := Member{Role: RoleMember, Joined: 8, Past: []Span{{0, 2}, {4, 6}}}
	windows := []struct {
		before, after, below int64
		earlier, ok          bool
	}{
		{0, 8, 0, true, true},   // the current membership, newest first
		{12, 8, 12, true, true}, // further back in it
		{9, 4, 7, true, true},   // below its start: the one before (4, 6]
		{6, 4, 6, true, true},   // further back in that
		{5, 0, 3, false, true},  // below its start: the first (0, 2]
		{2, 0, 2, false, true},  // further back in that
		{1, 0, 0, false, false}, // nothing below
	}
	for _, w := range windows {
		after, below, earlier, ok := h.HistoryWindow(w.before)
		if after != w.after || below != w.below || earlier != w.earlier || ok != w.ok {
			t.Errorf("history before %d: (%d, %d) earlier %v ok %v; want (%d, %d) %v %v", w.before, after, below, earlier, ok, w.after, w.below, w.earlier, w.ok)
		}
	}
	h.Removed, h.Left = true, 10
	if after, below, _, ok := h.HistoryWindow(0); after != 8 || below != 11 || !ok {
		t.Errorf("a removed member's newest history: (%d, %d) %v", after, below, ok)
	}
	h.Left = 8 // removed before anything was sent in the current membership
	if after, below, _, _ := h.HistoryWindow(0); after != 4 || below != 7 {
		t.Errorf("history of a member removed at once: (%d, %d), want (4, 7)", after, below)
	}
	// Unread counts the messages due above the read watermark in every
	// membership, not those sent while out.
	s := ConversationState{Conversation: Group("g"), Base: 8, Last: 12, Read: 3, Past: []Span{{2, 5}}}
	if got := s.Unread(); got != 2+4 {
		t.Errorf("unread = %d, want 6", got)
	}
	s.Read = 9
	if got := s.Unread(); got != 3 {
		t.Errorf("unread = %d, want 3", got)
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
