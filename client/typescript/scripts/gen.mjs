// gen.mjs - generates TypeScript from the repository's protos (the wire contract in
// ../../proto/ctxguard/v1) and google.rpc.Status/error_details (Debian's
// golang-github-gogo-googleapis-dev) with the system protoc and ts-proto, into gen/.
// Nothing generated is committed; `npm run build` runs this before tsc.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const out = join(pkg, "gen");
const protoRoot = process.env.CTXGUARD_PROTO_DIR || resolve(pkg, "..", "..", "proto");
const googleapis =
  process.env.CTXGUARD_GOOGLEAPIS_DIR || "/usr/share/gocode/src/github.com/gogo/googleapis";
const wkt = process.env.CTXGUARD_PROTOBUF_INCLUDE || "/usr/include";
const protoc = process.env.PROTOC || "protoc";
const plugin = join(pkg, "node_modules", ".bin", "protoc-gen-ts_proto");

function need(path, hint) {
  if (!existsSync(path)) {
    console.error(`gen: ${path} is missing: ${hint}`);
    process.exit(1);
  }
}
need(join(protoRoot, "ctxguard", "v1"), "run from the ctxguard repository (or set CTXGUARD_PROTO_DIR)");
need(join(googleapis, "google", "rpc", "status.proto"),
  "apt-get install --no-install-recommends golang-github-gogo-googleapis-dev (or set CTXGUARD_GOOGLEAPIS_DIR)");
need(join(wkt, "google", "protobuf", "any.proto"),
  "apt-get install --no-install-recommends libprotobuf-dev (or set CTXGUARD_PROTOBUF_INCLUDE)");
need(plugin, "run npm ci first");

const ours = readdirSync(join(protoRoot, "ctxguard", "v1"))
  .filter((f) => f.endsWith(".proto"))
  .sort()
  .map((f) => `ctxguard/v1/${f}`);
const opts = [
  "outputServices=grpc-js",
  "esModuleInterop=true",
  "importSuffix=.js",
  "env=node",
  "forceLong=number",
  "useDate=false",
  "outputJsonMethods=false",
  "useExactTypes=false",
].join(",");

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const args = [
  `--plugin=protoc-gen-ts_proto=${plugin}`,
  `--ts_proto_out=${out}`,
  `--ts_proto_opt=${opts}`,
  `-I${protoRoot}`,
  `-I${googleapis}`,
  `-I${wkt}`,
  ...ours,
  "google/rpc/status.proto",
  "google/rpc/error_details.proto",
];
const r = spawnSync(protoc, args, { stdio: "inherit" });
if (r.error) {
  console.error(`gen: cannot run ${protoc}: ${r.error.message} (apt-get install protobuf-compiler)`);
  process.exit(1);
}
if (r.status !== 0) process.exit(r.status ?? 1);
console.log(`gen: ${ours.length + 2} protos -> gen/`);
