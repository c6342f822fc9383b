// @signet-im/client: Signet's TypeScript client SDK. Browsers and Node.js 20+.
export * from "./client.js";
export * from "./store.js";
export * from "./frames.js";
export { IndexedDBStore } from "./indexeddb.js";
