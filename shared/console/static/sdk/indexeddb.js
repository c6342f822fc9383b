const stores = ["meta", "inbox", "outbox", "sent", "known", "gcursors", "glog"];
/**
 * A device store in the browser's IndexedDB (one database per user and
 * device). Each method is one IndexedDB transaction: `apply` writes the
 * entry and the cursor in the same readwrite transaction over "meta" and
 * "inbox", so a tab closed or crashed mid-way leaves both or neither —
 * which is what lets the client ack only what is persisted. The outbox
 * survives a reload; the next client on the same database sends it.
 */
export class IndexedDBStore {
    db;
    constructor(db) {
        this.db = db;
    }
    /** Opens (creating if needed) the database `name`, e.g. `signet:${user}:${device}`. */
    static open(name, factory = globalThis.indexedDB) {
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
    tx(mode, fn) {
        return new Promise((resolve, reject) => {
            const t = this.db.transaction([...stores], mode, { durability: "strict" });
            let out;
            t.oncomplete = () => resolve(out);
            t.onerror = () => reject(t.error);
            t.onabort = () => reject(t.error ?? new Error("IndexedDB transaction aborted"));
            fn(t, (v) => (out = v));
        });
    }
    position() {
        return this.tx("readonly", (t, done) => {
            const meta = t.objectStore("meta");
            const c = meta.get("cursor");
            const e = meta.get("epoch");
            e.onsuccess = () => done({ cursor: c.result ?? 0, epoch: e.result ?? "" });
        });
    }
    apply(entry) {
        return this.tx("readwrite", (t, done) => {
            const meta = t.objectStore("meta");
            const c = meta.get("cursor");
            c.onsuccess = () => {
                if (entry.seq !== (c.result ?? 0) + 1) {
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
    skip(from, to) {
        return this.tx("readwrite", (t, done) => {
            const meta = t.objectStore("meta");
            meta.put(to, "cursor");
            meta.put(`${from + 1}-${to}`, "skipped");
            done(undefined);
        });
    }
    skipped() {
        return this.tx("readonly", (t, done) => {
            const r = t.objectStore("meta").get("skipped");
            r.onsuccess = () => done(r.result ?? "");
        });
    }
    reset(epoch) {
        return this.tx("readwrite", (t, done) => {
            const inbox = t.objectStore("inbox");
            const known = t.objectStore("known");
            const all = inbox.getAll();
            all.onsuccess = () => {
                for (const e of all.result)
                    known.put(1, e.message.messageId);
                inbox.clear();
                const meta = t.objectStore("meta");
                meta.put(0, "cursor");
                meta.put(epoch, "epoch");
                done(undefined);
            };
        });
    }
    setEpoch(epoch) {
        return this.tx("readwrite", (t, done) => {
            t.objectStore("meta").put(epoch, "epoch");
            done(undefined);
        });
    }
    entries(after, limit = 0) {
        return this.tx("readonly", (t, done) => {
            const r = t.objectStore("inbox").getAll(IDBKeyRange.lowerBound(after, true), limit > 0 ? limit : undefined);
            r.onsuccess = () => done(r.result);
        });
    }
    newestConvSeq(match) {
        return this.tx("readonly", (t, done) => {
            done(0);
            const r = t.objectStore("inbox").openCursor(null, "prev");
            r.onsuccess = () => {
                const c = r.result;
                if (!c)
                    return;
                const e = c.value;
                if (match(e.message.conversationId))
                    done(e.message.convSeq);
                else
                    c.continue();
            };
        });
    }
    groupCursor(conversationId) {
        return this.tx("readonly", (t, done) => {
            const r = t.objectStore("gcursors").get(conversationId);
            r.onsuccess = () => done({ cursor: r.result ?? 0, known: r.result !== undefined });
        });
    }
    applyGroup(m, synced) {
        return this.tx("readwrite", (t, done) => {
            const cursors = t.objectStore("gcursors");
            const r = cursors.get(m.conversationId);
            r.onsuccess = () => {
                const cursor = r.result;
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
    markGroupKnown(conversationId, cursor) {
        return this.tx("readwrite", (t, done) => {
            const cursors = t.objectStore("gcursors");
            const r = cursors.get(conversationId);
            r.onsuccess = () => {
                if ((r.result ?? -1) < cursor)
                    cursors.put(cursor, conversationId);
                done(undefined);
            };
        });
    }
    groupMessages(conversationId, after = 0, limit = 0) {
        return this.tx("readonly", (t, done) => {
            const range = conversationId === "" ? undefined : IDBKeyRange.bound([conversationId, after], [conversationId, Infinity], true, false);
            const r = t.objectStore("glog").getAll(range, limit > 0 ? limit : undefined);
            r.onsuccess = () => done(r.result.filter((m) => m.convSeq > after));
        });
    }
    enqueue(item) {
        return this.tx("readwrite", (t, done) => {
            const s = t.objectStore("sent").get(item.clientMsgId);
            s.onsuccess = () => {
                if (s.result) {
                    done({ prev: s.result });
                    return;
                }
                const p = t.objectStore("outbox").index("id").get(item.clientMsgId);
                p.onsuccess = () => {
                    if (p.result) {
                        done({ pending: p.result.item });
                        return;
                    }
                    t.objectStore("outbox").add({ item });
                    done({});
                };
            };
        });
    }
    outbox() {
        return this.tx("readonly", (t, done) => {
            const r = t.objectStore("outbox").getAll();
            r.onsuccess = () => done(r.result.map((x) => x.item));
        });
    }
    settle(clientMsgId, sent) {
        return this.tx("readwrite", (t, done) => {
            const outbox = t.objectStore("outbox");
            const k = outbox.index("id").getKey(clientMsgId);
            k.onsuccess = () => {
                const key = k.result;
                const finish = (fp) => {
                    if (key !== undefined)
                        outbox.delete(key);
                    if (sent)
                        t.objectStore("sent").put({ sent, fp }, clientMsgId);
                    done(undefined);
                };
                if (key === undefined)
                    return finish("");
                const item = outbox.get(key);
                item.onsuccess = () => finish(item.result.item.fp);
            };
        });
    }
    async close() {
        this.db.close();
    }
}
