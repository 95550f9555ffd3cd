// ref_counts.js - the reference counts of the exactness test, from npm tiktoken.
//   node ref_counts.js NODE_MODULES_DIR RECORDS
// One line per record: "cl100k cl100k_special o200k o200k_special", where *_special is
// encode(text, "all") and the others encode_ordinary(text). Bytes are decoded as ctxguard
// defines (server/core/tok.h): WHATWG UTF-8 decoding with replacement, BOM kept.
"use strict";
const path = require("path");
const fs = require("fs");
const { get_encoding } = require(path.join(process.argv[2], "tiktoken"));
const buf = fs.readFileSync(process.argv[3]);
const encs = [get_encoding("cl100k_base"), get_encoding("o200k_base")];
const dec = new TextDecoder("utf-8", { ignoreBOM: true });
const out = [];
for (let off = 0; off + 4 <= buf.length;) {
  const n = buf.readUInt32LE(off);
  const text = dec.decode(buf.subarray(off + 4, off + 4 + n));
  off += 4 + n;
  const r = [];
  for (const e of encs) {
    r.push(e.encode_ordinary(text).length);
    r.push(e.encode(text, "all").length);
  }
  out.push(r.join(" "));
}
fs.writeFileSync(1, out.join("\n") + "\n");
