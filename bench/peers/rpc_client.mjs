// rpc_client.mjs - ctxguard's ContextService client for the node benches (count_rpc.mjs,
// compress_peers.mjs): @grpc/grpc-js and @grpc/proto-loader from NODE_MODULES, the protos from
// CG_PROTO_DIRS (":"-separated include dirs), the server at CG_BENCH_TARGET with the API key
// CG_BENCH_KEY. call(method, request) answers a promise of the response (enums as names,
// int64 as numbers); messages up to 64 MB each way.
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

export function connect(nodeModules) {
  const require = createRequire(join(resolve(nodeModules), "x.js"));
  const grpc = require("@grpc/grpc-js");
  const loader = require("@grpc/proto-loader");
  const def = loader.loadSync("ctxguard/v1/context.proto", {
    includeDirs: process.env.CG_PROTO_DIRS.split(":"),
    keepCase: true,
    longs: Number,
    enums: String,
  });
  const Service = grpc.loadPackageDefinition(def).ctxguard.v1.ContextService;
  const client = new Service(process.env.CG_BENCH_TARGET, grpc.credentials.createInsecure(), {
    "grpc.max_send_message_length": 64 << 20,
    "grpc.max_receive_message_length": 64 << 20,
  });
  const md = new grpc.Metadata();
  md.set("authorization", "Bearer " + process.env.CG_BENCH_KEY);
  return (method, req) =>
    new Promise((ok, fail) =>
      client[method](req, md, { deadline: Date.now() + 60000 }, (e, r) => (e ? fail(e) : ok(r))),
    );
}
