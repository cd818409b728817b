""""Bodies, secrets and signatures are never logged" (docs/operations.md,
Logs), at the most verbose level there is (`--log-level=trace`), in both
log formats, in the log file, on stderr and on stdout.

Every request carries unique markers: in its body (also where it is
forwarded upstream, refused as malformed or too large, or reused under its
key), in a header, in query tokens; every route has a secret (token,
GitHub, Standard Webhooks) and the admin endpoints a token, each sent
right and wrong. None of them may appear anywhere the node writes. Kills
the mutant `log-request-body`.
"""

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import unittest

from harness import Node, TempDir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402
from oncegate_drill.keys import github_signature, sw_signature  # noqa


def marker(name):
    return "MRK%s%s" % (name.upper(), secrets.token_hex(8))


class NoSecretsInLogsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.up = TestUpstream().start()
        self.addCleanup(self.up.stop)
        self.m = {n: marker(n) for n in (
            "body", "header", "agent", "tvsecret", "tvwrong", "passphrase",
            "ghsecret", "swkey", "admin", "adminwrong", "malformed", "large",
            "reused", "forwarded", "swbody", "ghbody", "query")}
        self.sw_key = self.m["swkey"].encode()
        self.sw_secret = "whsec_" + base64.b64encode(self.sw_key).decode()
        self.secrets = dict(self.m, swsecret=self.sw_secret,
                            swsecret_b64=self.sw_secret[6:])
        with open(os.path.join(self.tmp.path, "gh.secret"), "w") as f:
            f.write(self.m["ghsecret"] + "\n")
        self.ini = os.path.join(self.tmp.path, "node.ini")
        with open(self.ini, "w") as f:
            f.write("""
[route.tv]
auth="token"
secret-env="ONCEGATE_LOG_TV"

[route.gh]
auth="github"
secret-file="{tmp}/gh.secret"

[route.sw]
auth="standard-webhooks"
secret="{sw}"

[route.fwd]
upstream="{url}"

[route.small]
body-limit=256

[admin]
token="{admin}"
""".format(tmp=self.tmp.path, sw=self.sw_secret, url=self.up.url,
           admin=self.m["admin"]))

    def run_node(self, log_format):
        data = os.path.join(self.tmp.path, "data-" + log_format)
        log_file = os.path.join(self.tmp.path, "file-%s.log" % log_format)
        node = Node(data, "--config-file=" + self.ini, "--log-level=trace",
                    "--log-format=" + log_format, "--log-file=" + log_file,
                    env={"ONCEGATE_LOG_TV": self.m["tvsecret"]})
        node.start()
        self.addCleanup(node.kill)
        return node, log_file

    def traffic(self, node):
        m = self.m
        post = node.request
        hdrs = {"X-Request-Note": m["header"], "User-Agent": m["agent"]}

        def check(res, status):
            self.assertEqual(res[0], status, res)

        # Plain route: accepted, duplicate, reused key, malformed, too big.
        body = {"note": m["body"], "n": 1}
        check(post("POST", "/v1/webhook", body,
                   dict(hdrs, **{"Idempotency-Key": "log-1"})), 200)
        check(post("POST", "/v1/webhook", body,
                   dict(hdrs, **{"Idempotency-Key": "log-1"})), 409)
        check(post("POST", "/v1/webhook", {"note": m["reused"]},
                   dict(hdrs, **{"Idempotency-Key": "log-1"})), 422)
        check(post("POST", "/v1/webhook", '{"note":"%s",' % m["malformed"],
                   {"Idempotency-Key": "log-2"}), 400)
        check(post("POST", "/v1/webhook/small",
                   {"note": m["large"], "pad": "x" * 400},
                   {"Idempotency-Key": "log-3"}), 413)
        check(post("POST", "/v1/webhook", {"note": m["body"]},
                   {"Idempotency-Key": "log-4",
                    "Content-Type": "application/xml"}), 415)
        # Token route: query token and body passphrase, right and wrong.
        check(post("POST", "/v1/webhook/tv?token=" + m["tvsecret"],
                   {"id": "tv-1", "note": m["body"]}, hdrs), 200)
        check(post("POST", "/v1/webhook/tv?token=" + m["tvwrong"],
                   {"id": "tv-2", "note": m["body"]}, hdrs), 401)
        check(post("POST", "/v1/webhook/tv",
                   {"id": "tv-3", "passphrase": m["tvsecret"]}), 200)
        check(post("POST", "/v1/webhook/tv",
                   {"id": "tv-4", "passphrase": m["passphrase"]}), 401)
        check(post("POST", "/v1/webhook?x=" + m["query"],
                   {"id": "q-1"}), 200)
        # GitHub route: signed, and signed with a wrong secret.
        data = json.dumps({"note": m["ghbody"]}).encode()
        for secret, status in ((m["ghsecret"], 200), ("wrong", 401)):
            sig = github_signature(secret, data)
            self.secrets["ghsig-%d" % status] = sig[7:]
            check(post("POST", "/v1/webhook/gh", data,
                       {"X-Hub-Signature-256": sig,
                        "X-GitHub-Delivery": "d-%d" % status}), status)
        # Standard Webhooks route: valid and invalid signatures.
        data = json.dumps({"note": m["swbody"]}).encode()
        ts = str(int(time.time()))
        for key, status in ((self.sw_key, 200), (b"wrong-key", 401)):
            sig = sw_signature(key, "sw-1", ts, data)[len("v1,"):]
            self.secrets["swsig-%d" % status] = sig
            check(post("POST", "/v1/webhook/sw", data,
                       {"webhook-id": "sw-1", "webhook-timestamp": ts,
                        "webhook-signature": "v1," + sig}), status)
        # Forwarded upstream, and answered by it.
        check(post("POST", "/v1/webhook/fwd", {"note": m["forwarded"]},
                   dict(hdrs, **{"Idempotency-Key": "fwd-1"})), 200)
        self.assertEqual(self.up.executions("fwd-1"), 1)
        # Admin: right and wrong tokens.
        check(post("GET", "/v1/keys/log-1?route=default", None,
                   {"Authorization": "Bearer " + m["admin"]}), 200)
        check(post("GET", "/v1/keys/log-1?route=default", None,
                   {"Authorization": "Bearer " + m["adminwrong"]}), 401)
        check(post("DELETE", "/v1/keys/log-1?route=default", None,
                   {"Authorization": "Bearer " + m["admin"]}), 200)

    def stop_and_collect(self, node):
        """SIGTERM; the rest of stdout, read to its end."""
        node.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = node.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill()
            self.fail("node did not stop")
        self.assertEqual(node.proc.returncode, 0)
        node.proc = None
        return out.decode(errors="replace")

    def assert_no_marker(self, name, text):
        found = {k: v for k, v in self.secrets.items() if v in text}
        self.assertEqual(found, {}, "%s holds bodies or secrets: %s"
                         % (name, [line for line in text.splitlines()
                                   if any(v in line for v in found.values())
                                   ][:5]))

    def check_format(self, log_format):
        node, log_file = self.run_node(log_format)
        self.traffic(node)
        stdout = self.stop_and_collect(node)
        with open(node.log_path, errors="replace") as f:
            stderr = f.read()
        with open(log_file, errors="replace") as f:
            file_text = f.read()
        # Trace level really logged the requests (so silence is meaningful).
        self.assertIn("claim.submit", file_text)
        self.assertGreater(len(file_text.splitlines()), 20, file_text)
        self.assert_no_marker("stdout", stdout)
        self.assert_no_marker("stderr", stderr)
        self.assert_no_marker("the log file", file_text)

    def test_no_body_or_secret_reaches_a_text_log_at_trace_level(self):
        self.check_format("text")

    def test_no_body_or_secret_reaches_a_json_log_at_trace_level(self):
        self.check_format("json")


if __name__ == "__main__":
    unittest.main()
