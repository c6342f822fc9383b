// The real local stack for the SDK's tests: `signet local` on free ports,
// started by the test (built from the repository unless SIGNET_BIN names a
// binary), and HS256 tokens it accepts.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHmac } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020 } from "ajv/dist/2020.js";
import { readFileSync } from "node:fs";
import { SignetClient, type ClientOptions, type DeviceStore, type WebSocketConstructor, type WebSocketLike } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (build/test → sdk/typescript → repo). */
export const repo = resolve(here, "../../../..");
const secret = "local-dev-secret";

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => ok(port));
    });
  });
}

/** The signet binary: SIGNET_BIN, or built once into build/signet. */
export function signetBinary(): string {
  if (process.env.SIGNET_BIN) return process.env.SIGNET_BIN;
  const bin = join(repo, "sdk/typescript/build/signet");
  if (!existsSync(bin) || process.env.SIGNET_REBUILD !== "0") {
    execFileSync("go", ["build", "-o", bin, "./cmd/signet"], { cwd: repo, stdio: "inherit" });
  }
  return bin;
}

export interface Stack {
  url: string;
  httpUrl: string;
  stop(): Promise<void>;
  log(): string;
}

/**
 * Starts `signet local` (in memory) with env added to its environment. The
 * ports are found free here and then bound by the stack, so another process
 * on the machine can take one in between ("address already in use"; the
 * stack binds them before anything of its own takes a port the system
 * picks): the start is then tried again, on new ports unless the caller
 * named them.
 */
export async function startStack(env: Record<string, string> = {}, params: string[] = [], ports?: number[]): Promise<Stack & { ports: number[] }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startStackOnce(env, params, ports);
    } catch (e) {
      if (attempt >= 3 || !String(e).includes("address already in use")) throw e;
    }
  }
}

async function startStackOnce(env: Record<string, string>, params: string[], ports?: number[]): Promise<Stack & { ports: number[] }> {
  const [ws, http, ddb, sqs] = ports ?? [await freePort(), await freePort(), await freePort(), await freePort()];
  const args = ["local", "--quiet", `--addr=127.0.0.1:${ws}`, `--http-addr=127.0.0.1:${http}`, `--dynamodb-addr=127.0.0.1:${ddb}`,
    `--sqs-addr=127.0.0.1:${sqs}`, "--console-addr=off", "--parameter", "RateLimits=off", ...params.flatMap((p) => ["--parameter", p])];
  const child: ChildProcess = spawn(signetBinary(), args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (b) => (out += b));
  child.stderr!.on("data", (b) => (out += b));
  await new Promise<void>((ok, fail) => {
    const check = setInterval(() => {
      if (out.includes("Signet is running.")) {
        clearInterval(check);
        ok();
      }
    }, 50);
    child.once("exit", (code) => {
      clearInterval(check);
      fail(new Error(`signet local exited with ${code}:\n${out}`));
    });
  });
  return {
    ports: [ws, http, ddb, sqs],
    url: `ws://127.0.0.1:${ws}/`,
    httpUrl: `http://127.0.0.1:${http}`,
    log: () => out,
    stop: () =>
      new Promise<void>((ok) => {
        if (child.exitCode !== null) return ok();
        child.once("exit", () => ok());
        child.kill("SIGINT");
        setTimeout(() => child.kill("SIGKILL"), 10000).unref();
      }),
  };
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString("base64url");

/** A JWT for user (and device) that the local stack accepts. */
export function token(user: string, device?: string): string {
  const now = Math.floor(Date.now() / 1000);
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const claims = b64url(JSON.stringify({ sub: user, ...(device ? { did: device } : {}), iat: now, exp: now + 3600 }));
  const sig = b64url(createHmac("sha256", secret).update(`${head}.${claims}`).digest());
  return `${head}.${claims}.${sig}`;
}

const schema = JSON.parse(readFileSync(join(repo, "docs/protocol.schema.json"), "utf8"));
const ajv = new Ajv2020({ allErrors: false, strict: false });
ajv.addSchema(schema, "protocol");
const validClient = ajv.getSchema("protocol#/$defs/ClientFrame")!;
const validServer = ajv.getSchema("protocol#/$defs/ServerFrame")!;

/** Frames that did not match docs/protocol.schema.json, collected by frameCheck. */
export const invalidFrames: string[] = [];

/** An onFrame option that checks every frame against the protocol schema. */
export function frameCheck(direction: "in" | "out", frame: unknown): void {
  const v = direction === "out" ? validClient : validServer;
  if (!v(frame)) invalidFrames.push(`${direction} ${JSON.stringify(frame)}: ${ajv.errorsText(v.errors)}`);
}

/** A seeded random number generator (mulberry32). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Waits until cond() holds, checking every 20 ms, or fails after ms. */
export async function eventually(what: string, cond: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A WebSocket that passes everything through to Node's own; the test
 * transports below change what `received` and `send` do. */
class PassThrough implements WebSocketLike {
  protected ws: WebSocketLike;
  onopen: WebSocketLike["onopen"] = null;
  onclose: WebSocketLike["onclose"] = null;
  onerror: WebSocketLike["onerror"] = null;
  onmessage: WebSocketLike["onmessage"] = null;
  constructor(url: string) {
    this.ws = new (globalThis as unknown as { WebSocket: WebSocketConstructor }).WebSocket(url);
    this.ws.onopen = (e) => this.onopen?.(e);
    this.ws.onclose = (e) => this.onclose?.(e);
    this.ws.onerror = (e) => this.onerror?.(e);
    this.ws.onmessage = (e) => this.received(e.data);
  }
  protected received(data: unknown): void {
    this.onmessage?.({ data });
  }
  get readyState() {
    return this.ws.readyState;
  }
  send(data: string) {
    this.ws.send(data);
  }
  close(code?: number, reason?: string) {
    this.ws.close(code, reason);
  }
}

/** How a transport below mangles the incoming frames `applies` picks: of one draw per frame, below `drop` it is
 * dropped, below `dup` delivered twice, below `hold` held back and delivered after the next frame (or `flushMs`
 * later, if given). */
interface IncomingFaults {
  drop: number;
  dup: number;
  hold: number;
  applies: (data: unknown) => boolean;
  flushMs?: number;
}

/** A PassThrough whose incoming frames are mangled as f says, counted in counts; `afterDelivery` runs after each
 * frame that was not held back. */
function mangling(rand: () => number, counts: { dropped: number; duplicated: number; reordered: number }, f: IncomingFaults) {
  return class Mangling extends PassThrough {
    private held: unknown[] = [];
    private flush?: ReturnType<typeof setTimeout>;
    protected afterDelivery(): void {}
    protected override received(data: unknown): void {
      const deliver = (d: unknown) => this.onmessage?.({ data: d });
      const r = f.applies(data) ? rand() : 1;
      if (r < f.drop) {
        counts.dropped++;
      } else if (r < f.dup) {
        counts.duplicated++;
        deliver(data);
        deliver(data);
      } else if (r < f.hold) {
        counts.reordered++;
        this.held.push(data);
        if (f.flushMs !== undefined) {
          clearTimeout(this.flush);
          this.flush = setTimeout(() => this.held.splice(0).forEach(deliver), f.flushMs);
        }
        return;
      } else {
        deliver(data);
      }
      clearTimeout(this.flush);
      for (const h of this.held.splice(0)) deliver(h);
      this.afterDelivery();
    }
  };
}

/** A WebSocket whose incoming pushes (frames of type `push`: "message", or
 * "groupMessage") are dropped, duplicated and reordered at random. */
export function flakyWebSocket(rand: () => number, counts: { dropped: number; duplicated: number; reordered: number }, push = "message"): WebSocketConstructor {
  const applies = (data: unknown) => typeof data === "string" && data.startsWith(`{"type":"${push}"`);
  return mangling(rand, counts, { drop: 0.2, dup: 0.35, hold: 0.5, applies });
}

/** What `chaosWebSocket` did to the frames it carried. */
export interface ChaosCounts {
  dropped: number; duplicated: number; reordered: number; lostOut: number; failedOut: number; duplicatedOut: number; cuts: number;
}

/** A WebSocket under chaos, both ways, for every frame type: incoming frames
 * dropped, duplicated and reordered (a held frame goes after the next one,
 * or 200 ms later); outgoing frames lost, answered in their invocation's
 * place by API Gateway's error frame (a throttle), or sent twice; and the
 * connection cut now and then. Its faults come from rand. */
export function chaosWebSocket(rand: () => number, counts: ChaosCounts): WebSocketConstructor {
  return class Chaos extends mangling(rand, counts, { drop: 0.06, dup: 0.1, hold: 0.16, applies: () => true, flushMs: 200 }) {
    private maybeCut(): void {
      if (rand() < 0.006) {
        counts.cuts++;
        this.ws.close();
      }
    }
    protected override afterDelivery(): void {
      this.maybeCut();
    }
    override send(data: string) {
      const r = rand();
      if (r < 0.03) {
        counts.lostOut++;
      } else if (r < 0.06) {
        counts.failedOut++;
        const answer = `{"message": "Internal server error", "connectionId":"chaos", "requestId":"chaos-${counts.failedOut}"}`;
        setTimeout(() => this.received(answer), 5);
      } else if (r < 0.08) {
        counts.duplicatedOut++;
        super.send(data);
        super.send(data);
      } else {
        super.send(data);
      }
      this.maybeCut();
    }
  };
}

/** A WebSocket that stands in for a throttled invocation: the first
 * outgoing frame that `swallow` matches never reaches the stack, and the
 * client gets instead the frame API Gateway answers a failed or throttled
 * route invocation with (as the local gateway sends it, gateway.go). Every
 * outgoing frame is recorded in `sent` with its time. */
export function throttledOnce(swallow: (frame: Record<string, unknown>) => boolean, sent: { at: number; frame: Record<string, unknown> }[]): WebSocketConstructor {
  let done = false;
  return class Throttled extends PassThrough {
    override send(data: string) {
      const frame = JSON.parse(data) as Record<string, unknown>;
      sent.push({ at: Date.now(), frame });
      if (!done && swallow(frame)) {
        done = true;
        const answer = `{"message": "Internal server error", "connectionId":"test", "requestId":"throttled-${sent.length}"}`;
        setTimeout(() => this.received(answer), 10);
        return;
      }
      super.send(data);
    }
  };
}

/** A WebSocket that stands in for a throttle: every outgoing frame that `swallow` matches while `throttled()` holds
 * never reaches the stack, and the client gets API Gateway's error frame in its place. Every outgoing frame is
 * recorded in `sent` with its time. */
export function throttledWhile(swallow: (frame: Record<string, unknown>) => boolean, throttled: () => boolean, sent: { at: number; frame: Record<string, unknown> }[]): WebSocketConstructor {
  return class Throttled extends PassThrough {
    override send(data: string) {
      const frame = JSON.parse(data) as Record<string, unknown>;
      sent.push({ at: Date.now(), frame });
      if (throttled() && swallow(frame)) {
        const answer = `{"message": "Internal server error", "connectionId":"test", "requestId":"throttled-${sent.length}"}`;
        setTimeout(() => this.received(answer), 1);
        return;
      }
      super.send(data);
    }
  };
}

/** A WebSocket that sends the first outgoing frame `match` matches and then answers it, as if its invocation had
 * failed after its write, with the server's "internal" error frame (which names no frame). Every outgoing frame is
 * recorded in `sent` with its time. */
export function failsAfterItsWrite(match: (frame: Record<string, unknown>) => boolean, sent: { at: number; frame: Record<string, unknown> }[]): WebSocketConstructor {
  let done = false;
  return class FailsAfterItsWrite extends PassThrough {
    override send(data: string) {
      const frame = JSON.parse(data) as Record<string, unknown>;
      sent.push({ at: Date.now(), frame });
      super.send(data);
      if (!done && match(frame)) {
        done = true;
        const answer = `{"type":"error","code":"internal","message":"injected: the invocation failed after its write","requestId":"failed-${sent.length}"}`;
        setTimeout(() => this.received(answer), 10);
      }
    }
  };
}

/** What `holdsGroupSyncRefusals` is told and reports. */
export interface RefusalHold {
  /** Pushes (type "message") holding this text are dropped. */
  dropPush: string;
  /** Set by the test: the next inbox sync written releases the held refusals. */
  armed: boolean;
  released: boolean;
  /** The next inbox sync page after the release is still to be dropped. */
  dropPage: boolean;
  /** Group sync refusals held. */
  held: number;
  /** Group syncs written after the release. */
  groupSyncsAfter: number;
}

/** A WebSocket that holds the group sync refusals (rate_limited error frames with a group sync's ref) it reads
 * until `ctl.armed` and the client writes an inbox sync; then passes them on, ahead of that sync's page, which it
 * drops. It drops every push holding `ctl.dropPush`, and counts the group syncs written after the release. */
export function holdsGroupSyncRefusals(ctl: RefusalHold): WebSocketConstructor {
  return class HoldsRefusals extends PassThrough {
    private held: unknown[] = [];
    protected override received(data: unknown): void {
      if (typeof data === "string") {
        const f = JSON.parse(data) as { type?: string; code?: string; ref?: string };
        if (!ctl.released && f.type === "error" && f.code === "rate_limited" && f.ref?.startsWith("gs")) {
          this.held.push(data);
          ctl.held++;
          return;
        }
        if (ctl.released && ctl.dropPage && f.type === "sync") {
          ctl.dropPage = false;
          return;
        }
        if (f.type === "message" && data.includes(ctl.dropPush)) return;
      }
      super.received(data);
    }
    override send(data: string) {
      const f = JSON.parse(data) as { action?: string; conversationId?: string };
      if (f.action === "sync" && !f.conversationId && ctl.armed && !ctl.released) {
        ctl.released = true;
        ctl.dropPage = true;
        // The refusals reach the client while this sync is in flight.
        for (const h of this.held.splice(0)) super.received(h);
      } else if (f.action === "sync" && f.conversationId && ctl.released) {
        ctl.groupSyncsAfter++;
      }
      super.send(data);
    }
  };
}

/** A WebSocket whose first connection is lost `afterMs` after it reads the first frame `match` matches (its
 * text); `dials` counts the connections opened. */
export function lostAfter(match: (data: string) => boolean, afterMs: number, dials: { n: number }): WebSocketConstructor {
  let seen = false;
  return class LostAfter extends PassThrough {
    private readonly first = dials.n++ === 0;
    protected override received(data: unknown): void {
      super.received(data);
      if (this.first && !seen && typeof data === "string" && match(data)) {
        seen = true;
        setTimeout(() => this.ws.close(), afterMs);
      }
    }
  };
}

/** A WebSocket that drops the first incoming frame `match` matches (its text). */
export function dropsFirstIncoming(match: (data: string) => boolean): WebSocketConstructor {
  let dropped = false;
  return class DropsFirst extends PassThrough {
    protected override received(data: unknown): void {
      if (!dropped && typeof data === "string" && match(data)) {
        dropped = true;
        return;
      }
      super.received(data);
    }
  };
}

/** A WebSocket that reads an error in place of the first incoming frame `match` matches (its text; the first
 * `times`), as if the invocation answering had failed after storing what it did: API Gateway's error frame
 * ("gateway"), or the server's `internal` error frame with the answer's ref ("internal"). Every outgoing frame is
 * recorded in `sent`. */
export function failsInPlaceOfAnswer(match: (data: string) => boolean, sent: Record<string, unknown>[], how: "gateway" | "internal" = "gateway", times = 1): WebSocketConstructor {
  let failures = 0;
  return class FailsInPlace extends PassThrough {
    override send(data: string) {
      sent.push(JSON.parse(data) as Record<string, unknown>);
      super.send(data);
    }
    protected override received(data: unknown): void {
      if (failures < times && typeof data === "string" && match(data)) {
        failures++;
        const ref = (JSON.parse(data) as { ref?: string }).ref;
        super.received(
          how === "gateway"
            ? `{"message": "Internal server error", "connectionId":"test", "requestId":"failed-after-store"}`
            : JSON.stringify({ type: "error", code: "internal", message: "injected: failed after storing", requestId: "failed-after-store", ref }),
        );
        return;
      }
      super.received(data);
    }
  };
}

/** A WebSocket that loses the first frame with `action` it is given: not sent, and the connection closed (as a
 * connection that dies with the frame in its buffers). `sent` records every frame with that action offered. */
export function losesFirst(action: string, sent: Record<string, unknown>[]): WebSocketConstructor {
  let lost = false;
  return class Loses extends PassThrough {
    override send(data: string) {
      const frame = JSON.parse(data) as Record<string, unknown>;
      if (frame.action === action) {
        sent.push(frame);
        if (!lost) {
          lost = true;
          this.ws.close();
          return;
        }
      }
      super.send(data);
    }
  };
}

/** A WebSocket that loses the first outgoing frame `match` picks (it never reaches the stack and nothing answers
 * it, as when its invocation is still running), recording every outgoing frame in `sent`; `gatewayError()` then
 * hands the client API Gateway's error frame, as when a frame's invocation failed. */
export function losesFirstQuietly(match: (frame: Record<string, unknown>) => boolean, sent: Record<string, unknown>[]): { WebSocket: WebSocketConstructor; gatewayError: () => void } {
  let lost = false;
  let current: { inject(data: string): void } | undefined;
  class LosesQuietly extends PassThrough {
    constructor(url: string) {
      super(url);
      current = this;
    }
    inject(data: string): void {
      this.received(data);
    }
    override send(data: string) {
      const frame = JSON.parse(data) as Record<string, unknown>;
      sent.push(frame);
      if (!lost && match(frame)) {
        lost = true;
        return;
      }
      super.send(data);
    }
  }
  return {
    WebSocket: LosesQuietly,
    gatewayError: () => current?.inject(`{"message": "Internal server error", "connectionId":"test", "requestId":"lost-${sent.length}"}`),
  };
}

/** A WebSocket whose first connection holds back its first sync page until
 * the next "sent" has been delivered, as when the sync's invocation answers
 * after the send's (`held` is called once the page is held). */
export function holdFirstSyncUntilSent(held: () => void): WebSocketConstructor {
  let first = true;
  return class HoldFirstSync extends PassThrough {
    private page: unknown = undefined;
    private holding = first;
    constructor(url: string) {
      super(url);
      first = false;
    }
    protected override received(data: unknown): void {
      const type = typeof data === "string" ? (JSON.parse(data) as { type?: string }).type : undefined;
      if (this.holding && type === "sync") {
        this.holding = false;
        this.page = data;
        held();
        return;
      }
      super.received(data);
      if (type === "sent" && this.page !== undefined) {
        const page = this.page;
        this.page = undefined;
        super.received(page);
      }
    }
  };
}

/** Connects user's client on store to stack, every frame checked against the schema (SDK_DEBUG=1 prints its log). */
export function dialStack(stack: Stack, user: string, store: DeviceStore, extra: Partial<ClientOptions> = {}): Promise<SignetClient> {
  return SignetClient.connect({
    url: stack.url, token: () => token(user, extra.device), store, onFrame: frameCheck,
    log: process.env.SDK_DEBUG ? (l, m, f) => console.error(user, l, m, f ?? "") : undefined, ...extra,
  });
}
