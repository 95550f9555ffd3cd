// count_rpc.mjs - ContextService.CountTokens through gRPC on one conversation: the round trip
// an orchestrator pays (the request built from the conversation's JSON text, sent, answered),
// for bench/count.sh, which compares it with bench_count (the counter in-process).
//
//   CG_BENCH_TARGET=HOST:PORT CG_BENCH_KEY=K CG_PROTO_DIRS=proto:/usr/include \
//     node count_rpc.mjs NODE_MODULES FILE.json [RUNS]
//
// Prints one line: "RPC bytes=B tokens=T p50_ms=... mbps=..." (p50 of RUNS, default 21, after
// 3 warm-up calls; MB/s of the conversation's JSON bytes). Every call must succeed.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

import { connect } from "./rpc_client.mjs";

const [nm, file, runsArg] = process.argv.slice(2);
if (!nm || !file || !process.env.CG_BENCH_TARGET) {
  console.error("usage: CG_BENCH_TARGET=.. CG_BENCH_KEY=.. CG_PROTO_DIRS=.. node count_rpc.mjs NODE_MODULES FILE.json [RUNS]");
  process.exit(2);
}
const call = connect(nm);
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const count = () => call("CountTokens", { conversation: { openai_json: text }, model: "gpt-4o" });
const runs = Math.max(1, Number(runsArg ?? 21) | 0);
let tokens = 0;
for (let i = 0; i < 3; i++) tokens = (await count()).total_tokens;
const times = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  const r = await count();
  times.push(performance.now() - t0);
  if (r.method !== "TOKEN_COUNT_METHOD_EXACT") throw new Error(`not exact: ${r.method}`);
}
times.sort((a, b) => a - b);
const p50 = times[times.length >> 1];
console.log(`RPC bytes=${bytes.length} tokens=${tokens} p50_ms=${p50.toFixed(2)} mbps=${(bytes.length / 1e6 / (p50 / 1e3)).toFixed(1)}`);
process.exit(0);
