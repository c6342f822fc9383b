// Node.js-only parts of the SDK: import from "@signet-im/client/node".
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { JournaledStore, emptyState, groupKey, mutate, type Mutation, type State } from "./store.js";

export * from "./index.js";

/** The error FileStore.open gives when another live process has the file. */
export class StoreInUseError extends Error {
  constructor(path: string, pid: number) {
    super(`device store ${path} is in use by process ${pid} (one process per device; give this one another device id)`);
    this.name = "StoreInUseError";
  }
}

/** How many journal records FileStore keeps before it rewrites the file as one snapshot. */
const compactEvery = 5000;

/**
 * A device store in one file: a journal of changes, one JSON line each,
 * written and fsynced before the change is applied — so `apply` (entry and
 * cursor in one line) is atomic, and a process killed at any point leaves
 * either the whole line or, torn, a last line that is ignored. Every 5,000
 * changes the file is rewritten as a snapshot (written beside it, fsynced,
 * renamed over it). A lock file beside it keeps a second live process out.
 */
export class FileStore extends JournaledStore {
  private fd = -1;
  private records = 0;

  private constructor(readonly path: string) {
    super();
  }

  static async open(path: string): Promise<FileStore> {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const st = new FileStore(path);
    st.lock();
    try {
      st.load();
      st.fd = openSync(path, "a", 0o600);
    } catch (err) {
      st.unlock();
      throw err;
    }
    return st;
  }

  private lock(): void {
    const lock = this.path + ".lock";
    for (let tries = 0; tries < 2; tries++) {
      try {
        const fd = openSync(lock, "wx", 0o600);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        const pid = Number(readFileSync(lock, "utf8"));
        if (pid && pid !== process.pid && alive(pid)) throw new StoreInUseError(this.path, pid);
        if (pid === process.pid) throw new StoreInUseError(this.path, pid);
        unlinkSync(lock); // its process is gone
      }
    }
    throw new Error(`cannot lock ${this.path}`);
  }

  private unlock(): void {
    try {
      unlinkSync(this.path + ".lock");
    } catch {
      // already gone
    }
  }

  private load(): void {
    if (!existsSync(this.path)) return;
    const lines = readFileSync(this.path, "utf8").split("\n");
    for (const line of lines) {
      if (!line) continue;
      let rec: Mutation | { op: "snapshot"; state: SerialState };
      try {
        rec = JSON.parse(line);
      } catch {
        break; // a torn last line: the change it began never happened
      }
      if (rec.op === "snapshot") this.state = fromSerial(rec.state);
      else mutate(this.state, rec);
      this.records++;
    }
  }

  protected async record(m: Mutation): Promise<void> {
    writeSync(this.fd, JSON.stringify(m) + "\n");
    fsyncSync(this.fd);
    if (++this.records >= compactEvery) this.compactAfter = true;
  }

  private compactAfter = false;

  override async apply(e: Parameters<JournaledStore["apply"]>[0]) {
    const r = await super.apply(e);
    this.maybeCompact();
    return r;
  }

  override async applyGroup(m: Parameters<JournaledStore["applyGroup"]>[0], synced: boolean) {
    const r = await super.applyGroup(m, synced);
    this.maybeCompact();
    return r;
  }

  override async settle(id: string, sent?: Parameters<JournaledStore["settle"]>[1]) {
    await super.settle(id, sent);
    this.maybeCompact();
  }

  /** Rewrites the journal as one snapshot line. */
  private maybeCompact(): void {
    if (!this.compactAfter) return;
    this.compactAfter = false;
    const tmp = this.path + ".tmp";
    writeFileSync(tmp, JSON.stringify({ op: "snapshot", state: toSerial(this.state) }) + "\n", { mode: 0o600 });
    const t = openSync(tmp, "r+");
    fsyncSync(t);
    closeSync(t);
    closeSync(this.fd);
    renameSync(tmp, this.path);
    this.fd = openSync(this.path, "a", 0o600);
    this.records = 1;
  }

  override async close(): Promise<void> {
    if (this.closed) return;
    await super.close();
    closeSync(this.fd);
    this.unlock();
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

type SerialState = Omit<State, "inbox" | "sent" | "known" | "groupCursors" | "groupLog"> & {
  inbox: State["inbox"] extends Map<number, infer E> ? E[] : never;
  sent: [string, State["sent"] extends Map<string, infer R> ? R : never][];
  known: string[];
  // Absent in a snapshot written before read-diffused groups.
  groupCursors?: [string, number][];
  groupLog?: (State["groupLog"] extends Map<string, infer M> ? M : never)[];
};

function toSerial(s: State): SerialState {
  return {
    ...s, inbox: [...s.inbox.values()], sent: [...s.sent.entries()], known: [...s.known],
    groupCursors: [...s.groupCursors.entries()], groupLog: [...s.groupLog.values()],
  };
}

function fromSerial(s: SerialState): State {
  const st = emptyState();
  Object.assign(st, s, {
    inbox: new Map(s.inbox.map((e) => [e.seq, e])), sent: new Map(s.sent), known: new Set(s.known),
    groupCursors: new Map(s.groupCursors ?? []), groupLog: new Map((s.groupLog ?? []).map((m) => [groupKey(m.conversationId, m.convSeq), m])),
  });
  return st;
}
