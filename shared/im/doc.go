// Package im is Signet's domain: users, devices, conversations, messages,
// inbox sequences and the redelivery policy, in plain Go with no AWS, Lambda
// or wire-format dependency.
//
// Invariants this package states and the adapters keep:
//
//   - A 1:1 conversation has one id for both directions: "d:" + the two user
//     ids sorted, so A→B and B→A share one conversation sequence.
//   - Inbox sequence numbers start at 1 and are gap-free as seen by readers: an
//     entry with seq N exists for every N ≤ head (until retention expires it).
//   - Device ack cursors and read watermarks only move forward.
//   - Redelivery is bounded: a push is retried at most len(Backoff)+1 times and
//     the whole window is the sum of the policy's delays.
package im
