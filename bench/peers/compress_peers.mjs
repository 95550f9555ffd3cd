// compress_peers.mjs - the npm context trimmers ctxguard's Compress is raced against (issue 5,
// "Fidelity and performance"), on the same inputs, scored alike with ctxguard's own outputs.
//
//   node compress_peers.mjs NODE_MODULES CONV_DIR OUT_DIR BENCH_COMPRESS [ROUNDS]
//
// CONV_DIR: the conv-*.json conversations (OpenAI JSON + `needles`). Each round runs
// `BENCH_COMPRESS --out OUT_DIR CONV_DIR` (ctxguard: it writes synthetic-1000.json, its input,
// and out-NAME, its output for each input, and prints its p50s on its `CTXGUARD` line), then
// the peers; a tool's figure is the median over ROUNDS (default 3) of its round p50, so that
// ctxguard and the peers see the same machine load. Each peer gets the conversation's JSON text and
// is timed (p50 of RUNS) from JSON.parse through the conversion to its own message type and
// the trimming, its token counting included. Every output (ctxguard's too) is then converted
// to OpenAI chat messages and scored the same way: exact o200k count (gpt-tokenizer, OpenAI
// chat framing as ctxguard counts it: 3 per message + the role, 3 per tool call or result +
// its id (+ name), 3 of reply priming; tool definitions not counted), against the
// conversation's target (37.5 % of its count, capped at 48,000, the same for every tool);
// invalid for a provider (empty, first non-system message not user, orphan tool result,
// dangling tool call); planted `needles` facts present verbatim in the output's text, by where
// planted. With a server (CG_BENCH_TARGET), ctxguard's Compress is also timed through gRPC.
import { createRequire } from "node:module";
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { execFileSync } from "node:child_process";

import { connect } from "./rpc_client.mjs";

const [nm, convDir, outDir, benchBin, roundsArg] = process.argv.slice(2);
const nodeModules = nm && resolve(nm);
const ROUNDS = Math.max(1, Number(roundsArg ?? 3) | 0);
if (!nodeModules || !convDir || !outDir || !benchBin) {
  console.error("usage: compress_peers.mjs NODE_MODULES CONV_DIR OUT_DIR BENCH_COMPRESS [ROUNDS]");
  process.exit(2);
}
const require = createRequire(join(nodeModules, "x.js"));
const { countTokens, clearMergeCache } = require("gpt-tokenizer/cjs/encoding/o200k_base");
const lc = require("@langchain/core/messages");
const strands = await import(join(nodeModules, "@strands-agents/sdk/dist/src/index.node.js"));
let mastra = null;
try {
  mastra = require("@mastra/core/processors");
} catch (e) {
  console.error(`compress_peers: @mastra/core not loadable (${e.message}); skipped`);
}

const WINDOW = 128000;
const CAP = Math.floor(WINDOW * 0.375); // 48000: 37.5 % of a 128k window
// Every tool gets the same target per conversation: 37.5 % of its own exact count, capped at
// 48,000 (a conversation under the cap still has to shrink, as the peers are asked to).
const targetOf = (msgs) => Math.min(CAP, Math.floor(0.375 * countAll(msgs)));
const RUNS = 5;

// ---- the exact o200k counter, OpenAI chat framing (what the peers are given, and the scorer)
const tok = (s) => (s ? countTokens(s) : 0);
function countOpenAI(m) {
  let n = 3 + tok(m.role);
  if (typeof m.content === "string") n += tok(m.content);
  else if (Array.isArray(m.content))
    for (const p of m.content) if (p && typeof p.text === "string") n += tok(p.text);
  if (m.name) n += tok(m.name) + 1;
  for (const c of m.tool_calls ?? [])
    n += 3 + tok(c.id) + tok(c.function?.name) + tok(c.function?.arguments);
  if (m.role === "tool") n += 3 + tok(m.tool_call_id);
  return n;
}
const countAll = (msgs) => msgs.reduce((a, m) => a + countOpenAI(m), 3);
const textOf = (c) =>
  typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => p?.text ?? "").join("") : "";

// ---- (a) @langchain/core trimMessages
function toLangchain(msgs) {
  return msgs.map((m) => {
    const content = textOf(m.content);
    if (m.role === "system") return new lc.SystemMessage(content);
    if (m.role === "user") return new lc.HumanMessage(content);
    if (m.role === "tool") return new lc.ToolMessage({ content, tool_call_id: m.tool_call_id });
    return new lc.AIMessage({
      content,
      tool_calls: (m.tool_calls ?? []).map((c) => ({
        id: c.id,
        name: c.function.name,
        args: JSON.parse(c.function.arguments || "{}"),
        type: "tool_call",
      })),
    });
  });
}
function langchainToOpenAI(m) {
  const t = m._getType();
  const content = textOf(m.content);
  if (t === "system") return { role: "system", content };
  if (t === "human") return { role: "user", content };
  if (t === "tool") return { role: "tool", tool_call_id: m.tool_call_id, content };
  const o = { role: "assistant", content };
  if (m.tool_calls?.length)
    o.tool_calls = m.tool_calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: JSON.stringify(c.args) },
    }));
  return o;
}
async function runLangchain(text, target) {
  const msgs = toLangchain(JSON.parse(text).messages);
  const cache = new WeakMap(); // per message: a counter as fast as a careful user would write
  const count = (m) => {
    let n = cache.get(m);
    if (n === undefined) cache.set(m, (n = countOpenAI(langchainToOpenAI(m))));
    return n;
  };
  const out = await lc.trimMessages(msgs, {
    maxTokens: target,
    strategy: "last",
    startOn: "human",
    includeSystem: true,
    tokenCounter: (ms) => ms.reduce((a, m) => a + count(m), 3),
  });
  return out.map(langchainToOpenAI);
}

// ---- (b) @strands-agents/sdk SlidingWindowConversationManager, looped until the count fits
function toStrands(msgs) {
  let system = "";
  const out = [];
  for (const m of msgs) {
    const text = textOf(m.content);
    if (m.role === "system") {
      system += text; // strands keeps the system prompt outside the messages, always sent
    } else if (m.role === "tool") {
      const block = new strands.ToolResultBlock({
        toolUseId: m.tool_call_id,
        status: "success",
        content: [new strands.TextBlock(text)],
      });
      const last = out[out.length - 1];
      if (last?.role === "user" && last.content.every((b) => b.type === "toolResultBlock"))
        last.content.push(block);
      else out.push(new strands.Message({ role: "user", content: [block] }));
    } else {
      const content = text ? [new strands.TextBlock(text)] : [];
      for (const c of m.tool_calls ?? [])
        content.push(
          new strands.ToolUseBlock({
            name: c.function.name,
            toolUseId: c.id,
            input: JSON.parse(c.function.arguments || "{}"),
          }),
        );
      out.push(new strands.Message({ role: m.role, content }));
    }
  }
  return { system, messages: out };
}
function strandsToOpenAI(m) {
  const out = [];
  const texts = m.content.filter((b) => b.type === "textBlock").map((b) => b.text);
  const uses = m.content.filter((b) => b.type === "toolUseBlock");
  const results = m.content.filter((b) => b.type === "toolResultBlock");
  for (const r of results)
    out.push({ role: "tool", tool_call_id: r.toolUseId, content: r.content.map((b) => b.text ?? "").join("") });
  if (texts.length || uses.length || !results.length) {
    const o = { role: m.role, content: texts.join("") };
    if (uses.length)
      o.tool_calls = uses.map((u) => ({
        id: u.toolUseId,
        type: "function",
        function: { name: u.name, arguments: JSON.stringify(u.input) },
      }));
    out.push(o);
  }
  return out;
}
function runStrands(text, target) {
  const { system, messages } = toStrands(JSON.parse(text).messages);
  const cache = new WeakMap();
  const count = (m) => {
    let n = cache.get(m);
    if (n === undefined) cache.set(m, (n = strandsToOpenAI(m).reduce((a, o) => a + countOpenAI(o), 0)));
    return n;
  };
  const sys = system ? countOpenAI({ role: "system", content: system }) : 0;
  // windowSize above the length: each reduce() drops the oldest messages up to the next valid
  // trim point (a user message that is not a tool result), keeping tool pairs; no truncation
  // of tool results (that is its reactive overflow path, taken only with a provider error).
  const mgr = new strands.SlidingWindowConversationManager({ windowSize: 1 << 30 });
  const agent = { messages };
  while (messages.reduce((a, m) => a + count(m), 3 + sys) > target)
    if (!mgr.reduce({ agent })) break;
  const out = system ? [{ role: "system", content: system }] : [];
  for (const m of messages) out.push(...strandsToOpenAI(m));
  return out;
}

// ---- (c) @mastra/core TokenLimiterProcessor on the AI SDK prompt (its LLM-request hook)
function toMastraPrompt(msgs) {
  const names = new Map();
  return msgs.map((m) => {
    const text = textOf(m.content);
    if (m.role === "system") return { role: "system", content: text };
    if (m.role === "user") return { role: "user", content: [{ type: "text", text }] };
    if (m.role === "tool")
      return {
        role: "tool",
        content: [
          {
            type: "tool-result",
            toolCallId: m.tool_call_id,
            toolName: names.get(m.tool_call_id) ?? "",
            output: { type: "text", value: text },
          },
        ],
      };
    const content = text ? [{ type: "text", text }] : [];
    for (const c of m.tool_calls ?? []) {
      names.set(c.id, c.function.name);
      content.push({
        type: "tool-call",
        toolCallId: c.id,
        toolName: c.function.name,
        input: JSON.parse(c.function.arguments || "{}"),
      });
    }
    return { role: "assistant", content };
  });
}
function mastraToOpenAI(m) {
  if (m.role === "system") return [{ role: "system", content: m.content }];
  if (m.role === "tool")
    return m.content.map((p) => ({
      role: "tool",
      tool_call_id: p.toolCallId,
      content: typeof p.output?.value === "string" ? p.output.value : JSON.stringify(p.output?.value ?? ""),
    }));
  const o = { role: m.role, content: m.content.filter((p) => p.type === "text").map((p) => p.text).join("") };
  const calls = m.content.filter((p) => p.type === "tool-call");
  if (calls.length)
    o.tool_calls = calls.map((c) => ({
      id: c.toolCallId,
      type: "function",
      function: { name: c.toolName, arguments: JSON.stringify(c.input) },
    }));
  return [o];
}
async function runMastra(text, target) {
  const prompt = toMastraPrompt(JSON.parse(text).messages);
  const lim = new mastra.TokenLimiterProcessor({ limit: target }); // its own counter (o200k)
  const r = await lim.processLLMRequest({ prompt });
  return (r?.prompt ?? prompt).flatMap(mastraToOpenAI);
}

// ---- (d) ctxguard's Compress through gRPC, the round trip an orchestrator pays: the request
// built from the conversation's JSON text, sent, answered, the answer's JSON parsed. Only when
// bench/compress.sh started a server (CG_BENCH_TARGET, CG_BENCH_KEY, CG_PROTO_DIRS).
const rpc = process.env.CG_BENCH_TARGET ? connect(nodeModules) : null;
async function runCtxguardRpc(text, target, model) {
  const r = await rpc("Compress", {
    conversation: { openai_json: text },
    model,
    context_window_tokens: WINDOW,
    force: true,
    summarizer: "SUMMARIZER_KIND_EXTRACTIVE",
    policy: { target_tokens: target, reserved_output_tokens: 0 },
  });
  return JSON.parse(r.conversation.openai_json).messages;
}

// ---- scoring
function invalidWhy(msgs) {
  const rest = msgs.filter((m) => m.role !== "system");
  if (rest.length === 0) return "empty";
  if (rest[0].role !== "user") return "first non-system message not user";
  let pending = null; // ids of the last assistant's tool calls still unanswered
  for (const m of msgs) {
    if (m.role === "tool") {
      if (!pending || !pending.delete(m.tool_call_id)) return "orphan tool result";
      continue;
    }
    if (pending && pending.size) return "dangling tool call";
    pending = m.role === "assistant" && m.tool_calls?.length ? new Set(m.tool_calls.map((c) => c.id)) : null;
  }
  if (pending && pending.size) return "dangling tool call";
  return null;
}
function factsIn(msgs) {
  const parts = [];
  for (const m of msgs) {
    parts.push(textOf(m.content));
    for (const c of m.tool_calls ?? []) parts.push(c.function?.arguments ?? "");
  }
  return parts.join("\u0000");
}
const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// ---- inputs: the same files bench_compress read, the synthetic one it wrote
const inputs = readdirSync(convDir)
  .filter((f) => /^conv-.*\.json$/.test(f))
  .sort()
  .map((f) => {
    const d = JSON.parse(readFileSync(join(convDir, f), "utf8"));
    const body = { messages: d.messages };
    if (d.tools) body.tools = d.tools;
    return {
      name: f,
      text: JSON.stringify(body),
      needles: d.needles ?? [],
      out: join(outDir, "out-" + f),
      target: targetOf(d.messages),
      model: typeof d.model === "string" && d.model ? d.model : "gpt-4o",
    };
  });
const synPath = join(outDir, "synthetic-1000.json");
function runCtxguard() {
  const out = execFileSync(benchBin, ["--out", outDir, convDir], { encoding: "utf8", maxBuffer: 1 << 26 });
  const l = out.trim().split("\n").pop().split(/\s+/);
  if (l[0] !== "CTXGUARD") throw new Error("bench_compress: no CTXGUARD line");
  return { samples: Number(l[1]), syn: Number(l[2]), text: out };
}
const cgRounds = [runCtxguard()];
if (!existsSync(synPath)) {
  console.error(`compress_peers: ${synPath} missing`);
  process.exit(1);
}
{
  const text = readFileSync(synPath, "utf8");
  const msgs = JSON.parse(text).messages;
  inputs.push({ name: "synthetic-1000", text, needles: [], out: join(outDir, "out-synthetic-1000"), synthetic: true, target: targetOf(msgs), model: "gpt-4o" });
}

// gpt-tokenizer keeps a merge cache across calls (its default): the plain rows keep it warm
// over the RUNS of one conversation (an agent resending its history), the "cold" rows clear it
// before each run (a history it has not seen, like ctxguard, which has no such cache).
const tools = [
  { name: "ctxguard in-process (no transport)", run: null },
  { name: "langchain trimMessages", run: runLangchain },
  { name: "strands sliding window", run: runStrands },
  { name: "langchain (cold cache)", run: runLangchain, before: clearMergeCache, timeOnly: true },
  { name: "strands (cold cache)", run: runStrands, before: clearMergeCache, timeOnly: true },
];
if (mastra) tools.push({ name: "mastra TokenLimiter", run: runMastra });
if (rpc) {
  // Exact counting on both sides: gpt-4o's o200k, as the peers count.
  tools.push({ name: "ctxguard gRPC (exact)", run: (text, target) => runCtxguardRpc(text, target, "gpt-4o"), ours: true });
  // The file's own model: estimated counts for Claude and Gemini conversations.
  tools.push({ name: "ctxguard gRPC (file's model)", run: (text, target, inp) => runCtxguardRpc(text, target, inp.model), ours: true, estimated: true });
}

const WH = ["user", "assistant", "tool"];
const detail = [];
for (const t of tools) {
  t.roundS = [];
  t.roundY = [];
  t.met = 0;
  t.n = 0;
  t.invalid = 0;
  t.why = {};
  t.planted = [0, 0, 0];
  t.kept = [0, 0, 0];
}
function score(t, inp, out) {
  const tokens = countAll(out);
  const why = invalidWhy(out);
  const text = factsIn(out);
  let kept = 0;
  for (const nd of inp.needles) {
    const w = Math.max(0, WH.indexOf(nd.where));
    t.planted[w]++;
    if (text.includes(nd.fact)) (t.kept[w]++, kept++);
  }
  t.n++;
  t.met += tokens <= inp.target;
  if (why) (t.invalid++, (t.why[why] = (t.why[why] ?? 0) + 1));
  detail.push(
    `${t.name.padEnd(24)} ${inp.name.padEnd(16)} ${String(out.length).padStart(5)} msgs ` +
      `${String(tokens).padStart(7)} / ${inp.target} ${why ? "INVALID (" + why + ")" : "valid"} ` +
      `facts ${kept}/${inp.needles.length}`,
  );
}
for (let round = 0; round < ROUNDS; round++) {
  if (round > 0) cgRounds.push(runCtxguard());
  console.error(`compress_peers: round ${round + 1}/${ROUNDS}: ctxguard ${cgRounds[round].samples} ms / ${cgRounds[round].syn} ms`);
  for (const t of tools) {
    if (!t.run) {
      if (round === 0) for (const inp of inputs) score(t, inp, JSON.parse(readFileSync(inp.out, "utf8")).messages);
      t.roundS.push(cgRounds[round].samples);
      t.roundY.push(cgRounds[round].syn);
      continue;
    }
    const p50s = [];
    for (const inp of inputs) {
      let out;
      const times = [];
      try {
        for (let i = 0; i < RUNS; i++) {
          if (t.before) t.before();
          const t0 = performance.now();
          out = await t.run(inp.text, inp.target, inp);
          times.push(performance.now() - t0);
        }
      } catch (e) {
        if (round === 0) {
          t.n++;
          t.invalid++;
          const k = "threw: " + String(e.message).slice(0, 60);
          t.why[k] = (t.why[k] ?? 0) + 1;
          detail.push(`${t.name.padEnd(24)} ${inp.name.padEnd(16)} FAILED ${e.message}`);
        }
        continue;
      }
      if (inp.synthetic) t.roundY.push(median(times));
      else p50s.push(median(times));
      if (round === 0 && !t.timeOnly) score(t, inp, out);
    }
    t.roundS.push(median(p50s));
    console.error(`  ${t.name}: ${median(p50s).toFixed(2)} ms / ${t.roundY.at(-1)?.toFixed(2)} ms`);
  }
}
for (const t of tools) {
  t.p50 = median(t.roundS);
  t.syn = median(t.roundY);
}

console.log("per conversation (exact o200k count of the output, OpenAI chat framing):");
for (const l of detail) console.log("  " + l);
console.log("\nctxguard's own report (last round):\n" + cgRounds.at(-1).text.trimEnd());
const pct = (k, p) => (p ? ((100 * k) / p).toFixed(0) + "%" : "-");
console.log(
  `\nCompress to 37.5 % of each conversation, capped at ${CAP} tokens (exact o200k, messages + ` +
    `framing), the same target for every tool; ${inputs.length - 1} samples + synthetic 1,000 messages; p50 of ${RUNS} runs, median of ${ROUNDS} rounds`,
);
const hdr = ["tool", "p50 ms (samples)", "p50 ms (synthetic)", "target met", "invalid", "facts kept u/a/t (all)"];
const rows = tools.map((t) => {
  if (t.timeOnly)
    return [t.name, t.p50.toFixed(2), t.syn.toFixed(2), "same", "same", "same outputs as above"];
  const kp = t.kept.reduce((a, b) => a + b, 0), pl = t.planted.reduce((a, b) => a + b, 0);
  return [
    t.name,
    Number.isFinite(t.p50) ? t.p50.toFixed(2) : "-",
    Number.isFinite(t.syn) ? t.syn.toFixed(2) : "-",
    `${t.met}/${t.n}`,
    String(t.invalid),
    `${pct(t.kept[0], t.planted[0])}/${pct(t.kept[1], t.planted[1])}/${pct(t.kept[2], t.planted[2])} (${kp}/${pl} ${pct(kp, pl)})`,
  ];
});
const widths = hdr.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
console.log(line(hdr));
for (const r of rows) console.log(line(r));
for (const t of tools) if (Object.keys(t.why).length) console.log(`  ${t.name} invalid: ${JSON.stringify(t.why)}`);
const ours = tools.find((t) => t.ours && !t.estimated) ?? tools[0];
for (const cold of [false, true]) {
  const raced = tools.filter(
    (t) => t.run && !t.ours && !t.name.startsWith("mastra") && !!t.timeOnly === cold,
  );
  const fastS = Math.min(...raced.map((t) => t.p50)), fastY = Math.min(...raced.map((t) => t.syn));
  console.log(
    `speed ${ours.name} vs the faster of trimMessages / strands (${cold ? "cold" : "warm"} tokenizer cache): ` +
      `samples ${(fastS / ours.p50).toFixed(1)}x, synthetic ${(fastY / ours.syn).toFixed(1)}x (target >= 5x)`,
  );
}
