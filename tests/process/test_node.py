"""The real binary over HTTP: first request 200, duplicate 409, restarts."""

import json
import threading
import unittest

from harness import Node, TempDir

SIGNAL = {"exchange": "BINANCE", "symbol": "BTCUSDT", "action": "buy",
          "timestamp": 1700000000}


class NodeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.node = Node(self.tmp.path).start()

    def tearDown(self):
        try:
            self.node.kill()
        finally:
            self.tmp.cleanup()

    def test_first_request_is_accepted_and_a_repeat_conflicts(self):
        status, headers, body = self.node.webhook(SIGNAL, key="order-1")
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["status"], "accepted")
        self.assertEqual(doc["idempotency_key"], "order-1")
        self.assertEqual(doc["key_source"], "header")
        self.assertIn("received_at", doc)
        self.assertEqual(headers["idempotency-key"], "order-1")
        self.assertEqual(headers["cache-control"], "no-store")
        status, headers, body = self.node.webhook(SIGNAL, key="order-1")
        self.assertEqual(status, 409, body)
        self.assertEqual(headers["content-type"], "application/problem+json")
        problem = json.loads(body)
        self.assertEqual(problem["type"],
                         "https://oncegate.dev/problems/duplicate")
        self.assertEqual(problem["status"], 409)
        self.assertEqual(problem["original_status"], 200)
        self.assertEqual(problem["first_seen"], doc["received_at"])

    def test_a_reused_key_with_another_payload_is_422(self):
        self.assertEqual(self.node.webhook(SIGNAL, key="k")[0], 200)
        other = dict(SIGNAL, action="sell")
        status, _, body = self.node.webhook(other, key="k")
        self.assertEqual(status, 422, body)
        self.assertEqual(json.loads(body)["type"],
                         "https://oncegate.dev/problems/key-reused")
        # The original stays: its duplicate is still a 409.
        self.assertEqual(self.node.webhook(SIGNAL, key="k")[0], 409)

    def test_key_from_body_fields(self):
        status, _, body = self.node.webhook({"id": "tv-1", "action": "buy"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key_source"], "body")
        self.assertEqual(
            self.node.webhook({"id": "tv-1", "action": "buy"})[0], 409)

    def test_derived_key_ignores_case_whitespace_and_time_format(self):
        status, _, body = self.node.webhook(SIGNAL)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key_source"], "derived")
        same = {"exchange": " binance", "symbol": "btcusdt ",
                "action": " BUY ", "timestamp": "2023-11-14T22:13:20Z"}
        status, _, body = self.node.webhook(same)
        # Same derived key, different canonical payload: key reused.
        self.assertEqual(status, 422, body)

    def test_missing_derivation_fields_are_422_and_store_nothing(self):
        status, _, body = self.node.webhook({"symbol": "BTCUSDT"})
        self.assertEqual(status, 422, body)
        detail = json.loads(body)["detail"]
        for field in ("exchange", "action", "timestamp"):
            self.assertIn(field, detail)

    def test_malformed_json_is_400_and_stores_nothing(self):
        status, _, body = self.node.webhook('{"id": "x",', key="bad")
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["type"],
                         "https://oncegate.dev/problems/malformed-json")
        # Nothing was stored: the key is still free.
        self.assertEqual(self.node.webhook({"id": "x"}, key="bad")[0], 200)

    def test_other_endpoints(self):
        self.assertEqual(self.node.request("GET", "/healthz")[0], 200)
        status, headers, _ = self.node.request("GET", "/v1/webhook")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "POST")
        self.assertEqual(self.node.request("POST", "/nope", {})[0], 404)
        status, _, _ = self.node.webhook(
            "a=b", headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 415)

    def test_fifty_parallel_identical_requests_execute_once(self):
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(50)

        def send():
            barrier.wait(10)
            status = self.node.webhook(SIGNAL, key="burst")[0]
            with lock:
                results.append(status)

        threads = [threading.Thread(target=send) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(len(results), 50)
        self.assertEqual(results.count(200), 1, results)
        self.assertEqual(results.count(409), 49, results)

    def test_restart_keeps_every_key(self):
        keys = ["restart-%d" % i for i in range(100)]
        for k in keys:
            self.assertEqual(self.node.webhook({"n": k}, key=k)[0], 200)
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        for k in keys:
            self.assertEqual(self.node.webhook({"n": k}, key=k)[0], 409, k)

    def test_sigterm_under_load_keeps_every_answered_key(self):
        acked = []
        lock = threading.Lock()
        stop = threading.Event()

        def sender(n):
            for i in range(100000):
                if stop.is_set():
                    return
                key = "term-%d-%d" % (n, i)
                try:
                    status = self.node.webhook({"k": key}, key=key,
                                               timeout=5)[0]
                except OSError:
                    return
                if status == 200:
                    with lock:
                        acked.append(key)

        threads = [threading.Thread(target=sender, args=(n,))
                   for n in range(4)]
        for t in threads:
            t.start()
        # Stop once some load went through (bounded wait on a condition).
        from harness import wait_for
        self.assertTrue(wait_for(lambda: len(acked) >= 50, 10))
        self.assertEqual(self.node.stop(), 0)
        stop.set()
        for t in threads:
            t.join(15)
        self.node.start()
        lost = [k for k in acked
                if self.node.webhook({"k": k}, key=k)[0] != 409]
        self.assertEqual(lost, [])

    def test_sigterm_exits_zero_after_answering(self):
        self.assertEqual(self.node.webhook(SIGNAL, key="x")[0], 200)
        self.assertEqual(self.node.stop(), 0)


if __name__ == "__main__":
    unittest.main()
