// Package handler holds Signet's Lambda handlers: the $connect authorizer,
// the WebSocket routes ($connect, $disconnect, send, ack, sync, ping, read,
// history, group, receipts, presence, presence.query, summary, $default),
// the HTTP alerts API, the HTTP API's handshake check (GET /v1/handshake:
// what $connect would answer a token and device, for browsers, which
// cannot see a refused handshake's status) and the SQS consumers
// (redelivery, fan-out), each on
// the small struct of its use case (routes.go: Messages, Sessions,
// GroupRoutes, ..., built from Deps with only what the routes use).
// functions/<name>/main.go only builds its use case and calls lambda.Start
// with the route's method; the local stack invokes the very same methods
// in-process.
//
// Invariants kept here:
//   - The server ACK ("sent") is built only after the store reports the
//     message durable in every recipient inbox (1:1), or in the group log
//     with its fan-out job queued (groups): ack after durability.
//   - A rejected frame gets an error frame and causes no write.
//   - Pushes are hints: a failed or unacked push leaves the message in the
//     inbox; a bounded schedule of redelivery checks re-pushes it, then it
//     waits for a pull. A 410 removes the connection record.
package handler
