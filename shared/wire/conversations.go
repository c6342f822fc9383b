package wire

import (
	"strings"

	"github.com/signet-im/signet/shared/im"
)

// Actions of groups, receipts, presence and summary.
const (
	ActionGroup         = "group"
	ActionReceipts      = "receipts"
	ActionPresence      = "presence"
	ActionPresenceQuery = "presence.query"
	ActionSummary       = "summary"
)

// Server frame types of these actions.
const (
	TypeGroup    = "group"
	TypeReceipts = "receipts"
	TypePresence = "presence"
	TypeSummary  = "summary"
	// TypeMembership tells a user that someone else added them to a group
	// or removed them from it (Membership).
	TypeMembership = "membership"
)

// Membership is pushed to the live connections of users someone else
// added to a group (created it with them) or removed from it:
// {"type":"membership","change":"added"|"removed","conversationId":…,"name":…,"by":…}.
// It is a notice, not a delivery: a user offline at the time finds the
// group in its summary.
type Membership struct {
	// Type is "membership".
	Type string `json:"type"`
	// Change is "added" or "removed".
	Change string `json:"change"`
	// ConversationID and Name name the group.
	ConversationID string `json:"conversationId"`
	Name           string `json:"name"`
	// By is the user who made the change.
	By string `json:"by"`
	// Head, on "added" to a group under read diffusion, is the group's head
	// when the member's devices were indexed online: pull the group up to
	// it (a message stored just before may not have been pushed to them).
	Head *int64 `json:"head,omitempty"`
}

// Group operations (the "op" of a group frame).
const (
	GroupCreate  = "create"
	GroupAdd     = "add"
	GroupRemove  = "remove"
	GroupLeave   = "leave"
	GroupRole    = "role"
	GroupMembers = "members"
)

// MaxUsersPerFrame bounds the users one group or presence.query frame names.
const MaxUsersPerFrame = 500

// Query is embedded in every request that is answered with a frame: Ref
// is echoed in the answer and in an error frame, so a client can match
// answers to requests. Optional, at most 64 printable ASCII characters.
type Query struct {
	// Ref is echoed in the answer (optional).
	Ref string `json:"ref,omitempty"`
}

// SetRef sets the ref a client puts on a request.
func (q *Query) SetRef(ref string) { q.Ref = ref }

// RequestRef is the ref of a decoded request (its Query's).
func (q Query) RequestRef() string { return q.Ref }

// Request is a client frame answered with a frame: one that embeds Query.
type Request interface{ SetRef(ref string) }

// RefOf returns the ref of a frame body, "" when it has none or a bad one.
func RefOf(body string) string {
	if !strings.Contains(body, `"ref"`) {
		return "" // most frames (sends, acks) have none: skip a second decode
	}
	var q Query
	if decode(body, &q) != nil || !im.ValidClientMsgID(q.Ref) {
		return ""
	}
	return q.Ref
}

// check refuses an invalid ref, and then forgets it: an error frame echoes
// only a valid one.
func (q *Query) check() *Problem {
	if q.Ref != "" && !im.ValidClientMsgID(q.Ref) {
		q.Ref = ""
		return Problemf(CodeBadRequest, "ref must be 1-64 printable ASCII characters")
	}
	return nil
}

// Group is the client frame {"action":"group","op":…}: create a group, add
// or remove members, leave, change a role, or list members.
type Group struct {
	// Action is "group".
	Action string `json:"action"`
	Query
	// Op is create, add, remove, leave, role or members.
	Op string `json:"op"`
	// ConversationID names the group ("g:<id>"); for create, optional: a
	// new id is generated when absent.
	ConversationID string `json:"conversationId,omitempty"`
	// Name is the group's name (create; 1–100 characters).
	Name string `json:"name,omitempty"`
	// Users are the users to add or remove, or whose role changes; create
	// adds them as members besides the caller (owner). A user named twice
	// counts once.
	Users []string `json:"users,omitempty"`
	// Role is the role to give (add: default member; role: required).
	Role string `json:"role,omitempty"`
	// OpID is the client's id for this change (add, remove, leave, role;
	// optional, 1–64 printable ASCII): the same change sent again with it
	// is answered as the first time, listing the users the first changed.
	OpID string `json:"opId,omitempty"`
}

// DecodeGroup validates a group frame.
func DecodeGroup(body string) (Group, error) {
	var f Group
	if err := decode(body, &f); err != nil {
		return Group{}, err
	}
	if err := f.Query.check(); err != nil {
		return Group{}, err
	}
	g, err := f.validate()
	if err != nil {
		return Group{Query: f.Query}, err
	}
	return g, nil
}

// validate checks a decoded group frame and fills in its defaults.
func (f Group) validate() (Group, error) {
	needUsers := false
	switch f.Op {
	case GroupCreate:
		if !im.ValidGroupName(f.Name) {
			return Group{}, Problemf(CodeBadRequest, "name is required: 1-%d characters, no control characters", im.MaxGroupNameLength)
		}
		if f.ConversationID != "" && !im.ConversationID(f.ConversationID).ValidGroup() {
			return Group{}, Problemf(CodeBadRequest, "conversationId must be g:<id> with an id of 1-64 characters of [A-Za-z0-9._@-]")
		}
	case GroupAdd, GroupRemove, GroupRole:
		needUsers = true
	case GroupLeave, GroupMembers:
	default:
		return Group{}, Problemf(CodeBadRequest, "op must be one of create, add, remove, leave, role, members")
	}
	if f.OpID != "" && (f.Op == GroupCreate || f.Op == GroupMembers) {
		return Group{}, Problemf(CodeBadRequest, "opId is for add, remove, leave and role (a create is named by its conversationId)")
	}
	if f.OpID != "" && !im.ValidClientMsgID(f.OpID) {
		return Group{}, Problemf(CodeBadRequest, "opId must be 1-64 printable ASCII characters")
	}
	if f.Op != GroupCreate && !im.ConversationID(f.ConversationID).ValidGroup() {
		return Group{}, Problemf(CodeBadRequest, "conversationId is required: g:<id>")
	}
	if needUsers && len(f.Users) == 0 {
		return Group{}, Problemf(CodeBadRequest, "users is required for %s", f.Op)
	}
	if len(f.Users) > MaxUsersPerFrame {
		return Group{}, Problemf(CodeTooLarge, "at most %d users per frame", MaxUsersPerFrame)
	}
	seen := make(map[string]bool, len(f.Users))
	unique := f.Users[:0]
	for _, u := range f.Users {
		if !im.UserID(u).Person() {
			return Group{}, Problemf(CodeBadRequest, "users must be user ids: 1-64 characters of [A-Za-z0-9._@-], not starting with %q", im.AppSenderPrefix)
		}
		if !seen[u] {
			seen[u] = true
			unique = append(unique, u)
		}
	}
	f.Users = unique // a user named twice is one change, not a transaction DynamoDB refuses
	switch {
	case f.Op == GroupRole && !im.Role(f.Role).Valid():
		return Group{}, Problemf(CodeBadRequest, "role is required: owner, admin or member")
	case f.Op == GroupAdd && f.Role == "":
		f.Role = string(im.RoleMember)
	case f.Op == GroupAdd && !im.Role(f.Role).Valid():
		return Group{}, Problemf(CodeBadRequest, "role must be owner, admin or member")
	}
	return f, nil
}

// Member is one member in a group answer.
type Member struct {
	// UserID names the member.
	UserID string `json:"userId"`
	// Role is owner, admin or member.
	Role string `json:"role"`
	// Joined is the conversation head when the user joined: they receive
	// messages after it.
	Joined int64 `json:"joined"`
	// Removed is set for removed members, who received the messages up to
	// Left (absent: 0, removed before any message).
	Removed bool `json:"removed,omitempty"`
	// Left is the last convSeq a removed member received.
	Left int64 `json:"left,omitempty"`
}

// GroupInfo answers a group frame:
// {"type":"group","op":…,"conversationId":…,"name":…,"members":[…],"changed":[…]}.
type GroupInfo struct {
	// Type is "group".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref string `json:"ref,omitempty"`
	// Op echoes the request's op.
	Op string `json:"op"`
	// ConversationID names the group.
	ConversationID string `json:"conversationId"`
	// Name is the group's name.
	Name string `json:"name,omitempty"`
	// Head is the group's last convSeq.
	Head int64 `json:"head"`
	// Count is the number of current members.
	Count int64 `json:"count"`
	// Members lists the members (op members: all current ones, plus removed
	// ones; other ops: none).
	Members []Member `json:"members,omitempty"`
	// Changed lists the users whose membership or role this request changed
	// (users already in the wanted state are not listed).
	Changed []string `json:"changed,omitempty"`
}

// FromMember converts a domain member into its wire form.
func FromMember(m im.Member) Member {
	return Member{UserID: string(m.User), Role: string(m.Role), Joined: m.Joined, Removed: m.Removed, Left: m.Left}
}

// Receipts is the client frame {"action":"receipts","conversationId":…,
// "convSeq":N}: who has message N delivered and read.
type Receipts struct {
	// Action is "receipts".
	Action string `json:"action"`
	Query
	// ConversationID names a group or 1:1 conversation of the caller.
	ConversationID string `json:"conversationId"`
	// ConvSeq is the message asked about.
	ConvSeq *int64 `json:"convSeq"`
}

// DecodeReceipts validates a receipts frame.
// DecodeReceipts validates a receipts frame (ConvSeq is set).
func DecodeReceipts(body string) (Receipts, error) {
	var f Receipts
	if err := decode(body, &f); err != nil {
		return Receipts{}, err
	}
	if err := f.Query.check(); err != nil {
		return Receipts{}, err
	}
	if f.ConversationID == "" || len(f.ConversationID) > 3*im.MaxIDLength {
		return Receipts{Query: f.Query}, Problemf(CodeBadRequest, "conversationId is required")
	}
	if f.ConvSeq == nil || *f.ConvSeq < 1 {
		return Receipts{Query: f.Query}, Problemf(CodeBadRequest, "convSeq is required: a convSeq of at least 1")
	}
	return f, nil
}

// ReceiptsAnswer answers a receipts frame. Members are the users message
// ConvSeq was sent to (members when it was sent, the sender excluded);
// Delivered and Read count those whose watermarks reached it.
type ReceiptsAnswer struct {
	// Type is "receipts".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref string `json:"ref,omitempty"`
	// ConversationID and ConvSeq name the message.
	ConversationID string `json:"conversationId"`
	ConvSeq        int64  `json:"convSeq"`
	// From is the message's sender.
	From string `json:"from"`
	// Members counts the users the message went to.
	Members int `json:"members"`
	// Delivered and Read count those who have it delivered / read.
	Delivered int `json:"delivered"`
	Read      int `json:"read"`
	// DeliveredBy and ReadBy name them, sorted.
	DeliveredBy []string `json:"deliveredBy"`
	ReadBy      []string `json:"readBy"`
}

// Presence is the client frame {"action":"presence","status":…}: choose the
// display state online, away, dnd or invisible.
type Presence struct {
	// Action is "presence".
	Action string `json:"action"`
	Query
	// Status is online, away, dnd or invisible.
	Status string `json:"status"`
}

// DecodePresence validates a presence frame.
func DecodePresence(body string) (Presence, error) {
	var f Presence
	if err := decode(body, &f); err != nil {
		return Presence{}, err
	}
	if err := f.Query.check(); err != nil {
		return Presence{}, err
	}
	if !im.Status(f.Status).Settable() {
		return Presence{Query: f.Query}, Problemf(CodeBadRequest, "status must be online, away, dnd or invisible")
	}
	return f, nil
}

// PresenceQuery is the client frame {"action":"presence.query","users":[…]}.
type PresenceQuery struct {
	// Action is "presence.query".
	Action string `json:"action"`
	Query
	// Users are the users asked about (1–100).
	Users []string `json:"users"`
}

// MaxPresenceQuery bounds the users of one presence.query.
const MaxPresenceQuery = 100

// DecodePresenceQuery validates a presence.query frame.
func DecodePresenceQuery(body string) (PresenceQuery, error) {
	var f PresenceQuery
	if err := decode(body, &f); err != nil {
		return PresenceQuery{}, err
	}
	if err := f.Query.check(); err != nil {
		return PresenceQuery{}, err
	}
	if len(f.Users) == 0 || len(f.Users) > MaxPresenceQuery {
		return PresenceQuery{Query: f.Query}, Problemf(CodeBadRequest, "users is required: 1-%d user ids", MaxPresenceQuery)
	}
	for _, u := range f.Users {
		if !im.UserID(u).Valid() {
			return PresenceQuery{Query: f.Query}, Problemf(CodeBadRequest, "users must be user ids: 1-64 characters of [A-Za-z0-9._@-]")
		}
	}
	return f, nil
}

// UserIDs returns the users asked about.
func (f PresenceQuery) UserIDs() []im.UserID {
	out := make([]im.UserID, len(f.Users))
	for i, u := range f.Users {
		out[i] = im.UserID(u)
	}
	return out
}

// UserPresence is what one user shows to others.
type UserPresence struct {
	// UserID names the user.
	UserID string `json:"userId"`
	// Status is online, away, dnd or offline (invisible users show offline).
	Status string `json:"status"`
}

// PresenceAnswer answers presence and presence.query frames, and is pushed
// (without ref) to 1:1 peers when a user's visible presence changes:
// {"type":"presence","users":[{"userId":…,"status":…}]}.
type PresenceAnswer struct {
	// Type is "presence".
	Type string `json:"type"`
	// Ref echoes the request's ref (absent on pushes).
	Ref string `json:"ref,omitempty"`
	// Users are the users and what they show.
	Users []UserPresence `json:"users"`
}

// Summary is the client frame {"action":"summary","after":…,"limit":…}:
// one page of the caller's conversations.
type Summary struct {
	// Action is "summary".
	Action string `json:"action"`
	Query
	// After continues after this conversation id (the previous page's next).
	After string `json:"after,omitempty"`
	// Limit is the most conversations wanted, 1..200 (default 100).
	Limit int `json:"limit,omitempty"`
}

// MaxSummaryPage bounds a summary page.
const MaxSummaryPage = 200

// DecodeSummary validates a summary frame.
func DecodeSummary(body string) (Summary, error) {
	var f Summary
	if err := decode(body, &f); err != nil {
		return Summary{}, err
	}
	if err := f.Query.check(); err != nil {
		return Summary{}, err
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > MaxSummaryPage {
		return Summary{Query: f.Query}, Problemf(CodeBadRequest, "limit must be 1..%d", MaxSummaryPage)
	}
	if len(f.After) > 3*im.MaxIDLength {
		return Summary{Query: f.Query}, Problemf(CodeBadRequest, "after must be a conversation id")
	}
	return f, nil
}

// ConversationSummary is one conversation in a summary page.
type ConversationSummary struct {
	// ConversationID names the conversation.
	ConversationID string `json:"conversationId"`
	// Title is a group's name.
	Title string `json:"title,omitempty"`
	// Unread counts messages after the read watermark.
	Unread int64 `json:"unread"`
	// Last is the convSeq of the last message in the caller's inbox.
	Last int64 `json:"last"`
	// Read and Delivered are the caller's watermarks (convSeqs).
	Read      int64 `json:"read"`
	Delivered int64 `json:"delivered"`
	// ReadSeq, in an app's alert conversation, is the inbox seq up to which
	// the user has read its alerts (absent until a read names one): an alert
	// is read when its inbox seq is at or below it, whatever its convSeq.
	ReadSeq int64 `json:"readSeq,omitempty"`
	// Removed is set when the caller was removed from the group, at convSeq
	// Left (absent: 0).
	Removed bool `json:"removed,omitempty"`
	// Left is the last convSeq the caller received when removed.
	Left int64 `json:"left,omitempty"`
	// LastFrom, LastAt and Preview describe the last message (Preview: the
	// start of its JSON body, at most 160 bytes).
	LastFrom string `json:"lastFrom,omitempty"`
	// LastAt is RFC 3339 UTC with milliseconds.
	LastAt  string `json:"lastAt,omitempty"`
	Preview string `json:"preview,omitempty"`
}

// SummaryPage answers a summary frame.
type SummaryPage struct {
	// Type is "summary".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref string `json:"ref,omitempty"`
	// Conversations are ordered by conversation id.
	Conversations []ConversationSummary `json:"conversations"`
	// Next continues the listing (as after); "" on the last page.
	Next string `json:"next,omitempty"`
}

// FromState converts a conversation state into its summary form.
func FromState(s im.ConversationState) ConversationSummary {
	out := ConversationSummary{
		ConversationID: string(s.Conversation), Title: s.Title, Unread: s.Unread(), Last: s.Last,
		Read: s.Read, Delivered: s.Delivered, ReadSeq: s.ReadSeq, Removed: s.Removed, Left: s.Left, LastFrom: string(s.LastFrom), Preview: s.Preview,
	}
	if s.LastFrom != "" {
		out.LastAt = Timestamp(s.LastAt)
	}
	return out
}
