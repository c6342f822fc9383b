export function emptyState() {
    return { cursor: 0, epoch: "", skipped: "", inbox: new Map(), outbox: [], sent: new Map(), known: new Set(), groupCursors: new Map(), groupLog: new Map() };
}
/** The key of a group message: conversation, then convSeq (sortable). */
export function groupKey(conversationId, convSeq) {
    return `${conversationId}\u0000${String(convSeq).padStart(16, "0")}`;
}
/** Whether group message m comes next after a group's cursor (see DeviceStore.applyGroup). */
export function groupNext(m, synced, cursor) {
    if (m.convSeq <= (cursor ?? 0))
        return false;
    return synced || (cursor !== undefined && m.convSeq === cursor + 1);
}
/** Applies one mutation to a state; false when it changes nothing. */
export function mutate(s, m) {
    switch (m.op) {
        case "apply":
            if (m.entry.seq !== s.cursor + 1)
                return false;
            s.inbox.set(m.entry.seq, m.entry);
            s.cursor = m.entry.seq;
            return true;
        case "skip":
            s.cursor = m.to;
            s.skipped = `${m.from + 1}-${m.to}`;
            return true;
        case "reset":
            for (const e of s.inbox.values())
                s.known.add(e.message.messageId);
            s.inbox.clear();
            s.cursor = 0;
            s.epoch = m.epoch;
            return true;
        case "epoch":
            s.epoch = m.epoch;
            return true;
        case "enqueue":
            if (s.sent.has(m.item.clientMsgId) || s.outbox.some((o) => o.clientMsgId === m.item.clientMsgId))
                return false;
            s.outbox.push(m.item);
            return true;
        case "settle": {
            const i = s.outbox.findIndex((o) => o.clientMsgId === m.id);
            const fp = i >= 0 ? s.outbox[i].fp : "";
            if (i >= 0)
                s.outbox.splice(i, 1);
            if (m.sent)
                s.sent.set(m.id, { sent: m.sent, fp: s.sent.get(m.id)?.fp || fp });
            return true;
        }
        case "group": {
            const conv = m.message.conversationId;
            if (!groupNext(m.message, m.synced, s.groupCursors.get(conv)))
                return false;
            s.groupLog.set(groupKey(conv, m.message.convSeq), m.message);
            s.groupCursors.set(conv, m.message.convSeq);
            return true;
        }
        case "groupKnown":
            if ((s.groupCursors.get(m.conversationId) ?? -1) >= m.cursor)
                return false;
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
export class JournaledStore {
    state = emptyState();
    closed = false;
    async change(m) {
        if (this.closed)
            throw new Error("device store closed");
        await this.record(m);
        mutate(this.state, m);
    }
    async position() {
        return { cursor: this.state.cursor, epoch: this.state.epoch };
    }
    async apply(e) {
        if (e.seq !== this.state.cursor + 1)
            return { applied: false, known: false };
        await this.change({ op: "apply", entry: e });
        return { applied: true, known: this.state.known.has(e.message.messageId) };
    }
    async skip(from, to) {
        await this.change({ op: "skip", from, to });
    }
    async skipped() {
        return this.state.skipped;
    }
    async reset(epoch) {
        await this.change({ op: "reset", epoch });
    }
    async setEpoch(epoch) {
        await this.change({ op: "epoch", epoch });
    }
    async entries(after, limit = 0) {
        const out = [];
        for (let seq = after + 1; seq <= this.state.cursor; seq++) {
            const e = this.state.inbox.get(seq);
            if (!e)
                continue;
            out.push(e);
            if (limit > 0 && out.length === limit)
                break;
        }
        return out;
    }
    async newestConvSeq(match) {
        for (let seq = this.state.cursor; seq > 0; seq--) {
            const e = this.state.inbox.get(seq);
            if (e && match(e.message.conversationId))
                return e.message.convSeq;
        }
        return 0;
    }
    async groupCursor(conversationId) {
        const c = this.state.groupCursors.get(conversationId);
        return { cursor: c ?? 0, known: c !== undefined };
    }
    async applyGroup(m, synced) {
        if (!groupNext(m, synced, this.state.groupCursors.get(m.conversationId)))
            return false;
        await this.change({ op: "group", message: m, synced });
        return true;
    }
    async markGroupKnown(conversationId, cursor) {
        if ((this.state.groupCursors.get(conversationId) ?? -1) >= cursor)
            return;
        await this.change({ op: "groupKnown", conversationId, cursor });
    }
    async groupMessages(conversationId, after = 0, limit = 0) {
        const out = [...this.state.groupLog.entries()]
            .filter(([, m]) => (conversationId === "" || m.conversationId === conversationId) && m.convSeq > after)
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
            .map(([, m]) => m);
        return limit > 0 ? out.slice(0, limit) : out;
    }
    async enqueue(item) {
        const prev = this.state.sent.get(item.clientMsgId);
        if (prev)
            return { prev };
        const pending = this.state.outbox.find((o) => o.clientMsgId === item.clientMsgId);
        if (pending)
            return { pending };
        await this.change({ op: "enqueue", item });
        return {};
    }
    async outbox() {
        return [...this.state.outbox];
    }
    async settle(clientMsgId, sent) {
        await this.change({ op: "settle", id: clientMsgId, sent });
    }
    async close() {
        this.closed = true;
    }
}
/** A device store that keeps everything in memory (lost with the process). */
export class MemoryStore extends JournaledStore {
    async record() { }
    /** Makes a closed MemoryStore usable again, as reopening a file would:
     * a test restarts a client on the same "disk". */
    reopen() {
        this.closed = false;
        return this;
    }
}
