"""An upstream that bends HTTP: interim answers, closes, bogus statuses and
unsolicited bytes never become another order's outcome (issues #12, #13).

A real oncegate binary in front of the counting test upstream
(tools/test_upstream.py) in its misbehaving modes, both on loopback.
"""

import json
import unittest
from urllib.parse import quote

from harness import UpstreamNodeCase, wait_for


IN_DOUBT = "https://oncegate.dev/problems/in-doubt"
ROUTE = "orders"


def config(url):
    # A short upstream timeout: a client that waits for an answer that never
    # comes fails in seconds, not in the default eight.
    return """
[route.{route}]
upstream="{url}"
upstream-timeout=3s
""".format(route=ROUTE, url=url)


class UpstreamMisbehavingTest(UpstreamNodeCase, unittest.TestCase):
    def config(self, url):
        return config(url)

    def post(self, key):
        return self.node.request("POST", "/v1/webhook/" + ROUTE,
                                 {"order": key}, {"Idempotency-Key": key})

    def record(self, key):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=%s" % (quote(key, safe=""), ROUTE))
        return json.loads(body) if status == 200 else None

    def assert_own_answer(self, key, status=200):
        """Posts `key` and checks the sender and the record got the
        upstream's final answer to this very order."""
        got, _, body = self.post(key)
        self.assertEqual(got, status, body)
        self.assertEqual(json.loads(body)["key"], key, body)
        rec = self.record(key)
        self.assertEqual(rec["state"], "completed", rec)
        self.assertEqual(rec["status"], status, rec)
        self.assertEqual(json.loads(rec["response"])["key"], key, rec)
        self.assertEqual(self.up.executions(key), 1)

    def assert_in_doubt(self, key):
        status, _, body = self.post(key)
        self.assertEqual(status, 502, body)
        self.assertEqual(json.loads(body)["type"], IN_DOUBT, body)
        self.assertEqual(self.record(key)["state"], "in_doubt")
        # Never executed again: a retry is told it is in doubt.
        status, _, body = self.post(key)
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], IN_DOUBT, body)
        self.assertEqual(self.up.executions(key), 1)

    def test_early_hints_are_skipped_and_the_final_answer_is_the_outcome(self):
        self.up.set_mode("early-hints")  # 100 Continue, 103 Early Hints, 200
        self.assert_own_answer(self.key())
        self.up.set_mode("early-hints", interim=[103] * 8)
        self.assert_own_answer(self.key())

    def test_orders_over_a_pooled_connection_get_their_own_answers(self):
        orders = 30
        for i in range(orders):
            # Rejections between acceptances: a rejected order reported 200
            # (or an accepted one 500) is the bug.
            if i % 3 == 2:
                self.up.set_mode("error", interim=[103])
                k = self.key()
                status, _, body = self.post(k)
                self.assertEqual(status, 500, body)
                self.assertEqual(json.loads(body)["key"], k, body)
                self.assertEqual(self.record(k)["status"], 500)
                self.assertEqual(self.up.executions(k), 1)
            else:
                self.up.set_mode("early-hints")
                self.assert_own_answer(self.key())
        counts = self.up.counts()
        self.assertEqual(counts["total"], orders)
        self.assertTrue(all(n == 1 for n in counts["keys"].values()), counts)
        # The connection is still pooled after a complete final answer.
        self.assertLess(counts["connections"], orders / 2, counts)

    def test_an_answer_with_connection_close_is_never_reused(self):
        orders = 10
        for i in range(orders):
            self.up.set_mode("close", interim=[103] if i % 2 else [])
            self.assert_own_answer(self.key())
        counts = self.up.counts()
        self.assertEqual(counts["total"], orders)
        self.assertEqual(counts["connections"], orders, counts)
        # Back to keep-alive: served, and pooled again.
        self.up.set_mode("normal")
        for _ in range(5):
            self.assert_own_answer(self.key())
        self.assertLess(self.up.connections(), orders + 5)

    def test_a_status_outside_200_599_is_in_doubt_not_an_outcome(self):
        for status in (600, 99, 999, 0):
            with self.subTest(status=status):
                self.up.set_mode("bogus-status", status=status)
                self.assert_in_doubt(self.key())
                # The node keeps serving, with the right answers.
                self.up.set_mode("early-hints")
                self.assert_own_answer(self.key())

    def test_a_protocol_switch_or_endless_interim_answers_are_in_doubt(self):
        self.up.set_mode("normal", interim=[101])
        self.assert_in_doubt(self.key())
        self.up.set_mode("normal", interim=[103] * 9)
        self.assert_in_doubt(self.key())
        self.up.set_mode("normal")
        self.assert_own_answer(self.key())

    def test_unsolicited_bytes_after_an_answer_never_answer_the_next(self):
        for split in (False, True):
            for _ in range(5):
                with self.subTest(split=split):
                    extras = self.up.extras()
                    self.up.set_mode("extra", split=split)
                    self.assert_own_answer(self.key())
                    # The stale answer is on the wire before the next order.
                    self.assertTrue(wait_for(
                        lambda: self.up.extras() > extras, 5))
                    self.up.set_mode("normal")
                    self.assert_own_answer(self.key())
        counts = self.up.counts()
        self.assertTrue(all(n == 1 for n in counts["keys"].values()), counts)


if __name__ == "__main__":
    unittest.main()
