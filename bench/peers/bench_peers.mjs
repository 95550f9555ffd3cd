// bench_peers.mjs - single-thread token counting speed of the npm peers on the same corpus
// and parts as bench_tokens (bench/tokens.sh runs both).
//   node bench_peers.mjs NODE_MODULES_DIR CORPUS.records PARTS
// Prints "PEER ENCODING MBPS" (median over the parts; each part is new text: merge caches are
// cleared and a fresh tokenizer is made before each part, outside the timing) and
// "PEER ENCODING worst BYTES SECONDS" for one piece of random ASCII letters, doubling from
// 16 KB while one count stays under WORST_CAP_S (default 3 s): the peers are quadratic there.
// Times are min(wall, process CPU time) per pass, as in bench_tokens.c (the machine is shared).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [modules, corpusPath, partsArg] = process.argv.slice(2);
const parts = Number(partsArg || 8);
const capS = Number(process.env.WORST_CAP_S || 3);
const require = createRequire(path.join(path.resolve(modules), "x.js"));
const tiktoken = require("tiktoken");
const AiTokenizer = require("ai-tokenizer").Tokenizer;
const aiEnc = {
  cl100k_base: require("ai-tokenizer/encoding/cl100k_base"),
  o200k_base: require("ai-tokenizer/encoding/o200k_base"),
};
const gptEnc = {
  cl100k_base: require("gpt-tokenizer/cjs/encoding/cl100k_base"),
  o200k_base: require("gpt-tokenizer/cjs/encoding/o200k_base"),
};

const buf = fs.readFileSync(corpusPath);
const dec = new TextDecoder("utf-8", { ignoreBOM: true });
const texts = [], sizes = [];
for (let off = 0; off + 4 <= buf.length;) {
  const n = buf.readUInt32LE(off);
  texts.push(dec.decode(buf.subarray(off + 4, off + 4 + n)));
  sizes.push(n);
  off += 4 + n;
}
const total = sizes.reduce((a, b) => a + b, 0);
// The same cut as bench_tokens.c: part p ends once the bytes done reach total/parts*(p+1).
const cuts = [];
for (let p = 0, r = 0, done = 0; p < parts; p++) {
  const until = Math.floor(total / parts) * (p + 1), first = r;
  while (r < texts.length && (done < until || p === parts - 1)) done += sizes[r++];
  cuts.push([first, r]);
}

const peers = {
  tiktoken: (enc) => {
    const e = tiktoken.get_encoding(enc);
    return { count: (t) => e.encode_ordinary(t).length, done: () => e.free() };
  },
  "gpt-tokenizer": (enc) => {
    const m = gptEnc[enc];
    m.clearMergeCache();
    const opts = { disallowedSpecial: new Set() };
    return { count: (t) => m.countTokens(t, opts), done: () => {} };
  },
  "ai-tokenizer": (enc) => {
    const tok = new AiTokenizer(aiEnc[enc]);
    // encode with no special token allowed or disallowed: ordinary text, as the others
    return { count: (t) => tok.encode(t, [], []).length, done: () => {} };
  },
};

const timer = () => {
  const w0 = process.hrtime.bigint(), c0 = process.cpuUsage();
  return () => {
    const wall = Number(process.hrtime.bigint() - w0) / 1e9, c = process.cpuUsage(c0);
    return Math.min(wall, (c.user + c.system) / 1e6);
  };
};
const median = (v) => {
  const s = [...v].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
let seed = 4;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const letters = (n) => {
  let s = "";
  for (let i = 0; i < n; i++) s += String.fromCharCode(97 + Math.floor(rand() * 26));
  return s;
};

for (const enc of ["cl100k_base", "o200k_base"]) {
  for (const [name, make] of Object.entries(peers)) {
    const mbps = [];
    let tokens = 0;
    for (const [first, end] of cuts) {
      const c = make(enc);
      let bytes = 0;
      const stop = timer();
      for (let r = first; r < end; r++) {
        tokens += c.count(texts[r]);
        bytes += sizes[r];
      }
      const dt = stop();
      c.done();
      mbps.push(bytes / 1e6 / dt);
    }
    console.log(`${name} ${enc} ${median(mbps).toFixed(2)}`);
    console.error(`bench_peers: ${name} ${enc}: ${tokens} tokens`);
    let size = 16 * 1024, last = null;
    while (size <= 256 * 1024) {
      const c = make(enc), text = letters(size);
      const stop = timer();
      c.count(text);
      const dt = stop();
      c.done();
      last = [size, dt];
      if (dt * 4 > capS) break; // the next size (x2, quadratic) would pass the cap
      size *= 2;
    }
    console.log(`${name} ${enc} worst ${last[0]} ${last[1].toFixed(3)}`);
  }
}
