// Package gateway is a local emulation of an API Gateway WebSocket API: the
// $connect REQUEST authorizer, route selection on $request.body.action,
// $connect/$disconnect, route responses, request contexts shaped like AWS's,
// size limits, idle and lifetime timeouts, and the @connections management
// API over HTTP so that the real apigatewaymanagementapi client can push.
//
// It invokes handlers in-process: the very functions the Lambdas run.
//
// Limits it enforces, as AWS does: a client message over MaxMessageBytes
// (128 KiB) closes the connection with 1009; a connection idle for
// IdleTimeout (10 min) or open for MaxLifetime (2 h) is closed; a
// PostToConnection payload over 128 KiB is refused with 413. It does not
// enforce the 32 KB frame limit separately: the WebSocket library reassembles
// fragmented frames before the gateway sees them.
package gateway
