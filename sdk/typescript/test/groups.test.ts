// Groups under read diffusion (docs/proposal-group-read-diffusion.md)
// through the TypeScript SDK, against a local stack started with
// GroupDelivery=read: a group's messages come as "groupMessage" pushes and
// group sync pages, each persisted with the group's cursor before it is
// emitted and acked; every device gets each once and in order — online,
// offline, restarted, over a transport that loses pushes.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryStore, SignetClient, type ClientOptions, type DeviceStore, type StoredMessage } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { dialStack, eventually, failsInPlaceOfAnswer, flakyWebSocket, frameCheck, holdsGroupSyncRefusals, invalidFrames, seeded, startStack, throttledOnce, type RefusalHold, type Stack } from "./stack.js";

let stack: Stack;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "signet-sdk-groups-"));
  stack = await startStack(
    { SIGNET_PUSH_TIMEOUT: "1s", SIGNET_REDELIVERY_BACKOFF: "1s,1s", SIGNET_DYNAMODB_EMULATOR: "memdyn" },
    ["GroupDelivery=read"],
  );
});

after(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function dial(user: string, store: DeviceStore, extra: Partial<ClientOptions> = {}): Promise<SignetClient> {
  return dialStack(stack, user, store, extra);
}

/** Collects what c emits of conversation conv. */
function collect(c: SignetClient, conv: string): StoredMessage[] {
  const got: StoredMessage[] = [];
  c.onMessage((m) => {
    if (m.conversationId === conv) got.push(m);
  });
  return got;
}

/** Sends messages first..last (numbered bodies) to group conv, in order. */
async function sendRange(from: SignetClient, conv: string, first: number, last: number): Promise<void> {
  const all: Promise<unknown>[] = [];
  for (let n = first; n <= last; n++) all.push(from.sendDraft({ conversationId: conv, body: { n } }));
  await Promise.all(all); // one send per conversation in flight: stored in this order
}

/** Asserts that got holds convSeqs first..last once each, in order, as read-diffused (seq 0). */
function assertRange(got: StoredMessage[], first: number, last: number, what: string): void {
  assert.deepEqual(got.map((m) => m.convSeq), Array.from({ length: last - first + 1 }, (_, i) => first + i), `${what}: every message once, in order`);
  assert.deepEqual(got.map((m) => (m.body as { n: number }).n), got.map((m) => m.convSeq), `${what}: the bodies sent`);
  assert.ok(got.every((m) => m.seq === 0), `${what}: a read-diffused group's message has no inbox seq`);
}

test("a read-diffused group reaches an online member, an offline one and a restarted one once and in order, persisted before it is emitted", async () => {
  const alice = await dial("alice-g1", new MemoryStore());
  const bobStore = new MemoryStore();
  const bobAcks: { upTo: number; proof?: string }[] = [];
  const bob = await dial("bob-g1", bobStore, {
    onFrame: (dir, f) => {
      frameCheck(dir, f);
      const a = f as { action?: string; conversationId?: string; upTo: number; proof?: string };
      if (dir === "out" && a.action === "ack" && a.conversationId) bobAcks.push({ upTo: a.upTo, proof: a.proof });
    },
  });
  const g = await alice.createGroup("Ops", ["bob-g1", "carol-g1"]);
  const conv = g.conversationId;
  const bobGot = collect(bob, conv);
  bob.onMessage((m) => {
    // Emitted only once persisted, with the group's cursor moved to it.
    if (m.conversationId === conv) void bobStore.groupCursor(conv).then((c) => assert.ok(c.cursor >= m.convSeq, "persisted before emitted"));
  });
  await sendRange(alice, conv, 1, 20);
  await eventually("bob's 20 messages", () => bobGot.length >= 20, 60000);
  assertRange(bobGot, 1, 20, "bob, online");
  assert.equal(await bob.groupCursor(conv), 20);
  assert.deepEqual((await bob.history()).map((m) => m.conversationId).filter((c) => c === conv), [], "nothing in bob's inbox");
  assert.equal((await bob.groupHistory(conv)).length, 20, "the group's messages are in the device's group log");
  // The server counts bob's acks: his device's cursor is on the message.
  await eventually("bob's ack of 20", async () => (await alice.receipts(conv, 20)).deliveredBy?.includes("bob-g1") === true, 30000);
  // Each ack brings back the proof the server gave with the message it names.
  assert.ok(bobAcks.length > 0 && bobAcks.every((a) => a.proof), `bob's group acks carry proofs: ${JSON.stringify(bobAcks)}`);

  // carol was offline: she pulls all of it at her first connect, and is
  // synced only once she has.
  const file = join(dir, "carol.db");
  let carolStore = await FileStore.open(file);
  let carol = await dial("carol-g1", carolStore);
  const carolGot = collect(carol, conv);
  await eventually("carol synced", () => carol.synced, 30000);
  await eventually("carol's 20 messages", () => carolGot.length >= 20, 30000);
  assertRange(carolGot, 1, 20, "carol, back online");
  await carol.close();

  // Restarted on the same file: nothing again, then only what is new.
  await sendRange(alice, conv, 21, 25);
  carolStore = await FileStore.open(file);
  carol = await dial("carol-g1", carolStore);
  const again = collect(carol, conv);
  await eventually("carol's 5 new messages", () => again.length >= 5, 30000);
  await new Promise((r) => setTimeout(r, 1500)); // a repeat would come by now
  assertRange(again, 21, 25, "carol, restarted");
  assert.deepEqual((await carol.groupHistory(conv)).map((m) => m.convSeq), Array.from({ length: 25 }, (_, i) => i + 1));
  await eventually("bob's 25 messages", () => bobGot.length >= 25, 30000);
  assertRange(bobGot, 1, 25, "bob, online throughout");
  // Restarted with replay: the stored messages after what the app showed of the group come first.
  await carol.close();
  carol = await dial("carol-g1", await FileStore.open(file), { replay: true, shownGroups: { [conv]: 22 } });
  const replayed: StoredMessage[] = [];
  for await (const m of carol.messages()) if (replayed.push(m) === 3) break; // replayed before connect resolved: in messages()
  assertRange(replayed, 23, 25, "carol, replayed after 22");
  const rc = await alice.receipts(conv, 25);
  await eventually("both acks of 25", async () => (await alice.receipts(conv, 25)).delivered === 2, 30000);
  assert.equal(rc.members, 2);
  assert.deepEqual(invalidFrames, [], "every frame matched the protocol schema");
  await Promise.all([alice.close(), bob.close(), carol.close()]);
});

test("a member removed and added again while offline gets what was sent to them before the removal, never what was sent while out", async () => {
  const alice = await dial("alice-g5", new MemoryStore());
  const file = join(dir, "bob-g5.db");
  let bob = await dial("bob-g5", await FileStore.open(file));
  const g = await alice.createGroup("Again", ["bob-g5"]);
  assert.match(g.conversationId, /^g:[0-9a-f]{18}$/, "the SDK names a new group (a create asked again is answered as the first)");
  const conv = g.conversationId;
  const first = collect(bob, conv);
  await sendRange(alice, conv, 1, 2);
  await eventually("bob's 2 messages", () => first.length >= 2, 30000);
  await eventually("bob's ack of 2", async () => (await alice.receipts(conv, 2)).deliveredBy?.includes("bob-g5") === true, 30000);
  await bob.close();
  await sendRange(alice, conv, 3, 4); // due to bob, not on his device yet
  await alice.removeMembers(conv, ["bob-g5"]);
  await alice.sendDraft({ conversationId: conv, body: { n: 5 } }); // sent while bob is out
  await alice.addMembers(conv, ["bob-g5"]);
  await alice.sendDraft({ conversationId: conv, body: { n: 6 } });
  bob = await dial("bob-g5", await FileStore.open(file)); // the same device, restarted
  const back = collect(bob, conv);
  await eventually("bob's 3 messages", () => back.length >= 3, 30000);
  await new Promise((r) => setTimeout(r, 1500)); // message 5 would come by now
  assert.deepEqual(back.map((m) => m.convSeq), [3, 4, 6], "the earlier membership's rest, then the current one");
  assert.deepEqual((await bob.groupHistory(conv)).map((m) => m.convSeq), [1, 2, 3, 4, 6]);
  await Promise.all([alice.close(), bob.close()]);
});

test("a sender's own group message comes in sent (ownFromSent): persisted and emitted once, never pushed back", async () => {
  const pushed: number[] = [];
  const alice = await dial("alice-g4", new MemoryStore(), {
    onFrame: (dir, f) => {
      frameCheck(dir, f);
      const x = f as { type?: string; action?: string; ownFromSent?: boolean; message?: { convSeq: number } };
      if (dir === "in" && x.type === "groupMessage" && x.message) pushed.push(x.message.convSeq);
      if (dir === "out" && x.action === "send") assert.equal(x.ownFromSent, true, "a group send says ownFromSent");
    },
  });
  const g = await alice.createGroup("Own", ["bob-g4"]);
  const conv = g.conversationId;
  const got = collect(alice, conv);
  await sendRange(alice, conv, 1, 1);
  await eventually("alice's own message", () => got.length >= 1, 30000);
  await new Promise((r) => setTimeout(r, 2500)); // past a redelivery check's push timeout (1 s here)
  // (Applied from sent it needs no ack; one that came while the group was
  // being pulled is taken from the pull, whose end is acked.)
  assert.deepEqual(pushed, [], "the sending connection is not pushed its own message");
  // More at once: a fan-out job covering several may push the sender's
  // others back (a duplicate, acked); each is shown once either way.
  await sendRange(alice, conv, 2, 4);
  await eventually("alice's own 4 messages", () => got.length >= 4, 30000);
  assertRange(got, 1, 4, "alice, the sender");
  assert.equal(await alice.groupCursor(conv), 4);
  await alice.close();
});

test("over a transport that drops, duplicates and reorders group pushes, every group message arrives once and in order", async () => {
  const counts = { dropped: 0, duplicated: 0, reordered: 0 };
  const n = 60;
  const alice = await dial("alice-g2", new MemoryStore());
  const bob = await dial("bob-g2", new MemoryStore(), { WebSocket: flakyWebSocket(seeded(5), counts, "groupMessage") });
  const g = await alice.createGroup("Flaky", ["bob-g2"]);
  const got = collect(bob, g.conversationId);
  await sendRange(alice, g.conversationId, 1, n);
  await eventually(`${n} group messages`, () => got.length >= n, 60000 + n * 200);
  await new Promise((r) => setTimeout(r, 1500)); // a duplicate would come by now
  assertRange(got, 1, n, "flaky transport");
  assert.ok(counts.dropped > 3 && counts.duplicated > 3 && counts.reordered > 3, `faults happened: ${JSON.stringify(counts)}`);
  await Promise.all([alice.close(), bob.close()]);
});

test("a group sync that API Gateway answers with its error frame (a throttled invocation) is asked for again within seconds, not after the 10 s retry", async () => {
  const alice = await dial("alice-g5", new MemoryStore());
  const g = await alice.createGroup("Throttled", ["bob-g5"]);
  const conv = g.conversationId;
  await sendRange(alice, conv, 1, 3);
  // Bob connects to 3 waiting messages; his first pull of the group is
  // throttled: the invocation never runs, and the gateway says so.
  const sent: { at: number; frame: Record<string, unknown> }[] = [];
  const isGroupSync = (f: Record<string, unknown>) => f.action === "sync" && f.conversationId === conv;
  const bob = await dial("bob-g5", new MemoryStore(), { WebSocket: throttledOnce(isGroupSync, sent) });
  const got = collect(bob, conv);
  await eventually("bob's 3 group messages", () => got.length >= 3, 30000);
  assertRange(got, 1, 3, "bob, after a throttled group sync");
  const asks = sent.filter((s) => isGroupSync(s.frame));
  assert.ok(asks.length >= 2, `the group sync was asked for again (${asks.length} asks)`);
  // The SDK's retry of an unanswered group sync is 10 s; after the
  // gateway's error frame it asks in about a second.
  const gap = asks[1].at - asks[0].at;
  assert.ok(gap < 8000, `asked again ${gap} ms after the throttled ask, want well under the 10 s retry`);
  await Promise.all([alice.close(), bob.close()]);
});

test("a group change whose invocation failed after storing it is asked again and answered as the first (the SDK gives it an op id)", async () => {
  const alice = await dial("alice-g7", new MemoryStore());
  const g = await alice.createGroup("Ops", ["bob-g7", "carol-g7"]);
  const conv = g.conversationId;
  // API Gateway's error frame (the invocation failed: the SDK asks every unanswered query again), and the
  // server's internal error naming the query (it asks that one again a second later).
  const cases = [
    { who: "alice-g7", op: "add", how: "internal", changed: "dave-g7" },
    { who: "alice-g7", op: "remove", how: "gateway", changed: "bob-g7" },
    { who: "carol-g7", op: "leave", how: "internal", changed: "carol-g7" },
  ] as const;
  for (const { who, op, how, changed } of cases) {
    const sent: Record<string, unknown>[] = [];
    const answer = (d: string) => d.includes(`"type":"group"`) && d.includes(`"op":"${op}"`);
    const c = await dial(who, new MemoryStore(), { device: "failing", WebSocket: failsInPlaceOfAnswer(answer, sent, how) });
    const got =
      op === "add" ? await c.addMembers(conv, ["dave-g7", "bob-g7"]) : op === "remove" ? await c.removeMembers(conv, ["bob-g7"]) : await c.leaveGroup(conv);
    const asks = sent.filter((f) => f.action === "group" && f.op === op);
    assert.equal(asks.length, 2, `the ${op} was asked again after the ${how} error`);
    assert.ok(typeof asks[0].opId === "string" && asks[1].opId === asks[0].opId, `asked again with its op id: ${JSON.stringify(asks)}`);
    assert.deepEqual(got.changed, [changed], `the ${op} asked again names whom it changed`);
    await c.close();
  }
  const members = await alice.members(conv);
  assert.equal(members.count, 2, "alice and dave are the members left");
  assert.deepEqual(invalidFrames, [], "every frame matched the protocol schema");
  await alice.close();
});

test("a sync whose invocation failed (internal, with its ref) is asked again a second later: the inbox's and a group's", async () => {
  // Until the thirty-seventh session a sync's error frame named no frame: the SDK wrote its acks and reads again
  // instead, and the sync waited until it counted as unanswered (resendAfterMs; a group's groupSyncRetryMs).
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, ["GroupDelivery=read"]);
  const clients: SignetClient[] = [];
  try {
    const alice = await dialStack(own, "alice-sf", new MemoryStore());
    clients.push(alice);
    const g = await alice.createGroup("sf", ["bob-sf"]);
    await alice.sendDraft({ conversationId: g.conversationId, body: { n: 1 } });
    await alice.send("bob-sf", { text: "direct" });
    // The first inbox page and the first group page bob is answered fail.
    const failed = new Set<string>();
    const match = (d: string) => {
      const t = d.startsWith(`{"type":"sync"`) ? "sync" : d.startsWith(`{"type":"groupSync"`) ? "groupSync" : "";
      if (!t || failed.has(t)) return false;
      failed.add(t);
      return true;
    };
    // Per kind of sync ("is", "gs"): when its failure came, and how long after it the next one went out.
    const failedAt = new Map<string, number>();
    const again = new Map<string, number>();
    const resendAfterMs = 30000;
    const bob = await dialStack(own, "bob-sf", new MemoryStore(), {
      WebSocket: failsInPlaceOfAnswer(match, [], "internal", 2),
      resendAfterMs,
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        const x = f as { type?: string; code?: string; ref?: string; action?: string };
        if (dir === "in" && x.type === "error" && x.code === "internal" && x.ref) failedAt.set(x.ref.slice(0, 2), Date.now());
        if (dir === "out" && x.action === "sync" && x.ref) {
          const k = x.ref.slice(0, 2);
          const at = failedAt.get(k);
          if (at !== undefined && !again.has(k)) again.set(k, Date.now() - at);
        }
      },
    });
    clients.push(bob);
    const got = new Set<string>();
    bob.onMessage((m) => got.add(m.conversationId));
    await eventually("both messages at bob", () => got.size === 2, 120000);
    assert.deepEqual([...failed].sort(), ["groupSync", "sync"], "an inbox page and a group page failed");
    // Half of what the sync would otherwise have waited: a second late is a loaded machine.
    for (const [k, most] of [["is", resendAfterMs / 2], ["gs", 5000]] as const) {
      const d = again.get(k);
      assert.ok(d !== undefined && d <= most, `the ${k} sync that failed was asked again ${d} ms after its error, want within ${most} ms`);
    }
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await own.stop();
  }
});

/** What withQueryLimitedGroups hands its test. */
interface QueryLimited {
  own: Stack;
  alice: SignetClient;
  /** The groups alice made with bob, one message in each. */
  convs: string[];
  /** Closed when the test ends (alice is in it; push the test's own clients). */
  clients: SignetClient[];
}

/** Runs body against a stack of its own that allows 3 queries per 15 s window, where alice-<suffix> has made `groups`
 * read-diffused groups with bob-<suffix> and sent one message to each; body starts 300 ms into a window, so a
 * refusal asks to wait most of it. The stack and the clients are closed after body, whatever it does. */
async function withQueryLimitedGroups(suffix: string, groups: number, body: (t: QueryLimited) => Promise<void>): Promise<void> {
  const windowMs = 15000;
  const own = await startStack({ SIGNET_DYNAMODB_EMULATOR: "memdyn" }, ["GroupDelivery=read", `RateLimits=query=3/${windowMs / 1000}s,connect=60/1m`]);
  const clients: SignetClient[] = [];
  try {
    const alice = await dialStack(own, `alice-${suffix}`, new MemoryStore());
    clients.push(alice);
    const convs: string[] = [];
    for (let i = 0; i < groups; i++) {
      const g = await alice.createGroup(`g${i}`, [`bob-${suffix}`]);
      convs.push(g.conversationId);
      await alice.sendDraft({ conversationId: g.conversationId, body: { n: 1 } });
    }
    await new Promise((r) => setTimeout(r, windowMs - (Date.now() % windowMs) + 300));
    await body({ own, alice, convs, clients });
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await own.stop();
  }
}

test("a group sync refused rate_limited holds the group syncs, not the inbox sync: an inbox sync whose page is lost meanwhile is asked again as usual", async () => {
  // Until the thirty-seventh session a refusal named no frame and, while the inbox synced, was taken as its sync's
  // too: its 1:1 messages waited out the query window. The syncs' refs now say whose refusal it is.
  await withQueryLimitedGroups("gi", 12, async ({ own, alice, clients }) => {
    const ctl: RefusalHold = { dropPush: "gap-1", armed: false, released: false, dropPage: false, held: 0, groupSyncsAfter: 0 };
    const bob = await dialStack(own, "bob-gi", new MemoryStore(), { WebSocket: holdsGroupSyncRefusals(ctl), resendAfterMs: 2000 });
    clients.push(bob);
    let groupSyncsBefore = -1; // group syncs asked again before gap-2 arrived
    bob.onMessage((m) => {
      if ((m.body as { text?: string }).text === "gap-2") groupSyncsBefore = ctl.groupSyncsAfter;
    });
    await eventually("a group sync refused", () => ctl.held > 0, 60000);
    // Past the sync interval (2 s) since his connect sync: the gap's sync is not refused for it (which would say
    // when to ask again itself).
    await new Promise((r) => setTimeout(r, 2500));
    // A gap in bob's inbox (gap-1's pushes are lost) makes him sync; the refusals reach him while that sync is in
    // flight, and its page is lost.
    ctl.armed = true;
    await alice.send("bob-gi", { text: "gap-1" });
    await alice.send("bob-gi", { text: "gap-2" });
    await eventually("gap-2 at bob", () => groupSyncsBefore >= 0, 180000);
    assert.ok(ctl.released && !ctl.dropPage, "the test ran as planned: refusals released, a sync page dropped");
    assert.equal(groupSyncsBefore, 0, "the 1:1 messages came before the group syncs' hold ended (the inbox sync did not wait for it)");
  });
});

test("a device behind in more groups than its query limit pulls at once holds its group syncs until retryAfterMs: every message arrives, the connection is never closed for it", async () => {
  // A small query budget in 15 s windows, and bob back at the start of one:
  // his refused group syncs are told to wait ~15 s, longer than the 10 s
  // after which an unanswered group sync is asked again.
  const groups = 8;
  await withQueryLimitedGroups("gl", groups, async ({ own, clients, convs }) => {
    const frames: { dir: "in" | "out"; f: { action?: string; conversationId?: string; code?: string; retryAfterMs?: number }; at: number }[] = [];
    const bob = await dialStack(own, "bob-gl", new MemoryStore(), {
      onFrame: (dir, f) => {
        frameCheck(dir, f);
        frames.push({ dir, f: f as (typeof frames)[number]["f"], at: Date.now() });
      },
    });
    clients.push(bob);
    const got = new Set<string>();
    bob.onMessage((m) => got.add(m.conversationId));
    await eventually(`bob's ${groups} group messages`, () => convs.every((c) => got.has(c)), 180000);
    const refusals = frames.filter((x) => x.dir === "in" && x.f.code === "rate_limited");
    assert.ok(refusals.length >= 1, "the limit refused some group syncs");
    for (const r of refusals) {
      const early = frames.filter((x) => x.dir === "out" && x.f.action === "sync" && x.f.conversationId && x.at > r.at && x.at < r.at + (r.f.retryAfterMs ?? 0) - 50);
      assert.deepEqual(early.map((x) => x.at - r.at), [], `no group sync within retryAfterMs (${r.f.retryAfterMs} ms) of a refusal`);
    }
    assert.ok(!frames.some((x) => x.f.code === "rate_limit_ignored"), "never closed for ignoring the limit");
  });
});
