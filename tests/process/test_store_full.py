"""A full store answers 503, never 200, and keeps what it stored."""

import json
import unittest

from harness import Node, TempDir


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


if __name__ == "__main__":
    unittest.main()
