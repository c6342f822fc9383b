package im

import (
	"fmt"
	"strings"
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
// once removed, convSeq ≤ Left.
type Member struct {
	User UserID
	Role Role
	// Joined is the conversation head when the user was (last) added.
	Joined int64
	// Removed is set once the user was removed; Left is the conversation
	// head at that moment (0 if the group had no message yet).
	Removed bool
	Left    int64
}

// Active reports whether m is a current member.
func (m Member) Active() bool { return m.Role.Valid() && !m.Removed }

// Receives reports whether message convSeq of the group goes to m's inbox:
// it was sent while m was a member.
func (m Member) Receives(convSeq int64) bool {
	return m.Role.Valid() && convSeq > m.Joined && (!m.Removed || convSeq <= m.Left)
}

// Range returns the convSeqs (from, to] that m should hold once the group
// log reaches head, given that m's inbox already holds the group up to last.
// from ≥ to means nothing is due.
func (m Member) Range(last, head int64) (from, to int64) {
	from, to = max(last, m.Joined), head
	if m.Removed {
		to = min(to, m.Left)
	}
	return from, to
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
