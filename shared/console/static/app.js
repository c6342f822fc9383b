// Signet's local web console, on the TypeScript SDK: sign in as any user
// and device, conversations with unread counts, 1:1 and group chat with
// … / ✓ / ✓✓ delivered / ✓✓ read marks, presence, alerts, and a message's
// path to each device as a timeline from the trace API.
import { IndexedDBStore, SignetClient, SupersededError } from "@signet-im/client";
const $ = (id) => document.getElementById(id);
let me = "";
let client;
let current = "";
const conversations = new Map();
const messages = new Map();
const outgoing = new Map();
/** The peer's delivered and read watermarks of each 1:1 conversation (convSeqs). */
const delivered = new Map();
const readBy = new Map();
const presence = new Map();
let timelineId = "";
function directId(a, b) {
    return "d:" + [a, b].sort().join(":");
}
function peerOf(conv) {
    const [, a, b] = conv.split(":");
    return a === me ? b : a;
}
function titleOf(conv, summary) {
    if (summary?.title)
        return summary.title;
    if (conv.startsWith("d:"))
        return peerOf(conv);
    if (conv.startsWith("a:"))
        return `alerts · ${conv.slice(2)}`;
    return conversations.get(conv)?.title ?? conv;
}
function textOf(body) {
    if (typeof body === "string")
        return body;
    if (body && typeof body === "object" && typeof body.text === "string")
        return body.text;
    return JSON.stringify(body);
}
function conversation(id) {
    let c = conversations.get(id);
    if (!c) {
        c = { id, title: titleOf(id), last: 0, read: 0, readSeq: 0, unread: 0 };
        conversations.set(id, c);
    }
    return c;
}
// ---- sign in ----
async function signIn(user, device) {
    const cfg = (await (await fetch("config.json")).json());
    const token = async () => {
        const r = await fetch("token", { method: "POST", body: JSON.stringify({ userId: user, deviceId: device }) });
        const j = await r.json();
        if (!r.ok)
            throw new Error(j.error ?? `token: HTTP ${r.status}`);
        return j.token;
    };
    await token(); // a bad user id is refused here, with the server's words
    me = user;
    loadAnswers();
    localStorage.setItem("signet.user", user);
    localStorage.setItem("signet.device", device);
    $("me").textContent = `${user} · ${device}`;
    $("signin").hidden = true;
    $("app").hidden = false;
    const store = await IndexedDBStore.open(`signet:${user}:${device}`);
    const debug = new URLSearchParams(location.search).has("debug");
    client = await SignetClient.connect({
        url: cfg.webSocketUrl, apiUrl: cfg.apiUrl, token, device, store,
        log: debug ? (level, msg, fields) => console.log(`sdk ${level}: ${msg} ${fields ? JSON.stringify(fields) : ""}`) : undefined,
        onFrame: debug ? (dir, f) => console.log(`frame ${dir}: ${JSON.stringify(f).slice(0, 300)}`) : undefined,
        onState: ({ connected, synced, failedConnects, refused }) => {
            const el = $("conn");
            // A browser cannot tell why a handshake failed: the SDK asks the HTTP API (GET /v1/handshake) and says
            // what the server refuses; when it would admit one, the network or the server is down.
            el.textContent = connected ? (synced ? "connected" : "syncing…")
                : refused ? `cannot connect: ${refused.message}`
                    : failedConnects >= 3 ? `cannot connect (${failedConnects} tries): the network, or the server does not answer`
                        : "reconnecting…";
            el.title = el.textContent;
            el.classList.toggle("up", connected);
            el.dataset.state = connected ? (synced ? "synced" : "syncing") : "down";
        },
        onReceipt: receipt,
        onRead: (conv, upTo, inboxSeq) => {
            const c = conversation(conv);
            c.read = Math.max(c.read, upTo);
            c.readSeq = Math.max(c.readSeq, inboxSeq ?? 0);
            renderConversations();
        },
        onPresence: (u, s) => {
            presence.set(u, s);
            renderConversations();
            renderHeader();
        },
        onMembership: () => void loadSummary(),
        onAnswer: (a) => answered(a.messageId, `you answered ${a.option} (on another device)`),
        onRenotify: (m) => {
            // An escalation pushed this alert again: bring it back to the user.
            const title = m.conversationId.startsWith("a:") ? alertOf(m).title : textOf(m.body);
            $("conn").textContent = `⚑ again: ${title}`;
            document.title = `⚑ ${title}`;
            void open(m.conversationId);
        },
        onSent: (s) => {
            const o = outgoing.get(s.clientMsgId);
            if (o)
                o.sent = s;
            const c = conversation(s.conversationId);
            c.last = Math.max(c.last, s.convSeq);
            c.read = Math.max(c.read, s.convSeq); // what you write you have read
            renderMessages();
        },
    });
    for (const m of await client.history())
        add(m);
    for (const m of await client.groupHistory())
        add(m); // groups under read diffusion keep their own log on the device
    for (const q of await client.outbox()) {
        const conv = q.conversationId ?? directId(me, q.to ?? "");
        outgoing.set(q.clientMsgId, { clientMsgId: q.clientMsgId, conversationId: conv, text: textOf(q.body) });
        conversation(conv);
    }
    await loadSummary();
    const peers = [...conversations.keys()].filter((c) => c.startsWith("d:")).map(peerOf);
    if (peers.length)
        for (const [u, s] of Object.entries(await client.queryPresence(peers.slice(0, 100))))
            presence.set(u, s);
    renderConversations();
    const want = new URLSearchParams(location.search).get("conversation") ?? localStorage.getItem(`signet.open.${me}`);
    if (want)
        void open(want);
    void (async () => {
        for await (const m of client.messages()) {
            add(m);
            renderConversations();
            if (m.conversationId === current) {
                renderMessages();
                markRead();
            }
        }
    })();
}
async function loadSummary() {
    if (!client)
        return;
    for (const s of await client.summary()) {
        const c = conversation(s.conversationId);
        c.title = titleOf(s.conversationId, s);
        c.last = Math.max(c.last, s.last);
        c.read = Math.max(c.read, s.read);
        c.readSeq = Math.max(c.readSeq, s.readSeq ?? 0);
        c.unread = s.unread;
        c.preview ??= s.preview;
    }
    renderConversations();
}
function add(m) {
    const list = messages.get(m.conversationId) ?? [];
    if (list.some((x) => x.messageId === m.messageId))
        return;
    list.push(m);
    list.sort((a, b) => a.convSeq - b.convSeq);
    messages.set(m.conversationId, list);
    const c = conversation(m.conversationId);
    c.last = Math.max(c.last, m.convSeq);
    c.preview = m.conversationId.startsWith("a:") ? alertOf(m).title : textOf(m.body);
    if (m.from === me)
        c.read = Math.max(c.read, m.convSeq);
    for (const [id, o] of outgoing)
        if (o.sent?.messageId === m.messageId)
            outgoing.delete(id);
}
function receipt(r) {
    const map = r.kind === "read" ? readBy : delivered;
    map.set(r.conversationId, Math.max(map.get(r.conversationId) ?? 0, r.upTo));
    if (r.kind === "read")
        delivered.set(r.conversationId, Math.max(delivered.get(r.conversationId) ?? 0, r.upTo));
    if (r.conversationId === current)
        renderMessages();
}
// ---- rendering ----
function renderConversations() {
    const ul = $("conversations");
    ul.replaceChildren();
    const list = [...conversations.values()].sort((a, b) => lastAt(b) - lastAt(a) || a.id.localeCompare(b.id));
    for (const c of list) {
        const li = document.createElement("li");
        li.dataset.conversation = c.id;
        li.classList.toggle("active", c.id === current);
        const title = document.createElement("span");
        title.className = "title";
        if (c.id.startsWith("d:")) {
            const dot = document.createElement("span");
            dot.className = `dot ${presence.get(peerOf(c.id)) ?? ""}`;
            dot.title = presence.get(peerOf(c.id)) ?? "offline";
            title.append(dot);
        }
        title.append(c.title);
        li.append(title);
        const unread = unreadOf(c);
        if (unread > 0 && c.id !== current) {
            const b = document.createElement("span");
            b.className = "badge";
            b.dataset.unread = String(unread);
            b.textContent = String(unread);
            li.append(b);
        }
        else
            li.append(document.createElement("span"));
        const p = document.createElement("span");
        p.className = "preview";
        p.textContent = c.preview ?? "";
        li.append(p);
        li.onclick = () => void open(c.id);
        ul.append(li);
    }
}
function lastAt(c) {
    const list = messages.get(c.id);
    return list?.length ? Date.parse(list[list.length - 1].sentAt) : 0;
}
function renderHeader() {
    if (!current)
        return;
    const c = conversation(current);
    const status = current.startsWith("d:") ? ` · ${presence.get(peerOf(current)) ?? "offline"}` : "";
    $("conv-header").textContent = `${c.title}${status}`;
}
function alertOf(m) {
    const b = (m.body ?? {});
    return { app: b.app ?? m.from, title: b.title ?? "", body: b.body ?? "", priority: b.priority ?? "normal", ack: b.ack };
}
/** This user's answers to alerts (kept in localStorage per user: the server has them too, and says so again when asked). */
const answers = new Map();
function loadAnswers() {
    for (const [id, text] of JSON.parse(localStorage.getItem(`signet.answers.${me}`) ?? "[]"))
        answers.set(id, text);
}
function answered(messageId, text) {
    answers.set(messageId, text);
    localStorage.setItem(`signet.answers.${me}`, JSON.stringify([...answers]));
    if (current.startsWith("a:"))
        renderMessages();
}
async function answer(messageId, option) {
    try {
        const r = await client.answer(messageId, option);
        answered(messageId, `you answered ${r.option}`);
    }
    catch (err) {
        const e = err;
        if (e.code === "conflict")
            answered(messageId, e.message.replace(/^conflict: /, "").replace(/ \(request .*\)$/, ""));
        else
            alert(`Not answered: ${e.message}`);
    }
}
function renderMessages() {
    const ol = $("messages");
    const atBottom = ol.scrollHeight - ol.scrollTop - ol.clientHeight < 40;
    ol.replaceChildren();
    const list = messages.get(current) ?? [];
    for (const m of list)
        ol.append(bubble(m));
    for (const o of outgoing.values()) {
        if (o.conversationId !== current || list.some((m) => m.messageId === o.sent?.messageId))
            continue;
        const li = document.createElement("li");
        li.className = "msg mine";
        li.dataset.clientMsgId = o.clientMsgId;
        li.innerHTML = `<div class="text"></div><div class="meta"><span>${o.sent ? "stored" : "sending"}</span><span class="marks" data-mark="${o.sent ? "sent" : "pending"}">${o.sent ? "✓" : "…"}</span></div>`;
        li.querySelector(".text").textContent = o.text;
        ol.append(li);
    }
    if (atBottom)
        ol.scrollTop = ol.scrollHeight;
}
function bubble(m) {
    const li = document.createElement("li");
    li.className = "msg";
    li.dataset.messageId = m.messageId;
    li.dataset.convSeq = String(m.convSeq);
    const mine = m.from === me;
    li.classList.toggle("mine", mine);
    const meta = document.createElement("div");
    meta.className = "meta";
    const who = document.createElement("span");
    who.textContent = `${mine ? "you" : m.from} · ${new Date(m.sentAt).toLocaleTimeString()} · #${m.convSeq}`;
    const path = document.createElement("button");
    path.className = "link";
    path.textContent = "path";
    path.title = "this message's path to each device";
    path.onclick = () => void showTimeline(m.messageId);
    meta.append(who, path);
    if (m.conversationId.startsWith("a:")) {
        const a = alertOf(m);
        li.classList.add("alert", a.priority);
        const t = document.createElement("div");
        t.className = "title";
        t.textContent = a.title;
        const p = document.createElement("span");
        p.className = "priority";
        p.textContent = a.priority === "normal" ? "" : ` ${a.priority}`;
        t.append(p);
        const body = document.createElement("div");
        body.className = "text";
        body.textContent = a.body;
        li.append(t, body);
        if (a.ack?.options?.length) {
            const box = document.createElement("div");
            box.className = "answers";
            const done = answers.get(m.messageId);
            if (done) {
                box.textContent = done;
                box.dataset.answered = "true";
            }
            else {
                for (const o of a.ack.options) {
                    const b = document.createElement("button");
                    b.textContent = o;
                    b.dataset.option = o;
                    b.onclick = () => void answer(m.messageId, o);
                    box.append(b);
                }
                if (a.ack.firstAnswerWins)
                    box.append(Object.assign(document.createElement("small"), { textContent: " the first answer decides" }));
            }
            li.append(box);
        }
        li.append(meta);
        return li;
    }
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = textOf(m.body);
    li.append(text, meta);
    if (mine) {
        const marks = document.createElement("span");
        marks.className = "marks";
        let mark = "sent", label = "✓", tip = "stored on the server";
        if (m.conversationId.startsWith("d:")) {
            if ((readBy.get(m.conversationId) ?? 0) >= m.convSeq)
                [mark, label, tip] = ["read", "✓✓", "read"];
            else if ((delivered.get(m.conversationId) ?? 0) >= m.convSeq)
                [mark, label, tip] = ["delivered", "✓✓", "on a device of the recipient"];
        }
        else {
            const r = groupReceipts.get(m.messageId);
            if (r && r.members > 0 && r.read >= r.members)
                [mark, label, tip] = ["read", "✓✓", `read by all ${r.members}`];
            else if (r && r.members > 0 && r.delivered >= r.members)
                [mark, label, tip] = ["delivered", "✓✓", `on a device of all ${r.members}; read by ${r.read}`];
            else if (r)
                tip = `delivered to ${r.delivered} of ${r.members}, read by ${r.read}`;
        }
        marks.dataset.mark = mark;
        marks.classList.toggle("read", mark === "read");
        marks.textContent = label;
        marks.title = tip;
        meta.append(marks);
    }
    return li;
}
// ---- actions ----
async function open(conv) {
    current = conv;
    localStorage.setItem(`signet.open.${me}`, conv);
    conversation(conv);
    $("composer").hidden = conv.startsWith("a:");
    renderHeader();
    renderConversations();
    renderMessages();
    markRead();
    if (conv.startsWith("d:") && client) {
        // The peer's watermarks, for the marks of messages sent before this page loaded.
        const mine = (messages.get(conv) ?? []).filter((m) => m.from === me).at(-1);
        if (mine) {
            const r = await client.receipts(conv, mine.convSeq).catch(() => undefined);
            if (r?.readBy?.length)
                receipt({ type: "receipt", kind: "read", conversationId: conv, userId: peerOf(conv), upTo: mine.convSeq });
            else if (r?.deliveredBy?.length)
                receipt({ type: "receipt", kind: "delivered", conversationId: conv, userId: peerOf(conv), upTo: mine.convSeq });
        }
    }
}
/** Group receipts of this user's messages (groups get no receipt pushes: the console asks). */
const groupReceipts = new Map();
/** Asks who has this user's last messages of the open group, while one is open (every 3 s). */
async function refreshGroupReceipts() {
    if (!client || !current.startsWith("g:") || document.visibilityState === "hidden")
        return;
    const conv = current;
    const mine = (messages.get(conv) ?? []).filter((m) => m.from === me).slice(-10);
    let changed = false;
    for (const m of mine) {
        const known = groupReceipts.get(m.messageId);
        if (known && known.members > 0 && known.read >= known.members)
            continue; // final
        const r = await client.receipts(conv, m.convSeq).catch(() => undefined);
        if (!r)
            continue;
        groupReceipts.set(m.messageId, { members: r.members, delivered: r.delivered, read: r.read });
        changed = true;
    }
    if (changed && current === conv)
        renderMessages();
}
setInterval(() => void refreshGroupReceipts(), 3000);
/**
 * Unread messages of a conversation: after the read watermark; in an app's
 * alert conversation, whose convSeqs also number other users' alerts, the
 * alerts on this device above the inbox seq read up to (by convSeq while no
 * read has set it), or the server's count while none are here.
 */
function unreadOf(c) {
    if (!c.id.startsWith("a:"))
        return Math.max(0, c.last - c.read);
    const list = messages.get(c.id) ?? [];
    if (!list.length)
        return c.unread;
    return list.filter((m) => (c.readSeq > 0 ? m.seq > c.readSeq : m.convSeq > c.read)).length;
}
function markRead() {
    if (!client || !current || document.visibilityState === "hidden")
        return;
    const c = conversation(current);
    const last = Math.max(0, ...(messages.get(current) ?? []).map((m) => m.convSeq));
    if (current.startsWith("a:")) {
        // An alert can arrive after a later one (a retried post, an
        // escalation), below the watermark: what is read is the inbox seq.
        const seq = Math.max(0, ...(messages.get(current) ?? []).map((m) => m.seq));
        if (seq > c.readSeq || last > c.read) {
            c.read = Math.max(c.read, last);
            c.readSeq = Math.max(c.readSeq, seq);
            c.unread = 0;
            void client.markRead(current, c.read, seq).catch(() => { });
            renderConversations();
        }
        return;
    }
    if (last > c.read) {
        c.read = last;
        void client.markRead(current, last).catch(() => { });
        renderConversations();
    }
}
async function send() {
    const ta = $("composer-text");
    const text = ta.value.trim();
    if (!text || !client || !current)
        return;
    ta.value = "";
    const clientMsgId = crypto.randomUUID();
    const conversationId = current;
    try {
        // "…" once the draft is durable in the outbox (IndexedDB): from then
        // on it survives a reload and is sent until the server ACKs it.
        await client.sendDraft({ clientMsgId, conversationId, body: { text } }, {
            onQueued: () => {
                if (!outgoing.get(clientMsgId)?.sent)
                    outgoing.set(clientMsgId, { clientMsgId, conversationId, text });
                renderMessages();
            },
        });
    }
    catch (err) {
        outgoing.delete(clientMsgId);
        renderMessages();
        alert(`Not sent: ${err.message}`);
    }
}
const colors = {
    created: "#6b7686", stored: "#1d2430", inboxed: "#8e44ad", pushed: "#2f6fde", push_failed: "#c0392b",
    redelivery_scheduled: "#f39c12", acked: "#27ae60", read: "#16a085", awaiting_pull: "#c0392b",
};
async function showTimeline(id) {
    timelineId = id;
    $("timeline").hidden = false;
    $("timeline-id").textContent = id;
    const r = await fetch(`trace/${encodeURIComponent(id)}`);
    const j = (await r.json());
    if (!r.ok) {
        $("timeline-chart").textContent = `No trace: ${j.message ?? j.error ?? r.status}`;
        return;
    }
    drawTimeline(j.events ?? []);
}
/** Draws the events as an SVG: a lane for the server and one per user and device, time across. */
function drawTimeline(events) {
    const lanes = [];
    const laneOf = (e) => (e.deviceId ? `${e.userId} · ${e.deviceId}` : e.userId ? `${e.userId} (inbox)` : "server");
    for (const e of events)
        if (!lanes.includes(laneOf(e)))
            lanes.push(laneOf(e));
    const t0 = events.length ? Date.parse(events[0].at) : 0;
    const span = Math.max(100, ...events.map((e) => Date.parse(e.at) - t0));
    const left = 170, width = 900, laneH = 44, top = 24;
    const x = (e) => left + ((Date.parse(e.at) - t0) / span) * (width - left - 90);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(top + lanes.length * laneH + 10));
    svg.dataset.events = String(events.length);
    const el = (tag, attrs, text) => {
        const n = document.createElementNS(ns, tag);
        for (const [k, v] of Object.entries(attrs))
            n.setAttribute(k, String(v));
        if (text !== undefined)
            n.textContent = text;
        svg.append(n);
        return n;
    };
    el("text", { x: left, y: 14 }, "0 ms");
    el("text", { x: width - 150, y: 14 }, `+${span} ms`);
    lanes.forEach((lane, i) => {
        const y = top + i * laneH + laneH / 2;
        el("text", { x: 4, y: y + 4 }, lane);
        el("line", { x1: left, x2: width - 80, y1: y, y2: y, stroke: "#d5dbe5" });
    });
    const placed = new Map();
    for (const e of events) {
        const i = lanes.indexOf(laneOf(e));
        const y = top + i * laneH + laneH / 2;
        const cx = x(e);
        const key = `${i}:${Math.round(cx / 40)}`;
        const n = placed.get(key) ?? 0;
        placed.set(key, n + 1);
        const c = el("circle", { cx, cy: y, r: 6, fill: colors[e.type] ?? "#999" });
        c.dataset.type = e.type;
        const ms = Date.parse(e.at) - t0;
        el("text", { x: cx + 8, y: y - 8 + n * 12 }, `${e.type.replace("_", " ")}${ms > 0 ? ` +${ms} ms` : ""}`);
    }
    $("timeline-chart").replaceChildren(svg);
    const table = $("timeline-events");
    table.replaceChildren();
    for (const e of events) {
        const tr = document.createElement("tr");
        const who = [e.userId && `user ${e.userId}`, e.deviceId && `device ${e.deviceId}`, e.seq && `seq ${e.seq}`, e.attempt && `attempt ${e.attempt}`, e.delayMs && `in ${e.delayMs} ms`, e.detail]
            .filter(Boolean).join(", ");
        for (const v of [`+${Date.parse(e.at) - t0} ms`, e.type, e.function ?? "", who]) {
            const td = document.createElement("td");
            td.textContent = v;
            tr.append(td);
        }
        table.append(tr);
    }
}
// ---- wiring ----
$("signin-form").onsubmit = (ev) => {
    ev.preventDefault();
    const user = $("signin-user").value.trim();
    const device = $("signin-device").value.trim() || "web";
    signIn(user, device).catch((err) => {
        $("signin-error").textContent = String(err.message ?? err);
        $("signin").hidden = false;
        $("app").hidden = true;
    });
};
$("composer").onsubmit = (ev) => {
    ev.preventDefault();
    void send();
};
$("composer-text").onkeydown = (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
        ev.preventDefault();
        void send();
    }
};
$("new-chat").onsubmit = (ev) => {
    ev.preventDefault();
    const u = $("new-chat-user").value.trim();
    if (u)
        void open(directId(me, u));
};
$("new-group").onsubmit = async (ev) => {
    ev.preventDefault();
    const name = $("new-group-name").value.trim();
    const members = $("new-group-members").value.split(",").map((s) => s.trim()).filter(Boolean);
    try {
        const g = await client.createGroup(name, members);
        conversation(g.conversationId).title = name;
        void open(g.conversationId);
    }
    catch (err) {
        alert(`Group not created: ${err.message}`);
    }
};
$("presence").onchange = (ev) => {
    // A later choice made before this one's answer supersedes it: that one sets the status.
    client?.setPresence(ev.target.value).catch((err) => {
        if (!(err instanceof SupersededError))
            alert(`Status not set: ${err.message}`);
    });
};
$("signout").onclick = async () => {
    await client?.close();
    localStorage.removeItem("signet.user");
    location.search = "";
};
$("timeline-close").onclick = () => ($("timeline").hidden = true);
$("timeline-refresh").onclick = () => void showTimeline(timelineId);
document.addEventListener("visibilitychange", markRead);
const params = new URLSearchParams(location.search);
const user = params.get("user") ?? localStorage.getItem("signet.user");
if (user) {
    $("signin-user").value = user;
    $("signin-device").value = params.get("device") ?? localStorage.getItem("signet.device") ?? "web";
    $("signin-form").requestSubmit();
}
else {
    $("signin").hidden = false;
}
