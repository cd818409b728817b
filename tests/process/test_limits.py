"""Documented limits, observed over HTTP against the real binary:
`keys.max-live` refuses new keys with 503 and executes nothing, and
`http.response-timeout` answers 503 while a slow forward runs on and is
recorded (a retry then finds its outcome, never a second execution).
"""

import json
import time
import unittest

from harness import UpstreamNodeCase, wait_for


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


class ResponseTimeoutTest(UpstreamNodeCase, unittest.TestCase):
    def config(self, url):
        return """
[http]
response-timeout=700ms

[route.slow]
upstream="{url}"
upstream-timeout=5s
""".format(url=url)

    def post(self, key):
        return self.node.request("POST", "/v1/webhook/slow", {"k": key},
                                 {"Idempotency-Key": key}, 10)

    def test_a_request_past_the_response_timeout_gets_503_and_runs_on(self):
        self.up.set_mode("slow", 2)
        started = time.monotonic()
        status, _, body = self.post("slow-1")
        took = time.monotonic() - started
        self.assertEqual(status, 503, body)
        self.assertLess(took, 1.8, "answered after %.2fs" % took)
        self.assertEqual(self.up.executions("slow-1"), 1)
        # The forward goes on and its outcome is recorded.

        def completed():
            status, _, body = self.node.request(
                "GET", "/v1/keys/slow-1?route=slow")
            return status == 200 and json.loads(body)["state"] == "completed"

        self.assertTrue(wait_for(completed, 10))
        self.up.set_mode("normal")
        status, _, body = self.post("slow-1")
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["original_status"], 200)
        self.assertEqual(self.up.executions("slow-1"), 1)


if __name__ == "__main__":
    unittest.main()
