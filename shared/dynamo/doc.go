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
//	Messages     conversationId / "head"          last conversation seq
//	             conversationId / "s#<seq:016d>"   canonical message
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
//   - Device cursors only move forward (conditional update on the old value).
package dynamo
