"""Documented limits, observed over HTTP against the real binary:
`keys.max-live` refuses new keys with 503 and executes nothing, and
`http.response-timeout` answers 503 only while nothing may have been
forwarded (a forward never begins after it), and 504 in-doubt once a
forward has begun; a route whose upstream may take longer than the
response timeout is refused.
"""

import json
import os
import subprocess
import threading
import unittest

import harness
from harness import BIN, TempDir, UpstreamNodeCase, wait_for


class MaxLiveTest(UpstreamNodeCase, unittest.TestCase):
    node_args = ("--keys.max-live=3", "--keys.idle-timeout=1h",
                 "--keys.decision-cache=0")

    def test_new_keys_beyond_max_live_get_503_and_nothing_is_stored(self):
        for i in range(3):
            status, _, body = self.node.webhook({"n": i}, key="live-%d" % i)
            self.assertEqual(status, 200, body)
        status, headers, body = self.node.webhook({"n": 9}, key="live-9")
        self.assertEqual(status, 503, body)
        self.assertIn("retry-after", headers)
        self.assertEqual(json.loads(body)["status"], 503)
        self.assertEqual(self.node.request(
            "GET", "/v1/keys/live-9?route=default")[0], 404)
        # Known keys are still decided: a duplicate is a 409, not a 503.
        status, _, body = self.node.webhook({"n": 0}, key="live-0")
        self.assertEqual(status, 409, body)


class ResponseTimeoutConfigTest(unittest.TestCase):
    """A route whose upstream may take longer than `http.response-timeout`
    would answer its sender before the upstream: refused at start and by
    `--check-config`, unless the route answers 202 first."""

    SLOW = ('[http]\nresponse-timeout=700ms\n\n[route.slow]\n'
            'upstream="http://127.0.0.1:9/orders"\nupstream-timeout=5s\n')

    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def run_bin(self, ini_text, check=False):
        """Starts the node on `ini_text` (or checks it): (exit code, output).
        A configuration that passes starts a node; it is stopped."""
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write(ini_text)
        config = ("--check-config=" if check else "--config-file=") + ini
        out = subprocess.run(
            [BIN, config, "--http-port=0",
             "--data-dir=" + os.path.join(self.tmp.path, "data")],
            capture_output=True, timeout=30)
        return out.returncode, (out.stdout + out.stderr).decode()

    def test_upstream_timeouts_beyond_the_response_timeout_are_refused(self):
        for check in (False, True):
            code, text = self.run_bin(self.SLOW, check)
            self.assertEqual(code, 2, text)
            self.assertIn("route.slow: upstream-connect-timeout + "
                          "upstream-timeout (7s) must not exceed "
                          "http.response-timeout (700ms)", text)

    def test_a_route_that_answers_202_first_may_wait_longer(self):
        code, text = self.run_bin(self.SLOW + "respond-after=300ms\n", True)
        self.assertEqual(code, 0, text)
        code, text = self.run_bin(self.SLOW + 'delivery="async"\n', True)
        self.assertEqual(code, 0, text)


class ResponseTimeoutTest(UpstreamNodeCase, unittest.TestCase):
    """`http.response-timeout` passes while the store stalls (the test
    build's ONCEGATE_COMMIT_HOLD_FILE holds every COMMIT): `503` promises
    that nothing was executed, so a forward may not begin after it; once a
    forward has begun, the answer is `504 in-doubt`."""

    def config(self, url):
        return """
[http]
response-timeout=1500ms

[route.fwd]
upstream="{url}"
upstream-connect-timeout=200ms
upstream-timeout=1300ms
""".format(url=url)

    def setUp(self):
        if not harness.MUTANT_BIN:
            self.skipTest("ONCEGATE_MUTANT_BIN (the test build) is not set")
        super().setUp()

    def node_kwargs(self):
        self.hold = os.path.join(self.tmp.path, "commit-hold")
        return {"bin": harness.MUTANT_BIN,
                "env": {"ONCEGATE_COMMIT_HOLD_FILE": self.hold}}

    def post(self, key):
        return self.node.request("POST", "/v1/webhook/fwd", {"k": key},
                                 {"Idempotency-Key": key}, 30)

    def record(self, key):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=fwd" % key, timeout=30)
        return json.loads(body) if status == 200 else None

    def test_a_503_past_the_response_timeout_means_nothing_was_forwarded(
            self):
        open(self.hold, "w").close()
        status, _, body = self.post("held-claim")
        self.assertEqual(status, 503, body)
        self.assertEqual(json.loads(body)["status"], 503)
        # The claim commits once the disk is back; the forward must not
        # begin after that 503: the record is released, never forwarded.
        os.unlink(self.hold)
        self.assertTrue(wait_for(
            lambda: "upstream.abandoned" in self.node.log()
            or self.up.executions("held-claim") > 0, 30), self.node.log())
        self.assertEqual(self.up.executions("held-claim"), 0)
        self.assertTrue(wait_for(lambda: self.record("held-claim") is None,
                                 30), self.record("held-claim"))
        # The sender's retry executes, once.
        status, _, body = self.post("held-claim")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.up.executions("held-claim"), 1)

    def test_a_timeout_after_the_forward_began_answers_in_doubt(self):
        # The upstream holds the request; once it has it, the disk stalls,
        # and only then the upstream answers: its outcome cannot be stored
        # before the response timeout.
        self.up.set_mode("slow", 60)
        answer = {}

        def send():
            answer["r"] = self.post("held-outcome")

        sender = threading.Thread(target=send)
        sender.start()
        self.assertTrue(wait_for(
            lambda: self.up.executions("held-outcome") == 1, 30))
        open(self.hold, "w").close()
        self.up.set_mode("normal")
        sender.join(30)
        self.assertFalse(sender.is_alive())
        status, headers, body = answer["r"]
        self.assertEqual(status, 504, body)
        doc = json.loads(body)
        self.assertEqual(doc["type"],
                         "https://oncegate.dev/problems/in-doubt", body)
        os.unlink(self.hold)
        self.assertTrue(wait_for(
            lambda: (self.record("held-outcome") or {}).get("state")
            in ("completed", "in_doubt"), 30), self.record("held-outcome"))
        status, _, body = self.post("held-outcome")
        self.assertEqual(status, 409, body)
        self.assertEqual(self.up.executions("held-outcome"), 1)


if __name__ == "__main__":
    unittest.main()
