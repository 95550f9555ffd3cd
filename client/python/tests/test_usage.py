"""usage_from_openai / usage_from_anthropic / usage_from_response: dicts and SDK-like objects
(attribute access), without a server."""

import unittest
from types import SimpleNamespace as NS

import sdkenv  # noqa: F401  (puts the package on sys.path)
from ctxguard import Usage, usage_from_anthropic, usage_from_openai, usage_from_response

OPENAI_CHAT = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
              "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 64}},
}
OPENAI_RESPONSES = {
    "id": "resp_1", "object": "response", "model": "gpt-4.1",
    "usage": {"input_tokens": 900, "output_tokens": 50, "total_tokens": 950,
              "input_tokens_details": {"cached_tokens": 512},
              "output_tokens_details": {"reasoning_tokens": 0}},
}
ANTHROPIC = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 40, "output_tokens": 210, "cache_read_input_tokens": 3000,
              "cache_creation_input_tokens": 1500},
}


def to_obj(x):
    """A dict tree as attribute objects, as the providers' SDKs return them."""
    if isinstance(x, dict):
        return NS(**{k: to_obj(v) for k, v in x.items()})
    if isinstance(x, list):
        return [to_obj(v) for v in x]
    return x


class UsageTest(unittest.TestCase):
    def test_openai_chat_dict_and_object(self):
        want = Usage(input_tokens=176, output_tokens=300, cache_read_tokens=1024,
                     reasoning_tokens=64)
        self.assertEqual(usage_from_openai(OPENAI_CHAT), want)
        self.assertEqual(usage_from_openai(to_obj(OPENAI_CHAT)), want)
        self.assertEqual(usage_from_openai(OPENAI_CHAT["usage"]), want)  # the usage alone
        self.assertEqual(want.total, 1500)

    def test_openai_chat_without_details(self):
        r = {"usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        self.assertEqual(usage_from_openai(r), Usage(10, 5, 0, 0))
        # SDK objects have the details attribute set to None when absent.
        o = NS(usage=NS(prompt_tokens=10, completion_tokens=5, prompt_tokens_details=None,
                        completion_tokens_details=None))
        self.assertEqual(usage_from_openai(o), Usage(10, 5, 0, 0))

    def test_openai_responses_api(self):
        want = Usage(input_tokens=388, output_tokens=50, cache_read_tokens=512)
        self.assertEqual(usage_from_openai(OPENAI_RESPONSES), want)
        self.assertEqual(usage_from_openai(to_obj(OPENAI_RESPONSES)), want)

    def test_anthropic_dict_and_object(self):
        want = Usage(input_tokens=40, output_tokens=210, cache_read_tokens=3000,
                     cache_write_tokens=1500)
        self.assertEqual(usage_from_anthropic(ANTHROPIC), want)
        self.assertEqual(usage_from_anthropic(to_obj(ANTHROPIC)), want)
        o = NS(usage=NS(input_tokens=7, output_tokens=3, cache_read_input_tokens=None,
                        cache_creation_input_tokens=None))
        self.assertEqual(usage_from_anthropic(o), Usage(7, 3, 0, 0))

    def test_detection(self):
        self.assertEqual(usage_from_response(OPENAI_CHAT).cache_read_tokens, 1024)
        self.assertEqual(usage_from_response(to_obj(OPENAI_CHAT)).input_tokens, 176)
        self.assertEqual(usage_from_response(OPENAI_RESPONSES).input_tokens, 388)
        self.assertEqual(usage_from_response(to_obj(OPENAI_RESPONSES)).input_tokens, 388)
        self.assertEqual(usage_from_response(ANTHROPIC).cache_write_tokens, 1500)
        self.assertEqual(usage_from_response(to_obj(ANTHROPIC)).input_tokens, 40)

    def test_no_usage(self):
        for bad in ({"choices": []}, NS(choices=[]), {"usage": {"foo": 1}}):
            with self.assertRaises(ValueError):
                usage_from_response(bad)
        with self.assertRaises(ValueError):
            usage_from_openai({"usage": {}})


class ScopeTest(unittest.TestCase):
    def test_paths(self):
        from ctxguard import TENANT, Scope, parse_scope
        # "-" names the tenant explicitly (spends need that); "" and None are no scope.
        self.assertEqual(parse_scope("-"), TENANT)
        self.assertTrue(parse_scope("-").to_proto().tenant)
        self.assertEqual(parse_scope(""), Scope())
        self.assertEqual(parse_scope(None), Scope())
        self.assertFalse(parse_scope(None).to_proto().tenant)
        self.assertEqual(TENANT.path, "-")
        with self.assertRaises(ValueError):
            Scope("s", tenant=True)
        self.assertEqual(parse_scope("s/t/a"), Scope("s", "t", "a"))
        self.assertEqual(parse_scope("s/t").path, "s/t")
        self.assertEqual(Scope().path, "-")
        for bad in ("a/b/c/d", "a//b", "/a", "a/", "x" * 129):
            with self.assertRaises(ValueError, msg=bad):
                parse_scope(bad)


if __name__ == "__main__":
    unittest.main()
