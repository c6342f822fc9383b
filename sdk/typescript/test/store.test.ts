// The device stores: the file store's journal survives a torn write and a
// compaction, and keeps a second process out; IndexedDBStore and the
// memory store keep the same contract (checked here on fake-indexeddb, an
// implementation of the IndexedDB spec; the browser tests use Chromium's).
import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import "fake-indexeddb/auto"; // IndexedDB and IDBKeyRange as a browser has them
import { IDBFactory } from "fake-indexeddb";
import { IndexedDBStore, MemoryStore, type DeviceStore, type Entry, type SentFrame } from "../src/index.js";
import { FileStore, StoreInUseError } from "../src/node.js";

const entry = (seq: number, id = `m${seq}`): Entry => ({
  seq, message: { messageId: id, conversationId: "d:a:b", convSeq: seq, from: "a", body: { n: seq }, sentAt: "2026-12-02T00:00:00.000Z" },
});
const sent = (id: string): SentFrame => ({ type: "sent", clientMsgId: id, messageId: `m-${id}`, conversationId: "d:a:b", convSeq: 1, sentAt: "2026-12-02T00:00:00.000Z" });

async function contract(name: string, open: () => Promise<DeviceStore>, reopen: (s: DeviceStore) => Promise<DeviceStore>) {
  await test(`${name}: apply takes only cursor + 1, and entry and cursor survive a reopen together`, async () => {
    let st = await open();
    assert.deepEqual(await st.apply(entry(2)), { applied: false, known: false }, "a gap is not applied");
    assert.deepEqual(await st.apply(entry(1)), { applied: true, known: false });
    assert.deepEqual(await st.apply(entry(1)), { applied: false, known: false }, "a duplicate is not applied");
    await st.apply(entry(2));
    await st.setEpoch("e1");
    st = await reopen(st);
    assert.deepEqual(await st.position(), { cursor: 2, epoch: "e1" });
    assert.deepEqual((await st.entries(0)).map((e) => e.seq), [1, 2]);
    assert.deepEqual((await st.entries(1, 1)).map((e) => e.seq), [2]);
    // A reset forgets the position and remembers the messages as known.
    await st.reset("e2");
    assert.deepEqual(await st.position(), { cursor: 0, epoch: "e2" });
    assert.deepEqual(await st.apply(entry(1, "m2")), { applied: true, known: true }, "m2 was shown before the reset");
    await st.skip(1, 5);
    assert.equal(await st.skipped(), "2-5");
    assert.equal((await st.position()).cursor, 5);
    await st.close();
  });
  await test(`${name}: newestConvSeq finds the newest held entry of a conversation (a send's "seen")`, async () => {
    let st = await open();
    const at = (seq: number, conversationId: string, convSeq: number): Entry => ({
      seq, message: { messageId: `m${seq}`, conversationId, convSeq, from: "a", body: seq, sentAt: "2026-12-02T00:00:00.000Z" },
    });
    for (const e of [at(1, "d:a:b", 4), at(2, "d:a:c", 9), at(3, "d:a:b", 5), at(4, "g:team", 2)]) await st.apply(e);
    st = await reopen(st);
    assert.equal(await st.newestConvSeq!((c) => c === "d:a:b"), 5);
    assert.equal(await st.newestConvSeq!((c) => c === "d:a:c"), 9);
    assert.equal(await st.newestConvSeq!((c) => c === "d:a:z"), 0, "none held");
    await st.reset("e9");
    assert.equal(await st.newestConvSeq!((c) => c === "d:a:b"), 0, "forgotten with the entries at a resync");
    await st.close();
  });
  await test(`${name}: the outbox keeps its order across a reopen and a settled send's ACK`, async () => {
    let st = await open();
    for (const id of ["c1", "c2", "c3"]) {
      assert.deepEqual(await st.enqueue({ clientMsgId: id, frame: { action: "send", clientMsgId: id, to: "b", body: id }, at: 1, fp: `fp-${id}` }), {});
    }
    assert.equal((await st.enqueue({ clientMsgId: "c2", frame: { action: "send", clientMsgId: "c2", to: "b", body: "x" }, at: 1, fp: "other" })).pending?.fp, "fp-c2");
    await st.settle("c2", sent("c2"));
    st = await reopen(st);
    assert.deepEqual((await st.outbox()).map((o) => o.clientMsgId), ["c1", "c3"]);
    const again = await st.enqueue({ clientMsgId: "c2", frame: { action: "send", clientMsgId: "c2", to: "b", body: "c2" }, at: 1, fp: "fp-c2" });
    assert.equal(again.prev?.sent.messageId, "m-c2");
    assert.equal(again.prev?.fp, "fp-c2");
    await st.settle("c1"); // a refused send: out of the outbox, no ACK kept
    assert.deepEqual((await st.outbox()).map((o) => o.clientMsgId), ["c3"]);
    await st.close();
  });
  await test(`${name}: a read-diffused group's message and cursor move together; a push only at cursor + 1 of a known group`, async () => {
    let st = await open();
    assert.deepEqual(await st.groupCursor("g:ops"), { cursor: 0, known: false });
    assert.equal(await st.applyGroup(groupMessage("g:ops", 1), false), false, "a push to a group never pulled is not applied");
    assert.equal(await st.applyGroup(groupMessage("g:ops", 3), true), true, "a synced message above the cursor is (the member's range may start there)");
    assert.equal(await st.applyGroup(groupMessage("g:ops", 5), false), false, "a pushed gap is not");
    assert.equal(await st.applyGroup(groupMessage("g:ops", 4), false), true);
    assert.equal(await st.applyGroup(groupMessage("g:ops", 4), true), false, "a duplicate is not");
    await st.markGroupKnown("g:dev", 7);
    await st.markGroupKnown("g:dev", 2); // never back
    await st.applyGroup(groupMessage("g:dev", 8), false);
    st = await reopen(st);
    assert.deepEqual(await st.groupCursor("g:ops"), { cursor: 4, known: true });
    assert.deepEqual(await st.groupCursor("g:dev"), { cursor: 8, known: true });
    assert.deepEqual((await st.groupMessages("g:ops")).map((m) => m.convSeq), [3, 4]);
    assert.deepEqual((await st.groupMessages("g:ops", 3)).map((m) => m.convSeq), [4]);
    assert.deepEqual((await st.groupMessages("")).map((m) => `${m.conversationId}#${m.convSeq}`), ["g:dev#8", "g:ops#3", "g:ops#4"]);
    await st.reset("e3"); // the inbox's epoch says nothing about a group's log
    assert.deepEqual(await st.groupCursor("g:ops"), { cursor: 4, known: true });
    assert.deepEqual(await st.position(), { cursor: 0, epoch: "e3" }, "no inbox entry came from a group");
    await st.close();
  });
}

const groupMessage = (conversationId: string, convSeq: number) => ({
  messageId: `${conversationId}-${convSeq}`, conversationId, convSeq, from: "a", body: { convSeq }, sentAt: "2026-12-03T00:00:00.000Z",
});

const dir = mkdtempSync(join(tmpdir(), "signet-store-"));
let files = 0;

await contract("MemoryStore", async () => new MemoryStore(), async (s) => (s as MemoryStore));
await contract("FileStore", async () => FileStore.open(join(dir, `c${++files}.db`)), async (s) => {
  const path = (s as FileStore).path;
  await s.close();
  return FileStore.open(path);
});
const idb = new IDBFactory();
const idbNames = new Map<DeviceStore, string>();
await contract("IndexedDBStore", async () => {
  const name = `db${++files}`;
  const st = await IndexedDBStore.open(name, idb);
  idbNames.set(st, name);
  return st;
}, async (s) => {
  await s.close();
  const st = await IndexedDBStore.open(idbNames.get(s)!, idb);
  idbNames.set(st, idbNames.get(s)!);
  return st;
});

test("FileStore: a torn last line (a write the process died in) is ignored; the lines before it hold", async () => {
  const path = join(dir, "torn.db");
  const st = await FileStore.open(path);
  await st.apply(entry(1));
  await st.apply(entry(2));
  await st.close();
  appendFileSync(path, '{"op":"apply","entry":{"seq":3,"mess');
  const again = await FileStore.open(path);
  assert.deepEqual(await again.position(), { cursor: 2, epoch: "" });
  await again.close();
});

test("FileStore: 5,000 changes are compacted into one snapshot line that reads back the same", async () => {
  const path = join(dir, "compact.db");
  const st = await FileStore.open(path);
  for (let i = 1; i <= 5200; i++) await st.apply(entry(i));
  await st.close();
  const lines = readFileSync(path, "utf8").trim().split("\n");
  assert.ok(lines.length < 300, `compacted: ${lines.length} lines`);
  assert.ok(lines[0].startsWith('{"op":"snapshot"'));
  const again = await FileStore.open(path);
  assert.equal((await again.position()).cursor, 5200);
  assert.equal((await again.entries(5199)).length, 1);
  await again.close();
});

test("IndexedDBStore: a database of version 1 (before read-diffused groups) opens with its entries and takes group messages", async () => {
  const name = "v1db";
  await new Promise<void>((ok, fail) => {
    const req = idb.open(name, 1);
    req.onupgradeneeded = () => {
      const db = req.result;
      db.createObjectStore("meta");
      db.createObjectStore("inbox", { keyPath: "seq" });
      db.createObjectStore("outbox", { keyPath: "order", autoIncrement: true }).createIndex("id", "item.clientMsgId", { unique: true });
      db.createObjectStore("sent");
      db.createObjectStore("known");
    };
    req.onsuccess = () => {
      const t = req.result.transaction(["meta", "inbox"], "readwrite");
      t.objectStore("inbox").put(entry(1));
      t.objectStore("meta").put(1, "cursor");
      t.oncomplete = () => (req.result.close(), ok());
      t.onerror = () => fail(t.error);
    };
    req.onerror = () => fail(req.error);
  });
  const st = await IndexedDBStore.open(name, idb);
  assert.deepEqual(await st.position(), { cursor: 1, epoch: "" });
  assert.equal(await st.applyGroup(groupMessage("g:ops", 1), true), true);
  assert.deepEqual(await st.groupCursor("g:ops"), { cursor: 1, known: true });
  await st.close();
});

test("FileStore: a snapshot keeps the groups' cursors and messages", async () => {
  const path = join(dir, "groups-compact.db");
  const st = await FileStore.open(path);
  await st.applyGroup(groupMessage("g:ops", 1), true);
  for (let i = 1; i <= 5000; i++) await st.apply(entry(i));
  await st.close();
  assert.ok(readFileSync(path, "utf8").startsWith('{"op":"snapshot"'), "compacted");
  const again = await FileStore.open(path);
  assert.deepEqual(await again.groupCursor("g:ops"), { cursor: 1, known: true });
  assert.deepEqual((await again.groupMessages("g:ops")).map((m) => m.convSeq), [1]);
  await again.close();
});

test("FileStore: a second open of a store in use is refused", async () => {
  const path = join(dir, "locked.db");
  const st = await FileStore.open(path);
  await assert.rejects(FileStore.open(path), StoreInUseError);
  await st.close();
  await (await FileStore.open(path)).close();
});
