// What an app can learn of a connection the server keeps refusing: a
// browser's WebSocket hides the handshake's status, so the SDK counts the
// failed handshakes in a row (onState's failedConnects) and starts again
// from 0 once a connection opens.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore, SignetClient } from "../src/index.js";
import { eventually, startStack, token, type Stack } from "./stack.js";

let stack: Stack;

before(async () => {
  stack = await startStack({}, ["MaxDevicesPerUser=1"]);
});

after(async () => {
  await stack?.stop();
});

test("a device beyond the user's device limit: onState counts its refused handshakes, and it connects once an operator forgets a device", async () => {
  const phone = await SignetClient.connect({ url: stack.url, token: () => token("cat", "phone"), device: "phone", store: new MemoryStore() });
  await phone.close();

  const states: { connected: boolean; failedConnects: number }[] = [];
  const laptop = SignetClient.connect({
    url: stack.url, token: () => token("cat", "laptop"), device: "laptop", store: new MemoryStore(), minBackoffMs: 20, maxBackoffMs: 200,
    onState: (s) => states.push({ connected: s.connected, failedConnects: s.failedConnects }),
  });
  await eventually("three refused handshakes counted", () => states.some((s) => s.failedConnects >= 3), 30000);
  assert.deepEqual(states.slice(0, 3), [1, 2, 3].map((n) => ({ connected: false, failedConnects: n })), "each refused handshake counted once, in a row");

  // The operator forgets the phone (refused while its connection is still
  // recorded): the laptop's next handshake is admitted, and the count is 0.
  await eventually("the phone forgotten", async () => {
    const r = await fetch(`${stack.httpUrl}/v1/users/cat/devices/phone`, { method: "DELETE", headers: { Authorization: "Bearer local-admin-key" } });
    return r.status === 204;
  }, 30000);
  const c = await laptop;
  await eventually("the laptop connected", () => states.some((s) => s.connected), 30000);
  assert.equal(states.find((s) => s.connected)!.failedConnects, 0, "a connection that opened starts the count again");
  await c.close();
});
