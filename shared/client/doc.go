// Package client is Signet's reference Go client: it keeps a device's
// messages, cursor and outbox in one local file and speaks the protocol of
// docs/protocol.md over a WebSocket, getting the device half of reliable
// delivery right:
//
//   - Persist, then ack. A received entry with seq = cursor+1 is written
//     together with the new cursor in one local transaction; only then is it
//     emitted and acknowledged (cumulative "ack upTo", batched: a pushed
//     entry within AckInterval, 2 s, capped at 2/5 of the server's push
//     timeout, or at once when 50 wait; a sync's entries once when the sync
//     ends or every 500). A crash before the commit leaves nothing, so the
//     server re-pushes or the next sync brings the entry; a crash after it
//     leaves the entry stored, and a re-push is dropped as a duplicate.
//   - No skipped seq. An entry at or below the cursor is a duplicate: it is
//     dropped and acked again. An entry beyond cursor+1 reveals a gap: nothing
//     past the gap is applied until a sync from the cursor fills it.
//   - Sync on connect. After every (re)connect the client syncs from its
//     stored cursor until hasMore is false; an epoch change means the
//     server's sequence restarted and the client resyncs from zero.
//   - Resumable outbox. A send is written to the outbox with its clientMsgId
//     before it goes out, and is re-sent with the same id — after reconnects
//     and process restarts — until the server's "sent" ACK arrives. The server
//     is idempotent per clientMsgId, so the peer gets it exactly once.
//   - Reconnect with capped exponential backoff and full jitter, honouring
//     retryAfterMs. A send refused rate_limited holds every send (the limit
//     is the user's) until retryAfterMs, on a new connection too, and so
//     does a refused query every query of its kind, so the server never
//     sees this client ignore its limit; if it closes the connection anyway
//     (rate_limit_ignored: the app's own calls kept coming), the client
//     waits retryAfterMs before reconnecting.
//
// A Client is safe for concurrent use.
package client
