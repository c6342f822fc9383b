package im

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Role is a member's role in a group.
type Role string

// Roles, from most to least powerful.
const (
	// RoleOwner created the group; owners manage admins and members.
	RoleOwner Role = "owner"
	// RoleAdmin adds and removes members.
	RoleAdmin Role = "admin"
	// RoleMember sends, reads and leaves.
	RoleMember Role = "member"
)

// Valid reports whether r is one of the three roles.
func (r Role) Valid() bool { return r == RoleOwner || r == RoleAdmin || r == RoleMember }

func (r Role) rank() int {
	switch r {
	case RoleOwner:
		return 3
	case RoleAdmin:
		return 2
	case RoleMember:
		return 1
	}
	return 0
}

// DefaultMemberLimit is the default largest group size.
const DefaultMemberLimit = 500

// MaxGroupNameLength is the longest group name, in characters.
const MaxGroupNameLength = 100

// Group returns the conversation id of group id ("g:<id>").
func Group(id string) ConversationID { return ConversationID("g:" + id) }

// ValidGroup reports whether c is a well-formed group conversation id.
func (c ConversationID) ValidGroup() bool {
	id, ok := strings.CutPrefix(string(c), "g:")
	return ok && validID(id)
}

// ValidGroupName reports whether name is an acceptable group name: 1–100
// characters of valid UTF-8 display text (ValidDisplayText).
func ValidGroupName(name string) bool { return ValidDisplayText(name, MaxGroupNameLength) }

// ValidDisplayText reports whether s is 1–max characters of valid UTF-8
// that every client shows alike: no control characters (C0, DEL, C1: NUL
// included) and no bidirectional controls (U+061C, U+200E–U+200F,
// U+202A–U+202E, U+2066–U+2069), which can make a name read as another
// ("Trojan Source") or reverse the text around it.
func ValidDisplayText(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return false
		case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return false
		}
	}
	return true
}

// Member is one user's membership of a group. Positions are convSeqs of the
// group's log: the member receives the messages with Joined < convSeq and,
// once removed, convSeq ≤ Left — and those of their earlier memberships
// (Past), so that a member removed and added again still gets what was
// sent to them before, on a device that had not pulled it yet.
type Member struct {
	User UserID
	Role Role
	// Joined is the conversation head when the user was (last) added.
	Joined int64
	// Removed is set once the user was removed; Left is the conversation
	// head at that moment (0 if the group had no message yet).
	Removed bool
	Left    int64
	// Past are the member's earlier memberships that held a message,
	// oldest first (at most MaxPastSpans).
	Past []Span
}

// A MemberChange is one change of a group's membership or roles that an
// actor asks for.
type MemberChange struct {
	Group   ConversationID
	Actor   UserID
	Op      GroupOp
	Targets []UserID
	// Role is what an add gives its targets and a role change makes them.
	Role Role
	// Limit bounds the group's active members after the change.
	Limit int
	At    time.Time
	// OpID is the client's id of the change ("" for none): the same change
	// sent again is answered as the first (Key).
	OpID string
}

// Key is what the change leaves on the member records it writes:
// the same change sent again (same actor, same op id) finds the records it
// wrote. Empty without an op id.
func (ch MemberChange) Key() string {
	if ch.OpID == "" {
		return ""
	}
	return string(ch.Actor) + " " + ch.OpID
}

// Span is an earlier membership of a group: the member received the
// convSeqs in (Joined, Left].
type Span struct{ Joined, Left int64 }

// MaxPastSpans bounds the earlier memberships a member record keeps: a
// device that has not pulled a group through more than this many removals
// and re-adds no longer gets the messages of the oldest.
const MaxPastSpans = 8

// Active reports whether m is a current member.
func (m Member) Active() bool { return m.Role.Valid() && !m.Removed }

// Receives reports whether message convSeq of the group goes to m's inbox:
// it was sent while m was a member.
func (m Member) Receives(convSeq int64) bool {
	if !m.Role.Valid() {
		return false
	}
	if convSeq > m.Joined && (!m.Removed || convSeq <= m.Left) {
		return true
	}
	for _, p := range m.Past {
		if convSeq > p.Joined && convSeq <= p.Left {
			return true
		}
	}
	return false
}

// End is the highest position m's view of the group reaches once the log
// reaches head: head, or where m left. No cursor of m's stands above it.
func (m Member) End(head int64) int64 {
	if m.Removed {
		return min(head, m.Left)
	}
	return head
}

// Start is the head when m first joined (of the memberships m keeps).
func (m Member) Start() int64 {
	if len(m.Past) > 0 {
		return m.Past[0].Joined
	}
	return m.Joined
}

// Range returns the next run of convSeqs (from, to] due to m above last
// once the group log reaches head: within one membership, the earliest
// that has something above last. from ≥ to means nothing is due above
// last (from is then where the current membership's view stands).
func (m Member) Range(last, head int64) (from, to int64) {
	for _, p := range m.Past {
		if from, to := max(last, p.Joined), min(p.Left, head); from < to {
			return from, to
		}
	}
	return max(last, m.Joined), m.End(head)
}

// LastDue returns the highest convSeq up to head that m receives, 0 if none.
func (m Member) LastDue(head int64) int64 {
	if !m.Role.Valid() {
		return 0
	}
	if end := m.End(head); end > m.Joined {
		return end
	}
	for _, p := range slices.Backward(m.Past) {
		if to := min(p.Left, head); to > p.Joined {
			return to
		}
	}
	return 0
}

// HistoryWindow returns, for a page of the group's history below convSeq
// before (0: the newest), the window (after, below) — both exclusive,
// below 0 for "no bound" — of the newest of m's memberships with messages
// there, and whether an earlier membership remains beneath it (the page
// has more to come). ok is false when no membership has messages there.
func (m Member) HistoryWindow(before int64) (after, below int64, earlier, ok bool) {
	if !m.Role.Valid() {
		return 0, 0, false, false
	}
	if !m.Removed && (before == 0 || before-1 > m.Joined) {
		return m.Joined, before, len(m.Past) > 0, true
	}
	// The highest convSeq of a closed membership below before.
	top := func(left int64) int64 {
		if before == 0 {
			return left
		}
		return min(left, before-1)
	}
	if m.Removed {
		if t := top(m.Left); t > m.Joined {
			return m.Joined, t + 1, len(m.Past) > 0, true
		}
	}
	for i, p := range slices.Backward(m.Past) {
		if t := top(p.Left); t > p.Joined {
			return p.Joined, t + 1, i > 0, true
		}
	}
	return 0, 0, false, false
}

// Rejoined returns m added again at head with role: a removed member's
// membership that held a message becomes one of Past (the oldest dropped
// beyond MaxPastSpans).
func (m Member) Rejoined(head int64, role Role) Member {
	past := slices.Clone(m.Past)
	if m.Role.Valid() && m.Removed && m.Left > m.Joined {
		past = append(past, Span{m.Joined, m.Left})
	}
	if len(past) > MaxPastSpans {
		past = past[len(past)-MaxPastSpans:]
	}
	return Member{User: m.User, Role: role, Joined: head, Past: past}
}

// GroupOp is a change to a group's membership or roles.
type GroupOp string

// Group operations.
const (
	OpAdd    GroupOp = "add"
	OpRemove GroupOp = "remove"
	OpRole   GroupOp = "role"
)

// Authorize reports whether actor (a member with role actor.Role) may apply
// op to target (who has role target.Role, or none when not a member) giving
// them role to (for add and role changes):
//
//   - owners may do anything except remove or demote the last owner (checked
//     by the caller, who knows how many owners there are);
//   - admins add and remove members and admins, and grant member or admin;
//   - members may only remove themselves (leave).
func Authorize(actor Member, op GroupOp, target Member, to Role) error {
	if !actor.Active() {
		return fmt.Errorf("%s %s: %w", op, target.User, ErrNotMember)
	}
	self := actor.User == target.User
	switch op {
	case OpAdd:
		if actor.Role.rank() < RoleAdmin.rank() || to.rank() > actor.Role.rank() || !to.Valid() {
			return fmt.Errorf("%s may not add %s as %s: %w", actor.User, target.User, to, ErrForbidden)
		}
	case OpRemove:
		if self {
			return nil
		}
		if actor.Role.rank() < RoleAdmin.rank() || target.Role.rank() > actor.Role.rank() {
			return fmt.Errorf("%s may not remove %s: %w", actor.User, target.User, ErrForbidden)
		}
	case OpRole:
		if actor.Role != RoleOwner || !to.Valid() || !target.Active() {
			return fmt.Errorf("%s may not make %s %s: %w", actor.User, target.User, to, ErrForbidden)
		}
	default:
		return fmt.Errorf("group operation %q: %w", op, ErrForbidden)
	}
	return nil
}

// InboxPosition is where a user's inbox stands for a group's fan-out: the
// inbox head and the last convSeq of the group claimed for the inbox.
type InboxPosition struct {
	Head, Last int64
	// LastSeq is the inbox seq claimed for Last (0: unknown); LastInPlace
	// is true when the newest entry is known to be Last's (a claim whose
	// entry is not known to be there is checked before anything follows it).
	LastSeq     int64
	LastInPlace bool
	// Epoch is the inbox's epoch ("" while it has none: its first
	// append creates it).
	Epoch string
}

// DeviceKey names one device of one user.
type DeviceKey struct {
	User   UserID
	Device DeviceID
}

// GroupPage is one cursor pull from a group's log by a member (read
// diffusion: docs/proposal-group-read-diffusion.md). Positions are the
// group's convSeqs.
type GroupPage struct {
	Messages []Message
	// Next is the cursor to continue from: the last returned convSeq, or
	// the request's cursor when nothing was returned.
	Next int64
	// More reports whether messages above Next are due to the member.
	More bool
	// Head is the last convSeq due to the member: the group's head, or
	// where the member left.
	Head int64
	// Truncated is set when messages after the cursor have expired (history
	// retention): the page starts at FirstSeq, not at cursor+1.
	Truncated bool
	// FirstSeq is the oldest retained convSeq after the cursor (with Truncated).
	FirstSeq int64
}

// GroupPosition is where one device stands in a read-diffused group.
type GroupPosition struct {
	Conversation ConversationID
	// Head is the last convSeq due to the member; Acked the device's
	// cursor, at least where the member's range starts (nothing before it
	// is due).
	Head, Acked int64
}

// Behind reports whether messages due to the device are above its cursor.
func (p GroupPosition) Behind() bool { return p.Acked < p.Head }
