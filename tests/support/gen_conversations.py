#!/usr/bin/env python3
"""gen_conversations.py - realistic coding-agent conversations for ctxguard's tests and
benchmarks, deterministic from a seed (Python 3 standard library only).

    gen_conversations.py [--seed N] [--count N] [--sizes CLASS,...] OUT_DIR

writes OUT_DIR/conv-000.json ... (and removes other conv-*.json there), one OpenAI chat
conversation each:

    {"id": "conv-003", "model": "gpt-4o", "language": "ja",
     "messages": [system, user, assistant with tool_calls, tool results, ..., assistant, user...],
     "tools": [OpenAI function definitions, every tool called is among them],
     "needles": [{"fact": "...", "where": "user|assistant|tool", "turn": N,
                  "role": "user|assistant|tool", "message_index": N}]}

A needle's fact is stated verbatim in messages[turn] (content), whose role is `where`
("role" and "message_index" repeat them under plain names; the benches read "where").

Sizes, by class (--sizes; the default set cycles through PLAN):
  tiny    3-8 messages, 2-10 KB
  small   15-40 messages, 15-60 KB
  medium  60-140 messages, 100-330 KB
  large   200-280 messages, 480-760 KB (above a 128k-token window for most models)
Languages en, de, fr, es, ru, ja, zh (the user's and the assistant's words; tool output is
code, logs, JSON, listings, test output... as an agent sees them). Tool outputs range from
empty to ~120 KB; medium and large conversations have several above 10,000 characters (the
offload layer's threshold). Some assistant turns call 2-3 tools at once.

As a module: conversation(seed, index, size=None) -> dict, conversations(seed, count),
generate(out_dir, seed, count) -> [paths]. Conversation i depends only on (seed, i).
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import textgen as tg  # noqa: E402

DEFAULT_SEED = 1
DEFAULT_COUNT = 24
SIZES = {  # messages (lo, hi), bytes (lo, hi)
    "tiny": ((3, 8), (2_000, 10_000)),
    "small": ((15, 40), (15_000, 60_000)),
    "medium": ((60, 140), (100_000, 330_000)),
    "large": ((200, 280), (480_000, 760_000)),
}
# conv-000 is small (>10 messages), conv-001 large (>= 200 messages): tests slice them.
PLAN = ["small", "large", "medium", "tiny", "small", "large", "medium", "small", "large",
        "medium", "tiny", "small", "large", "medium", "small", "medium", "large", "small",
        "medium", "tiny", "large", "medium", "small", "large"]
LANG_PLAN = ["en", "de", "ja", "en", "ru", "zh", "en", "fr", "es", "en", "ja", "de", "en",
             "zh", "ru", "fr", "en", "es"]
MODELS = ["gpt-4o", "gpt-4.1", "claude-sonnet-4-5", "gemini-1.5-pro", "gpt-4o-mini",
          "llama-3.3-70b"]
BIG = 10_000  # a tool output above this goes to an artifact when the offload layer runs


def _fn(name, desc, props, required):
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": props, "required": required}}}


S, I, B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
TOOLS = {
    "read_file": _fn("read_file", "Return the text of a file in the workspace, optionally a "
                     "range of lines", {"path": S, "start_line": I, "end_line": I}, ["path"]),
    "write_file": _fn("write_file", "Create or overwrite a file with the given text",
                      {"path": S, "content": S}, ["path", "content"]),
    "edit_file": _fn("edit_file", "Replace exactly one occurrence of old_text with new_text",
                     {"path": S, "old_text": S, "new_text": S}, ["path", "old_text", "new_text"]),
    "run_command": _fn("run_command", "Run a shell command in the repository root; returns "
                       "stdout and stderr merged", {"command": S, "timeout_s": I}, ["command"]),
    "search": _fn("search", "Search file contents for a regular expression",
                  {"pattern": S, "glob": S}, ["pattern"]),
    "http_get": _fn("http_get", "GET a URL of the internal network and return the body",
                    {"url": S}, ["url"]),
    "list_dir": _fn("list_dir", "List the entries of a directory",
                    {"path": S, "recursive": B}, ["path"]),
}
ALWAYS = ["read_file", "run_command", "search"]
ACTION_OF = {"read_file": ("read", "path"), "write_file": ("write", "path"),
             "edit_file": ("edit", "path"), "run_command": ("run", "command"),
             "search": ("search", "pattern"), "http_get": ("http", "url"),
             "list_dir": ("list", "path")}

# Facts that tool output carries (ASCII, no quotes: they appear verbatim in JSON text too).
TOOL_FACTS = [
    "upstream {host} marked unhealthy after {n} consecutive 503s",
    "max_open_conns raised to {n} for {svc} in {ticket}",
    "certificate for {svc}.example.com expires on {date}",
    "replica lag on {host} reached {n} s at {hhmm} UTC",
    "migration {mig} took {n} ms on {rows} rows",
    "job {svc}-nightly exited with code {code} after {n} s",
    "volume /var/lib/{svc} is {pct} percent full with {n} GiB free",
    "owner of {svc} is {person} from the {team} team",
    "deploy {hex} of {svc} was rolled back by {person}",
    "tenant {tenant} is limited to {n} requests per minute",
    "build {n} used cache key {hex}-{svc}",
    "the {svc} pool size is {n} with idle timeout {ms} ms",
]
LEADS = {  # how a user or an assistant mentions a fact: {fact} is verbatim
    "user": {"en": ["By the way, {fact}.", "FYI: {fact}.", "Keep in mind that {fact}.", "One more thing: {fact}."],
             "de": ["Übrigens: {fact}.", "Zur Info: {fact}.", "Denk daran, {fact}."],
             "fr": ["Au fait, {fact}.", "Pour info : {fact}.", "N'oublie pas que {fact}."],
             "es": ["Por cierto, {fact}.", "Para que lo sepas: {fact}.", "Ten en cuenta que {fact}."],
             "ru": ["Кстати, {fact}.", "К сведению: {fact}.", "Учти, что {fact}."],
             "ja": ["ちなみに、{fact}。", "参考までに、{fact}。", "念のため：{fact}。"],
             "zh": ["顺便说一下，{fact}。", "提醒一下：{fact}。", "请注意，{fact}。"]},
    "assistant": {"en": ["I noted that {fact}.", "Worth recording: {fact}.", "From the output: {fact}."],
                  "de": ["Festgehalten: {fact}.", "Aus der Ausgabe: {fact}."],
                  "fr": ["Je note que {fact}.", "D'après la sortie : {fact}."],
                  "es": ["Anoto que {fact}.", "Según la salida: {fact}."],
                  "ru": ["Отмечу: {fact}.", "По выводу видно: {fact}."],
                  "ja": ["記録しておきます：{fact}。", "出力によると、{fact}。"],
                  "zh": ["记录一下：{fact}。", "从输出看，{fact}。"]},
}
TEAMS = ["platform", "payments", "storage", "identity", "observability", "search", "edge"]


def _tool_fact(rng):
    v = tg.slots(rng)
    v.update(host=tg.host(rng), ticket=f"{rng.choice(['OPS', 'INC', 'PLAT', 'SEC'])}-{rng.randint(100, 9999)}",
             mig=f"{rng.randint(2023, 2025)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}_{tg.ident(rng)}",
             rows=rng.randint(1000, 90_000_000), code=rng.choice([1, 2, 3, 124, 137, 139]),
             hex=tg.hexid(rng, 8), team=rng.choice(TEAMS), tenant=f"t-{tg.alnum(rng, 6).lower()}",
             ms=rng.randint(100, 600_000))
    return rng.choice(TOOL_FACTS).format(**v)


class Builder:
    """One conversation, message by message."""

    def __init__(self, rng, lang, n_msgs, n_bytes, n_facts):
        self.rng, self.lang = rng, lang
        self.msgs, self.needles, self.facts_seen = [], [], set()
        self.n_msgs, self.n_bytes, self.n_facts = n_msgs, n_bytes, n_facts
        self.svc = rng.choice(tg.SERVICES)
        self.files = [tg.path(rng, rng.choice([".c", ".h", ".py", ".yaml", ".json", ".md", ".go"]))
                      for _ in range(rng.randint(4, 12))]
        self.used_tools = set()
        self.calls = 0
        self.big = 0
        self.bytes = 0  # of the messages as JSON

    def add(self, msg):
        self.msgs.append(msg)
        self.bytes += len(json.dumps(msg, ensure_ascii=False)) + 2

    # -- facts --------------------------------------------------------------------------
    def _want_fact(self, role):
        """Whether the next message of role carries a fact: spread over the conversation,
        about a third each said by the user, by the assistant and in tool output."""
        left = self.n_facts - len(self.needles)
        msgs_left = max(1, self.n_msgs - len(self.msgs))
        weight = {"user": 2.5, "assistant": 2.0, "tool": 1.0}[role]
        return left > 0 and self.rng.random() < min(1.0, weight * left / msgs_left)

    def _new_fact(self, where):
        for _ in range(20):
            fact = (_tool_fact(self.rng) if where == "tool"
                    else tg.phrase(self.rng, self.lang, "facts", svc=self.svc))
            if fact not in self.facts_seen:
                self.facts_seen.add(fact)
                return fact
        return None

    def _plant(self, where, fact):
        i = len(self.msgs)  # the message about to be appended
        self.needles.append({"fact": fact, "where": where, "turn": i, "role": where,
                             "message_index": i})

    def _said(self, role, text):
        """text, with a fact of role's mouth added when one is due."""
        if self._want_fact(role):
            fact = self._new_fact(role)
            if fact:
                lead = self.rng.choice(LEADS[role][self.lang]).format(fact=fact)
                sep = "" if self.lang in ("ja", "zh") else " "
                self._plant(role, fact)
                return text + sep + lead if self.rng.random() < 0.7 else lead + sep + text
        return text

    # -- messages -----------------------------------------------------------------------
    def phrase(self, kind):
        return tg.phrase(self.rng, self.lang, kind, svc=self.svc, path=self.rng.choice(self.files))

    def user(self, kind):
        rng = self.rng
        text = self.phrase(kind)
        if kind != "ack" and rng.random() < 0.15:
            text += "\n\n```\n" + tg.logs(rng, rng.randint(300, 1500), self.svc) + "\n```"
        self.add({"role": "user", "content": self._said("user", text)})

    def assistant_text(self):
        rng = self.rng
        parts = tg.phrases(rng, self.lang, "found", rng.randint(1, 3), svc=self.svc,
                           path=rng.choice(self.files))
        sep = "" if self.lang in ("ja", "zh") else " "
        text = sep.join(parts)
        if rng.random() < 0.2:
            text += "\n\n```diff\n" + tg.diff(rng, rng.randint(300, 1200)) + "\n```"
        self.add({"role": "assistant", "content": self._said("assistant", text)})

    def tool_step(self, out_budget, cap=120_000):
        """An assistant message with 1-3 tool calls and their results."""
        rng = self.rng
        n = 1 if rng.random() < 0.75 else rng.randint(2, 3)
        calls, results = [], []
        for _ in range(n):
            name, args, output = self.call(out_budget / n, cap / n)
            self.calls += 1
            cid = "call_" + tg.alnum(rng, 24)
            calls.append({"id": cid, "type": "function", "function": {
                "name": name, "arguments": json.dumps(args, ensure_ascii=rng.random() < 0.7)}})
            results.append((cid, output))
            self.used_tools.add(name)
        r = rng.random()
        if r < 0.75:
            name, args = calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])
            kind, arg = ACTION_OF[name]
            content = tg.action(rng, self.lang, kind, args[arg])
        else:
            # null, not "": an empty text block is invalid for Anthropic (ValidateContext
            # says so for that dialect).
            content = None
        self.add({"role": "assistant", "content": content, "tool_calls": calls})
        for cid, output in results:
            if output and len(output) > 400 and self._want_fact("tool"):
                fact = self._new_fact("tool")
                if fact:
                    output = self.insert_fact(output, fact)
                    self._plant("tool", fact)
            self.big += len(output) > BIG
            self.add({"role": "tool", "tool_call_id": cid, "content": output})

    def insert_fact(self, output, fact):
        """The fact on a line of its own in the middle third of output (a JSON body keeps
        its syntax: the fact becomes a field of a record there)."""
        rng = self.rng
        if output.startswith("{"):
            try:
                doc = json.loads(output)
                recs = doc.get("data")
                if isinstance(recs, list) and recs:
                    recs[len(recs) // 2]["note"] = fact
                    return json.dumps(doc, indent=2 if "\n" in output[:4] else None,
                                      ensure_ascii="\\u" in output)
            except (ValueError, AttributeError, TypeError):
                pass
        lines = output.split("\n")
        at = rng.randint(len(lines) // 3, max(len(lines) // 3, 2 * len(lines) // 3))
        line = rng.choice([fact, f"{tg.timestamp(rng)} WARN  [{self.svc}] {fact}", f"# {fact}",
                           f"/* {fact} */", f"note: {fact}"])
        return "\n".join(lines[:at] + [line] + lines[at:])

    def out_size(self, budget, cap):
        """A tool output size around budget: log-normal, a few large ones."""
        rng = self.rng
        size = int(budget * rng.lognormvariate(0, 0.8))
        if rng.random() < 0.12:
            size = int(size * rng.uniform(2, 5))
        return int(max(120, min(size, cap, 120_000)))

    def call(self, budget, cap):
        """(tool name, arguments, output) of one call."""
        rng = self.rng
        size = self.out_size(budget, cap)
        kind = rng.random()
        f = rng.choice(self.files)
        if kind < 0.30:
            ext = f.rsplit(".", 1)[-1]
            gen = {"c": "c", "h": "c", "go": "c", "py": "python", "yaml": "yaml", "json": "json",
                   "md": "markdown"}[ext]
            if rng.random() < 0.1:
                return "read_file", {"path": f}, f"Error: {f}: no such file or directory"
            args = {"path": f}
            if rng.random() < 0.2:
                a = rng.randint(1, 400)
                args.update(start_line=a, end_line=a + rng.randint(20, 300))
            if gen == "markdown":
                return "read_file", args, tg.markdown_doc(rng, self.lang, size)
            return "read_file", args, tg.text(rng, gen, size)
        if kind < 0.62:
            cmd, gen = rng.choice([
                ("make test", "tests"), ("ctest --test-dir build --output-on-failure", "tests"),
                ("python3 -m pytest -q tests", "tests"), ("go test ./...", "tests"),
                (f"ls -la {rng.choice(tg.DIRS)}", "listing"),
                (f"ls -laR {rng.choice(tg.DIRS)}", "listing"), ("git log --stat -n 30", "gitlog"),
                ("git diff HEAD~1", "diff"), (f"journalctl -u {self.svc} --since -1h --no-pager", "logs"),
                (f"kubectl logs deploy/{self.svc} --tail=2000", "logs"),
                (f"tail -n 800 var/log/{self.svc}/app.log", "logs"), ("ps aux", "ps"),
                ("kubectl get pods -A", "pods"), ("dpkg -l", "packages"),
                (f"cat docs/man/{self.svc}.8", "man"), ("cmake --build build -j2", "build")])
            args = {"command": cmd}
            if rng.random() < 0.3:
                args["timeout_s"] = rng.choice([30, 60, 120, 600])
            out = build_log(rng, size) if gen == "build" else tg.text(rng, gen, size)
            if rng.random() < 0.08:
                out += f"\n[exit status {rng.choice([1, 2, 124, 137])}]"
            return "run_command", args, out
        if kind < 0.74:
            pat = rng.choice([tg.func_name(rng), "TODO|FIXME", f"{tg.ident(rng)}\\(", "timeout", "pool_size"])
            args = {"pattern": pat}
            if rng.random() < 0.4:
                args["glob"] = rng.choice(["*.c", "src/**", "*.py", "*.{yaml,yml}"])
            return "search", args, "" if rng.random() < 0.1 else tg.grep_hits(rng, min(size, 20_000), pat.split("\\")[0])
        if kind < 0.84:
            url = (f"http://{self.svc}.internal:{rng.choice([8080, 9090, 8443])}/"
                   f"{rng.choice(['v1/status', 'debug/vars', 'api/v2/' + tg.ident(rng) + 's', 'metrics/json', 'admin/config'])}")
            if rng.random() < 0.06:
                return "http_get", {"url": url}, json.dumps({"error": {"code": 503, "message": "upstream unavailable"}})
            return "http_get", {"url": url}, tg.json_document(rng, size, indent=rng.choice([None, 2]))
        if kind < 0.90:
            return "list_dir", {"path": rng.choice(tg.DIRS), "recursive": rng.random() < 0.3}, tg.dir_listing(rng, min(size, 30_000))
        if kind < 0.96:
            content = tg.text(rng, rng.choice(["c", "python", "yaml"]), min(size, 12_000))
            p = tg.path(rng, rng.choice([".c", ".py", ".yaml"]))
            self.files.append(p)
            return "write_file", {"path": p, "content": content}, f"Wrote {len(content.encode())} bytes to {p}"
        old = tg._c_stmt(rng, [tg.ident(rng, 1)], 0).split("\n")[0]
        new = tg._c_stmt(rng, [tg.ident(rng, 1)], 0).split("\n")[0]
        res = (f"Applied 1 edit to {f} (line {rng.randint(1, 900)})" if rng.random() < 0.85
               else f"Error: old_text not found in {f}")
        return "edit_file", {"path": f, "old_text": old, "new_text": new}, res


def build_log(rng, size):
    """Compiler output: progress lines, warnings with carets, a link line."""
    def piece(r):
        if r.random() < 0.15:
            p = tg.path(r, ".c")
            ln = r.randint(1, 900)
            stmt = tg._c_stmt(r, [tg.ident(r, 1)], 0).split("\n")[0]
            return (f"{p}:{ln}:{r.randint(1, 60)}: warning: {r.choice(['unused variable', 'comparison of integer expressions of different signedness', 'implicit conversion loses precision', 'variable may be used uninitialized'])} [-W{r.choice(['unused-variable', 'sign-compare', 'conversion', 'maybe-uninitialized'])}]\n"
                    f"{ln:5d} |     {stmt}\n      |     ^~~~~~")
        return f"[{r.randint(0, 100):3d}%] Building C object {tg.path(r, '.c.o')}"
    return tg.grow(rng, size, piece) + "\n[100%] Linking C executable bin/" + rng.choice(tg.SERVICES)


def conversation(seed=DEFAULT_SEED, index=0, size=None):
    """Conversation `index` of the set of `seed` (size: a class of SIZES, default PLAN's)."""
    rng = random.Random(f"ctxguard-conv:{seed}:{index}")
    size = size or PLAN[index % len(PLAN)]
    (mlo, mhi), (blo, bhi) = SIZES[size]
    lang = LANG_PLAN[index % len(LANG_PLAN)]
    model = MODELS[(index * 5 + seed) % len(MODELS)]
    n_msgs, n_bytes = rng.randint(mlo, mhi), rng.randint(blo, bhi)
    n_facts = 1 if size == "tiny" else max(1, n_msgs // rng.randint(8, 14))
    b = Builder(rng, lang, n_msgs, n_bytes, n_facts)
    b.add({"role": "system", "content": tg.phrase(rng, lang, "system", svc=b.svc)})
    b.user("ask")
    # Bytes for tool output, spread over the expected number of results.
    expect_results = max(1, int(n_msgs * 0.42))
    while len(b.msgs) < n_msgs - 1:
        steps = rng.randint(1, 4)
        for _ in range(steps):
            if len(b.msgs) >= n_msgs - 2:
                break
            left = max(600, n_bytes - b.bytes)
            b.tool_step(left / max(1, expect_results - b.calls), left)
        b.assistant_text()
        if len(b.msgs) < n_msgs - 1:
            b.user("follow" if rng.random() < 0.8 else "ack")
    # The end: a request waiting for an answer, an answer, or tool results.
    end = rng.random()
    if end < 0.5:
        if b.msgs[-1]["role"] != "user":
            b.user("follow")
    elif end < 0.75:
        if b.msgs[-1]["role"] == "user":
            b.assistant_text()
    else:
        if b.msgs[-1]["role"] == "assistant":
            b.user("follow")  # never two assistant messages in a row (Anthropic, Google)
        b.tool_step(2000, 4000)
    if size != "tiny" and b.big == 0 and n_bytes > 12 * BIG:
        # Medium and large sets always have a result for the offload layer.
        b.user("follow")
        b.tool_step(3 * BIG, 4 * BIG)
    names = ALWAYS + sorted(t for t in TOOLS if t not in ALWAYS and (t in b.used_tools or rng.random() < 0.3))
    return {"id": f"conv-{index:03d}", "model": model, "language": lang, "messages": b.msgs,
            "tools": [TOOLS[n] for n in names], "needles": b.needles}


def conversations(seed=DEFAULT_SEED, count=DEFAULT_COUNT, sizes=None):
    for i in range(count):
        yield conversation(seed, i, sizes[i % len(sizes)] if sizes else None)


def generate(out_dir, seed=DEFAULT_SEED, count=DEFAULT_COUNT, sizes=None):
    """Writes the set into out_dir (removing other conv-*.json there); returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for conv in conversations(seed, count, sizes):
        p = os.path.join(out_dir, conv["id"] + ".json")
        tmp = p + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(conv, f, ensure_ascii=False)
        os.replace(tmp, p)
        paths.append(p)
    keep = {os.path.basename(p) for p in paths}
    for name in os.listdir(out_dir):
        if name.startswith("conv-") and name.endswith(".json") and name not in keep:
            os.remove(os.path.join(out_dir, name))
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--sizes", help="comma-separated classes to cycle through: " + ", ".join(SIZES))
    a = ap.parse_args()
    sizes = a.sizes.split(",") if a.sizes else None
    if sizes and any(s not in SIZES for s in sizes):
        ap.error(f"--sizes: classes are {', '.join(SIZES)}")
    t0 = time.monotonic()
    paths = generate(a.out_dir, a.seed, a.count, sizes)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"gen_conversations: {len(paths)} conversations, {total / 1e6:.1f} MB in {a.out_dir} "
          f"(seed {a.seed}, {time.monotonic() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
