import type { Entry, Message, SentFrame } from "./frames.js";
import type { DeviceStore, OutboxItem, Position, SentRecord } from "./store.js";

const stores = ["meta", "inbox", "outbox", "sent", "known", "gcursors", "glog"] as const;

/**
 * A device store in the browser's IndexedDB (one database per user and
 * device). Each method is one IndexedDB transaction: `apply` writes the
 * entry and the cursor in the same readwrite transaction over "meta" and
 * "inbox", so a tab closed or crashed mid-way leaves both or neither —
 * which is what lets the client ack only what is persisted. The outbox
 * survives a reload; the next client on the same database sends it.
 */
export class IndexedDBStore implements DeviceStore {
  private constructor(private readonly db: IDBDatabase) {}

  /** Opens (creating if needed) the database `name`, e.g. `signet:${user}:${device}`. */
  static open(name: string, factory: IDBFactory = globalThis.indexedDB): Promise<IndexedDBStore> {
    return new Promise((resolve, reject) => {
      // Version 2 adds read-diffused groups (their cursors and messages).
      const req = factory.open(name, 2);
      req.onupgradeneeded = (ev) => {
        const db = req.result;
        if (ev.oldVersion < 1) {
          db.createObjectStore("meta");
          db.createObjectStore("inbox", { keyPath: "seq" });
          db.createObjectStore("outbox", { keyPath: "order", autoIncrement: true }).createIndex("id", "item.clientMsgId", { unique: true });
          db.createObjectStore("sent");
          db.createObjectStore("known");
        }
        if (ev.oldVersion < 2) {
          db.createObjectStore("gcursors");
          db.createObjectStore("glog", { keyPath: ["conversationId", "convSeq"] });
        }
      };
      req.onsuccess = () => resolve(new IndexedDBStore(req.result));
      req.onerror = () => reject(req.error);
      req.onblocked = () => reject(new Error(`IndexedDB ${name} is blocked by another tab`));
    });
  }

  /** Runs fn in one transaction and resolves with its result once the transaction commits. */
  private tx<T>(mode: IDBTransactionMode, fn: (t: IDBTransaction, done: (v: T) => void) => void): Promise<T> {
    return new Promise((resolve, reject) => {
      const t = this.db.transaction([...stores], mode, { durability: "strict" } as IDBTransactionOptions);
      let out: T;
      t.oncomplete = () => resolve(out);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error ?? new Error("IndexedDB transaction aborted"));
      fn(t, (v) => (out = v));
    });
  }

  position(): Promise<Position> {
    return this.tx("readonly", (t, done) => {
      const meta = t.objectStore("meta");
      const c = meta.get("cursor");
      const e = meta.get("epoch");
      e.onsuccess = () => done({ cursor: (c.result as number) ?? 0, epoch: (e.result as string) ?? "" });
    });
  }

  apply(entry: Entry): Promise<{ applied: boolean; known: boolean }> {
    return this.tx("readwrite", (t, done) => {
      const meta = t.objectStore("meta");
      const c = meta.get("cursor");
      c.onsuccess = () => {
        if (entry.seq !== ((c.result as number) ?? 0) + 1) {
          done({ applied: false, known: false });
          return;
        }
        t.objectStore("inbox").put(entry);
        meta.put(entry.seq, "cursor");
        const k = t.objectStore("known").get(entry.message.messageId);
        k.onsuccess = () => done({ applied: true, known: k.result !== undefined });
      };
    });
  }

  skip(from: number, to: number): Promise<void> {
    return this.tx("readwrite", (t, done) => {
      const meta = t.objectStore("meta");
      meta.put(to, "cursor");
      meta.put(`${from + 1}-${to}`, "skipped");
      done(undefined);
    });
  }

  skipped(): Promise<string> {
    return this.tx("readonly", (t, done) => {
      const r = t.objectStore("meta").get("skipped");
      r.onsuccess = () => done((r.result as string) ?? "");
    });
  }

  reset(epoch: string): Promise<void> {
    return this.tx("readwrite", (t, done) => {
      const inbox = t.objectStore("inbox");
      const known = t.objectStore("known");
      const all = inbox.getAll();
      all.onsuccess = () => {
        for (const e of all.result as Entry[]) known.put(1, e.message.messageId);
        inbox.clear();
        const meta = t.objectStore("meta");
        meta.put(0, "cursor");
        meta.put(epoch, "epoch");
        done(undefined);
      };
    });
  }

  setEpoch(epoch: string): Promise<void> {
    return this.tx("readwrite", (t, done) => {
      t.objectStore("meta").put(epoch, "epoch");
      done(undefined);
    });
  }

  entries(after: number, limit = 0): Promise<Entry[]> {
    return this.tx("readonly", (t, done) => {
      const r = t.objectStore("inbox").getAll(IDBKeyRange.lowerBound(after, true), limit > 0 ? limit : undefined);
      r.onsuccess = () => done(r.result as Entry[]);
    });
  }

  newestConvSeq(match: (conversationId: string) => boolean): Promise<number> {
    return this.tx("readonly", (t, done) => {
      done(0);
      const r = t.objectStore("inbox").openCursor(null, "prev");
      r.onsuccess = () => {
        const c = r.result;
        if (!c) return;
        const e = c.value as Entry;
        if (match(e.message.conversationId)) done(e.message.convSeq);
        else c.continue();
      };
    });
  }

  groupCursor(conversationId: string): Promise<{ cursor: number; known: boolean }> {
    return this.tx("readonly", (t, done) => {
      const r = t.objectStore("gcursors").get(conversationId);
      r.onsuccess = () => done({ cursor: (r.result as number) ?? 0, known: r.result !== undefined });
    });
  }

  applyGroup(m: Message, synced: boolean): Promise<boolean> {
    return this.tx("readwrite", (t, done) => {
      const cursors = t.objectStore("gcursors");
      const r = cursors.get(m.conversationId);
      r.onsuccess = () => {
        const cursor = r.result as number | undefined;
        if (m.convSeq <= (cursor ?? 0) || (!synced && (cursor === undefined || m.convSeq !== cursor + 1))) {
          done(false);
          return;
        }
        t.objectStore("glog").put(m);
        cursors.put(m.convSeq, m.conversationId);
        done(true);
      };
    });
  }

  markGroupKnown(conversationId: string, cursor: number): Promise<void> {
    return this.tx("readwrite", (t, done) => {
      const cursors = t.objectStore("gcursors");
      const r = cursors.get(conversationId);
      r.onsuccess = () => {
        if (((r.result as number | undefined) ?? -1) < cursor) cursors.put(cursor, conversationId);
        done(undefined);
      };
    });
  }

  groupMessages(conversationId: string, after = 0, limit = 0): Promise<Message[]> {
    return this.tx("readonly", (t, done) => {
      const range = conversationId === "" ? undefined : IDBKeyRange.bound([conversationId, after], [conversationId, Infinity], true, false);
      const r = t.objectStore("glog").getAll(range, limit > 0 ? limit : undefined);
      r.onsuccess = () => done((r.result as Message[]).filter((m) => m.convSeq > after));
    });
  }

  enqueue(item: OutboxItem): Promise<{ prev?: SentRecord; pending?: OutboxItem }> {
    return this.tx("readwrite", (t, done) => {
      const s = t.objectStore("sent").get(item.clientMsgId);
      s.onsuccess = () => {
        if (s.result) {
          done({ prev: s.result as SentRecord });
          return;
        }
        const p = t.objectStore("outbox").index("id").get(item.clientMsgId);
        p.onsuccess = () => {
          if (p.result) {
            done({ pending: (p.result as { item: OutboxItem }).item });
            return;
          }
          t.objectStore("outbox").add({ item });
          done({});
        };
      };
    });
  }

  outbox(): Promise<OutboxItem[]> {
    return this.tx("readonly", (t, done) => {
      const r = t.objectStore("outbox").getAll();
      r.onsuccess = () => done((r.result as { item: OutboxItem }[]).map((x) => x.item));
    });
  }

  settle(clientMsgId: string, sent?: SentFrame): Promise<void> {
    return this.tx("readwrite", (t, done) => {
      const outbox = t.objectStore("outbox");
      const k = outbox.index("id").getKey(clientMsgId);
      k.onsuccess = () => {
        const key = k.result;
        const finish = (fp: string) => {
          if (key !== undefined) outbox.delete(key);
          if (sent) t.objectStore("sent").put({ sent, fp } satisfies SentRecord, clientMsgId);
          done(undefined);
        };
        if (key === undefined) return finish("");
        const item = outbox.get(key);
        item.onsuccess = () => finish((item.result as { item: OutboxItem }).item.fp);
      };
    });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
