import type { Entry, Message, SendFrame, SentFrame } from "./frames.js";

/** Where a device stands in its inbox: the highest seq persisted and the
 * inbox epoch it belongs to ("" until the first sync page tells it). */
export interface Position {
  cursor: number;
  epoch: string;
}

/** A send waiting for the server's ACK, kept until it comes. */
export interface OutboxItem {
  clientMsgId: string;
  frame: SendFrame;
  /** When it was queued (ms since the epoch). */
  at: number;
  /** The draft's fingerprint: a clientMsgId names one message. */
  fp: string;
}

/** The ACK of a send, kept so that the same clientMsgId gets it again. */
export interface SentRecord {
  sent: SentFrame;
  fp: string;
}

/**
 * A device's durable state: its inbox entries and cursor, epoch, outbox and
 * the ACKs of its sends. Every method is one atomic step: in particular
 * `apply` stores the entry and moves the cursor together (or does neither),
 * which is what lets the client ack only what is persisted.
 *
 * Implementations: {@link MemoryStore} (tests, or a device that keeps
 * nothing), `FileStore` (Node, from "@signet-im/client/node") and
 * {@link IndexedDBStore} (browsers).
 */
export interface DeviceStore {
  position(): Promise<Position>;
  /** Stores e and moves the cursor to e.seq if e.seq is cursor + 1.
   * known: e's message was held before a resync (already shown). */
  apply(e: Entry): Promise<{ applied: boolean; known: boolean }>;
  /** Records that seqs from+1..to expired on the server before this device
   * synced them, and moves the cursor to `to`. */
  skip(from: number, to: number): Promise<void>;
  /** The last skipped range ("from-to"), or "". */
  skipped(): Promise<string>;
  /** Forgets the cursor and the entries (remembering their message ids as
   * known) and takes epoch: the server's sequence restarted. */
  reset(epoch: string): Promise<void>;
  setEpoch(epoch: string): Promise<void>;
  /** Persisted entries with seq > after, ascending (limit 0: all). */
  entries(after: number, limit?: number): Promise<Entry[]>;
  /** The convSeq of the newest held entry whose conversation `match`
   * accepts (0: none): a 1:1 send's "seen" (docs/protocol.md). Optional: a
   * store without it makes sends without "seen" (the server then keeps an
   * idempotency record per send). */
  newestConvSeq?(match: (conversationId: string) => boolean): Promise<number>;
  /** A read-diffused group's cursor on this device: the highest convSeq
   * persisted (known false: the group was never pulled here). */
  groupCursor(conversationId: string): Promise<{ cursor: number; known: boolean }>;
  /** Stores message m of its group and moves the group's cursor to
   * m.convSeq, in one step, if m comes next: a pushed message only at
   * cursor + 1 of a known cursor; a synced one anywhere above the cursor
   * (a group sync page holds every message due above it). */
  applyGroup(m: Message, synced: boolean): Promise<boolean>;
  /** Moves a group's cursor to `cursor` (not back), marking it known: a
   * group sync found nothing due up to there. */
  markGroupKnown(conversationId: string, cursor: number): Promise<void>;
  /** Persisted messages of a read-diffused group with convSeq > after,
   * ascending (limit 0: all); conversationId "" lists every group's. */
  groupMessages(conversationId: string, after?: number, limit?: number): Promise<Message[]>;
  /** Queues item unless its clientMsgId was ACKed (prev) or is queued (pending). */
  enqueue(item: OutboxItem): Promise<{ prev?: SentRecord; pending?: OutboxItem }>;
  outbox(): Promise<OutboxItem[]>;
  /** Removes a send from the outbox, keeping its ACK (sent) if it has one. */
  settle(clientMsgId: string, sent?: SentFrame): Promise<void>;
  close(): Promise<void>;
}

/** One change of a device's state: what a journal records. */
export type Mutation =
  | { op: "apply"; entry: Entry }
  | { op: "skip"; from: number; to: number }
  | { op: "reset"; epoch: string }
  | { op: "epoch"; epoch: string }
  | { op: "enqueue"; item: OutboxItem }
  | { op: "settle"; id: string; sent?: SentFrame }
  | { op: "group"; message: Message; synced: boolean }
  | { op: "groupKnown"; conversationId: string; cursor: number };

/** A device's whole state, as plain data. */
export interface State {
  cursor: number;
  epoch: string;
  skipped: string;
  inbox: Map<number, Entry>;
  outbox: OutboxItem[];
  sent: Map<string, SentRecord>;
  known: Set<string>;
  /** Read-diffused groups: the cursor of each group pulled here. */
  groupCursors: Map<string, number>;
  /** Their persisted messages, by groupKey. */
  groupLog: Map<string, Message>;
}

export function emptyState(): State {
  return { cursor: 0, epoch: "", skipped: "", inbox: new Map(), outbox: [], sent: new Map(), known: new Set(), groupCursors: new Map(), groupLog: new Map() };
}

/** The key of a group message: conversation, then convSeq (sortable). */
export function groupKey(conversationId: string, convSeq: number): string {
  return `${conversationId}\u0000${String(convSeq).padStart(16, "0")}`;
}

/** Whether group message m comes next after a group's cursor (see DeviceStore.applyGroup). */
export function groupNext(m: Message, synced: boolean, cursor: number | undefined): boolean {
  if (m.convSeq <= (cursor ?? 0)) return false;
  return synced || (cursor !== undefined && m.convSeq === cursor + 1);
}

/** Applies one mutation to a state; false when it changes nothing. */
export function mutate(s: State, m: Mutation): boolean {
  switch (m.op) {
    case "apply":
      if (m.entry.seq !== s.cursor + 1) return false;
      s.inbox.set(m.entry.seq, m.entry);
      s.cursor = m.entry.seq;
      return true;
    case "skip":
      s.cursor = m.to;
      s.skipped = `${m.from + 1}-${m.to}`;
      return true;
    case "reset":
      for (const e of s.inbox.values()) s.known.add(e.message.messageId);
      s.inbox.clear();
      s.cursor = 0;
      s.epoch = m.epoch;
      return true;
    case "epoch":
      s.epoch = m.epoch;
      return true;
    case "enqueue":
      if (s.sent.has(m.item.clientMsgId) || s.outbox.some((o) => o.clientMsgId === m.item.clientMsgId)) return false;
      s.outbox.push(m.item);
      return true;
    case "settle": {
      const i = s.outbox.findIndex((o) => o.clientMsgId === m.id);
      const fp = i >= 0 ? s.outbox[i].fp : "";
      if (i >= 0) s.outbox.splice(i, 1);
      if (m.sent) s.sent.set(m.id, { sent: m.sent, fp: s.sent.get(m.id)?.fp || fp });
      return true;
    }
    case "group": {
      const conv = m.message.conversationId;
      if (!groupNext(m.message, m.synced, s.groupCursors.get(conv))) return false;
      s.groupLog.set(groupKey(conv, m.message.convSeq), m.message);
      s.groupCursors.set(conv, m.message.convSeq);
      return true;
    }
    case "groupKnown":
      if ((s.groupCursors.get(m.conversationId) ?? -1) >= m.cursor) return false;
      s.groupCursors.set(m.conversationId, m.cursor);
      return true;
  }
}

/**
 * A device store over a {@link State} in memory. Every change goes through
 * {@link JournaledStore.record}, which a durable store overrides to write it
 * down first. A MemoryStore keeps its state for as long as the object lives:
 * a test may "crash" a client and start another on the same store object.
 */
export abstract class JournaledStore implements DeviceStore {
  protected state: State = emptyState();
  protected closed = false;

  /** Makes m durable (before it is applied in memory). */
  protected abstract record(m: Mutation): Promise<void>;

  private async change(m: Mutation): Promise<void> {
    if (this.closed) throw new Error("device store closed");
    await this.record(m);
    mutate(this.state, m);
  }

  async position(): Promise<Position> {
    return { cursor: this.state.cursor, epoch: this.state.epoch };
  }

  async apply(e: Entry): Promise<{ applied: boolean; known: boolean }> {
    if (e.seq !== this.state.cursor + 1) return { applied: false, known: false };
    await this.change({ op: "apply", entry: e });
    return { applied: true, known: this.state.known.has(e.message.messageId) };
  }

  async skip(from: number, to: number): Promise<void> {
    await this.change({ op: "skip", from, to });
  }

  async skipped(): Promise<string> {
    return this.state.skipped;
  }

  async reset(epoch: string): Promise<void> {
    await this.change({ op: "reset", epoch });
  }

  async setEpoch(epoch: string): Promise<void> {
    await this.change({ op: "epoch", epoch });
  }

  async entries(after: number, limit = 0): Promise<Entry[]> {
    const out: Entry[] = [];
    for (let seq = after + 1; seq <= this.state.cursor; seq++) {
      const e = this.state.inbox.get(seq);
      if (!e) continue;
      out.push(e);
      if (limit > 0 && out.length === limit) break;
    }
    return out;
  }

  async newestConvSeq(match: (conversationId: string) => boolean): Promise<number> {
    for (let seq = this.state.cursor; seq > 0; seq--) {
      const e = this.state.inbox.get(seq);
      if (e && match(e.message.conversationId)) return e.message.convSeq;
    }
    return 0;
  }

  async groupCursor(conversationId: string): Promise<{ cursor: number; known: boolean }> {
    const c = this.state.groupCursors.get(conversationId);
    return { cursor: c ?? 0, known: c !== undefined };
  }

  async applyGroup(m: Message, synced: boolean): Promise<boolean> {
    if (!groupNext(m, synced, this.state.groupCursors.get(m.conversationId))) return false;
    await this.change({ op: "group", message: m, synced });
    return true;
  }

  async markGroupKnown(conversationId: string, cursor: number): Promise<void> {
    if ((this.state.groupCursors.get(conversationId) ?? -1) >= cursor) return;
    await this.change({ op: "groupKnown", conversationId, cursor });
  }

  async groupMessages(conversationId: string, after = 0, limit = 0): Promise<Message[]> {
    const out = [...this.state.groupLog.entries()]
      .filter(([, m]) => (conversationId === "" || m.conversationId === conversationId) && m.convSeq > after)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, m]) => m);
    return limit > 0 ? out.slice(0, limit) : out;
  }

  async enqueue(item: OutboxItem): Promise<{ prev?: SentRecord; pending?: OutboxItem }> {
    const prev = this.state.sent.get(item.clientMsgId);
    if (prev) return { prev };
    const pending = this.state.outbox.find((o) => o.clientMsgId === item.clientMsgId);
    if (pending) return { pending };
    await this.change({ op: "enqueue", item });
    return {};
  }

  async outbox(): Promise<OutboxItem[]> {
    return [...this.state.outbox];
  }

  async settle(clientMsgId: string, sent?: SentFrame): Promise<void> {
    await this.change({ op: "settle", id: clientMsgId, sent });
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

/** A device store that keeps everything in memory (lost with the process). */
export class MemoryStore extends JournaledStore {
  protected async record(): Promise<void> {}

  /** Makes a closed MemoryStore usable again, as reopening a file would:
   * a test restarts a client on the same "disk". */
  reopen(): this {
    this.closed = false;
    return this;
  }
}
