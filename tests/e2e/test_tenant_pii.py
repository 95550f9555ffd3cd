"""Per-tenant PII settings end to end (admin.proto TenantSettings): the round trip through
CreateTenant / UpdateTenantSettings / GetTenant / ListTenants, a tenant that redacts only
emails (Summarize and Compress's summary layer keep its phone numbers), redact_artifacts on
and off (GetArtifact returns redacted or raw text; the history stays raw), bad input, and
`ctxguardctl tenant settings`."""

import json
import os
import subprocess
import uuid

import grpc

import cgtest
from cgtest import admin_pb2, common_pb2, context_pb2, context_pb2_grpc

C = context_pb2
P = common_pb2
EMAIL, PHONE = "alice@example.org", "415-555-0100"
EXTRACTIVE = C.SUMMARIZER_KIND_EXTRACTIVE


def msg(role, text):
    return P.Message(role=role, parts=[P.MessagePart(text=text)])


def pii_conversation():
    ms = [msg(P.ROLE_USER, f"Our customer {EMAIL} cannot log in; call her at {PHONE} today."),
          msg(P.ROLE_ASSISTANT, f"I will write to {EMAIL} and call {PHONE} once it is fixed.")]
    return P.Conversation(messages=P.MessageList(messages=ms))


def tool_conversation():
    """One large tool result (offloaded by L0) holding an email and a phone number."""
    body = (f"customer record: email {EMAIL}, phone {PHONE}.\n" + "0123456789" * 3000)
    msgs = [{"role": "user", "content": "read the record"},
            {"role": "assistant", "tool_calls": [
                {"id": "c0", "type": "function",
                 "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": body},
            {"role": "assistant", "content": "done"}]
    return P.Conversation(openai_json=json.dumps({"messages": msgs})), body


def out_messages(conv):
    out = json.loads(conv.openai_json)
    return out["messages"] if isinstance(out, dict) else out


class TenantPii(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.admin = cls.srv.admin(cls.ch)
        cls.amd = cls.srv.admin_md()
        cls.ctx = context_pb2_grpc.ContextServiceStub(cls.ch)

    def tenant(self, **settings):
        t = self.admin.CreateTenant(admin_pb2.CreateTenantRequest(
            name="pii-" + uuid.uuid4().hex[:8],
            settings=admin_pb2.TenantSettings(**settings) if settings else None),
            metadata=self.amd, timeout=10).tenant
        return t, cgtest.bearer(self.srv.create_key(t.tenant_id).secret)

    def update(self, tenant_id, **settings):
        return self.admin.UpdateTenantSettings(admin_pb2.UpdateTenantSettingsRequest(
            tenant_id=tenant_id, settings=admin_pb2.TenantSettings(**settings)),
            metadata=self.amd, timeout=10).tenant

    def summarize(self, md, **kw):
        return self.ctx.Summarize(C.SummarizeRequest(conversation=pii_conversation(),
                                                     summarizer=EXTRACTIVE, target_tokens=400,
                                                     **kw), metadata=md, timeout=30)

    def compress_session(self, md, session):
        conv, body = tool_conversation()
        resp = self.ctx.Compress(C.CompressRequest(conversation=conv, model="gpt-4o",
                                                   context_window_tokens=24000, session_id=session,
                                                   force=True), metadata=md, timeout=60)
        self.assertEqual(len(resp.report.artifacts), 1, resp.report)
        return resp, body

    def artifact(self, md, art_id, redacted):
        """The artifact's text; its stored ArtifactInfo must say whether it was redacted."""
        data, off = b"", 0
        while True:
            r = self.ctx.GetArtifact(C.GetArtifactRequest(artifact_id=art_id, offset=off),
                                     metadata=md, timeout=30)
            self.assertEqual(r.artifact.pii_redacted, redacted)
            data += r.content
            off += len(r.content)
            if r.eof:
                return data.decode()

    # -- settings round trip

    def test_defaults_and_round_trip(self):
        t, _ = self.tenant()
        self.assertEqual(list(t.settings.redact_types), [])
        self.assertFalse(t.settings.redact_artifacts)

        t, _ = self.tenant(redact_types=[P.PII_TYPE_PHONE, P.PII_TYPE_EMAIL, P.PII_TYPE_EMAIL],
                           redact_artifacts=True)
        self.assertEqual(list(t.settings.redact_types), [P.PII_TYPE_EMAIL, P.PII_TYPE_PHONE])
        self.assertTrue(t.settings.redact_artifacts)
        got = self.admin.GetTenant(admin_pb2.GetTenantRequest(tenant_id=t.tenant_id),
                                   metadata=self.amd, timeout=10).tenant
        self.assertEqual(got.settings, t.settings)

        upd = self.update(t.tenant_id, redact_types=[P.PII_TYPE_SECRET, P.PII_TYPE_IPV6])
        self.assertEqual(list(upd.settings.redact_types), [P.PII_TYPE_IPV6, P.PII_TYPE_SECRET])
        self.assertFalse(upd.settings.redact_artifacts)  # replaced whole
        self.assertEqual(upd.name, t.name)
        got = self.admin.GetTenant(admin_pb2.GetTenantRequest(tenant_id=t.tenant_id.upper()),
                                   metadata=self.amd, timeout=10).tenant
        self.assertEqual(got.settings, upd.settings)

        listed, token = {}, ""
        while True:
            page = self.admin.ListTenants(admin_pb2.ListTenantsRequest(page_token=token),
                                          metadata=self.amd, timeout=10)
            listed.update({x.tenant_id: x for x in page.tenants})
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(listed[t.tenant_id].settings, upd.settings)
        rows = cgtest.psql(f"SELECT pii_redact_types::text, pii_redact_artifacts FROM "
                           f"{self.srv.schema}.tenants WHERE tenant_id = '{t.tenant_id}'")
        self.assertIn("{6,8}", rows)

    # -- the settings used

    def test_email_only_tenant_keeps_phone_numbers_in_summaries(self):
        _, md = self.tenant(redact_types=[P.PII_TYPE_EMAIL])
        r = self.summarize(md)
        self.assertNotIn(EMAIL, r.summary)
        self.assertIn("<EMAIL_1>", r.summary)
        self.assertIn(PHONE, r.summary)
        counts = {P.PiiType.Name(c.type): c.count for c in r.redactions}
        self.assertEqual(counts, {"PII_TYPE_EMAIL": 2})

        # The default tenant redacts both; then the admin narrows it and it takes effect.
        t, md = self.tenant()
        r = self.summarize(md)
        self.assertNotIn(EMAIL, r.summary)
        self.assertNotIn(PHONE, r.summary)
        self.assertIn("<PHONE_1>", r.summary)
        self.update(t.tenant_id, redact_types=[P.PII_TYPE_EMAIL])
        r = self.summarize(md)
        self.assertIn(PHONE, r.summary)
        self.assertNotIn(EMAIL, r.summary)

    def test_email_only_tenant_in_compress_summary_layer(self):
        _, md = self.tenant(redact_types=[P.PII_TYPE_EMAIL])
        ms = [msg(P.ROLE_SYSTEM, "You are a support agent.")]
        for i in range(30):
            ms.append(msg(P.ROLE_USER, f"Round {i}: the customer {EMAIL} asked us to call "
                                       f"{PHONE} about ticket {1000 + i}. " + "detail " * 60))
            ms.append(msg(P.ROLE_ASSISTANT, f"Noted round {i}; " + "working on it " * 40))
        conv = P.Conversation(messages=P.MessageList(messages=ms))
        resp = self.ctx.Compress(C.CompressRequest(
            conversation=conv, model="gpt-4o", context_window_tokens=8000, force=True,
            summarizer=EXTRACTIVE, policy=C.CompressionPolicy(disabled_layers=[
                C.COMPRESSION_LAYER_STABLE_PREFIX_TRIM, C.COMPRESSION_LAYER_SLIDING_WINDOW])),
            metadata=md, timeout=60)
        rep = resp.report
        self.assertTrue(rep.HasField("summary"), rep.layers)
        counts = {P.PiiType.Name(c.type): c.count for c in rep.summary.redactions}
        self.assertGreater(counts.get("PII_TYPE_EMAIL", 0), 0, counts)
        self.assertNotIn("PII_TYPE_PHONE", counts)
        # The summary may be merged into the user message after it: find its part.
        parts = [p.text for m in resp.conversation.messages.messages for p in m.parts]
        summaries = [t for t in parts if "Session intent" in t]
        self.assertEqual(len(summaries), 1, (rep.summary, list(rep.source_indexes)))
        self.assertNotIn(EMAIL, summaries[0])

    def test_redact_artifacts_on_stores_redacted_text_and_keeps_the_history(self):
        _, md = self.tenant(redact_types=[P.PII_TYPE_EMAIL], redact_artifacts=True)
        session = "s-" + uuid.uuid4().hex
        resp, body = self.compress_session(md, session)
        info = resp.report.artifacts[0]
        self.assertTrue(info.pii_redacted)
        stored = self.artifact(md, info.artifact_id, True)
        self.assertNotIn(EMAIL, stored)
        self.assertIn("<EMAIL_1>", stored)
        self.assertIn(PHONE, stored)  # only the tenant's types
        self.assertEqual(stored, body.replace(EMAIL, "<EMAIL_1>"))
        self.assertEqual(info.size_bytes, len(stored.encode()))
        # The preview left in the message is redacted too and points at the artifact.
        preview = out_messages(resp.conversation)[2]["content"]
        self.assertNotIn(EMAIL, preview)
        self.assertTrue(preview.startswith(stored[:info.preview_bytes]), preview[:200])
        self.assertIn(info.artifact_id, preview)
        offload = [la for la in resp.report.layers if la.layer == C.COMPRESSION_LAYER_OFFLOAD]
        self.assertIn("PII redacted: EMAIL 2", offload[-1].detail)
        # The history stays as sent.
        h = self.ctx.GetHistory(C.GetHistoryRequest(
            session_id=session, response_format=P.CONVERSATION_FORMAT_OPENAI_CHAT),
            metadata=md, timeout=30)
        self.assertIn(EMAIL, json.dumps(out_messages(h.conversation)))

    def test_redact_artifacts_off_stores_raw_text(self):
        t, md = self.tenant(redact_types=[P.PII_TYPE_EMAIL])
        resp, body = self.compress_session(md, "s-" + uuid.uuid4().hex)
        info = resp.report.artifacts[0]
        self.assertFalse(info.pii_redacted)
        self.assertEqual(self.artifact(md, info.artifact_id, False), body)
        self.assertIn(EMAIL, out_messages(resp.conversation)[2]["content"])
        # Switched on, the next offload of the same tenant is redacted (every type: empty list).
        self.update(t.tenant_id, redact_artifacts=True)
        resp, body = self.compress_session(md, "s-" + uuid.uuid4().hex)
        stored = self.artifact(md, resp.report.artifacts[0].artifact_id, True)
        self.assertNotIn(EMAIL, stored)
        self.assertNotIn(PHONE, stored)

    # -- bad input

    def test_bad_input(self):
        t, _ = self.tenant()
        bad = grpc.StatusCode.INVALID_ARGUMENT
        self.assertRpcError(bad, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(
                                tenant_id=t.tenant_id, settings=admin_pb2.TenantSettings(
                                    redact_types=[P.PII_TYPE_EMAIL, 99])),
                            metadata=self.amd, timeout=10,
                            contains="settings.redact_types[1]")
        self.assertRpcError(bad, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(
                                tenant_id=t.tenant_id, settings=admin_pb2.TenantSettings(
                                    redact_types=[P.PII_TYPE_UNSPECIFIED])),
                            metadata=self.amd, timeout=10,
                            contains="settings.redact_types[0]")
        self.assertRpcError(bad, self.admin.CreateTenant, admin_pb2.CreateTenantRequest(
            name="x", settings=admin_pb2.TenantSettings(redact_types=[9])),
            metadata=self.amd, timeout=10, contains="settings.redact_types[0]")
        self.assertRpcError(bad, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(tenant_id=t.tenant_id),
                            metadata=self.amd, timeout=10, contains="settings")
        self.assertRpcError(bad, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(
                                tenant_id="nope", settings=admin_pb2.TenantSettings()),
                            metadata=self.amd, timeout=10, contains="tenant_id")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(
                                tenant_id=str(uuid.uuid4()), settings=admin_pb2.TenantSettings()),
                            metadata=self.amd, timeout=10, contains="tenant_id")
        agent = cgtest.bearer(self.srv.create_key(t.tenant_id, role="agent").secret)
        self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, self.admin.UpdateTenantSettings,
                            admin_pb2.UpdateTenantSettingsRequest(
                                tenant_id=t.tenant_id, settings=admin_pb2.TenantSettings()),
                            metadata=agent, timeout=10, contains="role 'agent'")
        # Nothing changed.
        got = self.admin.GetTenant(admin_pb2.GetTenantRequest(tenant_id=t.tenant_id),
                                   metadata=self.amd, timeout=10).tenant
        self.assertEqual(list(got.settings.redact_types), [])

    # -- ctxguardctl

    def ctl(self, *args, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_ADMIN_KEY"] = self.srv.admin_key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, expect, f"{args}: {proc.stdout}\n{proc.stderr}")
        return proc

    def test_ctl_tenant_settings(self):
        t, _ = self.tenant()
        out = self.ctl("tenant", "get", t.tenant_id).stdout
        self.assertRegex(out, r"pii_redact:\s+all")
        self.assertRegex(out, r"redact_artifacts:\s+off")
        out = self.ctl("tenant", "settings", t.tenant_id, "--redact", "email,PHONE").stdout
        self.assertRegex(out, r"pii_redact:\s+EMAIL,PHONE")
        self.assertRegex(out, r"redact_artifacts:\s+off")
        # Options not given are kept.
        self.ctl("tenant", "settings", t.tenant_id, "--redact-artifacts", "on")
        got = json.loads(self.ctl("--json", "tenant", "get", t.tenant_id).stdout)
        self.assertEqual(got["settings"]["redact_types"], ["PII_TYPE_EMAIL", "PII_TYPE_PHONE"])
        self.assertTrue(got["settings"]["redact_artifacts"])
        out = self.ctl("tenant", "settings", t.tenant_id, "--redact", "all").stdout
        self.assertRegex(out, r"pii_redact:\s+all")
        self.assertRegex(out, r"redact_artifacts:\s+on")
        err = self.ctl("tenant", "settings", t.tenant_id, "--redact", "email,zip", expect=2)
        self.assertIn("zip", err.stderr)
        self.ctl("tenant", "settings", t.tenant_id, "--redact-artifacts", "maybe", expect=2)
