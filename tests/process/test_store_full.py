"""A full store answers 503, never 200, and keeps what it stored."""

import json
import unittest

from harness import Node, TempDir, UpstreamNodeCase


class StoreFullTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        # 48 pages of 4 KiB: a few dozen records with 2 KiB bodies.
        self.node = Node(self.tmp.path, "--store.max-pages=48").start()

    def tearDown(self):
        try:
            self.node.kill()
        finally:
            self.tmp.cleanup()

    def test_full_store_fails_closed_and_loses_nothing(self):
        acked = []
        first_503 = None
        for i in range(2000):
            key = "full-%d" % i
            status, headers, body = self.node.webhook(
                {"pad": "x" * 2048, "n": i}, key=key)
            if status == 200:
                self.assertIsNone(first_503,
                                  "200 after the store was full: " + key)
                acked.append(key)
            else:
                self.assertEqual(status, 503, body)
                self.assertEqual(headers.get("retry-after"), "1")
                self.assertEqual(json.loads(body)["type"],
                                 "https://oncegate.dev/problems/unavailable")
                first_503 = first_503 or key
                if i > len(acked) + 20:
                    break
        self.assertIsNotNone(first_503, "the store never filled up")
        self.assertGreater(len(acked), 0)
        # Every acknowledged key is still a duplicate, before and after a
        # restart with room to grow; the refused ones are free.
        for key in acked:
            n = int(key.split("-")[1])
            self.assertEqual(self.node.webhook(
                {"pad": "x" * 2048, "n": n}, key=key)[0], 409, key)
        self.assertEqual(self.node.request("GET", "/healthz")[0], 200)
        self.assertEqual(self.node.stop(), 0)
        self.node.extra_args = []
        self.node.start()
        for key in acked:
            n = int(key.split("-")[1])
            self.assertEqual(self.node.webhook(
                {"pad": "x" * 2048, "n": n}, key=key)[0], 409, key)
        n = int(first_503.split("-")[1])
        self.assertEqual(self.node.webhook(
            {"pad": "x" * 2048, "n": n}, key=first_503)[0], 200)


class OutcomeUnrecordedTest(UpstreamNodeCase, unittest.TestCase):
    """An upstream answer whose outcome cannot be committed (here the store
    fills up between the claim and the outcome) is never relayed as if it
    were recorded: the sender hears `in-doubt`, as a resend would, and a
    200 always means a completed record."""

    # 48 pages of 4 KiB; each outcome stores ~24 KiB, each claim ~100 bytes.
    node_args = ("--store.max-pages=48",)

    def config(self, url):
        return ("[admin]\nallow-unauthenticated-loopback=true\n"
                '[route.orders]\nupstream="%s"\n' % url)

    def test_an_answer_the_store_cannot_keep_is_in_doubt_not_200(self):
        self.up.pad = 24 * 1024
        answers = {}
        for i in range(200):
            key = "unrec-%d" % i
            status, _, body = self.node.request(
                "POST", "/v1/webhook/orders", {"n": i},
                {"Idempotency-Key": key})
            answers[key] = (status, body)
            if status == 503:
                break
        self.assertEqual(answers[key][0], 503, "the store never filled up")
        unrecorded = []
        for key, (status, body) in answers.items():
            if status == 503:
                continue
            _, rec = self.record(key)
            state = rec["state"] if rec else None
            if status == 200:
                self.assertEqual(state, "completed",
                                 "%s answered 200, record %s" % (key, state))
                continue
            # Executed upstream, outcome not stored: in doubt, never 200.
            self.assertEqual(status, 502, body)
            doc = json.loads(body)
            self.assertEqual(doc["type"],
                             "https://oncegate.dev/problems/in-doubt")
            self.assertIn("answered 200", doc["detail"])
            self.assertIn(state, ("in_flight", "in_doubt"), key)
            unrecorded.append(key)
            self.assertEqual(self.up.counts()["keys"].get(key), 1, key)
        self.assertTrue(unrecorded, "no outcome failed to be stored: %r"
                        % {k: v[0] for k, v in answers.items()})
        # A resend executes nothing and is a duplicate of an unsettled key.
        for key in unrecorded:
            status, _, body = self.node.request(
                "POST", "/v1/webhook/orders",
                {"n": int(key.split("-")[1])}, {"Idempotency-Key": key})
            self.assertEqual(status, 409, body)
            self.assertEqual(self.up.counts()["keys"].get(key), 1, key)

    def record(self, key, route="orders"):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=%s" % (key, route))
        return status, (json.loads(body) if status == 200 else None)


if __name__ == "__main__":
    unittest.main()
