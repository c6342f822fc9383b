// Package memsqs is an in-memory SQS for the local stack and tests, spoken
// to over SQS's own JSON protocol (X-Amz-Target AmazonSQS.*) by the real
// SDK. It exists for runs that goaws and fauxqs cannot carry: goaws scans a
// queue's every message on each DeleteMessage under one process-wide lock,
// and fauxqs re-scans every delayed and in-flight message of a queue while a
// receive waits, so a redelivery backlog of tens of thousands of messages
// stalls every queue. Here each queue has its own lock, delayed and
// in-flight messages wait in a heap ordered by the time they become
// visible, visible ones in a FIFO, and a receipt handle finds its message
// in a map: every call is O(log n) in the queue's size.
//
// Semantics kept, as AWS documents them for standard queues:
//   - DelaySeconds (0–900, the queue's default when omitted), visibility
//     timeouts (0–43,200 s) and ChangeMessageVisibility on a message in
//     flight (MessageNotInflight otherwise);
//   - at-least-once delivery: a message not deleted within its visibility
//     timeout is received again, with a new receipt handle; a stale
//     handle's DeleteMessage succeeds and deletes nothing while a newer
//     receive holds the message;
//   - redrive: a message received more than maxReceiveCount times moves to
//     its dead-letter queue instead;
//   - retention (MessageRetentionPeriod), message size (MaximumMessageSize,
//     at most 256 KiB, batches too) and the characters SQS allows;
//   - long polling (WaitTimeSeconds 0–20, the queue's
//     ReceiveMessageWaitTimeSeconds by default), woken by a send;
//   - message attributes (String, Number, Binary, with custom suffixes;
//     at most 10, counted in the size; MD5OfMessageAttributes as AWS
//     computes it), received by name, "All", ".*" or "prefix.*";
//   - the error shapes the SDK models (QueueDoesNotExist,
//     ReceiptHandleIsInvalid, EmptyBatchRequest, …) with their query codes.
//
// Not implemented, and refused with an error rather than approximated:
// FIFO queues, message system attributes, tags, permissions and message move tasks.
package memsqs
