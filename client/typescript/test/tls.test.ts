// TLS: the client's `tls` option (a CA file, and a client certificate for mutual TLS)
// against a server with CTXGUARD_TLS_CERT / KEY / CLIENT_CA; certificates made with the
// openssl CLI in a temporary directory.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { AdminClient, adminpb, Client, Unavailable } from "../src/index.js";
import { ADMIN_KEY, Server, sid } from "./harness.js";

let dir: string;
let server: Server;

function openssl(...args: string[]): void {
  const r = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`openssl ${args.join(" ")}: ${r.stderr || r.error}`);
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cg-ts-tls-"));
  const newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl("req", "-x509", ...newkey, "-days", "2", "-subj", "/CN=ctxguard ts ca", "-keyout", "ca.key", "-out", "ca.pem");
  writeFileSync(join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  writeFileSync(join(dir, "client.ext"), "extendedKeyUsage=clientAuth\n");
  for (const [name, ext] of [["server", "server.ext"], ["client", "client.ext"]]) {
    openssl("req", ...newkey, "-subj", `/CN=ctxguard ts ${name}`, "-keyout", `${name}.key`, "-out", `${name}.csr`);
    openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2", "-extfile", ext!, "-out", `${name}.pem`);
  }
  server = new Server({
    env: {
      CTXGUARD_TLS_CERT: join(dir, "server.pem"),
      CTXGUARD_TLS_KEY: join(dir, "server.key"),
      CTXGUARD_TLS_CLIENT_CA: join(dir, "ca.pem"),
    },
  });
  await server.start(0, 30_000, { rootCerts: join(dir, "ca.pem"), privateKey: join(dir, "client.key"), certChain: join(dir, "client.pem") });
});

after(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("mutual TLS with the CA and a client certificate given as files", async () => {
  const tls = { rootCerts: join(dir, "ca.pem"), privateKey: join(dir, "client.key"), certChain: join(dir, "client.pem") };
  const admin = new AdminClient({ target: server.target, adminKey: ADMIN_KEY, tls });
  const t = await admin.createTenant({ name: sid("tls") });
  const k = await admin.createApiKey({ tenantId: t.tenant!.tenantId, name: "tls", role: adminpb.ApiKeyRole.API_KEY_ROLE_ADMIN });
  admin.close();
  const client = new Client({ target: server.target, apiKey: k.secret, tls });
  try {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 1_000 } });
    assert.equal((await client.getUsage({ scope: s })).root!.budget!.settings!.limitTokens, 1_000);
  } finally {
    client.close();
  }
  // Without a client certificate the handshake is refused.
  const anonymous = new Client({ target: server.target, apiKey: k.secret, tls: { rootCerts: join(dir, "ca.pem") }, retry: { maxAttempts: 1 } });
  try {
    await assert.rejects(anonymous.getUsage({}), Unavailable);
  } finally {
    anonymous.close();
  }
});
