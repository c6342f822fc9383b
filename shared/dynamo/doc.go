// Package dynamo stores Signet's connections, inboxes and conversation logs
// in DynamoDB through the AWS SDK v2.
//
// Key shapes (partition / sort key, both strings):
//
//	Connections  userId / connectionId            one item per live connection
//	Inbox        userId / "head"                  last inbox seq + epoch
//	             userId / "e#<seq:016d>"           inbox entry (denormalised message), TTL
//	             userId / "m#<messageId>"          dedup item: message → inbox seq, TTL
//	             userId / "i#<clientMsgId>"        sender idempotency item, TTL
//	             userId / "c#<deviceId>"           device cursor: acked seq, sync continuation
//	             userId / "rl#sync"                sync rate limit
//	             userId / "v#<conversationId>"     conversation index: last message, read and
//	                                               delivered watermarks, group view (no TTL)
//	             userId / "presence"               chosen display state, debounce state
//	Messages     conversationId / "head"          last conversation seq (groups: name, counts, fan-out mark)
//	             conversationId / "s#<seq:016d>"   canonical message (TTL: history retention)
//	             conversationId / "u#<userId>"     group member: role, joined, removed/left
//
// Invariants kept here:
//   - A 1:1 send is one TransactWriteItems: the conversation head and every
//     recipient inbox head advance conditionally on the values just read, the
//     message, the entries and the dedup items are put with
//     attribute_not_exists, and the sender's idempotency item is put in the
//     same transaction. Either all of it is stored or none of it is, so a
//     reader that sees head N finds every entry ≤ N (no skipped sequence), a
//     retry with the same clientMsgId finds the stored result, and an inbox
//     holds a message at most once.
//   - A group send is one TransactWriteItems: the conversation head (on the
//     value read), the message, the sender's idempotency item and a check
//     that the sender is a current member. Membership changes update the
//     same head conditionally, so sends and changes are totally ordered.
//   - Fan-out appends a run of group messages to one inbox in a transaction
//     that advances the inbox head on the value read and the member's
//     position ("last" of the index item) only if it is below the first
//     appended convSeq: exactly once and in order per inbox, however often
//     and however concurrently fan-out runs.
//   - Device cursors and read/delivered watermarks only move forward
//     (conditional update on the old value).
package dynamo
