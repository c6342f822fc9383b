// Package dynamo stores Signet's connections, inboxes and conversation logs
// in DynamoDB through the AWS SDK v2.
//
// Key shapes (partition / sort key, both strings):
//
//	Connections  userId / connectionId            one item per live connection
//	Inbox        userId / "head"                  inbox epoch, and a floor under the seq (heads.go)
//	             userId / "e#<seq:016d>"           inbox entry: a reference to its log item
//	                                               (conversation, convSeq, messageId, sender,
//	                                               time); the newest is the inbox head; TTL
//	             userId / "m#<messageId>"          dedup item of group fan-out and alerts, TTL
//	             userId / "i#<clientMsgId>"        sender idempotency item, TTL
//	             userId / "c#<deviceId>"           device cursor: acked seq, sync continuation
//	             userId / "devices"               device version: moved by every device
//	                                               admitted (the device limit)
//	             userId / "rl#…"                   rate limits
//	             userId / "v#<conversationId>"     conversation index: last message, read and
//	                                               delivered watermarks, group view (no TTL)
//	             userId / "presence"               chosen display state, debounce state
//	Messages     conversationId / "head"          groups and alert conversations: last
//	(Standard-IA)                                  conversation seq (groups: name, counts,
//	                                               fan-out mark); a 1:1 conversation has none
//	             conversationId / "s#<seq:016d>"   canonical message, its body plain ("body")
//	                                               or deflated ("bz", body.go); TTL: history
//	             conversationId / "u#<userId>"     group member: role, joined, removed/left
//
// Invariants kept here:
//   - A 1:1 send (SendMode claim, the default; sendclaim.go) puts the log
//     item (at the conversation's head plus one) and the sender's
//     idempotency item in one TransactWriteItems, both with
//     attribute_not_exists; the message then goes into each participant's
//     inbox as fan-out does (below), after any predecessor not yet there,
//     before the ACK: one order in both inboxes, each message once, a send
//     a crash cut short completed by its retry or by the conversation's
//     next send. In SendMode transaction (sendItems) it is one
//     TransactWriteItems of those two items and, per participant, the
//     inbox entry at the head just read plus one (entries are their own
//     heads) and the conversation index.
//   - A group send is one TransactWriteItems: the conversation head (on the
//     value read), the message, the sender's idempotency item and a check
//     that the sender is a current member. Membership changes update the
//     same head conditionally, so sends and changes are totally ordered.
//   - Fan-out (and a claim-mode 1:1 send) appends a single owed message to
//     an inbox without a transaction (AppendGroup; a backlog goes in one transaction that puts
//     the entries and claims the last): a message is claimed in the member's
//     conversation index (last convSeq moved from its predecessor, the
//     inbox seq it takes recorded) and then its entry is put at that seq if
//     free. Only the claim's winner puts the entry, only at the claimed seq,
//     and nothing is claimed before its predecessor's entry is in place:
//     exactly once and in order per inbox, however often and however
//     concurrently fan-out runs, and a run that crashed between the two
//     writes is completed by the next (SQS retries the job). An inbox
//     without entries takes its head from the conversation index, where
//     a recent claim whose entry is not there does not count (indexedSeq):
//     an append never goes above a claim still on its way.
//   - Device cursors and read/delivered watermarks only move forward
//     (conditional update on the old value).
package dynamo
