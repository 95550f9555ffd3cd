"""test_gen_conversations.py - the test conversation generator (tests/support/
gen_conversations.py): the shape every conversation has (OpenAI chat messages, tool calls
answered in order, tools declared, planted facts where the needles say), determinism from the
seed, and the spread of sizes and languages that the C and e2e tests and the benches rely on
(a few messages to hundreds, tool outputs above the offload threshold, multi-call turns,
conversations larger than a 128k window). Python 3 standard library only."""

import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support")
sys.path.insert(0, SUPPORT)
import gen_conversations as gen  # noqa: E402

LANGS = {"en", "de", "fr", "es", "ru", "ja", "zh"}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def default_set():
    return list(gen.conversations(gen.DEFAULT_SEED, gen.DEFAULT_COUNT))


class Shape(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.convs = default_set()

    def check(self, d):
        """Everything a conversation must satisfy to be valid for the server in every dialect
        and usable by the tests; fails with the conversation's id and message index."""
        self.assertEqual(set(d), {"id", "model", "language", "messages", "tools", "needles"})
        msgs = d["messages"]
        self.assertGreaterEqual(len(msgs), 3, d["id"])
        self.assertEqual(msgs[0]["role"], "system")
        self.assertEqual(msgs[1]["role"], "user")
        declared = [t["function"]["name"] for t in d["tools"]]
        self.assertEqual(len(declared), len(set(declared)), d["id"])
        pending = []  # tool_call ids of the last assistant message not yet answered
        seen_ids = set()
        for i, m in enumerate(msgs):
            where = f"{d['id']} message {i}"
            role = m["role"]
            self.assertIn(role, ("system", "user", "assistant", "tool"), where)
            if role == "tool":
                self.assertTrue(pending, f"{where}: tool result without a call")
                self.assertEqual(m["tool_call_id"], pending.pop(0), where)
                self.assertIsInstance(m["content"], str, where)
                continue
            self.assertEqual(pending, [], f"{where}: calls left unanswered")
            if i > 0:
                self.assertNotEqual(role, "system", where)
            if role == "assistant" and i > 0:
                self.assertNotEqual(msgs[i - 1]["role"], "assistant", f"{where}: two in a row")
            calls = m.get("tool_calls")
            if calls is not None:
                self.assertEqual(role, "assistant", where)
                self.assertGreater(len(calls), 0, where)
                # null or text, never "" (an empty text block is invalid for Anthropic)
                self.assertTrue(m["content"] is None or m["content"].strip(), where)
                for c in calls:
                    self.assertNotIn(c["id"], seen_ids, where)
                    seen_ids.add(c["id"])
                    self.assertRegex(c["id"], r"^[A-Za-z0-9_-]+$")
                    self.assertEqual(c["type"], "function")
                    self.assertIn(c["function"]["name"], declared, where)
                    args = json.loads(c["function"]["arguments"])
                    self.assertIsInstance(args, dict, where)
                    params = next(t for t in d["tools"]
                                  if t["function"]["name"] == c["function"]["name"])
                    for req in params["function"]["parameters"]["required"]:
                        self.assertIn(req, args, where)
                pending = [c["id"] for c in calls]
            else:
                self.assertIsInstance(m["content"], str, where)
                self.assertTrue(m["content"].strip(), where)
        self.assertEqual(pending, [], f"{d['id']}: calls left unanswered at the end")
        facts = set()
        for n in d["needles"]:
            self.assertEqual(n["turn"], n["message_index"])
            self.assertEqual(n["where"], n["role"])
            m = msgs[n["turn"]]
            self.assertEqual(m["role"], n["where"], n)
            self.assertIn(n["fact"], m["content"], n)
            self.assertNotIn(n["fact"], facts, n)
            facts.add(n["fact"])
            # Verbatim in the JSON text too (what a compressed output or an artifact holds).
            self.assertIn(n["fact"], json.dumps(m["content"], ensure_ascii=False), n)

    def test_every_conversation_has_the_shape(self):
        self.assertEqual(len(self.convs), gen.DEFAULT_COUNT)
        for d in self.convs:
            with self.subTest(conversation=d["id"]):
                self.check(d)

    def test_other_seeds_and_every_size_class_have_the_shape_too(self):
        for seed in (2, 3, 97):
            for i, size in enumerate(gen.SIZES):
                d = gen.conversation(seed, i, size)
                with self.subTest(seed=seed, size=size):
                    self.check(d)
                    lo, hi = gen.SIZES[size][0]
                    # The end may add a follow-up and a tool step (up to 5 messages).
                    self.assertTrue(lo <= len(d["messages"]) <= hi + 5, len(d["messages"]))


class Spread(unittest.TestCase):
    """What the other tests count on the default set to contain."""

    @classmethod
    def setUpClass(cls):
        cls.convs = default_set()
        cls.sizes = [len(json.dumps(d, ensure_ascii=False).encode()) for d in cls.convs]

    def test_sizes_from_a_few_messages_to_hundreds(self):
        counts = [len(d["messages"]) for d in self.convs]
        self.assertLessEqual(min(counts), 8)
        self.assertGreaterEqual(sum(c >= 200 for c in counts), 4)
        self.assertLessEqual(min(self.sizes), 10_000)
        self.assertGreaterEqual(max(self.sizes), 600_000)
        # tests/e2e/test_compress.py slices conv-000 at 10 and conv-001 at 120 and 180.
        self.assertGreater(counts[0], 10)
        self.assertGreaterEqual(counts[1], 200)
        self.assertGreaterEqual(sum(m["role"] == "user" for m in self.convs[1]["messages"]), 20)

    def test_languages_models_and_tools(self):
        self.assertEqual({d["language"] for d in self.convs}, LANGS)
        self.assertGreaterEqual(len({d["model"] for d in self.convs}), 4)
        self.assertTrue(any(d["model"].startswith("gpt") for d in self.convs))
        self.assertTrue(any(not d["model"].startswith("gpt") for d in self.convs))
        used = collections.Counter(c["function"]["name"] for d in self.convs
                                   for m in d["messages"] for c in m.get("tool_calls") or [])
        self.assertEqual(set(used), set(gen.TOOLS))

    def test_the_words_are_in_the_conversation_language(self):
        scripts = {"ja": "\u3040-\u30ff", "zh": "\u4e00-\u9fff", "ru": "\u0400-\u04ff"}
        for d in self.convs:
            # The users' own words: pasted logs (``` blocks) left out.
            said = "".join(m["content"].split("```")[0] for m in d["messages"]
                           if m["role"] == "user")
            lo_hi = scripts.get(d["language"])
            if lo_hi:
                lo, hi = lo_hi.split("-")
                n = sum(lo <= ch <= hi for ch in said)
                self.assertGreater(n, len(said) // 10, d["id"])

    def test_tool_outputs_and_turns_that_exercise_the_layers(self):
        outs = [m["content"] for d in self.convs for m in d["messages"] if m["role"] == "tool"]
        self.assertGreaterEqual(sum(len(o) > gen.BIG for o in outs), 50)
        self.assertGreater(max(len(o) for o in outs), 40_000)
        self.assertIn("", outs)  # an empty result (a search that found nothing)
        json_outs = [o for o in outs if o.startswith("{\"data\"") or o.startswith("{\n")]
        self.assertGreater(len(json_outs), 20)
        for o in json_outs:
            json.loads(o)  # JSON bodies stay JSON, facts included
        multi = [m for d in self.convs for m in d["messages"] if len(m.get("tool_calls") or []) > 1]
        self.assertGreater(len(multi), 20)
        for d in self.convs:
            if len(d["messages"]) >= 60:
                self.assertTrue(any(len(m["content"]) > gen.BIG for m in d["messages"]
                                    if m["role"] == "tool"), d["id"])

    def test_facts_said_by_everyone_and_spread_over_the_conversation(self):
        where = collections.Counter(n["where"] for d in self.convs for n in d["needles"])
        self.assertEqual(set(where), {"user", "assistant", "tool"})
        for w, n in where.items():
            self.assertGreater(n, 40, where)
        for d in self.convs:
            self.assertGreaterEqual(len(d["needles"]), 1, d["id"])
            if len(d["messages"]) >= 200:
                turns = [n["turn"] for n in d["needles"]]
                self.assertLess(min(turns), len(d["messages"]) // 3, d["id"])
                self.assertGreater(max(turns), 2 * len(d["messages"]) // 3, d["id"])


class Determinism(unittest.TestCase):
    def test_same_seed_same_conversation_other_seed_other(self):
        a = json.dumps(gen.conversation(5, 3))
        self.assertEqual(a, json.dumps(gen.conversation(5, 3)))
        self.assertNotEqual(a, json.dumps(gen.conversation(6, 3)))
        self.assertNotEqual(a, json.dumps(gen.conversation(5, 4, gen.PLAN[3])))

    def test_a_conversation_does_not_depend_on_the_count(self):
        few = list(gen.conversations(gen.DEFAULT_SEED, 3))
        self.assertEqual([json.dumps(d) for d in few],
                         [json.dumps(d) for d in default_set()[:3]])

    def test_the_command_writes_the_set_and_removes_stale_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "convs")
            os.makedirs(out)
            for name in ("conv-999.json", "notes.txt"):
                with open(os.path.join(out, name), "w") as f:
                    f.write("{}")
            cmd = [sys.executable, os.path.join(SUPPORT, "gen_conversations.py"), "--seed", "4",
                   "--count", "3", "--sizes", "tiny,small", out]
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            self.assertEqual(sorted(os.listdir(out)),
                             ["conv-000.json", "conv-001.json", "conv-002.json", "notes.txt"])
            first = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            again = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
            self.assertEqual(first, again)
            d = json.loads(first["conv-001.json"])
            self.assertEqual(d, json.loads(json.dumps(gen.conversation(4, 1, "small"))))
            bad = subprocess.run(cmd[:-2] + ["huge", out], capture_output=True, timeout=60)
            self.assertEqual(bad.returncode, 2)


if __name__ == "__main__":
    unittest.main()
