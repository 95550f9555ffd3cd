// Exact o200k_base counts (npm gpt-tokenizer) for the estimator comparison. See bench/README.md.
//   node reference.mjs chunks FILE.chunks     -> one token count per chunk (u32 LE length + bytes)
//   node reference.mjs convs DIR              -> per conversation file: name, exact total and the
//                                                inputs of the chars/4 baseline (TSV)
// Conversation accounting (the same framing the C estimator adds, so that only content is
// compared): 3 tokens for reply priming; per message 3 + role + content text; an assistant's
// tool call adds its name and arguments; a tool message's content is its result.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.cwd(), 'x.js'));
const { countTokens } = require('gpt-tokenizer/cjs/encoding/o200k_base');

const count = (s) => (s ? countTokens(s, { disallowedSpecial: new Set() }) : 0);

function contentText(c) {
  if (c == null) return [];
  if (typeof c === 'string') return [c];
  return c.filter((p) => p.type === 'text').map((p) => p.text);
}

const [mode, arg] = process.argv.slice(2);
if (mode === 'chunks') {
  const buf = fs.readFileSync(arg);
  const out = [];
  for (let i = 0; i < buf.length; ) {
    const n = buf.readUInt32LE(i);
    out.push(count(buf.subarray(i + 4, i + 4 + n).toString('utf8')));
    i += 4 + n;
  }
  process.stdout.write(out.join('\n') + '\n');
} else if (mode === 'convs') {
  for (const f of fs.readdirSync(arg).filter((x) => x.endsWith('.json')).sort()) {
    const conv = JSON.parse(fs.readFileSync(path.join(arg, f), 'utf8'));
    let total = 3, chars = 0;
    for (const m of conv.messages) {
      total += 3 + count(m.role);
      for (const t of contentText(m.content)) {
        total += count(t);
        chars += t.length;
      }
      for (const tc of m.tool_calls || []) {
        total += count(tc.function.name) + count(tc.function.arguments);
        chars += tc.function.name.length + tc.function.arguments.length;
      }
    }
    console.log([f, total, chars, conv.messages.length].join('\t'));
  }
} else {
  console.error('usage: node reference.mjs chunks FILE | convs DIR');
  process.exit(2);
}
