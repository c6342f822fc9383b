// Builds the console's JavaScript into the static folder that the Go
// binary embeds (shared/console/static, where its index.html and style.css
// live): the SDK (sdk/typescript, compiled by its own tsc) and the
// console's TypeScript, plain ES modules that the browser loads through an
// import map: no bundler, and no Node.js to run it.
// With --check it builds into a temporary folder and fails if the
// committed folder differs (the tests run it, so the two cannot drift).
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const args = process.argv.slice(2);
const check = args[0] === "--check";
const target = resolve(args.at(-1));
const here = import.meta.dirname;
const sdk = resolve(here, "../../sdk/typescript");
const tsc = (dir, project) => execFileSync(process.execPath, [join(dir, "node_modules/typescript/bin/tsc"), "-p", project], { cwd: dir, stdio: "inherit" });

tsc(sdk, "tsconfig.json");
tsc(here, "tsconfig.json");

// index.html and style.css are sources kept in the target folder itself;
// the build writes the JavaScript beside them (app.js, sdk/).
const out = check ? mkdtempSync(join(tmpdir(), "console-")) : target;
rmSync(join(out, "sdk"), { recursive: true, force: true });
rmSync(join(out, "app.js"), { force: true });
mkdirSync(join(out, "sdk"), { recursive: true });
// Only the runtime JavaScript, without source map references.
const js = (from, to) => {
  for (const f of readdirSync(from).filter((f) => f.endsWith(".js")).sort()) {
    if (f === "node.js") continue; // Node-only (the file store)
    writeFileSync(join(to, f), readFileSync(join(from, f), "utf8").replace(/\n\/\/# sourceMappingURL=.*\n?$/, "\n"));
  }
};
js(join(sdk, "dist"), join(out, "sdk"));
js(join(here, "build/app"), out);

if (check) {
  const list = (d) => readdirSync(d, { recursive: true }).map(String).filter((f) => f === "app.js" || f.startsWith("sdk")).sort();
  const want = list(out), have = list(target);
  const stale = want.filter((f) => !f.endsWith("/") && (() => {
    try { return readFileSync(join(out, f), "utf8") !== readFileSync(join(target, f), "utf8"); } catch (e) { return e.code !== "EISDIR"; }
  })());
  const extra = have.filter((f) => !want.includes(f));
  rmSync(out, { recursive: true, force: true });
  if (stale.length || extra.length) {
    console.error(`shared/console/static is not what web/console and sdk/typescript build now (run: make console):\n  differs: ${stale.join(", ") || "-"}\n  extra: ${extra.join(", ") || "-"}`);
    process.exit(1);
  }
  console.log("shared/console/static is up to date");
}
