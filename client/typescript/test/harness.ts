// Test support: a real ctxguard server (CG_SERVER_BIN) on 127.0.0.1:0 with its own
// PostgreSQL schema in the throwaway services (CG_TEST_PG_DSN, CG_TEST_REDIS_URL, started
// by scripts/run-tests.mjs or by `make test`), a tenant and an API key made with
// AdminService, and a deadline-bounded poll helper. Missing variables fail, never skip.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { Client as RawClient, status as GrpcStatus } from "@grpc/grpc-js";

import { ApiKeyRole } from "../gen/ctxguard/v1/admin.js";
import { AdminClient, Client, type ClientOptions, type TlsOptions } from "../src/index.js";

export function requireEnv(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(
      `${name} is not set: run the tests with \`npm test\` (scripts/run-tests.mjs starts the services) or through ctest`,
    );
  }
  return v;
}

export const ADMIN_KEY = "ts-sdk-admin-" + randomUUID().replace(/-/g, "");

export function psql(sql: string): string {
  const r = spawnSync("psql", ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", requireEnv("CG_TEST_PG_DSN"), "-c", sql], {
    encoding: "utf8",
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`psql failed for ${sql}: ${r.stderr || r.error}`);
  return r.stdout;
}

function dsnWithSchema(dsn: string, schema: string): string {
  if (dsn.includes("://")) {
    const opt = "options=" + encodeURIComponent(`-csearch_path=${schema}`);
    return dsn + (dsn.includes("?") ? "&" : "?") + opt;
  }
  return `${dsn} options='-csearch_path=${schema}'`;
}

/** Waits for `cond` to hold (polling every `everyMs`) until `timeoutMs`; fails with `what`. */
export async function poll<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${String(last)})` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** One ctxguard process. */
export class Server {
  proc: ChildProcess | undefined;
  port = 0;
  readonly schema: string;
  readonly ownSchema: boolean;
  private stderr: string[] = [];
  private exited: Promise<number | null> | undefined;

  constructor(opts: { schema?: string; env?: Record<string, string> } = {}) {
    this.ownSchema = opts.schema === undefined;
    this.schema = opts.schema ?? "cg_ts_" + randomUUID().replace(/-/g, "").slice(0, 12);
    this.extraEnv = opts.env ?? {};
  }
  private readonly extraEnv: Record<string, string>;
  private tls: TlsOptions | undefined;

  get target(): string {
    return `127.0.0.1:${this.port}`;
  }

  log(): string {
    return this.stderr.slice(-40).join("\n");
  }

  /** Starts it (on `port`, or any free port) and waits for Health SERVING. */
  async start(port = 0, timeoutMs = 30_000, tls?: TlsOptions): Promise<this> {
    this.tls = tls;
    if (this.ownSchema && port === 0 && this.proc === undefined) psql(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("CTXGUARD_") && v !== undefined) env[k] = v;
    Object.assign(env, {
      CTXGUARD_LISTEN: `127.0.0.1:${port}`,
      CTXGUARD_PG_DSN: dsnWithSchema(requireEnv("CG_TEST_PG_DSN"), this.schema),
      CTXGUARD_REDIS_URL: requireEnv("CG_TEST_REDIS_URL"),
      CTXGUARD_ADMIN_KEY: ADMIN_KEY,
      CTXGUARD_SHUTDOWN_GRACE_MS: "2000",
      CTXGUARD_SWEEP_INTERVAL_MS: "500",
      ...this.extraEnv,
    });
    const proc = spawn(requireEnv("CG_SERVER_BIN"), [], { env, stdio: ["ignore", "ignore", "pipe"] });
    this.proc = proc;
    this.exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
    const portSeen = new Promise<number>((resolve, reject) => {
      let buf = "";
      const timer = setTimeout(() => reject(new Error(`the server did not report its port within ${timeoutMs} ms:\n${this.log()}`)), timeoutMs);
      proc.stderr!.setEncoding("utf8");
      proc.stderr!.on("data", (chunk: string) => {
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          this.stderr.push(line);
          const m = /msg=listening.*\bport=(\d+)/.exec(line);
          if (m) {
            clearTimeout(timer);
            resolve(Number(m[1]));
          }
        }
      });
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the server exited (${code}) before listening:\n${this.log()}`));
      });
    });
    this.port = await portSeen;
    await this.waitServing(timeoutMs);
    return this;
  }

  /** Health/Check until SERVING (raw bytes: an empty request; SERVING is `08 01`). */
  async waitServing(timeoutMs = 30_000): Promise<void> {
    const raw = new RawClient(this.target, Client.credentials(this.tls));
    try {
      await poll(
        `Health SERVING on ${this.target}`,
        () =>
          new Promise<boolean>((resolve) => {
            raw.makeUnaryRequest(
              "/grpc.health.v1.Health/Check",
              () => Buffer.alloc(0),
              (b: Buffer) => b,
              {},
              { deadline: new Date(Date.now() + 2_000) },
              (err, res?: Buffer) => resolve(!err && res !== undefined && res.equals(Buffer.from([0x08, 0x01]))),
            );
          }),
        timeoutMs,
      );
    } finally {
      raw.close();
    }
  }

  /** SIGTERM and wait for the exit. */
  async stop(): Promise<void> {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc?.kill("SIGKILL"), 10_000);
      await this.exited;
      clearTimeout(t);
    }
  }

  /** Stops it, drops its schema, and fails on a sanitizer report in its stderr. */
  async close(): Promise<void> {
    await this.stop();
    if (this.ownSchema) psql(`DROP SCHEMA IF EXISTS ${this.schema} CASCADE`);
    const marks = ["ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer"];
    const at = this.stderr.findIndex((l) => marks.some((m) => l.includes(m)));
    if (at >= 0) throw new Error(`the server's sanitizers reported:\n${this.stderr.slice(at, at + 60).join("\n")}`);
  }

  admin(): AdminClient {
    return new AdminClient({ target: this.target, adminKey: ADMIN_KEY });
  }

  /** A Client with a new operator key of tenantId (it decides approvals: the key that
   * opened one may not). */
  async operatorClient(tenantId: string): Promise<{ client: Client; keyId: string }> {
    const admin = this.admin();
    try {
      const k = await admin.createApiKey({ tenantId, name: "ts-operator", role: ApiKeyRole.API_KEY_ROLE_OPERATOR });
      return { client: new Client({ target: this.target, apiKey: k.secret }), keyId: k.key!.keyId };
    } finally {
      admin.close();
    }
  }

  /** A new tenant and a Client with its key. */
  async tenantClient(opts: Omit<ClientOptions, "target" | "apiKey"> = {}): Promise<{ client: Client; apiKey: string; tenantId: string }> {
    const admin = this.admin();
    try {
      const t = await admin.createTenant({ name: "ts-" + randomUUID().slice(0, 8) });
      // A tenant admin: the tests set budgets and spend with the same key.
      const k = await admin.createApiKey({
        tenantId: t.tenant!.tenantId,
        name: "ts-sdk",
        role: ApiKeyRole.API_KEY_ROLE_ADMIN,
      });
      return { client: new Client({ ...opts, target: this.target, apiKey: k.secret }), apiKey: k.secret, tenantId: t.tenant!.tenantId };
    } finally {
      admin.close();
    }
  }
}

export { GrpcStatus };

/** A unique session id. */
export const sid = (prefix = "s"): string => `${prefix}-${randomUUID().slice(0, 8)}`;
