"""Optional TLS and mutual TLS, with certificates made by the openssl CLI."""

import os
import subprocess
import tempfile
import unittest

import grpc

import cgtest
from cgtest import admin_pb2


CERTS = None


def setUpModule():
    # One set of certificates for the whole file.
    global CERTS, _TMP
    _TMP = tempfile.TemporaryDirectory(prefix="cg_e2e_tls_")
    unittest.addModuleCleanup(_TMP.cleanup)
    CERTS = cgtest.Certs(_TMP.name)


def check_fails(ch):
    err = cgtest.rpc_error(cgtest.health_check, ch, timeout=3)
    return err


class Tls(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = CERTS
        cls.srv = cgtest.start_class_server(cls, tls=cls.certs, env={
            "CTXGUARD_TLS_CERT": cls.certs.server_cert,
            "CTXGUARD_TLS_KEY": cls.certs.server_key,
        })

    def test_listening_line_says_tls_on(self):
        self.assertRegex(self.srv.log_text(), r"msg=listening .*tls=on")

    def test_tls_client_calls_health_and_admin(self):
        ch = self.srv.channel()
        self.assertEqual(cgtest.health.name(cgtest.health_check(ch).status), "SERVING")
        r = self.srv.admin(ch).WhoAmI(admin_pb2.WhoAmIRequest(), metadata=self.srv.admin_md(),
                                      timeout=10)
        self.assertEqual(admin_pb2.WhoAmIResponse.Kind.Name(r.kind), "KIND_ADMIN")

    def test_localhost_name_verifies_too(self):
        creds = self.certs.client_credentials()
        with grpc.secure_channel(f"localhost:{self.srv.port}", creds) as ch:
            self.assertEqual(cgtest.health.name(cgtest.health_check(ch).status), "SERVING")

    def test_plaintext_client_fails(self):
        with grpc.insecure_channel(self.srv.target) as ch:
            err = check_fails(ch)
        self.assertIn(err.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED),
                      err.details())
        # ... and leaves the server serving TLS clients.
        self.assertEqual(cgtest.health.name(cgtest.health_check(self.srv.channel()).status),
                         "SERVING")

    def test_client_that_does_not_trust_the_ca_fails(self):
        other_ca = self.certs.read("otherca.pem")
        creds = grpc.ssl_channel_credentials(root_certificates=other_ca)
        with grpc.secure_channel(self.srv.target, creds) as ch:
            err = check_fails(ch)
        self.assertIn(err.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))

    def test_wrong_host_name_fails(self):
        creds = self.certs.client_credentials()
        with grpc.secure_channel(self.srv.target, creds,
                                 options=[("grpc.ssl_target_name_override", "evil.example")]) as ch:
            err = check_fails(ch)
        self.assertIn(err.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))


class MutualTls(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = CERTS
        cls.srv = cgtest.start_class_server(cls, tls=cls.certs, client_cert=True, env={
            "CTXGUARD_TLS_CERT": cls.certs.server_cert,
            "CTXGUARD_TLS_KEY": cls.certs.server_key,
            "CTXGUARD_TLS_CLIENT_CA": cls.certs.ca_pem,
        })

    def test_client_with_a_ca_signed_cert_works(self):
        ch = self.srv.channel()
        self.assertEqual(cgtest.health.name(cgtest.health_check(ch).status), "SERVING")
        r = self.srv.admin(ch).Ping(admin_pb2.PingRequest(payload=b"mtls"),
                                    metadata=self.srv.admin_md(), timeout=10)
        self.assertEqual(r.payload, b"mtls")

    def test_client_without_a_cert_fails(self):
        with grpc.secure_channel(self.srv.target, self.certs.client_credentials(False)) as ch:
            err = check_fails(ch)
        self.assertIn(err.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))

    def test_client_cert_from_another_ca_fails(self):
        creds = self.certs.client_credentials(True, which="rogue")
        with grpc.secure_channel(self.srv.target, creds) as ch:
            err = check_fails(ch)
        self.assertIn(err.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))

    def test_plaintext_client_fails(self):
        with grpc.insecure_channel(self.srv.target) as ch:
            check_fails(ch)


class TlsConfigErrors(cgtest.TestCase):
    def test_missing_or_bad_files_fail_fast(self):
        certs, d = CERTS, CERTS.dir
        pair = {"CTXGUARD_TLS_CERT": certs.server_cert, "CTXGUARD_TLS_KEY": certs.server_key}
        cases = [
            ({"CTXGUARD_TLS_CERT": certs.server_cert}, r"tls_key"),  # no key
            ({"CTXGUARD_TLS_CERT": d + "/missing.pem", "CTXGUARD_TLS_KEY": certs.server_key},
             r"tls_cert"),
            # a key that is not the certificate's
            ({"CTXGUARD_TLS_CERT": certs.server_cert, "CTXGUARD_TLS_KEY": d + "/client.key"},
             r"tls_(cert|key)"),
            # a file that is no key at all
            ({"CTXGUARD_TLS_CERT": certs.server_cert, "CTXGUARD_TLS_KEY": certs.ca_pem},
             r"tls_(cert|key)"),
            ({"CTXGUARD_TLS_CLIENT_CA": certs.ca_pem}, r"tls_client_ca"),  # without TLS
            (dict(pair, CTXGUARD_TLS_CLIENT_CA=d + "/missing.pem"), r"tls_client_ca"),
        ]
        for i, (env, key) in enumerate(cases):
            with self.subTest(case=i, env={k[13:]: os.path.basename(v) for k, v in env.items()}):
                full = {"CTXGUARD_LISTEN": "127.0.0.1:0",
                        "CTXGUARD_PG_DSN": cgtest.dsn_with_schema(cgtest.pg_dsn(), "cg_e2e_none"),
                        "CTXGUARD_MIGRATE_ON_START": "false", "CTXGUARD_REDIS_URL": ""}
                full.update(env)
                r = subprocess.run([cgtest.server_bin()], env=cgtest.clean_env(full),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, timeout=20)
                self.assertNotEqual(r.returncode, 0, r.stderr)
                self.assertNotIn("msg=listening", r.stderr)
                # ctxguard's own message (not gRPC core's) names the key at fault.
                own = [line for line in r.stderr.splitlines()
                       if line.startswith("ctxguard:") or "lvl=error" in line]
                self.assertTrue(own, r.stderr)
                self.assertRegex(own[-1], key, r.stderr)


if __name__ == "__main__":
    unittest.main()
