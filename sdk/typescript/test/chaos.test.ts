// A small chaos run of the TypeScript SDK against the real local stack (its
// Go counterpart is `signet chaos`): users, two of them with two devices,
// send 1:1 and to a read-diffused group at once, each device over a
// transport that loses, duplicates, reorders and cuts in both directions
// and answers some frames with API Gateway's error frame, while devices are
// killed at random points of an entry's path and restarted on the same
// store. In the end every device holds every message of each of its
// conversations once, in the order the server numbered them, and each
// device's sends in the order it sent them. Meanwhile a fifth user sends to a
// second group and removes its members and adds them back between its
// messages: each device ends with exactly the messages of its user's
// memberships there, and an app posts alerts over HTTPS to some of them
// and to that group: each device ends with each alert its user was a
// recipient of, once.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryStore, type Draft, type SignetClient, type StoredMessage } from "../src/index.js";
import { chaosWebSocket, dialStack, frameCheck, invalidFrames, seeded, startStack, type ChaosCounts, type Stack } from "./stack.js";

let stack: Stack;

before(async () => {
  stack = await startStack(
    { SIGNET_PUSH_TIMEOUT: "1s", SIGNET_REDELIVERY_BACKOFF: "1s,1s,2s", SIGNET_DYNAMODB_EMULATOR: "memdyn" },
    // SDK_CHAOS_GROUP_DELIVERY=write runs the group written into inboxes;
    // SDK_CHAOS_RATE_LIMITS sets the template's RateLimits (default: its
    // default, which the run's sends do not reach at 16 per device).
    [`GroupDelivery=${process.env.SDK_CHAOS_GROUP_DELIVERY ?? "read"}`, ...(process.env.SDK_CHAOS_RATE_LIMITS ? [`RateLimits=${process.env.SDK_CHAOS_RATE_LIMITS}`] : [])],
  );
});

after(async () => {
  await stack?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One device across its restarts: its "disk", what it has shown, its sends. */
interface Device {
  user: string;
  device: string;
  store: MemoryStore;
  client?: SignetClient;
  crashed: boolean;
  restarts: number;
  points: number; // crash points passed, across restarts
  nextKill: number; // the crash point the device is killed at
  shown: StoredMessage[];
  plan: Draft[];
  queued: number;
}

test("a chaos run: four users (two with two devices) send 1:1 and to a group over a network that loses, duplicates, reorders and cuts both ways, killed at random points, while they are removed from another group and added back and an app alerts them: every device ends with every message due to it once and in order", async () => {
  const seed = Number(process.env.SDK_CHAOS_SEED ?? 1);
  const perDevice = Number(process.env.SDK_CHAOS_SENDS ?? 16);
  const rand = seeded(seed);
  const users = ["ann", "ben", "cat", "dan"].map((u) => `${u}-chaos${seed}`);
  const owner = await dialStack(stack, users[0], new MemoryStore());
  const group = (await owner.createGroup("Chaos", users.slice(1))).conversationId;
  await owner.close();
  // The churned group: its owner (on a plain transport, never killed) is its only sender and changes its
  // membership only between its messages, each awaited, so a change's place in the log is exact.
  const admin = `eve-chaos${seed}`;
  const eve = await dialStack(stack, admin, new MemoryStore());
  const churn = (await eve.createGroup("Churn", users)).conversationId;
  const spans = new Map(users.map((u) => [u, [{ joined: 0, left: undefined as number | undefined }]]));
  let churnSent = 0;
  let churnDone = false;
  let churnChanges = 0;
  // The alerting app: it may alert the four users and the churned group.
  const adminKey = { Authorization: "Bearer local-admin-key" };
  const app = (await (await fetch(`${stack.httpUrl}/v1/apps`, { method: "POST", headers: adminKey, body: JSON.stringify({ name: `pager-chaos${seed}`, allowUsers: users, allowGroups: [churn.slice(2)] }) })).json()) as { appId: string; key: string };
  const alertConv = `a:${app.appId}`;
  const alertsTo = new Map<string, string[]>(users.map((u) => [u, []])); // user → the alerts they were a recipient of (a group's are fanned out after the answer: no order across them)
  let alertsPosted = 0;
  let alertsDone = false;
  /** The convSeqs of the churned group due to user: those of their memberships. */
  const churnDue = (user: string) =>
    Array.from({ length: churnSent }, (_, i) => i + 1).filter((c) => spans.get(user)!.some((sp) => c > sp.joined && c <= (sp.left ?? churnSent)));

  // Two users have two devices each. Each device's sends, in order: a
  // third to the group, the rest to a random peer.
  const devices: Device[] = [...users.slice(0, 2).map((u) => [u, "laptop"]), ...users.map((u) => [u, "phone"])].map(([user, device]) => {
    const plan: Draft[] = [];
    for (let n = 0; n < perDevice; n++) {
      const body = { from: user, device, n };
      // An id of the app's own (sent again by the next process after a kill), only ever sent from this device.
      const clientMsgId = `${user}-${device}-${n}`;
      if (rand() < 1 / 3) plan.push({ conversationId: group, body, clientMsgId, deviceOnly: true });
      else plan.push({ to: users.filter((u) => u !== user)[Math.floor(rand() * (users.length - 1))], body, clientMsgId, deviceOnly: true });
    }
    return { user, device, store: new MemoryStore(), crashed: false, restarts: 0, points: 0, nextKill: 5 + Math.floor(rand() * 20), shown: [], plan, queued: 0 };
  });
  const convOf = (from: string, d: Draft) => d.conversationId ?? `d:${[from, d.to!].sort().join(":")}`;
  // What each conversation will hold, and who is in it.
  const expected = new Map<string, { members: Set<string>; count: number }>();
  for (const dev of devices) {
    for (const d of dev.plan) {
      const conv = convOf(dev.user, d);
      const e = expected.get(conv) ?? { members: new Set(conv === group ? users : [dev.user, d.to!]), count: 0 };
      e.count++;
      expected.set(conv, e);
    }
  }
  const wants = (dev: Device) => [...expected].filter(([, e]) => e.members.has(dev.user));
  const shownIn = (dev: Device, conv: string) => dev.shown.filter((m) => m.conversationId === conv);
  /** Each conversation dev is due messages in: how many it has shown and how many it is due (in the churned group
   * and the alerts' conversation, final once their scripts have ended). */
  const tally = (dev: Device) =>
    [...wants(dev).map(([conv, e]) => [conv, e.count] as const), [churn, churnDue(dev.user).length] as const, [alertConv, alertsTo.get(dev.user)!.length] as const].map(
      ([conv, due]) => ({ conv, shown: shownIn(dev, conv).length, due }),
    );
  const complete = (dev: Device) => churnDone && alertsDone && tally(dev).every((t) => t.shown >= t.due);

  const counts: ChaosCounts = { dropped: 0, duplicated: 0, reordered: 0, lostOut: 0, failedOut: 0, duplicatedOut: 0, cuts: 0 };
  let crashes = 0;
  let refused = 0;
  let stopped = false; // a stalled run ends its devices' loops
  const onFrame = (direction: "in" | "out", frame: unknown) => {
    frameCheck(direction, frame);
    if (direction === "in" && (frame as { code?: string }).code === "rate_limited") refused++;
  };
  // SDK_CHAOS_TRACE=<user>/<device> prints that device's frames and log, with the time.
  const traced = (dev: Device) => process.env.SDK_CHAOS_TRACE === `${dev.user}/${dev.device}`;
  const trace = (dev: Device, ...what: unknown[]) => console.error(new Date().toISOString().slice(11, 23), `${dev.user}/${dev.device}`, ...what);

  /** Runs dev's device until it has shown everything: started again, on its store, after each kill. */
  const receive = async (dev: Device, devRand: () => number) => {
    while (!complete(dev) && !stopped) {
      dev.client = undefined;
      dev.crashed = false;
      const shownUpTo = Math.max(0, ...dev.shown.map((m) => m.seq));
      const shownGroups = Object.fromEntries([group, churn].map((g) => [g, Math.max(0, ...dev.shown.filter((m) => m.seq === 0 && m.conversationId === g).map((m) => m.convSeq))]));
      const c = await dialStack(stack, dev.user, dev.store.reopen(), {
        device: dev.device, WebSocket: chaosWebSocket(devRand, counts),
        onFrame: traced(dev) ? (d, f) => (onFrame(d, f), trace(dev, d, JSON.stringify(f))) : onFrame,
        log: traced(dev) ? (level, msg, fields) => trace(dev, level, msg, JSON.stringify(fields ?? {})) : undefined,
        replay: true, shownUpTo, shownGroups,
        resendAfterMs: 1500, minBackoffMs: 20, maxBackoffMs: 500, ackIntervalMs: 200,
        // A kill at the 5th to 25th step of an entry's path, then every 20 to 80 (a schedule, not a
        // chance per step: every device is killed, also on a loaded machine, where more entries come
        // in sync pages).
        crashAt: () => {
          if (!dev.crashed && ++dev.points >= dev.nextKill) {
            dev.crashed = true;
            dev.nextKill = dev.points + 20 + Math.floor(devRand() * 60);
          }
          return dev.crashed;
        },
      });
      dev.client = c;
      // A device may have shown all it is due before the churned group's script ended, with nothing more to come.
      let closing: Promise<void> | undefined;
      const watch = setInterval(() => {
        if (!dev.crashed && complete(dev)) closing ??= c.close();
      }, 100);
      for await (const m of c.messages()) {
        dev.shown.push(m);
        if (complete(dev)) break;
      }
      clearInterval(watch);
      if (dev.crashed) {
        crashes++;
        dev.restarts++;
      } else await (closing ??= c.close());
    }
  };

  /** Writes dev's plan into its outbox, a draft at a time (each again on the next process if one was killed first). */
  const send = async (dev: Device, devRand: () => number) => {
    while (dev.queued < dev.plan.length && !stopped) {
      const c = dev.client;
      if (!c || dev.crashed) {
        await sleep(10);
        continue;
      }
      const queued = await new Promise<boolean>((done) => {
        c.sendDraft(dev.plan[dev.queued], { onQueued: () => done(true) }).then(() => done(true), () => done(false));
      });
      if (queued) dev.queued++;
      await sleep(devRand() * 80);
    }
  };

  /** The churned group's script: perDevice messages, and before each, half the time, a member removed (at most 5
   * times each: a member record keeps 8 earlier memberships) or one removed added back. */
  const runChurn = async (r: () => number) => {
    for (let n = 1; n <= perDevice && !stopped; n++) {
      if (r() < 0.5) {
        const u = users[Math.floor(r() * users.length)];
        const mine = spans.get(u)!;
        const last = mine[mine.length - 1];
        if (last.left === undefined && mine.length <= 5) {
          const g = await eve.removeMembers(churn, [u]);
          assert.deepEqual([g.changed, g.head], [[u], churnSent], `the removal of ${u} changed them, after message ${churnSent}`);
          last.left = churnSent;
          churnChanges++;
        } else if (last.left !== undefined) {
          const g = await eve.addMembers(churn, [u]);
          assert.deepEqual([g.changed, g.head], [[u], churnSent], `adding ${u} back changed them, after message ${churnSent}`);
          mine.push({ joined: churnSent, left: undefined });
          churnChanges++;
        }
      }
      await eve.sendDraft({ conversationId: churn, body: { from: admin, n } });
      churnSent = n;
      await sleep(r() * 300);
    }
    churnDone = true;
  };

  /** The stack's last 20 warnings and errors (throttled functions, failed invocations), for a failure's report. */
  const stackTrouble = () =>
    stack
      .log()
      .split("\n")
      .filter((l) => /ERROR|WARN|panic/.test(l))
      .slice(-20)
      .join("\n");
  let alertRetries = 0; // posts answered 5xx (the function failed or was throttled) and posted again
  /** Posts one alert, as an app should: again after a 429 when Retry-After says, and again after a 5xx (API Gateway's
   * answer to a failed or throttled invocation, which may have stored it) with the same key after a jittered backoff.
   * Returns what the API answered. */
  const postAlert = async (key: string, alert: object): Promise<{ messageId: string; recipients: { userId: string }[] }> => {
    for (;;) {
      const r = await fetch(`${stack.httpUrl}/v1/messages`, { method: "POST", headers: { Authorization: `Bearer ${app.key}`, "Idempotency-Key": key }, body: JSON.stringify(alert) });
      if (r.status === 429) {
        await sleep(Number(r.headers.get("Retry-After") ?? 1) * 1000);
        continue;
      }
      if (r.status >= 500) {
        alertRetries++;
        await r.arrayBuffer();
        await sleep(200 + Math.random() * 800);
        continue;
      }
      if (r.status !== 202) assert.fail(`alert ${key}: ${r.status} ${await r.text()}; the stack's last warnings and errors:\n${stackTrouble()}`);
      return (await r.json()) as { messageId: string; recipients: { userId: string }[] };
    }
  };
  /** The app's script: perDevice/2 alerts, one at a time, each to some of the users or (one in four) to the churned
   * group, of random priority; one in four posted a second time with its Idempotency-Key, as an app does that did
   * not hear the answer. */
  const runAlerts = async (r: () => number) => {
    for (let n = 0; n < Math.max(2, perDevice / 2) && !stopped; n++) {
      const priority = ["normal", "high", "urgent"][Math.floor(r() * 3)];
      const to = users.filter(() => r() < 0.5);
      const alert = r() < 0.25 || to.length === 0 ? { group: churn.slice(2), title: `group alert ${n}`, body: "", priority } : { to, title: `alert ${n}`, body: "", priority };
      const key = `chaos${seed}-${n}`;
      const a = await postAlert(key, alert);
      if (r() < 0.25) assert.equal((await postAlert(key, alert)).messageId, a.messageId, `alert ${key} posted again: the same message`);
      for (const { userId } of a.recipients) alertsTo.get(userId)?.push(a.messageId);
      alertsPosted++;
      await sleep(r() * 500);
    }
    alertsDone = true;
  };

  // Bounded by the work: a run that stalls fails with each device's progress, not at the runner's timeout.
  const limitMs = 60000 + perDevice * devices.length * 1000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stalled = new Promise<never>((_, fail) => {
    timer = setTimeout(() => {
      const progress = devices.map((d) => `${d.user}/${d.device}: ${d.queued}/${d.plan.length} queued, ${d.shown.length} shown, ${d.restarts} restarts; wants ${tally(d).map((t) => `${t.conv} ${t.shown}/${t.due}`).join(", ")}`);
      progress.push(`${admin}: ${churnSent}/${perDevice} sent to ${churn}, ${churnChanges} changes; ${alertsPosted} alerts posted${alertsDone ? ", all" : ""}`);
      fail(new Error(`no end after ${limitMs} ms:\n${progress.join("\n")}\nthe stack's last warnings and errors:\n${stackTrouble()}`));
    }, limitMs);
  });
  try {
    await Promise.race([stalled, Promise.all([runChurn(seeded(seed * 10)), runAlerts(seeded(seed * 10 + 1)), ...devices.map((dev, i) => Promise.all([receive(dev, seeded(seed * 100 + i)), send(dev, seeded(seed * 1000 + i))]))])]);
  } finally {
    clearTimeout(timer);
    stopped = true;
    await Promise.all([eve.close(), ...devices.map((dev) => dev.client?.close())]);
  }

  for (const dev of devices) {
    for (const [conv, e] of wants(dev)) {
      const got = shownIn(dev, conv);
      const what = `${dev.user}/${dev.device} in ${conv}`;
      assert.deepEqual(got.map((m) => m.convSeq), Array.from({ length: e.count }, (_, i) => i + 1), `${what}: every message once, in the server's order`);
      for (const sender of devices.filter((d) => e.members.has(d.user))) {
        const ns = got.filter((m) => m.from === sender.user && (m.body as { device: string }).device === sender.device).map((m) => (m.body as { n: number }).n);
        assert.deepEqual(ns, [...ns].sort((a, b) => a - b), `${what}: ${sender.user}/${sender.device}'s messages in the order it sent them`);
      }
    }
    const spansOf = spans.get(dev.user)!.map((sp) => `(${sp.joined}, ${sp.left ?? "now"}]`).join(" ");
    assert.deepEqual(shownIn(dev, churn).map((m) => m.convSeq), churnDue(dev.user), `${dev.user}/${dev.device} in the churned group: the messages of its memberships ${spansOf}, once, in order`);
    const alerts = shownIn(dev, alertConv).map((m) => m.messageId);
    assert.deepEqual([...alerts].sort(), [...alertsTo.get(dev.user)!].sort(), `${dev.user}/${dev.device}: each alert its user was a recipient of, once`);
    const seqs = dev.shown.filter((m) => m.seq > 0).map((m) => m.seq);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), `${dev.user}/${dev.device}: inbox seqs shown ascending`);
    assert.equal(new Set(seqs).size, seqs.length, `${dev.user}/${dev.device}: no inbox seq shown twice`);
  }
  // The server's view of the churned group's members agrees with the run's.
  const viewer = await dialStack(stack, admin, new MemoryStore(), { device: "viewer" });
  const members = (await viewer.members(churn)).members ?? [];
  await viewer.close();
  for (const u of users) {
    const last = spans.get(u)!.at(-1)!;
    const m = members.find((x) => x.userId === u);
    assert.deepEqual([m?.joined, m?.removed ?? false, m?.left ?? 0], [last.joined, last.left !== undefined, last.left ?? 0], `${u}'s membership of the churned group as the server has it`);
  }
  const total = [...expected.values()].reduce((a, e) => a + e.count, 0) + churnSent + alertsPosted;
  console.log(`chaos seed ${seed}: ${devices.length} devices, ${total} messages, ${crashes} kills (${devices.map((d) => `${d.restarts} in ${d.points} steps`).join(", ")}), ${churnChanges} membership changes, ${alertsPosted} alerts (${alertRetries} posted again after a 5xx), ${refused} rate_limited refusals; network ${JSON.stringify(counts)}`);
  assert.ok(churnChanges > 0, "the churned group's membership changed");
  assert.ok(devices.every((d) => d.restarts > 0), `every device was killed: ${devices.map((d) => `${d.user}/${d.device} ${d.restarts} times in ${d.points} steps`).join(", ")}`);
  // Each of these is expected dozens of times a run; an outgoing frame sent twice only about 5 times (of
  // the outgoing faults together, about 20).
  const outgoing = counts.lostOut + counts.failedOut + counts.duplicatedOut;
  assert.ok(counts.dropped > 0 && counts.duplicated > 0 && counts.reordered > 0 && counts.cuts > 0 && outgoing > 0, `faults happened: ${JSON.stringify(counts)}`);
  assert.deepEqual(invalidFrames, [], "every frame matched the protocol schema");
  // Only the stack's own functions enqueue jobs: one its consumer cannot read is a bug (a read-diffused group's wake
  // jobs were, and were dropped, logged but unnoticed).
  const dropped = stack.log().split("\n").filter((l) => l.includes("dropping a malformed"));
  assert.deepEqual(dropped.slice(0, 3), [], `${dropped.length} queue jobs dropped as malformed`);
});
