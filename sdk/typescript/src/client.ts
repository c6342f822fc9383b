import type {
  Body, ClientFrame, ConversationSummary, Entry, ErrorCode, ErrorFrame, GroupFrame, GroupHead, GroupInfoFrame, GroupSyncPageFrame, HistoryPageFrame, Message,
  MembershipFrame, ReceiptFrame, ReceiptsAnswerFrame, SendFrame, SentFrame, ServerFrame, SyncPageFrame, SummaryPageFrame,
  PresenceAnswerFrame, ReadFrame, Role, AnswerResultFrame, RegisteredFrame,
} from "./frames.js";
import type { DeviceStore, OutboxItem } from "./store.js";

/** A message persisted on this device. */
export interface StoredMessage {
  /** The message's seq in this user's inbox; 0 for a message of a group
   * under read diffusion (it is in the group's log only: its place is
   * conversationId and convSeq). */
  seq: number;
  messageId: string;
  conversationId: string;
  convSeq: number;
  from: string;
  body: Body;
  sentAt: string;
}

/** A message to send. Exactly one of to and conversationId is set. */
export interface Draft {
  /** Makes the send idempotent; generated when absent. */
  clientMsgId?: string;
  /** clientMsgId is only ever sent from this device (always so for a
   * generated one): a 1:1 send then says what the device has seen of the
   * conversation ("seen"), which spares the server an idempotency record.
   * Leave it unset for an id the app may retry from another device. */
  deviceOnly?: boolean;
  to?: string;
  conversationId?: string;
  body: Body;
}

/** A send in the outbox. */
export interface QueuedSend {
  clientMsgId: string;
  to?: string;
  conversationId?: string;
  body: Body;
}

/** A step of an entry's path on the device, for fault-injection tests. */
export type CrashPoint = "before-persist" | "after-persist" | "before-ack";

/** The part of the standard WebSocket this SDK uses (browsers', Node's, or `ws`). */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface ClientOptions {
  /** The WebSocket endpoint: ws://127.0.0.1:3001/ locally, wss://{api}.execute-api.{region}.amazonaws.com/{stage}. */
  url: string;
  /** The JWT, or a function asked for one at every (re)connect. */
  token: string | (() => string | Promise<string>);
  /** Sent as the deviceId query parameter (a token's did claim wins). */
  device?: string;
  /**
   * The HTTP API (http://127.0.0.1:3000 locally, https://{api}.execute-api.{region}.amazonaws.com): after a
   * handshake fails, the client asks its GET /v1/handshake with the same token and device why — a browser's
   * WebSocket cannot tell — and says so in onState's `refused`; a rate limit's retryAfterMs holds the next
   * handshake, and a malformed device id, a device beyond the device limit, or a refused token that is a string
   * (not a function asked for a new one), is tried again only every maxBackoffMs. Without it only
   * failedConnects counts.
   */
  apiUrl?: string;
  /** Where the device keeps its messages, cursor and outbox. */
  store: DeviceStore;
  /** The WebSocket class (default: globalThis.WebSocket; Node 20 needs --experimental-websocket or the ws package). */
  WebSocket?: WebSocketConstructor;
  /** A pushed entry is acked at most this long after it arrived (2000), capped at 2/5 of the server's push timeout. */
  ackIntervalMs?: number;
  /** ...or at once when this many pushed entries wait (50). */
  ackBatch?: number;
  /** A sync's entries are acked when it ends, or every this many (500). */
  syncAckBatch?: number;
  /** Reconnect delays: capped exponential backoff with full jitter (200, 30000). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** The wait before reconnecting after the server closed this connection for the user's connection limit (300000). */
  evictedWaitMs?: number;
  /** How long a send waits for its ACK before it is sent again (10000). */
  resendAfterMs?: number;
  /** The keep-alive tick (480000: 8 minutes, inside API Gateway's 10-minute idle timeout). */
  pingIntervalMs?: number;
  /** Every headEvery-th tick is a ping (its pong carries the inbox head), the others keepalive frames (3). */
  headEvery?: number;
  /** A ping unanswered this long means the connection is dead (15000). */
  pongTimeoutMs?: number;
  /** Start messages() with the stored messages after shownUpTo: exactly once across restarts for an app that records how far it has shown. */
  replay?: boolean;
  shownUpTo?: number;
  /** With replay: how far the app has shown each group under read diffusion (highest convSeq; a group not named: nothing). Their messages have seq 0, so shownUpTo cannot say it. */
  shownGroups?: Record<string, number>;
  /** A delivered/read watermark of a 1:1 peer; they can arrive out of order (acks handled at once): keep the highest upTo. */
  onReceipt?: (r: ReceiptFrame) => void;
  /** Another device of this user read a conversation up to convSeq upTo; in an app's alert conversation also its alerts at inbox seqs up to inboxSeq (see markRead). */
  onRead?: (conversationId: string, upTo: number, inboxSeq?: number) => void;
  onPresence?: (userId: string, status: string) => void;
  onMembership?: (m: MembershipFrame) => void;
  /** Called when an escalation pushes again an alert this device already has: show it to the user again (messages() does not emit it twice). */
  onRenotify?: (m: StoredMessage) => void;
  /** Called when another device of this user answered an alert. */
  onAnswer?: (a: AnswerResultFrame) => void;
  /** Called with every ACK of a send, also of sends queued before a restart (which no promise waits for). */
  onSent?: (sent: SentFrame) => void;
  /**
   * Called when the connection state changes. `failedConnects` counts the
   * handshakes that failed in a row since the last connection: a browser's
   * WebSocket cannot tell why (a refused or expired token, a device id
   * beyond the user's device limit — HTTP 409, which the Go SDK reports as
   * such — a rate limit, or the network), so an app can say so once it grows.
   * With apiUrl set, `refused` says why the server refuses the handshakes (the
   * answer of GET /v1/handshake; absent when it would admit one: the network).
   */
  onState?: (s: { connected: boolean; synced: boolean; failedConnects: number; refused?: HandshakeRefusal }) => void;
  /** Every frame sent and received, parsed (for debugging and tests). */
  onFrame?: (direction: "in" | "out", frame: unknown) => void;
  /** Structured logs (discarded when absent). */
  log?: (level: "debug" | "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>) => void;
  /** Fault injection: asked at each crash point of an entry's path; true stops the client there as a killed process would. */
  crashAt?: (point: CrashPoint, seq: number) => boolean;
}

/** Why the server refuses this client's handshakes: GET /v1/handshake's error (docs/protocol.md, "Handshake check"). */
export interface HandshakeRefusal {
  /** 401 a missing, refused or expired token; 400 a malformed device id; 409 a new device beyond the user's device limit; 429 a rate limit. */
  status: number;
  /** unauthorized, bad_request, conflict, rate_limited. */
  code: string;
  /** What the server says, for people. */
  message: string;
  /** For rate_limited: when handshakes are admitted again. */
  retryAfterMs?: number;
}

/** An error frame that answered a request. */
export class ServerError extends Error {
  constructor(readonly code: ErrorCode, message: string, readonly requestId = "", readonly retryAfterMs?: number) {
    super(`${code}: ${message}${requestId ? ` (request ${requestId})` : ""}`);
    this.name = "ServerError";
  }
}

/** The error of everything still waiting when the client is closed (sends stay in the outbox). */
export class ClosedError extends Error {
  constructor(what = "client closed") {
    super(what);
    this.name = "ClosedError";
  }
}

/**
 * The error of setPresence or register when a later call of the same kind on this client superseded it before
 * it was answered: the later one sets the state. The server keeps the state whose frame API Gateway received
 * last, so a superseded frame is never written again (written later, it would undo the newer state).
 */
export class SupersededError extends Error {
  constructor() {
    super("superseded by a later request setting the same state");
    this.name = "SupersededError";
  }
}

class Crash extends Error {}

const catchUpGraceMs = 2000;
const housekeepingMs = 100;

/** Timers a session keeps; all cleared when it ends. */
interface Session {
  ws: WebSocketLike;
  cursor: number;
  epoch: string;
  lastAck: number;
  needAck: number;
  forceAck: boolean;
  own: Map<number, Entry>;
  unacked: number;
  syncedUnacked: number;
  pushWaiting: boolean;
  pushedAt: number;
  pushTimeoutMs: number;
  syncing: boolean;
  syncAt: number;
  syncSent: number;
  /** The ref of the inbox sync in flight. */
  syncRef: string;
  /**
   * When, after an error frame that may be any of them, what went out and may have failed is written again (0: not
   * due): the acks (the inbox's, and every group's acked within errorWindowMs), the recent reads and the unanswered
   * queries (writeAgain).
   */
  againAt: number;
  lastRecv: number;
  pingSent: number;
  /** When the unanswered pings were written, oldest first (a pong confirms the reads written before one). */
  pings: number[];
  ticks: number;
  resyncAgain: boolean;
  behindAt: number;
  behindHead: number;
  sentAt: Map<string, number>;
  reconnectAfter: number;
  timers: ReturnType<typeof setInterval>[];
  ended: boolean;
  /** The read-diffused groups this session has touched. */
  groups: Map<string, GroupState>;
}

/** One read-diffused group's position in a session. */
interface GroupState {
  cursor: number;
  lastAck: number;
  needAck: number;
  /** The highest convSeq known to exist (a push not applied, a head a sync
   * page or notify named): a group sync that ends below it is followed by another. */
  behind: number;
  /** The highest convSeq of this device's own messages that came in "sent"
   * and could not be applied yet (ownFromSent: no push or redelivery brings
   * them): group syncs go on until the cursor reaches it. */
  own: number;
  forceAck: boolean;
  /** When an ack of this group was last written (0: never). */
  ackedAt: number;
  syncing: boolean;
  syncSent: number;
  /** The ref of the group sync in flight. */
  syncRef: string;
  /** The server's proof of convSeq proofAt (a push's, or a page's last message's): an ack up to proofAt brings it back. */
  proof: string;
  proofAt: number;
}

/** How long the client waits for GET /v1/handshake's answer. */
const handshakeCheckMs = 10000;

/** The statuses of GET /v1/handshake that say why a handshake is refused (docs/protocol.md, "Handshake check"). */
const refusalStatuses = [400, 401, 409, 429];

/** How long a group sync may go unanswered (refused, or lost with its connection) before the device asks again. */
const groupSyncRetryMs = 10000;

/** How many times a query the server answers internal or rate_limited is asked again (a second later, or after
 * the wait it names) before the promise rejects with the error. */
const queryRetries = 3;

/**
 * A state query (stateOf) waits for the answer of the one before it of its kind, or this long after that one's last
 * write: API Gateway's receive time counts milliseconds, and two frames received in the same one could not be told
 * apart.
 */
const stateGapMs = 1000;

/**
 * How long a frame may still turn out to have failed: a pong shows the server received it, but its invocation may
 * still fail, and API Gateway's error frame for it (which names no frame) comes within its 29 s integration
 * timeout. Reads are kept that long after a pong confirmed them, and the groups acked within it are acked again
 * after an error frame.
 */
const errorWindowMs = 60000;

type Waiter<T> = { resolve: (v: T) => void; reject: (e: unknown) => void };

/**
 * One device's connection to Signet. It keeps the device half of
 * confirmable delivery: an entry is persisted (entry and cursor in one
 * store step) before it is emitted and acked; acks are cumulative and
 * batched; an entry beyond cursor + 1 is a gap that a sync fills first; an
 * epoch change or a cursor beyond the head resyncs from 0 without showing a
 * message twice; sends go through a durable outbox and are retried with the
 * same clientMsgId (one in flight per conversation, which keeps the
 * sender's order) until the server's ACK; reconnects back off with jitter
 * and honour retryAfterMs. See the README and docs/protocol.md.
 */
export class SignetClient {
  private readonly o: Required<Omit<ClientOptions, "onReceipt" | "onRead" | "onPresence" | "onMembership" | "onAnswer" | "onRenotify" | "onSent" | "onState" | "onFrame" | "log" | "crashAt" | "WebSocket" | "apiUrl">> & ClientOptions;
  private readonly store: DeviceStore;
  private session?: Session;
  private serial: Promise<void> = Promise.resolve();
  private enqueued: Promise<unknown> = Promise.resolve();
  private closed = false;
  private crashed = false;
  private attempt = 0;
  private reconnectTimer?: ReturnType<typeof setTimeout>;
  private first?: Waiter<void>;
  private readonly sendWaiters = new Map<string, Waiter<SentFrame>[]>();
  /**
   * The queries waiting for their answer, by ref; retries counts those answered internal or rate_limited, and
   * heldUntil (ms, 0: not held) is when one held by a rate limit goes out (its own timer writes it).
   */
  private readonly queries = new Map<string, Query>();
  /** Per state a query sets (stateOf), the ref number of the last query setting it. */
  private readonly latestState = new Map<string, number>();
  /** Per state, the query waiting for its turn (writeQuery): called when the one before it settles or its gap ends. */
  private readonly turns = new Map<string, () => void>();
  /**
   * Per limit kind (limitKind; "send" for the outbox), when its frames may go again after one was refused
   * rate_limited. The client's, not a connection's: a new connection during a hold waits it out too.
   */
  private readonly holds = new Map<string, number>();
  /**
   * Per conversation the highest read written: a new connection writes it again until a pong confirms it,
   * and API Gateway's error frame until errorWindowMs after it was written (its invocation may have failed).
   */
  private readonly reads = new Map<string, { frame: ReadFrame; at: number; confirmed: boolean }>();
  private refs = 0;
  private readonly queue: StoredMessage[] = [];
  private readonly takers: ((r: IteratorResult<StoredMessage>) => void)[] = [];
  private readonly listeners = new Set<(m: StoredMessage) => void>();
  private isSynced = false;
  /** This device's user, once a 1:1 ACK has told it (see sayWhatWasSeen). */
  private me?: string;

  private constructor(opts: ClientOptions) {
    this.o = {
      ackIntervalMs: 2000, ackBatch: 50, syncAckBatch: 500, minBackoffMs: 200, maxBackoffMs: 30000, evictedWaitMs: 300000,
      resendAfterMs: 10000, pingIntervalMs: 480000, headEvery: 3, pongTimeoutMs: 15000, replay: false, shownUpTo: 0, device: "",
      ...opts,
    } as SignetClient["o"];
    this.store = opts.store;
  }

  /**
   * Opens a client and resolves once its first connection is up (it then
   * reconnects on its own). A browser's WebSocket cannot tell a refused
   * token from a network error: connect keeps trying until `signal` aborts
   * (with `apiUrl`, onState's `refused` says why the server refuses it).
   */
  static async connect(opts: ClientOptions, signal?: AbortSignal): Promise<SignetClient> {
    if (!opts.url || !opts.token || !opts.store) throw new Error("url, token and store are required");
    const c = new SignetClient(opts);
    const up = new Promise<void>((resolve, reject) => (c.first = { resolve, reject }));
    signal?.addEventListener("abort", () => {
      c.first?.reject(signal.reason ?? new Error("aborted"));
      void c.close();
    });
    if (c.o.replay) await c.replayStored();
    c.dial();
    await up;
    return c;
  }

  /**
   * Writes a send to a store's outbox without connecting: the next client
   * on that store sends it with the same clientMsgId (as it sends whatever
   * its outbox holds). Resolves with the clientMsgId.
   */
  static async queue(store: DeviceStore, d: Draft): Promise<string> {
    const { frame, fp, deviceOnly } = await draftFrame(d);
    if (deviceOnly) await sayWhatWasSeen(store, frame, undefined);
    const { prev, pending } = await store.enqueue({ clientMsgId: frame.clientMsgId, frame, at: Date.now(), fp });
    if ((prev?.fp && prev.fp !== fp) || (pending?.fp && pending.fp !== fp)) throw reusedError();
    return frame.clientMsgId;
  }

  /** Whether a connection is up now. */
  get connected(): boolean {
    return this.session !== undefined && !this.session.ended;
  }

  /** Whether the device has caught up with its inbox since it last connected. */
  get synced(): boolean {
    return this.connected && this.isSynced;
  }

  /** The messages, each once after it is persisted, in seq order. Ends when the client closes. */
  messages(): AsyncIterableIterator<StoredMessage> {
    const it: AsyncIterableIterator<StoredMessage> = {
      next: () => {
        const m = this.queue.shift();
        if (m) return Promise.resolve({ value: m, done: false });
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => this.takers.push(resolve));
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }

  /** Calls fn for each message after it is persisted (instead of, or besides, messages()). Returns an unsubscribe function. */
  onMessage(fn: (m: StoredMessage) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** The highest seq persisted on this device. */
  async cursor(): Promise<number> {
    return (await this.store.position()).cursor;
  }

  /** Persisted messages with seq > after, ascending (limit 0: all). */
  async history(after = 0, limit = 0): Promise<StoredMessage[]> {
    return (await this.store.entries(after, limit)).map(toStored);
  }

  /** Persisted messages of read-diffused groups (seq 0): of one group with
   * convSeq > after, or of every group (conversationId ""), ascending. */
  async groupHistory(conversationId = "", after = 0, limit = 0): Promise<StoredMessage[]> {
    return (await this.store.groupMessages(conversationId, after, limit)).map((m) => toStored({ seq: 0, message: m }));
  }

  /** The highest convSeq of read-diffused group conversationId persisted on this device (0: none). */
  async groupCursor(conversationId: string): Promise<number> {
    return (await this.store.groupCursor(conversationId)).cursor;
  }

  /** The last range of inbox seqs ("from-to") that expired before this device synced them, or "". */
  skipped(): Promise<string> {
    return this.store.skipped();
  }

  /** The sends still waiting for their ACK, oldest first (they survive restarts). */
  async outbox(): Promise<QueuedSend[]> {
    return (await this.store.outbox()).map((o) => ({ clientMsgId: o.clientMsgId, body: o.frame.body, to: o.frame.to, conversationId: o.frame.conversationId }));
  }

  /** The clientMsgIds of sends still waiting for their ACK. */
  async pending(): Promise<string[]> {
    return (await this.store.outbox()).map((o) => o.clientMsgId);
  }

  /** Sends body to user `to` and resolves with the server's ACK. */
  send(to: string, body: Body): Promise<SentFrame> {
    return this.sendDraft({ to, body });
  }

  /**
   * Writes the draft to the outbox, sends it and resolves with the
   * server's ACK, or rejects with a ServerError refusal. The send stays in
   * the outbox until ACKed — across reconnects and restarts — and is
   * retried with the same clientMsgId, so the recipient gets it once.
   * opts.onQueued is called once the draft is durable in the outbox (a UI
   * shows it as pending from then on: it survives a reload).
   */
  async sendDraft(d: Draft, opts: { onQueued?: (clientMsgId: string) => void } = {}): Promise<SentFrame> {
    if (this.closed) throw new ClosedError();
    // Drafts reach the outbox in the order send was called (the
    // fingerprint's digest is asynchronous): the outbox order is the
    // order they are stored in.
    const framed = draftFrame(d);
    const queued = this.enqueued.then(async () => {
      const { frame, fp, deviceOnly } = await framed;
      if (deviceOnly) await sayWhatWasSeen(this.store, frame, this.me);
      return { frame, fp, ...(await this.store.enqueue({ clientMsgId: frame.clientMsgId, frame, at: Date.now(), fp })) };
    });
    this.enqueued = queued.catch(() => {});
    const { frame, fp } = await framed;
    const clientMsgId = frame.clientMsgId;
    const result = new Promise<SentFrame>((resolve, reject) => {
      const ws = this.sendWaiters.get(clientMsgId) ?? [];
      ws.push({ resolve, reject });
      this.sendWaiters.set(clientMsgId, ws);
    });
    const { prev, pending } = await queued;
    if ((prev && prev.fp && prev.fp !== fp) || (pending && pending.fp && pending.fp !== fp)) {
      this.resolveSend(clientMsgId, undefined, reusedError());
    } else if (prev) {
      this.resolveSend(clientMsgId, prev.sent);
    } else {
      opts.onQueued?.(clientMsgId);
      this.run(async (s) => this.flushOutbox(s));
    }
    return result;
  }

  /**
   * Moves this user's read watermark of a conversation to upTo (a convSeq).
   * In an app's alert conversation (a:<app>) pass inboxSeq too, the seq of
   * the newest of its alerts shown: an alert can reach the inbox after a
   * later one of its app (a retried post, an escalation), with a convSeq
   * below the watermark, and only its inbox seq marks it read.
   */
  async markRead(conversationId: string, upTo: number, inboxSeq?: number): Promise<void> {
    const frame: ReadFrame = inboxSeq ? { action: "read", conversationId, upTo, inboxSeq } : { action: "read", conversationId, upTo };
    await this.write(frame, () => this.noteRead(frame));
  }

  /** Keeps read frame f, just written (the conversation's highest), until a pong confirms it. */
  private noteRead(f: ReadFrame): void {
    const old = this.reads.get(f.conversationId);
    if (!old || old.frame.upTo <= f.upTo) this.reads.set(f.conversationId, { frame: f, at: Date.now(), confirmed: false });
  }

  /**
   * Answers an alert that asks for one (its body's ack.options): once,
   * forward-only. Resolves with the answer that stands (the same answer
   * again resolves as the first did); another option, or another
   * recipient's first answer where the first answer wins, rejects with a
   * ServerError conflict naming it.
   */
  answer(messageId: string, option: string): Promise<AnswerResultFrame> {
    return this.request<AnswerResultFrame>({ action: "answer", messageId, option });
  }

  /**
   * Registers this device for wake-ups while it has no connection: its
   * APNs ("apns", "apns_sandbox") or FCM ("fcm") token, which the server
   * hands to Amazon SNS. A wake-up carries ids only: the app connects and
   * syncs. An empty token removes the registration (sign-out); a platform
   * the deployment lacks rejects with a ServerError bad_request. The
   * registration whose frame the server received last stands: a later
   * register before this one is answered supersedes it (SupersededError).
   */
  register(platform: "apns" | "apns_sandbox" | "fcm", token: string): Promise<RegisteredFrame> {
    return this.request<RegisteredFrame>({ action: "register", platform, token });
  }

  /** Who has message convSeq of a conversation delivered and read. */
  receipts(conversationId: string, convSeq: number): Promise<ReceiptsAnswerFrame> {
    return this.request<ReceiptsAnswerFrame>({ action: "receipts", conversationId, convSeq });
  }

  /**
   * Creates a group with this user as owner and `members` as members. Without a `conversationId` the SDK makes
   * a new one, so that a create asked again (its answer lost with a connection) is answered as the first.
   */
  createGroup(name: string, members: string[], conversationId?: string): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "create", name, users: members, conversationId: conversationId ?? newGroupId() });
  }

  // The group changes below carry an op id made here: the SDK asks a query again (its connection was lost, API
  // Gateway answered a frame with its error, or the server answered it internal or rate_limited), and a change
  // asked again is answered as the first time — `changed` lists the users it changed, and they are told again —
  // though its first invocation stored it and failed after.

  addMembers(conversationId: string, users: string[], role?: Role): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "add", conversationId, users, ...(role ? { role } : {}), opId: newClientMsgId() });
  }

  removeMembers(conversationId: string, users: string[]): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "remove", conversationId, users, opId: newClientMsgId() });
  }

  leaveGroup(conversationId: string): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "leave", conversationId, opId: newClientMsgId() });
  }

  setRole(conversationId: string, users: string[], role: Role): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "role", conversationId, users, role, opId: newClientMsgId() });
  }

  members(conversationId: string): Promise<GroupInfoFrame> {
    return this.group({ action: "group", op: "members", conversationId });
  }

  private group(f: GroupFrame): Promise<GroupInfoFrame> {
    return this.request<GroupInfoFrame>(f);
  }

  /**
   * Chooses this user's display state; resolves with what others now see (the state whose frame the server
   * received last, from any of the user's devices, stands). Rejects with SupersededError when a later
   * setPresence was called before this one was answered.
   */
  async setPresence(status: "online" | "away" | "dnd" | "invisible"): Promise<string> {
    const p = await this.request<PresenceAnswerFrame>({ action: "presence", status });
    return p.users[0]?.status ?? "";
  }

  /** What users show to others (online, away, dnd or offline). */
  async queryPresence(users: string[]): Promise<Record<string, string>> {
    const p = await this.request<PresenceAnswerFrame>({ action: "presence.query", users });
    return Object.fromEntries(p.users.map((u) => [u.userId, u.status]));
  }

  /** Every conversation of this user with unread counts, previews and watermarks. */
  async summary(): Promise<ConversationSummary[]> {
    const out: ConversationSummary[] = [];
    let after: string | undefined;
    for (;;) {
      const p: SummaryPageFrame = await this.request<SummaryPageFrame>({ action: "summary", limit: 200, ...(after ? { after } : {}) });
      out.push(...p.conversations);
      if (!p.next) return out;
      after = p.next;
    }
  }

  /** A page of a conversation's log on the server (before 0: the newest). */
  conversationHistory(conversationId: string, before = 0, limit = 50): Promise<HistoryPageFrame> {
    return this.request<HistoryPageFrame>({ action: "history", conversationId, limit, ...(before > 0 ? { before } : {}) });
  }

  /**
   * Stops the client: acks what is persisted, closes the connection and
   * the store. Pending sends stay in the outbox for the next connect.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    const s = this.session;
    if (s && !s.ended && !this.crashed) {
      await this.run(async (s) => this.ack(s, true)).catch(() => {});
    }
    await this.shutdown(new ClosedError("client closed; sends stay in the outbox"));
    await this.serial; // a store step under way (a session starting or ending) finishes first
    await this.store.close();
  }

  /** Stops everything at once, as a killed process would: nothing more is written. */
  private async crash(): Promise<void> {
    this.crashed = true;
    await this.shutdown(new ClosedError("client crashed (fault injection)"));
  }

  private async shutdown(err: Error): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    if (this.session) this.endSession(this.session);
    this.first?.reject(err);
    for (const [id, ws] of this.sendWaiters) {
      this.sendWaiters.delete(id);
      for (const w of ws) w.reject(err);
    }
    this.turns.clear();
    for (const [ref, q] of this.queries) {
      this.queries.delete(ref);
      q.waiter.reject(err);
    }
    for (const t of this.takers.splice(0)) t({ value: undefined, done: true });
  }

  // ---- connection ----

  private log(level: "debug" | "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>): void {
    this.o.log?.(level, msg, fields);
  }

  private async url(): Promise<{ url: string; token: string }> {
    const token = typeof this.o.token === "string" ? this.o.token : await this.o.token();
    const u = new URL(this.o.url);
    u.searchParams.set("token", token);
    if (this.o.device) u.searchParams.set("deviceId", this.o.device);
    return { url: u.toString(), token };
  }

  private dial(): void {
    if (this.closed) return;
    void this.url().then(({ url, token }) => {
      if (this.closed) return;
      const WS = this.o.WebSocket ?? (globalThis as unknown as { WebSocket?: WebSocketConstructor }).WebSocket;
      if (!WS) throw new Error("no WebSocket: pass options.WebSocket (Node 20: run with --experimental-websocket, or use the ws package)");
      const ws = new WS(url);
      let opened = false;
      ws.onopen = () => {
        opened = true;
        this.failedConnects = 0;
        this.refused = undefined;
        void this.run(async () => this.startSession(ws), true);
      };
      ws.onmessage = (ev) => {
        const s = this.session;
        if (!s || s.ws !== ws || s.ended) return;
        const text = typeof ev.data === "string" ? ev.data : String(ev.data);
        this.run(async (s) => this.handle(s, text));
      };
      // A handshake that fails is counted and retried once: browsers fire
      // error and then close for it, Node 20's WebSocket only error.
      let failed = false;
      const handshakeFailed = (fields: Record<string, unknown>) => {
        if (opened || failed) return;
        failed = true;
        this.connectFailed(fields, token);
      };
      ws.onclose = (ev) => {
        const s = this.session;
        if (s && s.ws === ws) {
          this.log("info", "connection lost", { code: ev.code, reason: ev.reason });
          this.run(async () => this.sessionEnded(s), true);
        } else {
          handshakeFailed({ code: ev.code });
        }
      };
      ws.onerror = () => handshakeFailed({ error: "handshake refused or network error" });
    }).catch((err) => {
      this.connectFailed({ err: String(err) });
    });
  }

  private scheduleReconnect(wait: number): void {
    if (this.closed) return;
    const ceiling = Math.min(this.o.maxBackoffMs, this.o.minBackoffMs * 2 ** Math.min(this.attempt, 20));
    const delay = Math.max(Math.random() * ceiling + 1, wait);
    this.attempt++;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.dial(), delay);
  }

  /**
   * Runs fn with the current session, one at a time (store steps never
   * interleave). anySession runs it even when no session is up.
   */
  private run(fn: (s: Session) => Promise<void>, anySession = false): Promise<void> {
    const next = this.serial.then(async () => {
      const s = this.session;
      if (this.closed || ((!s || s.ended) && !anySession)) return;
      try {
        await fn(s!);
      } catch (err) {
        if (err instanceof Crash) {
          await this.crash();
          return;
        }
        this.log("warn", "session ended", { err: String(err) });
        if (s && !s.ended) s.ws.close();
      }
    });
    this.serial = next.catch(() => {});
    return next;
  }

  private async startSession(ws: WebSocketLike): Promise<void> {
    if (this.closed) {
      ws.close();
      return;
    }
    const { cursor, epoch } = await this.store.position();
    const now = Date.now();
    const s: Session = {
      ws, cursor, epoch, lastAck: 0, needAck: cursor, forceAck: false, own: new Map(), unacked: 0, syncedUnacked: 0,
      pushWaiting: false, pushedAt: 0, pushTimeoutMs: 0, syncing: false, syncAt: 0, syncSent: 0, syncRef: "", againAt: 0, lastRecv: now, pingSent: 0, pings: [],
      ticks: 0, resyncAgain: false, behindAt: 0, behindHead: 0, sentAt: new Map(), reconnectAfter: 0, timers: [], ended: false,
      groups: new Map(),
    };
    this.session = s;
    this.startedAt = now;
    this.log("info", "connected", { cursor });
    this.first?.resolve();
    this.first = undefined;
    this.state();
    s.timers.push(
      setInterval(() => this.run(async (s) => this.housekeeping(s)), housekeepingMs),
      setInterval(() => this.run(async (s) => this.checkAlive(s).then(() => this.flushOutbox(s))), 1000),
      setInterval(() => this.run(async (s) => this.keepAlive(s)), this.o.pingIntervalMs),
    );
    this.requestSync(s, s.cursor);
    await this.flushOutbox(s);
    // Queries that waited for a connection, or whose connection was lost, go out now (those a rate limit
    // holds, when it ends).
    for (const [ref, q] of [...this.queries]) {
      if (q.heldUntil > Date.now()) continue;
      this.writeQuery(s, ref, q);
    }
    // So do the reads the lost connection may not have delivered (forward-only: once more changes nothing).
    this.readAgain(s, (r) => !r.confirmed);
  }

  private startedAt = 0;

  /** Handshakes that failed in a row since the last connection opened. */
  private failedConnects = 0;

  private state(): void {
    this.o.onState?.({ connected: this.connected, synced: this.synced, failedConnects: this.failedConnects, ...(this.refused ? { refused: this.refused } : {}) });
  }

  /** Why the server refuses the handshakes (GET /v1/handshake), while they fail; undefined when unknown or none. */
  private refused?: HandshakeRefusal;

  /**
   * A handshake failed before its connection opened: count it, ask the HTTP API why (with apiUrl; token is the
   * one it used), say so, and try again — after a rate limit's retryAfterMs, or maxBackoffMs when trying again
   * soon cannot help.
   */
  private connectFailed(fields: Record<string, unknown>, token?: string): void {
    this.failedConnects++;
    this.log("warn", "connect failed", { ...fields, attempt: this.attempt, failedConnects: this.failedConnects });
    if (!this.o.apiUrl || token === undefined) {
      this.state();
      this.scheduleReconnect(0);
      return;
    }
    void this.askWhyRefused(token).then((refusal) => {
      if (this.closed) return;
      this.refused = refusal;
      if (refusal) this.log("warn", "the server refuses the handshake", { ...refusal });
      this.state();
      let wait = refusal?.retryAfterMs ?? 0;
      // Trying again soon cannot help a malformed device id, a device beyond the limit, or a refused token
      // that is a string (a function is asked for a new one at the next handshake).
      const tokenRefused = refusal?.status === 401 && typeof this.o.token === "string";
      if (refusal?.status === 400 || refusal?.status === 409 || tokenRefused) wait = this.o.maxBackoffMs;
      this.scheduleReconnect(wait);
    });
  }

  /** Asks GET /v1/handshake what the handshake with token meets: undefined when it would be admitted, or no answer came. */
  private async askWhyRefused(token: string): Promise<HandshakeRefusal | undefined> {
    const base = this.o.apiUrl!.endsWith("/") ? this.o.apiUrl! : this.o.apiUrl + "/";
    try {
      const u = new URL("v1/handshake", base);
      u.searchParams.set("token", token);
      if (this.o.device) u.searchParams.set("deviceId", this.o.device);
      const r = await fetch(u, { signal: AbortSignal.timeout(handshakeCheckMs) });
      // Only the check's own refusals: a stack without the route (404), or one that failed (5xx), says nothing.
      if (!refusalStatuses.includes(r.status)) return undefined;
      const e = ((await r.json()) as { error?: { code?: unknown; message?: unknown; retryAfterMs?: unknown } }).error ?? {};
      return {
        status: r.status, code: String(e.code ?? ""), message: String(e.message ?? ""),
        ...(typeof e.retryAfterMs === "number" ? { retryAfterMs: e.retryAfterMs } : {}),
      };
    } catch (err) {
      this.log("info", "the handshake check did not answer", { err: String(err) });
      return undefined;
    }
  }

  private endSession(s: Session): void {
    if (s.ended) return;
    s.ended = true;
    for (const t of s.timers) clearInterval(t);
    try {
      s.ws.close();
    } catch {
      // closing a socket that never opened
    }
  }

  private async sessionEnded(s: Session): Promise<void> {
    if (s.ended) return;
    this.endSession(s);
    this.isSynced = false;
    this.state();
    if (this.closed) return;
    if (Date.now() - this.startedAt > 10000) this.attempt = 0;
    this.scheduleReconnect(s.reconnectAfter);
  }

  private writeFrame(s: Session, f: ClientFrame): void {
    this.o.onFrame?.("out", f);
    s.ws.send(JSON.stringify(f));
  }

  /** Writes a frame on the current connection, waiting for one; written runs once it is. */
  private write(f: ClientFrame, written?: () => void): Promise<void> {
    if (this.closed) return Promise.reject(new ClosedError());
    return new Promise((resolve, reject) => {
      let done = false;
      const attempt = (): void => {
        void this.run(async (s) => {
          this.writeFrame(s, f);
          written?.();
          done = true;
          resolve();
        }).then(() => {
          if (done) return;
          if (this.closed) reject(new ClosedError());
          else setTimeout(attempt, 50);
        });
      };
      attempt();
    });
  }

  /** Sends a query with a fresh ref and resolves with its answer (re-sent on the next connection if this one is lost). */
  private request<T>(f: ClientFrame): Promise<T> {
    if (this.closed) return Promise.reject(new ClosedError());
    const n = ++this.refs;
    const ref = `q${n}`;
    const frame = { ...f, ref } as ClientFrame;
    return new Promise<T>((resolve, reject) => {
      const state = stateOf(frame);
      const q: Query = { n, state, frame, waiter: { resolve: resolve as (v: unknown) => void, reject }, written: false, writtenAt: 0, retries: 0, heldUntil: 0 };
      this.queries.set(ref, q);
      if (state) this.latestState.set(state, n);
      const hold = this.holds.get(limitKind(frame)) ?? 0;
      if (hold > Date.now()) {
        q.heldUntil = hold;
        setTimeout(() => this.writeHeld(ref, q), hold - Date.now());
        return;
      }
      void this.run(async (s) => {
        if (!q.written) this.writeQuery(s, ref, q);
      });
    });
  }

  /** Writes query q (ref) once its rate limit's hold has ended, unless it was answered or dropped meanwhile. */
  private writeHeld(ref: string, q: Query): void {
    if (this.queries.get(ref) !== q) return;
    q.heldUntil = 0;
    void this.run(async (s) => this.writeQuery(s, ref, q));
  }

  /**
   * Writes query q (ref), unless a later query sets the state it sets (SupersededError: written now, it would be
   * received after the later one and undo it) or it was answered meanwhile. A state query waits its turn: until
   * the one before it of its kind that went out settles, or stateGapMs after that one's last write.
   */
  private writeQuery(s: Session, ref: string, q: Query): void {
    if (this.queries.get(ref) !== q) return;
    if (q.state && (this.latestState.get(q.state) ?? 0) > q.n) {
      this.settle(ref, q);
      q.waiter.reject(new SupersededError());
      return;
    }
    let last = -Infinity;
    for (const p of this.queries.values()) if (q.state && p.state === q.state && p.n < q.n && p.written) last = Math.max(last, p.writtenAt);
    if (last + stateGapMs > Date.now()) {
      const turn = () => {
        if (this.turns.get(q.state) !== turn) return;
        this.turns.delete(q.state);
        clearTimeout(timer);
        // Unless askAgain wrote it meanwhile (the one before settled in its round).
        void this.run(async (s2) => {
          if (!q.written) this.writeQuery(s2, ref, q);
        });
      };
      const timer = setTimeout(turn, last + stateGapMs - Date.now());
      this.turns.set(q.state, turn);
      return;
    }
    q.written = true;
    q.writtenAt = Date.now();
    this.writeFrame(s, q.frame);
  }

  /** Forgets query q (ref), answered or given up, and lets the state query waiting behind it go (writeQuery). */
  private settle(ref: string, q: Query): void {
    this.queries.delete(ref);
    if (q.state) this.turns.get(q.state)?.();
  }

  // ---- frames ----

  private async handle(s: Session, text: string): Promise<void> {
    s.lastRecv = Date.now();
    s.pingSent = 0;
    let f: ServerFrame;
    try {
      f = JSON.parse(text);
    } catch {
      this.log("warn", "unreadable frame");
      return;
    }
    this.o.onFrame?.("in", f);
    const ref = "ref" in f ? f.ref : undefined;
    const q = ref ? this.queries.get(ref) : undefined;
    if (ref && q) {
      if ("type" in f && f.type === "error") {
        const e = f as ErrorFrame;
        if ((e.code === "internal" || e.code === "rate_limited") && q.retries < queryRetries) {
          // Every query is safe to repeat (a group create names its id, a group change carries an op id: sent
          // again, either is answered as the first though the failed invocation had stored it).
          q.retries++;
          const kind = limitKind(q.frame);
          if (e.code === "rate_limited") this.hold(kind, Date.now() + (e.retryAfterMs ?? 0));
          const waitMs = Math.max(1000, e.retryAfterMs ?? 0, (this.holds.get(kind) ?? 0) - Date.now());
          this.log("info", "query failed; asking again", { code: e.code, waitMs, requestId: e.requestId });
          q.heldUntil = Date.now() + waitMs;
          setTimeout(() => this.writeHeld(ref, q), waitMs);
          return;
        }
        this.settle(ref, q);
        q.waiter.reject(new ServerError(e.code, e.message, e.requestId, e.retryAfterMs));
      } else {
        this.settle(ref, q);
        q.waiter.resolve(f);
      }
      return;
    }
    if (!("type" in f)) {
      if (typeof f.message === "string") this.gatewayError(s, f.message);
      return;
    }
    switch (f.type) {
      case "membership":
        this.o.onMembership?.(f);
        // Added to a group under read diffusion: pull it up to the head the
        // notice names (a message stored just before may not have been pushed here).
        if (f.change === "added" && f.head !== undefined) await this.pullGroups(s, [{ conversationId: f.conversationId, head: f.head }]);
        return;
      case "presence":
        for (const u of f.users) this.o.onPresence?.(u.userId, u.status);
        return;
      case "message":
        if (f.renotify && f.seq <= s.cursor && this.o.onRenotify) {
          const [e] = await this.store.entries(f.seq - 1, 1);
          if (e?.seq === f.seq) this.o.onRenotify(toStored(e));
        }
        return this.apply(s, { seq: f.seq, message: f.message }, "pushed");
      case "sync":
        // The groups first: the client counts as synced once they are too.
        await this.pullGroups(s, f.groups);
        return this.page(s, f);
      case "groupMessage":
        return this.groupPush(s, f.message, f.proof);
      case "groupSync":
        return this.groupPage(s, f);
      case "sent": {
        s.sentAt.delete(f.clientMsgId);
        if (f.message && f.conversationId.startsWith("d:")) this.me = f.message.from; // the sender of a 1:1 ACK is this user
        await this.store.settle(f.clientMsgId, f);
        this.resolveSend(f.clientMsgId, f);
        this.o.onSent?.(f);
        if (f.seq && f.message && f.seq > s.cursor) {
          s.own.set(f.seq, { seq: f.seq, message: f.message });
          await this.applyOwn(s);
        }
        if (!f.seq && f.message) await this.groupOwn(s, f.message, f.proof);
        return this.flushOutbox(s); // the next send of that conversation may go now
      }
      case "receipt":
        this.o.onReceipt?.(f);
        return;
      case "read":
        this.o.onRead?.(f.conversationId, f.upTo, f.inboxSeq);
        return;
      case "answer":
        this.o.onAnswer?.(f);
        return;
      case "pong":
      case "notify":
        if (f.type === "pong" && s.pings.length > 0) {
          // The server had what was written before the oldest unanswered ping (pongs may come out of order).
          const t = s.pings.shift() as number;
          for (const [conv, r] of this.reads) {
            if (r.at < t - errorWindowMs) this.reads.delete(conv);
            else if (r.at < t) r.confirmed = true;
          }
        }
        await this.pullGroups(s, f.groups);
        return this.headSeen(s, f.type, f.head, f.epoch);
      case "error":
        return this.serverError(s, f);
    }
  }

  /** Asks the sync whose invocation failed (an internal error frame with its ref) again in a second, if it is still
   * in flight. */
  private syncFailed(s: Session, ref: string): void {
    this.log("warn", "sync failed; asking again", { ref });
    if (s.syncing && s.syncRef === ref && !s.syncAt) s.syncAt = Date.now() + 1000;
    const soon = Date.now() + 1000 - groupSyncRetryMs;
    for (const g of s.groups.values()) if (g.syncing && g.syncRef === ref && g.syncSent > soon) g.syncSent = soon;
  }

  /** API Gateway's own answer to a failed invocation: retry whatever was in flight (sends, the inbox and group syncs; the acks, queries and recent reads a second later, in one round). */
  private gatewayError(s: Session, message: string): void {
    this.log("warn", "gateway error; retrying what is in flight", { message });
    const retry = Date.now() + 1000 - this.o.resendAfterMs;
    for (const [id, at] of s.sentAt) if (at > retry) s.sentAt.set(id, retry);
    if (s.syncing && !s.syncAt) s.syncAt = Date.now() + 1000;
    // Unanswered group syncs are asked for again in a second, not after groupSyncRetryMs.
    const soon = Date.now() + 1000 - groupSyncRetryMs;
    for (const g of s.groups.values()) if (g.syncing && g.syncSent > soon) g.syncSent = soon;
    // A second later, once for every error frame in it: written again at each, k frames failing under a
    // throttle would come back as k error frames and k² frames.
    this.writeAgain(s, 1000);
  }

  /**
   * Has written again after waitMs what went out and may be the frame that failed: the acks (the inbox's and the
   * groups' acked within errorWindowMs), the recent reads and the unanswered queries (askAgain). Written again at
   * every error frame, an ack would go ten times a second for as long as a throttle lasts: a round already due
   * stays as it is unless waitMs is later (a rate limit's), so error frames arriving every second do not keep
   * putting it off.
   */
  private writeAgain(s: Session, waitMs: number): void {
    const at = Date.now() + waitMs;
    if (!s.againAt || (waitMs > 1000 && at > s.againAt)) s.againAt = at;
  }

  /** Writes again the unanswered queries and the reads of the last errorWindowMs (after a gateway error). */
  private askAgain(s: Session): void {
    for (const [ref, q] of [...this.queries]) if (q.heldUntil <= Date.now()) this.writeQuery(s, ref, q);
    const recent = Date.now() - errorWindowMs;
    this.readAgain(s, (r) => r.at >= recent);
  }

  /**
   * Writes again the reads that keep says may not have reached the server (forward-only: once more moves
   * nothing). Each says "again": a read whose first invocation failed after storing the watermark is then told
   * to the peer and the other devices (a read that moves nothing otherwise tells no one).
   */
  private readAgain(s: Session, keep: (r: { at: number; confirmed: boolean }) => boolean): void {
    for (const r of [...this.reads.values()]) {
      if (!keep(r)) continue;
      this.writeFrame(s, { ...r.frame, again: true });
      this.noteRead(r.frame);
    }
  }

  private async headSeen(s: Session, typ: "pong" | "notify", head: number, epoch: string): Promise<void> {
    const restarted = epoch !== "" && s.epoch !== "" && epoch !== s.epoch;
    if (restarted || s.cursor > head) {
      this.log("warn", "the inbox sequence restarted on the server; resyncing", { cursor: s.cursor, head, epoch });
      return this.resync(s, epoch);
    }
    if (head <= s.cursor || s.syncing) return;
    if (typ === "notify") {
      this.log("info", "server gave up pushing; syncing", { cursor: s.cursor, head });
      this.requestSync(s, s.cursor);
      return;
    }
    if (!s.behindAt || head > s.behindHead) {
      s.behindAt = Date.now();
      s.behindHead = head;
    }
  }

  private async resync(s: Session, epoch: string): Promise<void> {
    await this.store.reset(epoch);
    Object.assign(s, { epoch, cursor: 0, lastAck: 0, needAck: 0, own: new Map(), behindAt: 0 });
    this.requestSync(s, 0);
  }

  private requestSync(s: Session, cursor: number): void {
    s.syncing = true;
    s.syncSent = Date.now();
    s.syncRef = `${inboxSyncRef}${++this.refs}`;
    this.writeFrame(s, { action: "sync", cursor, limit: 100, ref: s.syncRef });
  }

  private async apply(s: Session, e: Entry, src: "pushed" | "synced"): Promise<void> {
    await this.applyOwn(s);
    await this.applyOne(s, e, src);
    await this.applyOwn(s);
  }

  /** Applies this device's own held entries (from "sent") that are next in line. */
  private async applyOwn(s: Session): Promise<void> {
    for (;;) {
      if (s.epoch === "" && s.syncing) return; // the sync in flight tells the epoch first
      const e = s.own.get(s.cursor + 1);
      if (!e) return;
      s.own.delete(e.seq);
      await this.applyOne(s, e, "own");
    }
  }

  private crashPoint(p: CrashPoint, seq: number): void {
    if (this.o.crashAt?.(p, seq)) throw new Crash(p);
  }

  private async applyOne(s: Session, e: Entry, src: "pushed" | "synced" | "own"): Promise<void> {
    if (src === "pushed" && s.epoch === "" && s.syncing) {
      // The epoch is not known yet: taking a push now could stack a new
      // sequence on a stale cursor. The sync in flight tells it; one more
      // sync then fetches this entry.
      s.resyncAgain = true;
      return;
    }
    if (e.seq <= s.cursor) {
      if (src !== "own") s.forceAck = true; // a duplicate: the server may have missed our ack
      return;
    }
    if (e.seq > s.cursor + 1) {
      if (!s.syncing) this.requestSync(s, s.cursor); // a gap: nothing past it until a sync fills it
      return;
    }
    this.crashPoint("before-persist", e.seq);
    const { applied, known } = await this.store.apply(e);
    if (!applied) return;
    s.cursor = e.seq;
    if (src !== "own") s.needAck = e.seq;
    this.crashPoint("after-persist", e.seq);
    if (!known) this.emit(toStored(e)); // else: shown before a resync
    if (src === "own") return;
    if (src === "synced") {
      if (++s.syncedUnacked >= this.o.syncAckBatch) await this.ack(s);
      return;
    }
    if (!s.pushWaiting) {
      s.pushWaiting = true;
      s.pushedAt = Date.now();
    }
    if (++s.unacked >= this.o.ackBatch) await this.ack(s);
  }

  private emit(m: StoredMessage): void {
    for (const fn of this.listeners) {
      try {
        fn(m);
      } catch (err) {
        this.log("error", "message listener threw", { err: String(err) });
      }
    }
    const t = this.takers.shift();
    if (t) t({ value: m, done: false });
    else this.queue.push(m);
  }

  private async replayStored(): Promise<void> {
    for (const e of await this.store.entries(this.o.shownUpTo)) this.emit(toStored(e));
    const shown = this.o.shownGroups ?? {};
    for (const m of await this.store.groupMessages("")) if (m.convSeq > (shown[m.conversationId] ?? 0)) this.emit(toStored({ seq: 0, message: m }));
  }

  private async page(s: Session, p: SyncPageFrame): Promise<void> {
    if (p.pushTimeoutMs) s.pushTimeoutMs = p.pushTimeoutMs;
    if (p.epoch && s.epoch !== p.epoch && (s.epoch !== "" || s.cursor > 0)) {
      this.log("warn", "inbox epoch changed; resyncing from scratch", { old: s.epoch, new: p.epoch, cursor: s.cursor });
      return this.resync(s, p.epoch);
    }
    if (p.head < s.cursor) {
      this.log("warn", "local cursor is beyond the inbox head; resyncing from scratch", { cursor: s.cursor, head: p.head });
      return this.resync(s, p.epoch);
    }
    if (p.epoch !== s.epoch) {
      await this.store.setEpoch(p.epoch);
      s.epoch = p.epoch;
    }
    if (p.truncated && p.firstSeq && p.firstSeq > s.cursor + 1) {
      this.log("warn", "inbox entries expired before this device synced them", { from: s.cursor + 1, to: p.firstSeq - 1 });
      await this.store.skip(s.cursor, p.firstSeq - 1);
      s.cursor = p.firstSeq - 1;
    }
    for (const e of p.messages) await this.apply(s, e, "synced");
    if (p.hasMore) {
      this.requestSync(s, p.nextCursor);
      return;
    }
    s.syncing = false;
    // This device's own entries that came in "sent" while the inbox's epoch
    // was unknown waited for this page (a page answered before the send was
    // stored can come after its "sent"): next in line now.
    await this.applyOwn(s);
    if (s.cursor < p.head || s.resyncAgain) {
      s.resyncAgain = false;
      this.requestSync(s, s.cursor);
      return;
    }
    this.markSynced(s);
    await this.ack(s);
  }

  /** Counts the client as synced once neither the inbox nor a group sync is under way. */
  private markSynced(s: Session): void {
    if (this.isSynced || s.syncing || [...s.groups.values()].some((g) => g.syncing)) return;
    this.isSynced = true;
    this.state();
  }

  // ---- groups under read diffusion (docs/proposal-group-read-diffusion.md) ----

  /** The session's state of a group, loading its stored cursor (known false: never pulled). */
  private async groupState(s: Session, conv: string): Promise<{ g: GroupState; known: boolean }> {
    const have = s.groups.get(conv);
    if (have) return { g: have, known: true };
    const { cursor, known } = await this.store.groupCursor(conv);
    const g: GroupState = { cursor, lastAck: cursor, needAck: cursor, behind: 0, own: 0, forceAck: false, ackedAt: 0, syncing: false, syncSent: 0, syncRef: "", proof: "", proofAt: 0 };
    if (known) s.groups.set(conv, g);
    return { g, known };
  }

  /** Holds the frames of kind until until (a later hold stands); returns the hold. */
  private hold(kind: string, until: number): number {
    const h = Math.max(this.holds.get(kind) ?? 0, until);
    this.holds.set(kind, h);
    return h;
  }

  /** Pulls conv above the group's cursor (one group sync at a time); while group syncs are held, only marks it
   * as syncing, to be asked when the hold ends. */
  private requestGroupSync(s: Session, conv: string, g: GroupState): void {
    if (g.syncing && Date.now() - g.syncSent < groupSyncRetryMs) return;
    s.groups.set(conv, g);
    g.syncing = true;
    const hold = this.holds.get("query") ?? 0;
    if (Date.now() < hold) {
      g.syncSent = hold - groupSyncRetryMs;
      return;
    }
    g.syncSent = Date.now();
    g.syncRef = `${groupSyncRef}${++this.refs}`;
    this.writeFrame(s, { action: "sync", conversationId: conv, cursor: g.cursor, limit: 100, ref: g.syncRef });
  }

  /** Holds the client's queries, group syncs among them, for waitMs after a group sync was refused
   * rate_limited (limitKind): the unanswered ones are asked again when the hold ends, as are those asked for
   * meanwhile. */
  private holdGroupSyncs(s: Session, waitMs: number): void {
    const hold = this.hold("query", Date.now() + waitMs);
    for (const g of s.groups.values()) if (g.syncing) g.syncSent = hold - groupSyncRetryMs;
  }

  /** Applies a pushed group message next in line; a gap, or a group never
   * pulled here, is pulled first; a duplicate asks for an ack. */
  private async groupPush(s: Session, m: Message, proof?: string): Promise<void> {
    const { g, known } = await this.groupState(s, m.conversationId);
    if (known && m.convSeq <= g.cursor) {
      g.forceAck = true;
      return;
    }
    if (!known || m.convSeq > g.cursor + 1 || g.syncing) {
      g.behind = Math.max(g.behind, m.convSeq);
      this.requestGroupSync(s, m.conversationId, g);
      return;
    }
    await this.applyGroupMessage(g, m, false);
    if (proof && g.cursor === m.convSeq) Object.assign(g, { proof, proofAt: m.convSeq });
    if (!s.pushWaiting) {
      s.pushWaiting = true;
      s.pushedAt = Date.now();
    }
    if (++s.unacked >= this.o.ackBatch) await this.ack(s);
  }

  /** Applies this device's own message of a group under read diffusion,
   * which came in "sent" (the send's ownFromSent) instead of as a push: as
   * a push would be, but with no ack of its own (the group's next ack,
   * cumulative, covers it). Out of order it is pulled; the group's first
   * message needs no pull (nothing is before it). */
  private async groupOwn(s: Session, m: Message, proof?: string): Promise<void> {
    const { g, known } = await this.groupState(s, m.conversationId);
    if (known && m.convSeq <= g.cursor) return;
    const first = !known && m.convSeq === 1 && !g.syncing;
    if (!first && (!known || m.convSeq > g.cursor + 1 || g.syncing)) {
      g.behind = Math.max(g.behind, m.convSeq);
      g.own = Math.max(g.own, m.convSeq);
      this.requestGroupSync(s, m.conversationId, g);
      return;
    }
    if (first) s.groups.set(m.conversationId, g);
    const needAck = g.needAck;
    await this.applyGroupMessage(g, m, first);
    g.needAck = needAck;
    if (proof && g.cursor === m.convSeq) Object.assign(g, { proof, proofAt: m.convSeq });
  }

  /** Persists m (message and group cursor in one store step) and emits it. */
  private async applyGroupMessage(g: GroupState, m: Message, synced: boolean): Promise<void> {
    if (!(await this.store.applyGroup(m, synced))) return;
    g.cursor = m.convSeq;
    g.needAck = m.convSeq;
    this.emit(toStored({ seq: 0, message: m }));
  }

  /** Applies one page of a group sync; the last one is acked. */
  private async groupPage(s: Session, p: GroupSyncPageFrame): Promise<void> {
    if (p.pushTimeoutMs) s.pushTimeoutMs = p.pushTimeoutMs;
    const { g } = await this.groupState(s, p.conversationId);
    for (const m of p.messages) await this.applyGroupMessage(g, m, true);
    if (p.messages.length === 0) {
      // Nothing due above the cursor (or it all expired): the group is known from here.
      const cursor = Math.max(g.cursor, p.nextCursor);
      await this.store.markGroupKnown(p.conversationId, cursor);
      g.cursor = cursor;
    }
    if (p.proof && p.messages.length > 0 && g.cursor === p.nextCursor) Object.assign(g, { proof: p.proof, proofAt: p.nextCursor });
    s.groups.set(p.conversationId, g);
    g.syncing = false;
    if (p.hasMore || g.cursor < Math.max(Math.min(g.behind, p.head), g.own)) {
      this.requestGroupSync(s, p.conversationId, g);
      return;
    }
    this.markSynced(s);
    await this.ack(s);
  }

  /** Pulls the groups a sync page or notify names that this device is behind in or has never pulled. */
  private async pullGroups(s: Session, heads: GroupHead[] | undefined): Promise<void> {
    for (const h of heads ?? []) {
      const { g, known } = await this.groupState(s, h.conversationId);
      if (known && h.head <= g.cursor) continue;
      if (this.isSynced) {
        this.isSynced = false;
        this.state();
      }
      g.behind = Math.max(g.behind, h.head);
      this.requestGroupSync(s, h.conversationId, g);
    }
  }

  /** Acks every group with something applied since its last ack (or a duplicate push). */
  private ackGroups(s: Session): void {
    for (const [conv, g] of s.groups) {
      if (g.needAck <= g.lastAck && !g.forceAck) continue;
      this.writeFrame(s, { action: "ack", conversationId: conv, upTo: g.cursor, ...(g.proofAt === g.cursor && g.proof ? { proof: g.proof } : {}) });
      g.lastAck = g.cursor;
      g.forceAck = false;
      g.ackedAt = Date.now();
    }
  }

  /** Asks again for group syncs unanswered for groupSyncRetryMs. */
  private retryGroupSyncs(s: Session): void {
    for (const [conv, g] of s.groups) if (g.syncing && Date.now() - g.syncSent >= groupSyncRetryMs) this.requestGroupSync(s, conv, g);
  }

  private ackWindow(s: Session): number {
    return Math.min(this.o.ackIntervalMs, ((s.pushTimeoutMs || 5000) * 2) / 5);
  }

  private async housekeeping(s: Session): Promise<void> {
    const now = Date.now();
    const again = s.againAt > 0 && now > s.againAt;
    if (again) {
      s.againAt = 0;
      s.forceAck = true;
      for (const g of s.groups.values()) if (g.ackedAt && now - g.ackedAt < errorWindowMs) g.forceAck = true;
    }
    const due = s.forceAck && !s.syncing ? true : s.pushWaiting ? now - s.pushedAt >= this.ackWindow(s) : !s.syncing;
    if (due) await this.ack(s);
    if (s.syncAt && now > s.syncAt) {
      s.syncAt = 0;
      this.requestSync(s, s.cursor);
    }
    if (again) this.askAgain(s);
    this.retryGroupSyncs(s);
    if (s.behindAt && now - s.behindAt >= catchUpGraceMs) {
      s.behindAt = 0;
      if (s.cursor < s.behindHead && !s.syncing) {
        this.log("info", "behind the inbox head with no push on the way; syncing", { cursor: s.cursor, head: s.behindHead });
        this.requestSync(s, s.cursor);
      }
    }
  }

  /** Acks everything up to the cursor when the server waits for it (or force). */
  private async ack(s: Session, force = false): Promise<void> {
    this.ackGroups(s);
    if (s.needAck <= s.lastAck && !s.forceAck && !(force && s.cursor > s.lastAck)) {
      // Nothing of the inbox waits: what did (group pushes) is acked.
      Object.assign(s, { unacked: 0, syncedUnacked: 0, pushWaiting: false });
      return;
    }
    this.crashPoint("before-ack", s.cursor);
    // A forced ack is one written again (after an error, or a duplicate push): it says so, and if the server's
    // cursor is already there (the first one's invocation failed after its write) the delivered receipts go then.
    this.writeFrame(s, s.forceAck ? { action: "ack", upTo: s.cursor, again: true } : { action: "ack", upTo: s.cursor });
    Object.assign(s, { lastAck: s.cursor, forceAck: false, unacked: 0, syncedUnacked: 0, pushWaiting: false });
  }

  private async keepAlive(s: Session): Promise<void> {
    s.ticks++;
    if (s.ticks % this.o.headEvery === 0) this.ping(s);
    else this.writeFrame(s, { action: "keepalive" });
  }

  private ping(s: Session): void {
    const now = Date.now();
    if (!s.pingSent) s.pingSent = now;
    this.writeFrame(s, { action: "ping" });
    s.pings.push(now);
  }

  /** Finds a connection that stopped delivering frames, and asks again for an unanswered sync. */
  private async checkAlive(s: Session): Promise<void> {
    const now = Date.now();
    if (s.pingSent && now - s.pingSent > this.o.pongTimeoutMs) {
      this.log("warn", "connection answers nothing (half-open?); reconnecting");
      s.ws.close();
      return this.sessionEnded(s);
    }
    let waiting = s.syncing;
    for (const at of s.sentAt.values()) waiting ||= now - at > this.o.resendAfterMs;
    if (waiting && !s.pingSent && now - s.lastRecv > this.o.resendAfterMs) this.ping(s);
    if (s.syncing && !s.syncAt && now - s.syncSent > this.o.resendAfterMs) {
      this.log("info", "sync unanswered; asking again", { cursor: s.cursor });
      this.requestSync(s, s.cursor);
    }
  }

  /** Sends, per conversation, the oldest pending send unless it went out recently on this connection. */
  private async flushOutbox(s: Session): Promise<void> {
    const now = Date.now();
    if (now < (this.holds.get("send") ?? 0)) return;
    const busy = new Set<string>();
    for (const it of await this.store.outbox()) {
      const conv = conversationOf(it);
      if (busy.has(conv)) continue;
      busy.add(conv);
      const at = s.sentAt.get(it.clientMsgId);
      if (at !== undefined && now - at < this.o.resendAfterMs) continue;
      this.writeFrame(s, it.frame);
      s.sentAt.set(it.clientMsgId, now);
    }
  }

  private resolveSend(id: string, sent?: SentFrame, err?: unknown): void {
    const ws = this.sendWaiters.get(id) ?? [];
    this.sendWaiters.delete(id);
    for (const w of ws) {
      if (sent) w.resolve(sent);
      else w.reject(err);
    }
  }

  private async serverError(s: Session, e: ErrorFrame): Promise<void> {
    if (e.clientMsgId) {
      if (e.code === "rate_limited" || e.code === "internal") {
        // Retry with the same id once the server asks (or after a second).
        const wait = Math.max(e.retryAfterMs ?? 0, 1000);
        s.sentAt.set(e.clientMsgId, Date.now() + wait - this.o.resendAfterMs);
        // The limit is the user's: every other send would be refused too (the client's hold: a new connection
        // during it does not send them at once either).
        if (e.code === "rate_limited") this.hold("send", Date.now() + wait);
        return;
      }
      s.sentAt.delete(e.clientMsgId);
      await this.store.settle(e.clientMsgId);
      this.resolveSend(e.clientMsgId, undefined, new ServerError(e.code, e.message, e.requestId));
      return this.flushOutbox(s);
    }
    switch (e.code) {
      case "unauthorized":
        this.log("info", "the connection's token expired; reconnecting with a new one");
        s.ws.close();
        return;
      case "connection_limit":
        this.log("warn", "closed by the server: too many connections for this user; waiting before reconnecting", { wait: this.o.evictedWaitMs });
        s.reconnectAfter = this.o.evictedWaitMs;
        return;
      case "rate_limit_ignored":
        this.log("error", "closed by the server: frames kept coming after rate_limited", { wait: e.retryAfterMs });
        s.reconnectAfter = e.retryAfterMs ?? this.o.maxBackoffMs;
        return;
      case "resync":
        this.log("warn", "server asks for a resync", { cursor: s.cursor, epoch: e.epoch });
        return this.resync(s, e.epoch ?? "");
      case "rate_limited": {
        // Refused: the inbox's sync (its own slot per sync interval), asked again after the wait, or a group's
        // (a query), which holds every group sync and query; their ref says which. Without a ref: an ack or a read.
        const wait = Math.max(e.retryAfterMs ?? 0, 100);
        if (e.ref?.startsWith(inboxSyncRef)) {
          if (s.syncing && s.syncRef === e.ref) s.syncAt = Date.now() + wait;
          return;
        }
        if (e.ref?.startsWith(groupSyncRef)) {
          this.holdGroupSyncs(s, wait);
          return;
        }
        this.writeAgain(s, Math.max(1000, e.retryAfterMs ?? 0));
        return;
      }
      case "internal":
        if (e.ref?.startsWith(inboxSyncRef) || e.ref?.startsWith(groupSyncRef)) {
          // That sync's invocation failed (not an ack's or a read's): ask it again in a second, not once it
          // counts as unanswered.
          this.syncFailed(s, e.ref);
          return;
        }
        // An ack or a read failed (they are answered only when they fail, without an id): acking and reading
        // again is harmless (forward-only).
        this.writeAgain(s, 1000);
        return;
    }
    this.log("warn", "server error", { code: e.code, message: e.message, requestId: e.requestId });
  }
}

/** Syncs carry a ref of their own kind (the server echoes it in their pages and errors): a refusal then says
 * whether it was the inbox sync's, a group sync's or (no ref) an ack's or a read's. */
const inboxSyncRef = "is";
const groupSyncRef = "gs";

/**
 * The limit a query frame counts against (docs/protocol.md, "Per-user limits"): a refused frame holds every
 * frame of its kind until its retryAfterMs, since the limit is the user's — every other would be refused too,
 * and a connection that keeps sending is closed. Group syncs are queries.
 */
/** A query waiting for its answer: n is its ref's number, state the state its frame sets (stateOf), writtenAt when it last went out. */
interface Query {
  n: number;
  state: string;
  frame: ClientFrame;
  waiter: Waiter<unknown>;
  written: boolean;
  writtenAt: number;
  retries: number;
  heldUntil: number;
}

/** The state a query frame sets, "" for none: presence (the user's display state) or register (this device's registration). */
function stateOf(f: ClientFrame): string {
  return f.action === "presence" || f.action === "register" ? f.action : "";
}

function limitKind(f: ClientFrame): "query" | "group" | "presence" {
  switch (f.action) {
    case "group":
      return "group";
    case "presence":
    case "register":
      return "presence";
  }
  return "query";
}

/** The send frame of a draft and its fingerprint. */
async function draftFrame(d: Draft): Promise<{ frame: SendFrame; fp: string; deviceOnly: boolean }> {
  const frame: SendFrame = { action: "send", clientMsgId: d.clientMsgId || newClientMsgId(), body: d.body };
  if (d.conversationId) frame.conversationId = d.conversationId;
  else if (d.to) frame.to = d.to;
  else throw new Error("a draft needs to or conversationId");
  // A group message under read diffusion comes back in "sent", not as a
  // push to this connection (groupOwn); a written group's ignores it.
  if (d.conversationId?.startsWith("g:")) frame.ownFromSent = true;
  return { frame, fp: await fingerprint(d), deviceOnly: !d.clientMsgId || d.deviceOnly === true };
}

/**
 * Sets a 1:1 send frame's "seen": the newest convSeq of its conversation the
 * device holds, fixed when the send is queued (a retry resends the queued
 * frame), so that the server finds an earlier try above it instead of
 * keeping an idempotency record per send (docs/protocol.md). Only for a
 * clientMsgId this device alone sends (Draft.deviceOnly): a try from another
 * device would say what that device had seen. A group send, a store without
 * newestConvSeq, or a send by recipient before the client knows its own
 * user `me` (a 1:1 ACK tells it; convSeqs of other conversations say
 * nothing about this one, a note to oneself included) says nothing.
 */
async function sayWhatWasSeen(store: DeviceStore, frame: SendFrame, me: string | undefined): Promise<void> {
  if (!store.newestConvSeq) return;
  let id = frame.conversationId;
  if (frame.to) id = me === undefined ? undefined : `d:${[me, frame.to].sort().join(":")}`;
  if (!id?.startsWith("d:")) return;
  const conv = id;
  frame.seen = await store.newestConvSeq((c) => c === conv);
}

/** The refusal of a clientMsgId reused for other content, in the server's words (the device knows first). */
function reusedError(): ServerError {
  return new ServerError("bad_request", "clientMsgId was already used for a different message");
}

function conversationOf(it: OutboxItem): string {
  return it.frame.conversationId ? `c:${it.frame.conversationId}` : `to:${it.frame.to}`;
}

function toStored(e: Entry): StoredMessage {
  const m = e.message;
  return { seq: e.seq, messageId: m.messageId, conversationId: m.conversationId, convSeq: m.convSeq, from: m.from, body: m.body, sentAt: m.sentAt };
}

/** A random 24-hex-digit clientMsgId. */
export function newClientMsgId(): string {
  return randomHex(12);
}

/** A new random group id, as the server makes them ("g:" and 18 hex digits). */
function newGroupId(): string {
  return "g:" + randomHex(9);
}

/** n random bytes in hex. */
function randomHex(n: number): string {
  const b = new Uint8Array(n);
  globalThis.crypto.getRandomValues(b);
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** Identifies a draft's content (where it goes and its body): a clientMsgId names one message. */
async function fingerprint(d: Draft): Promise<string> {
  const text = `${d.to ?? ""}\u0000${d.conversationId ?? ""}\u0000${JSON.stringify(d.body)}`;
  const h = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(h).slice(0, 16)].map((x) => x.toString(16).padStart(2, "0")).join("");
}
