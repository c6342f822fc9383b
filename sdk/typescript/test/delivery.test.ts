// The Go SDK's delivery guarantees, shown for the TypeScript SDK against the
// real local stack: persist before emit and ack, the outbox, crash at every
// step of an entry's path, a transport that drops, duplicates and reorders
// pushes, and a 1,000-message burst with the receiver restarted at random.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryStore, SignetClient, ServerError, SupersededError, type SentFrame, type ClientOptions, type CrashPoint, type DeviceStore, type ReceiptFrame, type StoredMessage, type WebSocketConstructor, type WebSocketLike } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { dialStack, dropsFirstIncoming, eventually, failsAfterItsWrite, flakyWebSocket, frameCheck, holdFirstSyncUntilSent, invalidFrames, losesFirst, losesFirstQuietly, lostAfter, seeded, startStack, throttledOnce, throttledWhile, type Stack } from "./stack.js";

let stack: Stack;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "signet-sdk-"));
  // Short redelivery timings so that a dropped push is re-pushed in a
  // second, not five; memdyn for the 1,000-message burst.
  stack = await startStack({ SIGNET_PUSH_TIMEOUT: "1s", SIGNET_REDELIVERY_BACKOFF: "1s,1s,2s,2s", SIGNET_DYNAMODB_EMULATOR: "memdyn" });
});

after(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function dial(user: string, store: DeviceStore, extra: Partial<ClientOptions> = {}): Promise<SignetClient> {
  return dialStack(stack, user, store, extra);
}

/** Sends n numbered messages from a client to user `to`, each after the previous one's ACK. */
async function sendNumbered(from: SignetClient, to: string, n: number, prefix = "m"): Promise<void> {
  const all: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) all.push(from.send(to, { n: i, text: `${prefix}${i}` }));
  await Promise.all(all); // the outbox keeps one send per conversation in flight: stored in this order
}

/** Asserts that shown holds messages 0..n-1 from `from`, once each, in order. */
function assertOnceInOrder(shown: StoredMessage[], n: number, what: string, sameInbox = true): void {
  const numbers = shown.map((m) => (m.body as { n: number }).n);
  assert.deepEqual(numbers, [...Array(n).keys()], `${what}: every message once, in order`);
  assert.equal(new Set(shown.map((m) => m.messageId)).size, n, `${what}: distinct message ids`);
  if (sameInbox) for (let i = 1; i < shown.length; i++) assert.ok(shown[i].seq > shown[i - 1].seq, `${what}: ascending seqs`);
}

test("a message reaches the recipient once, persisted before it is emitted, and the delivered receipt comes back", async () => {
  const receipts: ReceiptFrame[] = [];
  const a = await dial("alice-1", new MemoryStore(), { onReceipt: (r) => receipts.push(r) });
  const bStore = new MemoryStore();
  const b = await dial("bob-1", bStore);
  const sent = await a.send("bob-1", { text: "Approve PO-7?" });
  assert.equal(sent.conversationId, "d:alice-1:bob-1");
  assert.equal(sent.convSeq, 1);
  assert.ok(sent.seq && sent.seq >= 1, "a 1:1 sent carries the sender's own inbox seq");
  const m = (await b.messages().next()).value as StoredMessage;
  assert.deepEqual(m.body, { text: "Approve PO-7?" });
  assert.equal(m.from, "alice-1");
  assert.equal(m.messageId, sent.messageId);
  assert.ok((await bStore.position()).cursor >= m.seq, "persisted before it was emitted");
  await eventually("alice's delivered receipt", () => receipts.some((r) => r.kind === "delivered" && r.upTo === 1), 30000);
  const own = await a.history();
  assert.deepEqual(own.map((x) => x.messageId), [sent.messageId], "the sender's own copy is on its device, from sent");
  await b.markRead(sent.conversationId, 1);
  await eventually("alice's read receipt", () => receipts.some((r) => r.kind === "read" && r.upTo === 1), 30000);
  await Promise.all([a.close(), b.close()]);
});

test("a read frame lost with its connection is written again on the next one: the sender sees it read", async () => {
  const receipts: ReceiptFrame[] = [];
  const a = await dial("alice-lr", new MemoryStore(), { onReceipt: (r) => receipts.push(r) });
  const reads: Record<string, unknown>[] = [];
  const b = await dial("bob-lr", new MemoryStore(), { WebSocket: losesFirst("read", reads) });
  const sent = await a.send("bob-lr", { text: "Approve PO-9?" });
  await b.messages().next();
  await b.markRead(sent.conversationId, sent.convSeq);
  await eventually("alice's read receipt", () => receipts.some((r) => r.kind === "read" && r.upTo === sent.convSeq), 30000);
  assert.ok(reads.length >= 2, `the read was offered ${reads.length} times: lost once, then written again`);
  await Promise.all([a.close(), b.close()]);
});

test("a read whose invocation failed (API Gateway's error frame in its place) is written again at once: the sender sees it read", async () => {
  const receipts: ReceiptFrame[] = [];
  const a = await dial("alice-tr", new MemoryStore(), { onReceipt: (r) => receipts.push(r) });
  const out: { at: number; frame: Record<string, unknown> }[] = [];
  const b = await dial("bob-tr", new MemoryStore(), { WebSocket: throttledOnce((f) => f.action === "read", out) });
  const sent = await a.send("bob-tr", { text: "Approve PO-10?" });
  await b.messages().next();
  await b.markRead(sent.conversationId, sent.convSeq);
  await eventually("alice's read receipt", () => receipts.some((r) => r.kind === "read" && r.upTo === sent.convSeq), 30000);
  const reads = out.filter((o) => o.frame.action === "read");
  assert.ok(reads.length >= 2, `the read was written ${reads.length} times: swallowed once, then again`);
  await Promise.all([a.close(), b.close()]);
});

test("under a throttle a read is written again about once a second, not at each error frame (k frames would come back k² times)", async () => {
  const receipts: ReceiptFrame[] = [];
  const a = await dial("alice-th", new MemoryStore(), { onReceipt: (r) => receipts.push(r) });
  const out: { at: number; frame: Record<string, unknown> }[] = [];
  let until = 0;
  const b = await dial("bob-th", new MemoryStore(), { WebSocket: throttledWhile((f) => f.action === "read", () => Date.now() < until, out) });
  const sent = await a.send("bob-th", { text: "Approve PO-11?" });
  await b.messages().next();
  const start = Date.now();
  until = start + 3000;
  await b.markRead(sent.conversationId, sent.convSeq);
  await eventually("alice's read receipt", () => receipts.some((r) => r.kind === "read" && r.upTo === sent.convSeq), 30000);
  const reads = out.filter((o) => o.frame.action === "read").length;
  const most = Math.floor((Date.now() - start) / 1000) + 3;
  assert.ok(reads >= 2 && reads <= most, `the read was written ${reads} times in ${Date.now() - start} ms of which 3,000 throttled; want 2 to ${most}`);
  await Promise.all([a.close(), b.close()]);
});

test("a failed ack is written again a second later: under a throttle about once a second (not at every tick), and a group's too (no redelivery needed)", async () => {
  // Pushed again only after 30 s: what moves the cursors here is the ack written again.
  const own = await startStack({ SIGNET_PUSH_TIMEOUT: "30s", SIGNET_REDELIVERY_BACKOFF: "30s", SIGNET_DYNAMODB_EMULATOR: "memdyn" }, ["GroupDelivery=read"]);
  try {
    const receipts: ReceiptFrame[] = [];
    const a = await dial("alice-ack", new MemoryStore(), { url: own.url, onReceipt: (r) => receipts.push(r) });
    const out: { at: number; frame: Record<string, unknown> }[] = [];
    let until = Infinity;
    const b = await dial("bob-ack", new MemoryStore(), { url: own.url, WebSocket: throttledWhile((f) => f.action === "ack" && f.conversationId === undefined, () => Date.now() < until, out) });
    const sent = await a.send("bob-ack", { text: "Approve PO-12?" });
    await b.messages().next();
    const acks = () => out.filter((o) => o.frame.action === "ack" && o.frame.conversationId === undefined);
    await eventually("bob's first ack", () => acks().length > 0, 30000);
    const start = Date.now();
    until = start + 4000;
    await eventually("alice's delivered receipt", () => receipts.some((r) => r.kind === "delivered" && r.upTo === sent.convSeq), 30000);
    const n = acks().filter((o) => o.at >= start).length;
    const most = Math.floor((Date.now() - start) / 1000) + 3;
    assert.ok(n >= 1 && n <= most, `the ack was written ${n} times in ${Date.now() - start} ms of which 4,000 throttled; want 1 to ${most}`);

    // A group's ack answered with the error frame once.
    const groupOut: { at: number; frame: Record<string, unknown> }[] = [];
    let pushes = 0;
    const c = await dial("carol-ack", new MemoryStore(), {
      url: own.url,
      WebSocket: throttledOnce((f) => f.action === "ack" && typeof f.conversationId === "string", groupOut),
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        if (dir === "in" && (f as { type?: string }).type === "groupMessage") pushes++;
      },
    });
    const g = await a.createGroup("Ops", ["carol-ack"]);
    const gs = await a.sendDraft({ conversationId: g.conversationId, body: { text: "deploy?" } });
    await c.messages().next();
    await eventually("carol's cursor in the group", async () => (await a.receipts(g.conversationId, gs.convSeq)).delivered === 1, 20000);
    const groupAcks = groupOut.filter((o) => o.frame.action === "ack" && o.frame.conversationId === g.conversationId).length;
    assert.ok(groupAcks >= 2, `carol's group ack was written ${groupAcks} times: want it written again after the error frame`);
    assert.equal(pushes, 1, "no redelivered push moved carol's cursor");
    await Promise.all([a.close(), b.close(), c.close()]);
  } finally {
    await own.stop();
  }
});

test("a read answered with an internal error is written again a second later, saying again: the read receipt its failed invocation did not send arrives", async () => {
  // The read reaches the server and is stored; bob's client is then told its invocation failed, and alice's first
  // read receipt is dropped: what a function that stopped after the write leaves (the watermark moved, nobody told).
  const receipts: ReceiptFrame[] = [];
  const a = await dial("alice-ra", new MemoryStore(), { onReceipt: (r) => receipts.push(r), WebSocket: dropsFirstIncoming((d) => d.includes('"type":"receipt"') && d.includes('"kind":"read"')) });
  const out: { at: number; frame: Record<string, unknown> }[] = [];
  const b = await dial("bob-ra", new MemoryStore(), { WebSocket: failsAfterItsWrite((f) => f.action === "read", out) });
  const sent = await a.send("bob-ra", { text: "Approve PO-14?" });
  await b.messages().next();
  await b.markRead(sent.conversationId, sent.convSeq);
  await eventually("alice's read receipt", () => receipts.some((r) => r.kind === "read" && r.userId === "bob-ra" && r.upTo === sent.convSeq), 30000);
  const reads = out.filter((o) => o.frame.action === "read");
  assert.ok(reads.length >= 2, `the read was written ${reads.length} times: want it written again after the error`);
  assert.equal(reads[0].frame.again, undefined, "the first read does not say again");
  assert.equal(reads[reads.length - 1].frame.again, true, "the read written again says so");
  await Promise.all([a.close(), b.close()]);
});

test("an ack answered with an internal error is written again a second later, saying again: the delivered receipt its failed invocation did not send arrives", async () => {
  // As the read's test: the ack is stored, bob's client is told its invocation failed, alice's first delivered
  // receipt is dropped. Pushed again only after 30 s: no redelivery brings a second ack.
  const own = await startStack({ SIGNET_PUSH_TIMEOUT: "30s", SIGNET_REDELIVERY_BACKOFF: "30s", SIGNET_DYNAMODB_EMULATOR: "memdyn" });
  try {
    const receipts: ReceiptFrame[] = [];
    const a = await dial("alice-aa", new MemoryStore(), { url: own.url, onReceipt: (r) => receipts.push(r), WebSocket: dropsFirstIncoming((d) => d.includes('"type":"receipt"') && d.includes('"kind":"delivered"')) });
    const out: { at: number; frame: Record<string, unknown> }[] = [];
    const b = await dial("bob-aa", new MemoryStore(), { url: own.url, WebSocket: failsAfterItsWrite((f) => f.action === "ack" && f.conversationId === undefined, out) });
    const sent = await a.send("bob-aa", { text: "Approve PO-15?" });
    await b.messages().next();
    await eventually("alice's delivered receipt", () => receipts.some((r) => r.kind === "delivered" && r.userId === "bob-aa" && r.upTo === sent.convSeq), 30000);
    const acks = out.filter((o) => o.frame.action === "ack" && o.frame.conversationId === undefined);
    assert.ok(acks.length >= 2, `the ack was written ${acks.length} times: want it written again after the error`);
    assert.equal(acks[0].frame.again, undefined, "the first ack does not say again");
    assert.equal(acks[acks.length - 1].frame.again, true, "the ack written again says so");
    await Promise.all([a.close(), b.close()]);
  } finally {
    await own.stop();
  }
});

test("a new device's own message that comes in sent before its first sync page (answered before the send was stored) is shown when the page ends", async () => {
  let held!: () => void;
  const pageHeld = new Promise<void>((r) => (held = r));
  const a = await dial("alice-own", new MemoryStore(), { WebSocket: holdFirstSyncUntilSent(held), resendAfterMs: 3600000 });
  await pageHeld; // computed while the inbox was empty
  const sent = await a.send("bob-own", { text: "first words" });
  await eventually("alice's own message on her device", async () => (await a.history()).some((m) => m.messageId === sent.messageId), 30000);
  const m = (await a.messages().next()).value as StoredMessage;
  assert.equal(m.messageId, sent.messageId);
  assert.equal(m.seq, 1);
  await a.close();
});

test("the outbox survives a restart; a send retried with its clientMsgId is stored once; a reused id is refused", async () => {
  const file = join(dir, "outbox.db");
  let st = await FileStore.open(file);
  const id = await SignetClient.queue(st, { to: "bob-2", body: { n: 0, text: "queued offline" } });
  await st.close();
  st = await FileStore.open(file); // a restart: the outbox is on disk
  assert.deepEqual((await st.outbox()).map((o) => o.clientMsgId), [id]);
  const b = await dial("bob-2", new MemoryStore());
  const a = await dial("alice-2", st);
  const got = (await b.messages().next()).value as StoredMessage;
  assert.deepEqual(got.body, { n: 0, text: "queued offline" });
  await eventually("the outbox empties", async () => (await a.pending()).length === 0, 30000);
  // The same clientMsgId again (a retry after a lost ACK) gets the same
  // message back and stores nothing new; other content under it is refused.
  const again = await a.sendDraft({ clientMsgId: id, to: "bob-2", body: { n: 0, text: "queued offline" } });
  assert.equal(again.messageId, got.messageId);
  await assert.rejects(a.sendDraft({ clientMsgId: id, to: "bob-2", body: "something else" }), (e: unknown) => e instanceof ServerError && e.code === "bad_request");
  const next = await a.send("bob-2", { n: 1, text: "after" });
  const got2 = (await b.messages().next()).value as StoredMessage;
  assert.equal(got2.messageId, next.messageId, "nothing arrived between: the retry was not a second message");
  await Promise.all([a.close(), b.close()]);
});

for (const point of ["before-persist", "after-persist", "before-ack"] as CrashPoint[]) {
  test(`a receiver killed ${point} of an entry ends with every message once, in order (file store)`, async () => {
    const user = `bob-crash-${point}`;
    const file = join(dir, `${user}.db`);
    const n = 20;
    const a = await dial(`alice-crash-${point}`, new MemoryStore());
    const shown: StoredMessage[] = [];
    let crashed = false;
    let st = await FileStore.open(file);
    let b = await dial(user, st, { crashAt: (p, seq) => !crashed && p === point && seq >= 7 && (crashed = true) });
    const consume = async (c: SignetClient) => {
      for await (const m of c.messages()) shown.push(m);
    };
    let reading = consume(b);
    await sendNumbered(a, user, n);
    await eventually("the crash", () => crashed, 60000);
    await reading; // messages() ends with the crash
    await st.close(); // the killed process's lock goes with it
    st = await FileStore.open(file);
    b = await dial(user, st, { replay: true, shownUpTo: shown.at(-1)?.seq ?? 0 });
    reading = consume(b);
    await eventually(`${n} messages shown`, () => shown.length >= n, 60000);
    await b.close();
    await reading;
    assertOnceInOrder(shown, n, point);
    await a.close();
  });
}

test("over a transport that drops, duplicates and reorders pushes, every message arrives once and in order", async () => {
  const counts = { dropped: 0, duplicated: 0, reordered: 0 };
  const n = 100;
  const a = await dial("alice-flaky", new MemoryStore());
  const b = await dial("bob-flaky", new MemoryStore(), { WebSocket: flakyWebSocket(seeded(7), counts) });
  const shown: StoredMessage[] = [];
  b.onMessage((m) => shown.push(m));
  await sendNumbered(a, "bob-flaky", n);
  await eventually(`${n} messages`, () => shown.length >= n, 60000 + n * 200);
  assertOnceInOrder(shown, n, "flaky transport");
  assert.ok(counts.dropped > 5 && counts.duplicated > 5 && counts.reordered > 5, `faults happened: ${JSON.stringify(counts)}`);
  await Promise.all([a.close(), b.close()]);
});

test("a 1,000-message burst reaches a receiver restarted at random points: all 1,000 once and in order", async () => {
  const n = Number(process.env.SDK_BURST ?? 1000);
  const rand = seeded(11);
  const a = await dial("alice-burst", new MemoryStore());
  const store = new MemoryStore(); // the device's "disk": kept across the receiver's restarts
  const shown: StoredMessage[] = [];
  let restarts = 0;
  const sending = sendNumbered(a, "bob-burst", n);
  while (shown.length < n) {
    let crashed = false;
    const b = await dial("bob-burst", store.reopen(), {
      replay: true, shownUpTo: shown.at(-1)?.seq ?? 0,
      // About one restart per 150 entries, at any step of an entry's path.
      crashAt: () => (crashed ||= rand() < 1 / 450),
    });
    for await (const m of b.messages()) {
      shown.push(m);
      if (shown.length >= n) break;
    }
    if (crashed) restarts++;
    else await b.close();
  }
  await sending;
  assertOnceInOrder(shown, n, "burst");
  assert.ok(restarts >= 3, `the receiver was restarted (${restarts} times)`);
  await a.close();
});

test("a send whose ACK was lost is sent again with its clientMsgId after a restart: the recipient has it once", async () => {
  // alice's first connection never receives "sent": the send stays in her outbox.
  const WS = (globalThis as unknown as { WebSocket: WebSocketConstructor }).WebSocket;
  class NoAcks extends (WS as unknown as new (url: string) => WebSocketLike) {
    set onmessage(fn: WebSocketLike["onmessage"]) {
      super.onmessage = fn && ((e) => (typeof e.data === "string" && e.data.startsWith('{"type":"sent"') ? undefined : fn(e)));
    }
    get onmessage() {
      return super.onmessage;
    }
  }
  const file = join(dir, "lost-ack.db");
  let st = await FileStore.open(file);
  const b = await dial("bob-lost-ack", new MemoryStore());
  let a = await dial("alice-lost-ack", st, { WebSocket: NoAcks as unknown as WebSocketConstructor });
  // By conversation id: a draft by recipient says seen only once a 1:1
  // ACK has told the client its own user (below).
  const first = a.sendDraft({ conversationId: "d:alice-lost-ack:bob-lost-ack", body: { n: 0, text: "once" } }).catch(() => "closed");
  const got = (await b.messages().next()).value as StoredMessage; // stored and delivered: only the ACK is lost
  await a.close();
  assert.equal(await first, "closed", "no ACK reached the sender");
  st = await FileStore.open(file);
  assert.equal((await st.outbox()).length, 1, "the send is still in the outbox");
  // It says what the device had seen of the conversation (nothing), so the
  // server finds the first attempt above it without an idempotency record.
  assert.equal((await st.outbox())[0].frame.seen, 0, "the queued frame carries seen");
  const acks: SentFrame[] = [];
  const sends: { seen?: number }[] = [];
  a = await dial("alice-lost-ack", st, {
    onSent: (s) => acks.push(s),
    onFrame: (dir, f) => {
      frameCheck(dir, f);
      if (dir === "out" && (f as { action?: string }).action === "send") sends.push(f as { seen?: number });
    },
  });
  await eventually("the outbox empties", async () => (await a.pending()).length === 0, 30000);
  assert.equal(acks[0]?.messageId, got.messageId, "the retry got the first attempt's message back");
  // "seen" is what the device holds when a send is queued: wait until it
  // holds its first message (the outbox may empty a moment before; a send
  // queued then would rightly say 0).
  const conv = "d:alice-lost-ack:bob-lost-ack";
  await eventually("the device holds the conversation's first message", async () => (await st.newestConvSeq((c) => c === conv)) === 1, 30000);
  const next = await a.send("bob-lost-ack", { n: 1, text: "next" });
  // Now the client knows its user: a send by recipient says what it holds
  // of that conversation (its first message, convSeq 1).
  assert.equal(sends.at(-1)?.seen, 1, "a send by recipient after an ACK carries seen");
  assert.equal(((await b.messages().next()).value as StoredMessage).messageId, next.messageId, "no second copy arrived before the next message");
  await Promise.all([a.close(), b.close()]);
});

test("a server that lost its data (new inbox epoch): the device resyncs from 0, gets the new messages and shows nothing twice", async () => {
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" });
  const at = (s: Stack) => ({ url: s.url });
  const shown: StoredMessage[] = [];
  const bStore = new MemoryStore();
  let a = await dial("alice-epoch", new MemoryStore(), at(own));
  let b = await dial("bob-epoch", bStore, at(own));
  b.onMessage((m) => shown.push(m));
  await sendNumbered(a, "bob-epoch", 3);
  await eventually("3 messages", () => shown.length === 3, 30000);
  await Promise.all([a.close(), b.close()]);
  const epoch = (await bStore.position()).epoch;
  await own.stop();
  // The same addresses, empty tables: a re-created stack.
  const fresh = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, [], own.ports);
  try {
    a = await dial("alice-epoch", new MemoryStore(), at(fresh));
    await a.send("bob-epoch", { n: 3, text: "after the reset" });
    b = await dial("bob-epoch", bStore.reopen(), at(fresh));
    b.onMessage((m) => shown.push(m));
    await eventually("the message sent after the reset", () => shown.length === 4, 30000);
    const pos = await bStore.position();
    assert.notEqual(pos.epoch, epoch, "the device took the new epoch");
    assert.equal(pos.cursor, 1, "its cursor restarted with the new inbox");
    assertOnceInOrder(shown, 4, "across the reset", false); // the new inbox numbers from 1 again
    await Promise.all([a.close(), b.close()]);
  } finally {
    await fresh.stop();
  }
});

test("a send refused rate_limited holds every send until retryAfterMs, also across a reconnect; all are stored in order and the connection is never closed for it", async () => {
  // A small send budget in 10 s windows, used from the start of one: the
  // first refusal then asks to wait most of it.
  const windowMs = 10000;
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, [`RateLimits=send=4/${windowMs / 1000}s,connect=60/1m`]);
  let a: SignetClient | undefined;
  let b: SignetClient | undefined;
  try {
    const frames: { dir: "in" | "out"; f: { type?: string; action?: string; code?: string; retryAfterMs?: number }; at: number }[] = [];
    // The connection is lost half a second after the first refusal: the new one must not send the outbox
    // before the wait ends.
    const dials = { n: 0 };
    a = await dial("alice-rl", new MemoryStore(), {
      url: own.url,
      WebSocket: lostAfter((d) => d.includes(`"rate_limited"`), 500, dials),
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        frames.push({ dir, f: f as (typeof frames)[number]["f"], at: Date.now() });
      },
    });
    b = await dial("bob-rl", new MemoryStore(), { url: own.url });
    const shown: StoredMessage[] = [];
    b.onMessage((m) => shown.push(m));
    await new Promise((r) => setTimeout(r, windowMs - (Date.now() % windowMs) + 300));
    const n = 8;
    await sendNumbered(a, "bob-rl", n);
    await eventually(`${n} messages`, () => shown.length === n, 120000);
    assertOnceInOrder(shown, n, "under a rate limit");
    const refusals = frames.filter((x) => x.dir === "in" && x.f.code === "rate_limited");
    assert.ok(refusals.length >= 1, "the limit refused some sends");
    for (const r of refusals) {
      const early = frames.filter((x) => x.dir === "out" && x.f.action === "send" && x.at > r.at && x.at < r.at + (r.f.retryAfterMs ?? 0) - 50);
      assert.deepEqual(early.map((x) => x.at - r.at), [], `no send within retryAfterMs (${r.f.retryAfterMs} ms) of a refusal`);
    }
    assert.ok(dials.n >= 2, "the connection was lost during the wait");
    assert.ok(!frames.some((x) => x.f.code === "rate_limit_ignored"), "never closed for ignoring the limit");
  } finally {
    await Promise.all([a?.close(), b?.close()]);
    await own.stop();
  }
});

test("queries asked while one waits out its rate_limited refusal are held until its retryAfterMs, then answered, also across a reconnect", async () => {
  // A small query budget in 10 s windows, asked from the start of one: a
  // refusal then asks to wait most of it.
  const windowMs = 10000;
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, [`RateLimits=query=3/${windowMs / 1000}s,connect=60/1m`]);
  let a: SignetClient | undefined;
  try {
    await new Promise((r) => setTimeout(r, windowMs - (Date.now() % windowMs) + 300));
    const frames: { query: boolean; waitMs: number; at: number }[] = [];
    // The connection is lost half a second after the first refusal: the new one must not ask the refused
    // queries again before their wait ends.
    const dials = { n: 0 };
    a = await dial("alice-ql", new MemoryStore(), {
      url: own.url,
      WebSocket: lostAfter((d) => d.includes(`"rate_limited"`), 500, dials),
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        const x = f as { action?: string; conversationId?: string; ref?: string; code?: string; retryAfterMs?: number };
        // (an inbox sync has a ref too, and a limit of its own)
        const inboxSync = x.action === "sync" && !x.conversationId;
        if (dir === "out" && x.ref && !inboxSync && x.action !== "group" && x.action !== "presence" && x.action !== "register") frames.push({ query: true, waitMs: 0, at: Date.now() });
        if (dir === "in" && x.code === "rate_limited") frames.push({ query: false, waitMs: x.retryAfterMs ?? 0, at: Date.now() });
      },
    });
    const asked: Promise<unknown>[] = [];
    for (let i = 0; i < 8; i++) {
      asked.push(a.summary());
      await new Promise((r) => setTimeout(r, 200));
    }
    await Promise.all(asked);
    const refusals = frames.filter((x) => !x.query);
    assert.ok(refusals.length >= 1, "the limit refused some queries");
    for (const r of refusals) {
      // A query written as the refusal came in was on its way: 250 ms later, it was asked after it.
      const early = frames.filter((x) => x.query && x.at > r.at + 250 && x.at < r.at + r.waitMs - 50);
      assert.deepEqual(early.map((x) => x.at - r.at), [], `no query within retryAfterMs (${r.waitMs} ms) of a refusal`);
    }
    assert.ok(dials.n >= 2, "the connection was lost during the wait");
  } finally {
    await a?.close();
    await own.stop();
  }
});

/**
 * The first state after `after` that is connected again following a
 * disconnected one: a state with connected true can also be the first sync
 * ending (synced), which on a loaded machine may come after a closing frame.
 */
function reconnected(states: { connected: boolean; at: number }[], after: number): { connected: boolean; at: number } | undefined {
  return states.find((st, i) => st.connected && st.at > after && i > 0 && !states[i - 1].connected);
}

test("a connection the server closes with connection_limit waits evictedWaitMs before it reconnects (no eviction ping-pong)", async () => {
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, ["MaxConnectionsPerUser=2"]);
  try {
    const wait = 3000;
    const states: { connected: boolean; at: number }[] = [];
    let evictedAt = 0;
    const a = await dial("carol-cap", new MemoryStore(), {
      url: own.url, device: "a", evictedWaitMs: wait,
      onState: (s) => states.push({ connected: s.connected, at: Date.now() }),
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        if (dir === "in" && (f as { code?: string }).code === "connection_limit") evictedAt = Date.now();
      },
    });
    const b = await dial("carol-cap", new MemoryStore(), { url: own.url, device: "b" });
    const c = await dial("carol-cap", new MemoryStore(), { url: own.url, device: "c" }); // the third: the oldest, a, is closed
    await eventually("a told connection_limit", () => evictedAt > 0, 30000);
    await eventually("a back after its wait", () => reconnected(states, evictedAt) !== undefined, 60000);
    const back = reconnected(states, evictedAt)!;
    assert.ok(back.at - evictedAt >= wait - 100, `a reconnected ${back.at - evictedAt} ms after its eviction, before evictedWaitMs (${wait} ms)`);
    await Promise.all([a.close(), b.close(), c.close()]);
  } finally {
    await own.stop();
  }
});

test("a connection the server closes with rate_limit_ignored reconnects only after its retryAfterMs", async () => {
  // The SDK itself never ignores rate_limited, so the server's closing
  // frame is injected: on the first connection, the server's error and
  // close, as the gateway delivers them.
  const WS = (globalThis as unknown as { WebSocket: WebSocketConstructor }).WebSocket;
  const wait = 2000;
  let toldAt = 0;
  let first = true;
  class Ignored extends (WS as unknown as new (url: string) => WebSocketLike) {
    constructor(url: string) {
      super(url);
      if (!first) return;
      first = false;
      (this as unknown as EventTarget).addEventListener("open", () => setTimeout(() => {
        toldAt = Date.now();
        const frame = { type: "error", code: "rate_limit_ignored", message: "send kept coming after rate_limited", requestId: "injected", retryAfterMs: wait };
        this.onmessage?.({ data: JSON.stringify(frame) });
        this.close();
      }, 300));
    }
  }
  const states: { connected: boolean; at: number }[] = [];
  const a = await dial("dana-ignored", new MemoryStore(), {
    WebSocket: Ignored as unknown as WebSocketConstructor,
    onState: (st) => states.push({ connected: st.connected, at: Date.now() }),
  });
  await eventually("a back after retryAfterMs", () => toldAt > 0 && reconnected(states, toldAt) !== undefined, 60000);
  const back = reconnected(states, toldAt)!;
  assert.ok(back.at - toldAt >= wait - 100, `reconnected ${back.at - toldAt} ms after rate_limit_ignored, before its retryAfterMs (${wait} ms)`);
  await a.close();
});

test("a presence frame superseded before its answer is not written again after a gateway error: the later state stands", async () => {
  // Written again, the server would receive the older "online" after "invisible" and keep it.
  const sent: Record<string, unknown>[] = [];
  const onlines = () => sent.filter((f) => f.action === "presence" && f.status === "online").length;
  const t = losesFirstQuietly((f) => f.action === "presence" && f.status === "online", sent);
  const a = await dial("erin-presence", new MemoryStore(), { WebSocket: t.WebSocket });
  const online = a.setPresence("online");
  await eventually("the online frame written", () => onlines() === 1, 30000);
  assert.equal(await a.setPresence("invisible"), "offline");
  t.gatewayError();
  await assert.rejects(online, (e: unknown) => e instanceof SupersededError);
  assert.equal(onlines(), 1, "the superseded online frame was written again");
  assert.deepEqual(await a.queryPresence(["erin-presence"]), { "erin-presence": "offline" });
  await a.close();
});

test("a presence frame waits for the answer of the one before it (or a second after its write): never received in the same millisecond", async () => {
  const wrote: Record<string, { ref: string; at: number }> = {};
  const answered: Record<string, number> = {};
  let online: Promise<string> | undefined;
  const a: SignetClient = await dial("gina-presence", new MemoryStore(), {
    onFrame: (dir, f) => {
      const x = f as { action?: string; type?: string; status?: string; ref?: string };
      if (dir === "out" && x.action === "presence" && x.status) wrote[x.status] ??= { ref: x.ref ?? "", at: Date.now() };
      if (dir === "in" && x.type === "presence" && x.ref) answered[x.ref] ??= Date.now();
      // The next choice comes as the away frame goes out, before its answer can.
      if (dir === "out" && x.status === "away") online ??= a.setPresence("online");
    },
  });
  assert.equal(await a.setPresence("away"), "away");
  assert.equal(await online, "online");
  const turn = Math.min(answered[wrote.away.ref], wrote.away.at + 1000);
  assert.ok(wrote.online.at >= turn, `online written ${wrote.online.at - wrote.away.at} ms after away, before away's answer (${answered[wrote.away.ref] - wrote.away.at} ms) and before a second had passed`);
  await a.close();
});

test("an alert that asks for an answer: answer() once, forward-only; the user's other device hears of it", async () => {
  const admin = { Authorization: "Bearer local-admin-key" };
  const app = await (await fetch(`${stack.httpUrl}/v1/apps`, { method: "POST", headers: admin, body: JSON.stringify({ name: "deploys", allowUsers: ["bob-answer"] }) })).json();
  const phone = await dial("bob-answer", new MemoryStore(), { device: "phone" });
  const heard: string[] = [];
  const laptop = await dial("bob-answer", new MemoryStore(), { device: "laptop", onAnswer: (a) => heard.push(`${a.userId}:${a.option}`) });
  const r = await fetch(`${stack.httpUrl}/v1/messages`, {
    method: "POST", headers: { Authorization: `Bearer ${app.key}`, "Idempotency-Key": "d-7" },
    body: JSON.stringify({ to: ["bob-answer"], title: "Deploy 7?", body: "", ack: { options: ["approve", "reject"] } }),
  });
  assert.equal(r.status, 202);
  const m = (await phone.messages().next()).value as StoredMessage;
  assert.deepEqual((m.body as { ack: unknown }).ack, { options: ["approve", "reject"], required: true, firstAnswerWins: false });
  const a = await phone.answer(m.messageId, "approve");
  assert.equal(a.option, "approve");
  assert.equal((await phone.answer(m.messageId, "approve")).answeredAt, a.answeredAt, "the same answer again is the first");
  await assert.rejects(phone.answer(m.messageId, "reject"), (e: unknown) => e instanceof ServerError && e.code === "conflict");
  await assert.rejects(phone.answer(m.messageId, "maybe"), (e: unknown) => e instanceof ServerError && e.code === "bad_request");
  await eventually("the laptop hears of the answer", () => heard.length === 1, 30000);
  assert.deepEqual(heard, ["bob-answer:approve"]);
  await Promise.all([phone.close(), laptop.close()]);
});

test("register() records the device's token for SNS wake-ups; an empty token removes it", async () => {
  const phone = await dial("bob-register", new MemoryStore(), { device: "phone" });
  const r = await phone.register("fcm", "fcm-token-bob");
  assert.deepEqual({ deviceId: r.deviceId, platform: r.platform, registered: r.registered }, { deviceId: "phone", platform: "fcm", registered: true });
  assert.equal((await phone.register("fcm", "")).registered, false);
  await phone.close();
});

test("an escalation's re-notification of an alert the device has calls onRenotify, and messages() emits it once", async () => {
  const admin = { Authorization: "Bearer local-admin-key" };
  const app = await (await fetch(`${stack.httpUrl}/v1/apps`, { method: "POST", headers: admin, body: JSON.stringify({ name: "pager", allowUsers: ["bob-renotify", "carol-renotify"] }) })).json();
  const again: StoredMessage[] = [];
  const shown: StoredMessage[] = [];
  const bob = await dial("bob-renotify", new MemoryStore(), { onRenotify: (m) => again.push(m) });
  bob.onMessage((m) => shown.push(m));
  const r = await fetch(`${stack.httpUrl}/v1/messages`, {
    method: "POST", headers: { Authorization: `Bearer ${app.key}`, "Idempotency-Key": "inc-9" },
    body: JSON.stringify({ to: ["bob-renotify"], title: "DB down", body: "", priority: "urgent", ack: {}, escalation: { everySeconds: 1, renotify: 1, steps: [{ to: ["carol-renotify"] }] } }),
  });
  assert.equal(r.status, 202);
  const id = (await r.json()).messageId;
  await eventually("the re-notification", () => again.length >= 1, 60000);
  assert.equal(again[0].messageId, id);
  await bob.answer(id, "ack"); // stops the escalation
  assert.deepEqual(shown.map((m) => m.messageId), [id], "emitted once");
  await bob.close();
});

test("no frame of the run broke the protocol schema", () => {
  assert.deepEqual(invalidFrames, []);
});
