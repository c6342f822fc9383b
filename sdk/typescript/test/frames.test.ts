// The SDK's frame types are generated from docs/protocol.schema.json, which
// the Go server's tests check too: the committed src/frames.ts must be what
// the generator makes of the schema now.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { clientActions, serverTypes } from "../src/index.js";
import { repo } from "./stack.js";

const sdk = join(repo, "sdk/typescript");

test("src/frames.ts is generated from docs/protocol.schema.json as it is now (npm run gen)", () => {
  const fresh = execFileSync("node", ["scripts/gen-frames.mjs", "../../docs/protocol.schema.json", "-"], { cwd: sdk, encoding: "utf8" });
  assert.equal(readFileSync(join(sdk, "src/frames.ts"), "utf8"), fresh, "src/frames.ts is stale: run npm run gen");
});

test("the generated frames name every action and server frame type of the protocol", () => {
  assert.deepEqual([...clientActions].sort(), ["ack", "answer", "group", "history", "keepalive", "ping", "presence", "presence.query", "read", "receipts", "register", "send", "summary", "sync"]);
  assert.deepEqual([...serverTypes].sort(), ["answer", "error", "group", "groupMessage", "groupSync", "history", "membership", "message", "notify", "pong", "presence", "read", "receipt", "receipts", "registered", "sent", "summary", "sync"]);
});
