// What an app can learn of a connection the server keeps refusing: a
// browser's WebSocket hides the handshake's status, so the SDK counts the
// failed handshakes in a row (onState's failedConnects) and starts again
// from 0 once a connection opens. Given the HTTP API (apiUrl), it asks
// GET /v1/handshake why and says so (onState's refused).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore, SignetClient, type HandshakeRefusal } from "../src/index.js";
import { eventually, startStack, token, type Stack } from "./stack.js";

let stack: Stack;

before(async () => {
  stack = await startStack({}, ["MaxDevicesPerUser=1"]);
});

after(async () => {
  await stack?.stop();
});

test("a device beyond the user's device limit: onState counts its refused handshakes, and it connects once an operator forgets a device", async (t) => {
  const abort = new AbortController(); // the laptop keeps trying until it connects: stopped if the test fails first
  t.after(() => abort.abort());
  const phone = await SignetClient.connect({ url: stack.url, token: () => token("cat", "phone"), device: "phone", store: new MemoryStore() });
  await phone.close();

  const states: { connected: boolean; failedConnects: number }[] = [];
  const laptop = SignetClient.connect({
    url: stack.url, token: () => token("cat", "laptop"), device: "laptop", store: new MemoryStore(), minBackoffMs: 20, maxBackoffMs: 200,
    onState: (s) => {
      assert.equal(s.refused, undefined, "no apiUrl: no reason");
      states.push({ connected: s.connected, failedConnects: s.failedConnects });
    },
  }, abort.signal);
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

test("given the HTTP API, the client says why its handshakes are refused: the device limit, a refused token", async (t) => {
  // Clients that keep trying until aborted: aborted when the test ends, also when an assertion failed.
  const aborts: AbortController[] = [];
  const abortable = () => {
    const a = new AbortController();
    aborts.push(a);
    return a;
  };
  t.after(() => aborts.forEach((a) => a.abort()));
  const phone = await SignetClient.connect({ url: stack.url, token: () => token("dan", "phone"), device: "phone", store: new MemoryStore() });
  await phone.close();

  const refusals: (HandshakeRefusal | undefined)[] = [];
  const abort = abortable();
  const laptop = SignetClient.connect({
    url: stack.url, apiUrl: stack.httpUrl, token: () => token("dan", "laptop"), device: "laptop", store: new MemoryStore(),
    minBackoffMs: 20, maxBackoffMs: 3000, onState: (s) => refusals.push(s.refused),
  }, abort.signal);
  await eventually("a refusal said", () => refusals.length >= 1, 30000);
  assert.equal(refusals[0]?.status, 409, `the device limit: ${JSON.stringify(refusals[0])}`);
  assert.equal(refusals[0]?.code, "conflict");
  assert.match(refusals[0]?.message ?? "", /forget/);
  // Trying again soon cannot help: the next handshake waits maxBackoffMs (3 s), not the 20 ms of minBackoffMs.
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(refusals.length, 1, "a device beyond the limit tried again before maxBackoffMs");
  abort.abort();
  await laptop.catch(() => {});

  const said: (HandshakeRefusal | undefined)[] = [];
  const abort2 = abortable();
  const forged = SignetClient.connect({
    url: stack.url, apiUrl: stack.httpUrl + "/", token: token("dan", "phone") + "x", device: "phone", store: new MemoryStore(),
    minBackoffMs: 20, maxBackoffMs: 200, onState: (s) => said.push(s.refused),
  }, abort2.signal);
  await eventually("a refused token said", () => said.length >= 1, 30000);
  assert.equal(said[0]?.status, 401, `a forged token: ${JSON.stringify(said[0])}`);
  assert.equal(said[0]?.code, "unauthorized");
  assert.match(said[0]?.message ?? "", /invalid token/);
  abort2.abort();
  await forged.catch(() => {});

  // A stack without the check (404 from the HTTP API): nothing said, the handshakes counted.
  const unknown: { failedConnects: number; refused?: HandshakeRefusal }[] = [];
  const abort3 = abortable();
  const older = SignetClient.connect({
    url: stack.url, apiUrl: stack.httpUrl + "/older-stack", token: () => token("dan", "laptop"), device: "laptop", store: new MemoryStore(),
    minBackoffMs: 20, maxBackoffMs: 200, onState: (s) => unknown.push({ failedConnects: s.failedConnects, refused: s.refused }),
  }, abort3.signal);
  await eventually("two refused handshakes counted", () => unknown.length >= 2, 30000);
  assert.deepEqual(unknown.slice(0, 2), [{ failedConnects: 1, refused: undefined }, { failedConnects: 2, refused: undefined }], "a 404 is no reason");
  abort3.abort();
  await older.catch(() => {});

  // Admitted: nothing to say, and the count starts again.
  const states: { connected: boolean; refused?: HandshakeRefusal }[] = [];
  const ok = await SignetClient.connect({
    url: stack.url, apiUrl: stack.httpUrl, token: () => token("dan", "phone"), device: "phone", store: new MemoryStore(),
    onState: (s) => states.push({ connected: s.connected, refused: s.refused }),
  });
  assert.ok(states.some((s) => s.connected && s.refused === undefined), JSON.stringify(states));
  await ok.close();
});
