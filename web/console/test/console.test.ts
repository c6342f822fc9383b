// The web console in a real browser: headless Chromium (Debian's package)
// driven by playwright-core, against a real `signet local` that serves the
// console from its binary. Two browser contexts are two users: they chat,
// one reloads mid-conversation and loses nothing, the marks reach "read",
// an alert is rendered with its title and priority, and a message's path is
// drawn as a timeline — screenshots are written to test-results/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../../..");
const results = resolve(here, "../../test-results");
const wait = 30000; // per step; every step is one round trip or one ack window

let stack: ChildProcess;
let out = "";
let base = "";
let api = "";
let browser: Browser;

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => ok(port));
    });
  });
}

/**
 * Starts `signet local` (the console served from its binary) with parameters; resolves with the console's and the HTTP API's base URLs.
 * The ports are found free here and bound by the stack, so another process on the machine can take one in between (the stack binds
 * them before anything of its own takes a port the system picks): the start is then tried again on new ports.
 */
async function startLocal(bin: string, params: string[] = []): Promise<{ proc: ChildProcess; base: string; api: string; log: () => string }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startLocalOnce(bin, params);
    } catch (e) {
      if (attempt >= 3 || !String(e).includes("address already in use")) throw e;
    }
  }
}

async function startLocalOnce(bin: string, params: string[]): Promise<{ proc: ChildProcess; base: string; api: string; log: () => string }> {
  const ports = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  const proc = spawn(bin, ["local", "--quiet", `--addr=127.0.0.1:${ports[0]}`, `--http-addr=127.0.0.1:${ports[1]}`, `--dynamodb-addr=127.0.0.1:${ports[2]}`,
    `--sqs-addr=127.0.0.1:${ports[3]}`, `--console-addr=127.0.0.1:${ports[4]}`, ...params.flatMap((p) => ["--parameter", p])], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  proc.stdout!.on("data", (b) => (log += b));
  proc.stderr!.on("data", (b) => (log += b));
  const base = await new Promise<string>((ok, fail) => {
    const t = setInterval(() => {
      const m = /Web console\s+(http:\/\/\S+\/)/.exec(log);
      if (m && log.includes("Press Ctrl-C to stop.")) {
        clearInterval(t);
        ok(m[1]);
      }
    }, 50);
    proc.once("exit", (code) => fail(new Error(`signet local exited ${code}:\n${log}`)));
  });
  return { proc, base, api: `http://127.0.0.1:${ports[1]}`, log: () => log };
}

let bin = "";
/** A second stack whose groups are written into every inbox (GroupDelivery=write, not the default), started by the test that needs it. */
let writeStack: Awaited<ReturnType<typeof startLocal>> | undefined;

before(async () => {
  mkdirSync(results, { recursive: true });
  bin = process.env.SIGNET_BIN ?? join(repo, "web/console/build/signet");
  if (!process.env.SIGNET_BIN) execFileSync("go", ["build", "-o", bin, "./cmd/signet"], { cwd: repo, stdio: "inherit" });
  const local = await startLocal(bin);
  stack = local.proc;
  base = local.base;
  api = local.api;
  local.proc.stdout!.on("data", (b) => (out += b));
  local.proc.stderr!.on("data", (b) => (out += b));
  const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
  if (!existsSync(executablePath)) throw new Error(`no Chromium at ${executablePath}: install Debian's chromium package (make test-console does) or set CHROMIUM`);
  browser = await chromium.launch({
    executablePath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  stack?.kill("SIGINT");
  writeStack?.proc.kill("SIGINT");
});

/** Runs step; when it fails, writes a screenshot and the page's log (the SDK's, with ?debug) to test-results/ and prints the log. */
async function diagnose<T>(page: Page, name: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    await page.screenshot({ path: join(results, `${name}.png`) }).catch(() => {});
    const logs = (page as Page & { logs?: string[] }).logs ?? [];
    console.error(`--- ${name}: page log (last 80 lines)\n${logs.slice(-80).join("\n")}\n--- stack log\n${out.slice(-3000)}`);
    throw err;
  }
}

async function signIn(user: string, at = base): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1200, height: 760 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  (page as Page & { errors?: string[] }).errors = errors;
  const logs: string[] = [];
  page.on("console", (m) => logs.push(`${new Date().toISOString()} ${m.text()}`));
  (page as Page & { logs?: string[] }).logs = logs;
  await page.goto(`${at}?user=${user}&device=web&debug`);
  await page.waitForSelector('#conn[data-state="synced"]', { timeout: wait });
  return page;
}

const marks = (page: Page) => page.$$eval(".msg.mine .marks", (els) => els.map((e) => (e as HTMLElement).dataset.mark));
const shown = (page: Page) => page.$$eval("#messages .msg[data-message-id]", (els) => els.map((e) => (e as HTMLElement).dataset.messageId!));

async function say(page: Page, text: string): Promise<void> {
  await page.fill("#composer-text", text);
  await page.press("#composer-text", "Enter");
}

test("two users chat; a reload loses nothing; marks reach read; alerts and the timeline render", async () => {
  const alice = await signIn("alice");
  const bob = await signIn("bob");

  // alice opens a chat with bob and writes: … then ✓, then ✓✓ once bob's device has it.
  await alice.fill("#new-chat-user", "bob");
  await alice.press("#new-chat-user", "Enter");
  await say(alice, "Approve PO-7?");
  await alice.waitForFunction(() => document.querySelector(".msg.mine .marks")?.getAttribute("data-mark") === "delivered", null, { timeout: wait });

  // bob sees the conversation with one unread message, opens it, and alice's mark turns to read.
  await bob.waitForSelector('#conversations li[data-conversation="d:alice:bob"] .badge[data-unread="1"]', { timeout: wait });
  await bob.click('#conversations li[data-conversation="d:alice:bob"]');
  await bob.waitForSelector("#messages .msg[data-message-id]", { timeout: wait });
  assert.equal(await bob.textContent("#messages .msg .text"), "Approve PO-7?");
  await alice.waitForFunction(() => document.querySelector(".msg.mine .marks")?.getAttribute("data-mark") === "read", null, { timeout: wait });
  assert.ok(await alice.$('#conversations li[data-conversation="d:alice:bob"] .dot.online'), "alice sees bob online");

  // bob reloads mid-conversation while alice keeps writing: after the reload he has every message once.
  const reload = bob.reload();
  for (const t of ["one", "two", "three"]) await say(alice, t);
  await reload;
  await bob.waitForSelector('#conn[data-state="synced"]', { timeout: wait });
  await bob.waitForFunction(() => document.querySelectorAll("#messages .msg[data-message-id]").length >= 4, null, { timeout: wait });
  const ids = await shown(bob);
  assert.equal(ids.length, 4, "four messages after the reload");
  assert.equal(new Set(ids).size, 4, "each once");
  assert.deepEqual(await bob.$$eval("#messages .msg .text", (els) => els.map((e) => e.textContent)), ["Approve PO-7?", "one", "two", "three"]);
  await alice.waitForFunction(() => [...document.querySelectorAll(".msg.mine .marks")].every((e) => e.getAttribute("data-mark") === "read"), null, { timeout: wait });
  assert.deepEqual(await marks(alice), ["read", "read", "read", "read"]);

  // bob answers; alice reads it.
  await say(bob, "Approved.");
  await alice.waitForFunction(() => [...document.querySelectorAll("#messages .msg .text")].some((e) => e.textContent === "Approved."), null, { timeout: wait });

  // An alert from an app, rendered with its title and priority.
  const app = await (await fetch(`${api}/v1/apps`, { method: "POST", headers: { Authorization: "Bearer local-admin-key" }, body: JSON.stringify({ name: "monitoring", allowUsers: ["bob"] }) })).json();
  const posted = await fetch(`${api}/v1/messages`, {
    method: "POST", headers: { Authorization: `Bearer ${app.key}`, "Idempotency-Key": "inc-1" },
    body: JSON.stringify({ to: ["bob"], title: "DB down", body: "primary failed over", priority: "urgent", ack: { options: ["ack", "decline"] } }),
  });
  assert.equal(posted.status, 202, await posted.clone().text());
  const alertId = (await posted.json()).messageId as string;
  await bob.waitForSelector('#conversations li[data-conversation="a:monitoring"]', { timeout: wait });
  await bob.click('#conversations li[data-conversation="a:monitoring"]');
  await bob.waitForSelector(".msg.alert.urgent .title", { timeout: wait });
  assert.match((await bob.textContent(".msg.alert .title")) ?? "", /DB down\s*urgent/);
  assert.equal(await bob.isHidden("#composer"), true, "no composer in an alert conversation");
  // The alert asks for an answer (issue 16): bob acknowledges it; the app sees it.
  await bob.click('.msg.alert .answers button[data-option="ack"]');
  await bob.waitForSelector('.msg.alert .answers[data-answered="true"]', { timeout: wait });
  assert.equal(await bob.textContent(".msg.alert .answers"), "you answered ack");
  const status = await (await fetch(`${api}/v1/messages/${alertId}`, { headers: { Authorization: `Bearer ${app.key}` } })).json();
  assert.equal(status.recipients[0].answer, "ack", JSON.stringify(status));

  // The path of alice's first message, drawn from the trace API.
  await bob.click('#conversations li[data-conversation="d:alice:bob"]');
  await alice.click("#messages .msg.mine .meta button");
  await alice.waitForSelector("#timeline-chart svg circle", { timeout: wait });
  const types = await alice.$$eval("#timeline-chart svg circle", (els) => els.map((e) => (e as SVGElement).dataset.type));
  for (const t of ["created", "stored", "inboxed", "pushed", "acked", "read"]) assert.ok(types.includes(t), `the timeline shows ${t}: ${types}`);
  await alice.screenshot({ path: join(results, "console.png") });
  await (await alice.$("#timeline"))!.screenshot({ path: join(results, "timeline.png") });

  for (const p of [alice, bob]) assert.deepEqual((p as Page & { errors: string[] }).errors, [], "no script errors");
});

for (const mode of ["write", "read"] as const) {
  test(`a group (${mode} diffusion): created in the console, its messages reach every member once, also after a reload, and the sender's mark reaches read`, async () => {
    let at = base;
    if (mode === "write") {
      writeStack = await startLocal(bin, ["GroupDelivery=write"]);
      at = writeStack.base;
    }
    await groupInConsole(await signIn("carol", at), await signIn("dave", at));
  });
}

async function groupInConsole(carol: Page, dave: Page): Promise<void> {
  await carol.fill("#new-group-name", "On-call");
  await carol.fill("#new-group-members", "dave");
  await carol.click("#new-group button");
  await carol.waitForSelector("#composer:not([hidden])", { timeout: wait });
  await say(carol, "handover at 9");
  await dave.waitForSelector("#conversations li .title >> text=On-call", { timeout: wait });
  await dave.click("#conversations li:has-text('On-call')");
  await dave.waitForFunction(() => [...document.querySelectorAll("#messages .msg .text")].some((e) => e.textContent === "handover at 9"), null, { timeout: wait });
  // Groups get no receipt pushes: the console asks, and the mark follows dave's read.
  await carol.waitForFunction(() => document.querySelector(".msg.mine .marks")?.getAttribute("data-mark") === "read", null, { timeout: wait });
  // dave reloads while carol writes on: after it he has every message once, in order.
  const reload = dave.reload();
  for (const t of ["pager is yours", "runbook updated"]) await say(carol, t);
  await reload;
  await dave.waitForSelector('#conn[data-state="synced"]', { timeout: wait });
  await dave.click("#conversations li:has-text('On-call')");
  await dave.waitForFunction(() => document.querySelectorAll("#messages .msg[data-message-id]").length >= 3, null, { timeout: wait });
  assert.deepEqual(await dave.$$eval("#messages .msg .text", (els) => els.map((e) => e.textContent)), ["handover at 9", "pager is yours", "runbook updated"]);
  for (const p of [carol, dave]) assert.deepEqual((p as Page & { errors: string[] }).errors, [], "no script errors");
}

test("a send the server never got waits in the outbox (…) and is sent after a reload", async () => {
  const erin = await signIn("erin");
  // Until the reload, erin's send frames are lost on the way (a network that drops them).
  let dropSends = true;
  await erin.routeWebSocket(/.*/, (ws) => {
    const server = ws.connectToServer();
    ws.onMessage((m) => {
      if (!(dropSends && String(m).includes('"action":"send"'))) server.send(m);
    });
    server.onMessage((m) => ws.send(m));
  });
  await erin.reload(); // the route applies to connections made from now on
  await erin.waitForSelector('#conn[data-state="synced"]', { timeout: wait });
  await erin.fill("#new-chat-user", "frank");
  await erin.press("#new-chat-user", "Enter");
  await say(erin, "sent before a reload");
  await erin.waitForSelector('.msg.mine .marks[data-mark="pending"]', { timeout: wait });
  dropSends = false;
  await erin.reload();
  // After the reload the outbox (IndexedDB) still has it, shows it, and sends it.
  await diagnose(erin, "erin-after-reload", () =>
    erin.waitForFunction(() => ["sent", "delivered"].includes(document.querySelector(".msg.mine .marks")?.getAttribute("data-mark") ?? ""), null, { timeout: wait }));
  const frank = await signIn("frank");
  await frank.waitForSelector('#conversations li[data-conversation="d:erin:frank"] .badge[data-unread="1"]', { timeout: wait });
  await frank.click('#conversations li[data-conversation="d:erin:frank"]');
  await frank.waitForFunction(() => document.querySelectorAll("#messages .msg[data-message-id]").length === 1, null, { timeout: wait });
  assert.equal(await frank.textContent("#messages .msg .text"), "sent before a reload");
});

test("an alert escalated to a user after a later alert of its app counts unread until shown, then its status says read", async () => {
  const hank = await signIn("hank");
  const app = await (await fetch(`${api}/v1/apps`, { method: "POST", headers: { Authorization: "Bearer local-admin-key" }, body: JSON.stringify({ name: "paging", allowUsers: ["gina", "hank"] }) })).json();
  const post = async (key: string, body: object): Promise<string> => {
    const r = await fetch(`${api}/v1/messages`, { method: "POST", headers: { Authorization: `Bearer ${app.key}`, "Idempotency-Key": key }, body: JSON.stringify(body) });
    assert.equal(r.status, 202, await r.clone().text());
    return (await r.json()).messageId as string;
  };
  const stateFor = async (id: string): Promise<string | undefined> => {
    const s = await (await fetch(`${api}/v1/messages/${id}`, { headers: { Authorization: `Bearer ${app.key}` } })).json();
    return (s.recipients as { userId: string; state: string }[]).find((r) => r.userId === "hank")?.state;
  };
  const until = async (what: string, ok: () => Promise<boolean>) => {
    for (const end = Date.now() + wait; !(await ok()); ) {
      if (Date.now() > end) throw new Error(`waited ${wait} ms for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  // Nobody answers gina's alert: it escalates to hank, whose inbox has a later alert of the app by then (and his read of it).
  const early = await post("e-1", { to: ["gina"], title: "Checkout errors", body: "5xx", ack: { options: ["ack"] }, escalation: { everySeconds: 8, steps: [{ to: ["hank"] }] } });
  const later = await post("f-1", { to: ["hank"], title: "Disk 91%", body: "db-2" });
  await hank.waitForSelector('#conversations li[data-conversation="a:paging"]', { timeout: wait });
  await hank.click('#conversations li[data-conversation="a:paging"]');
  await until("the later alert read", async () => (await stateFor(later)) === "read");
  assert.equal(await stateFor(early), undefined, "the escalation has not reached hank yet (it runs 8 s after the post)");
  // hank is in another conversation when the escalation brings the early alert, below his read watermark.
  await hank.fill("#new-chat-user", "gina");
  await hank.press("#new-chat-user", "Enter");
  await diagnose(hank, "late-alert-badge", () => hank.waitForSelector('#conversations li[data-conversation="a:paging"] .badge[data-unread="1"]', { timeout: wait }));
  await until("the escalated alert on hank's device", async () => (await stateFor(early)) !== "pushed");
  assert.equal(await stateFor(early), "delivered", "on hank's device, not read");
  await hank.click('#conversations li[data-conversation="a:paging"]');
  await until("the escalated alert read once shown", async () => (await stateFor(early)) === "read");
  assert.ok(await hank.isHidden('#conversations li[data-conversation="a:paging"] .badge'), "no unread badge");
  assert.deepEqual((hank as Page & { errors: string[] }).errors, [], "no script errors");
});

test("a browser beyond its user's device limit is told why it cannot connect, at its first refusal", async () => {
  const limited = await startLocal(bin, ["MaxDevicesPerUser=1"]);
  try {
    const first = await signIn("hal", limited.base); // device "web": the user's one place
    const context = await browser.newContext({ viewport: { width: 1200, height: 760 } });
    const page = await context.newPage();
    const logs: string[] = [];
    page.on("console", (m) => logs.push(m.text()));
    (page as Page & { logs?: string[] }).logs = logs;
    await page.goto(`${limited.base}?user=hal&device=laptop&debug`);
    await diagnose(page, "device-limit", async () => {
      await page.waitForSelector('#conn[data-state="down"]', { timeout: wait });
      // The server's words, from GET /v1/handshake (the SDK's apiUrl): the device limit, and what to do.
      await page.waitForFunction(() => /cannot connect: device laptop is new .* the most allowed: an operator can forget one/.test(document.querySelector("#conn")?.textContent ?? ""),
        undefined, { timeout: wait });
    });
    const refusals = (limited.log().match(/connect refused: device limit/g) ?? []).length;
    assert.ok(refusals >= 1, `the stack refused the laptop ${refusals} times`);
    await context.close();
    await first.context().close();
  } finally {
    limited.proc.kill("SIGINT");
  }
});
