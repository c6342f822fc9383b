// Package gateway is a local emulation of an API Gateway WebSocket API: the
// $connect REQUEST authorizer, route selection on $request.body.action,
// $connect/$disconnect, route responses, request contexts shaped like AWS's,
// size limits, idle and lifetime timeouts, and the @connections management
// API over HTTP so that the real apigatewaymanagementapi client can push.
//
// It invokes handlers in-process: the very functions the Lambdas run.
//
// As API Gateway does, it invokes each frame's route on its own goroutine
// (frames of one connection run concurrently and may finish in any order;
// Serial is a test switch), and sends a two-way route's response even when
// its body is empty (counted in Faults: an empty frame is a backend bug).
//
// Limits it enforces, as AWS does: a client frame over MaxFrameBytes (32 KB,
// read on the wire, see frames.go) or message over MaxMessageBytes (128
// KiB) closes the connection with 1009, a binary frame with 1003; a
// connection idle for IdleTimeout (10 min) or open for MaxLifetime (2 h) is
// closed; a route response or PostToConnection payload over 128 KiB is not
// sent (413 for PostToConnection; counted in Faults); PostToConnection
// answers 410 while the connection is still in $connect, and 403 to an
// unsigned request (SigV4 is required, any credentials are accepted).
package gateway
