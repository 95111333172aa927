// Runs the client's tests against a real kagent-fork: starts `kagent-fork serve` on a free port with
// its embedded PostgreSQL (demo sessions demo-legacy-session and demo-v1-session, owned by
// admin@kagent.dev) in a temporary directory, waits for /readyz, adds two share links, runs
// `node --test` on the compiled tests, then stops the server and its database.
//
// kagent-fork is $KAGENT_FORK_BIN, else the repository's .venv/bin/kagent-fork, else `kagent-fork` on PATH.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const repo = resolve(pkg, "../..");

const [major] = process.versions.node.split(".").map(Number);
if (major < 20) {
  console.error(`run-tests: Node 20 or newer is needed (global fetch, AbortSignal.timeout); this is ${process.version}`);
  process.exit(1);
}

const HOW_TO_GET_KAGENT_FORK =
  "get one with ./scripts/test (or: python3 -m venv .venv && .venv/bin/pip install -e .) at the repository root, " +
  "or name one with KAGENT_FORK_BIN=/path/to/kagent-fork";

function onPath(name) {
  return (process.env.PATH || "").split(":").some((dir) => dir && existsSync(join(dir, name)));
}

function kagentForkBin() {
  if (process.env.KAGENT_FORK_BIN) {
    if (existsSync(process.env.KAGENT_FORK_BIN)) return process.env.KAGENT_FORK_BIN;
    console.error(`run-tests: KAGENT_FORK_BIN=${process.env.KAGENT_FORK_BIN} does not exist: ${HOW_TO_GET_KAGENT_FORK}`);
    process.exit(1);
  }
  const venv = join(repo, ".venv", "bin", "kagent-fork");
  if (existsSync(venv)) return venv;
  if (onPath("kagent-fork")) return "kagent-fork";
  console.error(`run-tests: the kagent-fork command is needed (the tests run against a real service); ${HOW_TO_GET_KAGENT_FORK}`);
  process.exit(1);
}

function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitGone(pid, ms) {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (!alive(pid)) return true;
    await sleep(100);
  }
  return !alive(pid);
}

const bin = kagentForkBin();
const work = mkdtempSync(join(tmpdir(), "kf-ts-"));
const dataDir = join(work, "pg"); // short: PostgreSQL's socket lives here (path length limit)
const logPath = join(work, "server.log");
const port = await freePort();
const base = `http://127.0.0.1:${port}`;

const serverEnv = { ...process.env, KAGENT_FORK_DATA_DIR: dataDir };
delete serverEnv.DATABASE_URL; // the embedded database with the demo sessions, never a real one
delete serverEnv.AUTH_MODE; // kagent's default: unsecure (user from X-User-Id)

const log = openSync(logPath, "a");
console.log(`run-tests: ${bin} serve --port ${port} (data ${dataDir})`);
const server = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", String(port)], {
  env: serverEnv,
  stdio: ["ignore", log, log],
});
let serverExit = null;
server.on("exit", (code, signal) => {
  serverExit = { code, signal };
});
server.on("error", (error) => {
  serverExit = { code: null, signal: null, error };
});

function serverLog() {
  try {
    return readFileSync(logPath, "utf8").split("\n").slice(-40).join("\n");
  } catch {
    return "";
  }
}

async function stop() {
  if (server.pid !== undefined && serverExit === null) {
    // SIGINT: uvicorn shuts down gracefully and the process exits normally, which also stops the
    // embedded PostgreSQL (on SIGTERM uvicorn re-raises the signal and the database stays up).
    server.kill("SIGINT");
    if (!(await waitGone(server.pid, 40_000))) server.kill("SIGKILL");
  }
  // The embedded PostgreSQL this run started, if it outlived the server.
  const pidFile = join(dataDir, "postmaster.pid");
  if (existsSync(pidFile)) {
    const pg = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
    if (pg > 0 && alive(pg)) {
      process.kill(pg, "SIGINT"); // PostgreSQL's fast shutdown
      if (!(await waitGone(pg, 20_000))) process.kill(pg, "SIGKILL");
    }
  }
  closeSync(log);
  rmSync(work, { recursive: true, force: true });
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, async () => {
    await stop();
    process.exit(130);
  });
}

async function waitReady() {
  for (const end = Date.now() + 120_000; Date.now() < end; ) {
    if (serverExit !== null) throw new Error(`kagent-fork exited before it was ready: ${JSON.stringify(serverExit)}`);
    try {
      const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(250);
  }
  throw new Error("kagent-fork was not ready after 120 s");
}

// Two share links of demo-legacy-session, written as kagent writes them (its session_share table).
function addShares() {
  const python = process.env.KAGENT_FORK_PYTHON ?? join(dirname(bin), "python");
  if (!existsSync(python)) {
    console.log(`run-tests: no Python next to ${bin}: the share-link tests are skipped`);
    return {};
  }
  const readOnly = `ro-${process.pid}-${Date.now()}`;
  const readWrite = `rw-${process.pid}-${Date.now()}`;
  const code = `
import asyncio, sys, asyncpg

async def main(host, ro, rw):
    conn = await asyncpg.connect(host=host, user="postgres", database="postgres")
    try:
        await conn.execute(
            "INSERT INTO session_share (token, session_id, user_id, read_only) VALUES "
            "($1, 'demo-legacy-session', 'admin@kagent.dev', true), "
            "($2, 'demo-legacy-session', 'admin@kagent.dev', false)",
            ro, rw,
        )
    finally:
        await conn.close()

asyncio.run(main(*sys.argv[1:]))
`;
  const run = spawnSync(python, ["-c", code, dataDir, readOnly, readWrite], { encoding: "utf8" });
  if (run.status !== 0) throw new Error(`adding share links failed: ${run.stderr || run.error}`);
  return { KF_TEST_SHARE_READ_ONLY: readOnly, KF_TEST_SHARE_READ_WRITE: readWrite };
}

let status = 1;
try {
  await waitReady();
  const shares = addShares();
  const testDir = join(pkg, "build", "test");
  const files = readdirSync(testDir)
    .filter((f) => f.endsWith(".test.js"))
    .map((f) => join(testDir, f));
  const tests = spawn(process.execPath, ["--test", ...files], {
    stdio: "inherit",
    env: { ...process.env, KAGENT_FORK_URL: base, ...shares },
  });
  status = await new Promise((done) => {
    tests.on("exit", (code) => done(code ?? 1));
    tests.on("error", () => done(1));
  });
  if (status !== 0) console.error(`run-tests: tests failed; the server's log ends with:\n${serverLog()}`);
} catch (error) {
  console.error(`run-tests: ${error.message}\n${serverLog()}`);
  status = 1;
} finally {
  await stop();
}
process.exit(status);
