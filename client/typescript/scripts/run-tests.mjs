// run-tests.mjs - `npm test`: the compiled tests (dist/test/*.test.js) with node's built-in
// test runner, against the real server.
//
// The server is CG_SERVER_BIN, else $CG_BUILD_DIR/bin/ctxguard, else <repo>/build/bin/ctxguard
// (build it first: scripts/build.sh). PostgreSQL and Redis come from CG_TEST_PG_DSN and
// CG_TEST_REDIS_URL (as ctest / `make test` set them); without them this starts throwaway
// ones with the repository's scripts/services.sh under <repo>/.run/ts-sdk-<pid> and
// destroys them afterwards.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(pkg, "..", "..");
const env = { ...process.env };

if (!env.CG_SERVER_BIN) {
  env.CG_SERVER_BIN = join(env.CG_BUILD_DIR || join(repo, "build"), "bin", "ctxguard");
}
if (!existsSync(env.CG_SERVER_BIN)) {
  console.error(`run-tests: no server at ${env.CG_SERVER_BIN}: build it (scripts/build.sh build) or set CG_SERVER_BIN`);
  process.exit(1);
}

const testDir = join(pkg, "dist", "test");
if (!existsSync(testDir)) {
  console.error("run-tests: dist/test is missing: run `npm run build` first");
  process.exit(1);
}
const files = readdirSync(testDir)
  .filter((f) => f.endsWith(".test.js"))
  .sort()
  .map((f) => join(testDir, f));
const only = process.argv.slice(2);
const selected = only.length ? files.filter((f) => only.some((o) => f.includes(o))) : files;

let servicesDir = "";
const services = join(repo, "scripts", "services.sh");
function destroy() {
  if (servicesDir) {
    spawnSync("bash", [services, "destroy", servicesDir], { stdio: "inherit" });
    servicesDir = "";
  }
}
if (!env.CG_TEST_PG_DSN || !env.CG_TEST_REDIS_URL) {
  servicesDir = join(repo, ".run", `ts-sdk-${process.pid}`);
  const r = spawnSync("bash", [services, "start", "--fast", servicesDir], { stdio: "inherit" });
  if (r.status !== 0) {
    destroy();
    console.error("run-tests: scripts/services.sh start failed");
    process.exit(1);
  }
  for (const line of readFileSync(join(servicesDir, "env"), "utf8").split("\n")) {
    const m = /^export ([A-Z_]+)=(.*)$/.exec(line.trim());
    if (m) env[m[1]] = m[2].replace(/^'(.*)'$/, "$1");
  }
}

const child = spawn(process.execPath, ["--test", ...selected], { stdio: "inherit", env, cwd: pkg });
const forward = (sig) => child.kill(sig);
process.on("SIGINT", forward);
process.on("SIGTERM", forward);
child.on("exit", (code, signal) => {
  destroy();
  process.exit(code ?? (signal ? 1 : 0));
});
