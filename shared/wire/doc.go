// Package wire is Signet's WebSocket protocol: the JSON frames clients send
// (selected by their "action" field) and the frames the server sends (told
// apart by "type"), with validation on decode and the one table that maps
// errors to wire error codes.
//
// Rules it keeps:
//   - Unknown fields are ignored; wrong types, missing ids and oversize bodies
//     are rejected before anything is stored.
//   - Internal error text never reaches a client: only the codes below and
//     fixed, human-readable messages do.
//   - Error codes are append-only: a code, once shipped, keeps its meaning.
//
// docs/protocol.md is the reference for client authors; it documents these
// types with examples.
package wire
