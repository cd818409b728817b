"""Store failures over HTTP (docs/http-api.md, Responses: "store failure,
store full, overload ... 503 unavailable; Retry-After: 1; nothing
executed"; /readyz).

- A COMMIT that fails (ONCEGATE_COMMIT_FAULT_FILE of the test build
  oncegate_mutant: while the file exists every COMMIT is a rollback, as a
  disk error at commit time would be) answers 503, acknowledges nothing and
  forwards nothing; once the disk is back the sender's retry executes once,
  and a restart finds exactly that. Kills the mutant `ignore-commit-result`.
- An overloaded store (`store.max-pending-bytes`, `store.max-pending`)
  refuses with 503 and stores nothing for the refused requests.
- /readyz is 503 with a reason while the store does not answer, 200 again
  once it does.

The store is made to stall by holding SQLite's write lock from another
connection (BEGIN IMMEDIATE): the node's next transaction waits in its busy
timeout (5 s), and everything sent meanwhile queues behind it. Every hold
is released well within that timeout.
"""

import json
import os
import sqlite3
import threading
import time
import unittest

import harness
from harness import UpstreamNodeCase, metric, wait_for

PROBLEM = "https://oncegate.dev/problems/"


def problem(body):
    return json.loads(body)


class StoreLock:
    """Holds the write lock of a node's database from another connection."""

    def __init__(self, data_dir):
        self.db = sqlite3.connect(os.path.join(data_dir, "oncegate.db"),
                                  isolation_level=None, timeout=5)

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc):
        self.db.execute("ROLLBACK")
        self.db.close()


class Senders:
    """One thread per request, each answer kept by its key."""

    def __init__(self, node, path, keys, timeout=15.0):
        self.results = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._send,
                                         args=(node, path, k, timeout))
                        for k in keys]
        for t in self.threads:
            t.start()

    def _send(self, node, path, key, timeout):
        try:
            res = node.request("POST", path, {"order": key},
                               {"Idempotency-Key": key}, timeout)
        except OSError as e:
            res = (None, {}, repr(e).encode())
        with self.lock:
            self.results[key] = res

    def join(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return dict(self.results)


class CommitFailureTest(UpstreamNodeCase, unittest.TestCase):
    """Run on the test build (ONCEGATE_MUTANT_BIN), which alone knows the
    commit fault; under expect_killed.py that build carries the mutant."""

    def config(self, url):
        return '[route.fwd]\nupstream="%s"\n' % url

    def setUp(self):
        if not harness.MUTANT_BIN:
            self.skipTest("ONCEGATE_MUTANT_BIN (the test build) is not set")
        super().setUp()

    def node_kwargs(self):
        self.fault = os.path.join(self.tmp.path, "commit-fault")
        return {"bin": harness.MUTANT_BIN,
                "env": {"ONCEGATE_COMMIT_FAULT_FILE": self.fault}}

    def post(self, key, route="fwd"):
        path = "/v1/webhook" + ("/" + route if route else "")
        return self.node.request("POST", path, {"order": key},
                                 {"Idempotency-Key": key})

    def record(self, key, route="fwd"):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=%s" % (key, route))
        return json.loads(body) if status == 200 else None

    def assert_refused(self, status, headers, body):
        self.assertEqual(status, 503, body)
        self.assertEqual(headers.get("retry-after"), "1")
        doc = problem(body)
        self.assertEqual(doc["type"], PROBLEM + "unavailable", body)
        self.assertIn("no durable decision", doc["detail"])

    def test_a_failed_commit_is_503_executes_nothing_and_the_retry_runs_once(
            self):
        open(self.fault, "w").close()
        failed_before = metric(self.node,
                               "oncegate_store_failed_commits_total")
        # A forwarding route and a plain one: neither is acknowledged nor
        # forwarded while COMMIT fails.
        self.assert_refused(*self.post("cf-fwd"))
        self.assert_refused(*self.post("cf-plain", route=""))
        self.assert_refused(*self.post("cf-later"))
        # A retry during the fault is refused again; nothing was kept that
        # would turn it into a duplicate or an in-flight answer.
        self.assert_refused(*self.post("cf-fwd"))
        self.assertEqual(self.up.counts()["total"], 0, self.up.counts())
        self.assertIsNone(self.record("cf-fwd"))
        self.assertIsNone(self.record("cf-plain", route="default"))
        self.assertGreater(metric(self.node,
                                  "oncegate_store_failed_commits_total"),
                           failed_before)

        os.remove(self.fault)
        status, _, body = self.post("cf-fwd")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["key"], "cf-fwd", body)
        self.assertEqual(self.up.executions("cf-fwd"), 1)
        status, _, body = self.post("cf-fwd")
        self.assertEqual(status, 409, body)
        self.assertEqual(problem(body)["type"], PROBLEM + "duplicate")
        status, _, body = self.post("cf-plain", route="")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["status"], "accepted", body)

        # After a restart: what was acknowledged is there, what was refused
        # is not, and nothing ran twice.
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        rec = self.record("cf-fwd")
        self.assertEqual(rec["state"], "completed", rec)
        self.assertEqual(rec["status"], 200, rec)
        status, _, body = self.post("cf-fwd")
        self.assertEqual(status, 409, body)
        self.assertEqual(problem(body)["original_status"], 200, body)
        self.assertEqual(self.post("cf-plain", route="")[0], 409)
        self.assertIsNone(self.record("cf-later"))
        status, _, body = self.post("cf-later")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.up.counts()["keys"],
                         {"cf-fwd": 1, "cf-later": 1})

    def ready(self):
        status, _, body = self.node.request("GET", "/readyz")
        return status, json.loads(body)

    def test_readyz_is_503_while_commits_fail_and_200_once_they_do_again(
            self):
        # A node whose every commit failed (a full disk) said "ready" while
        # it answered 503 to every new key.
        self.assertEqual(self.ready()[0], 200)
        open(self.fault, "w").close()
        self.assert_refused(*self.post("rf-1", route=""))
        status, doc = self.ready()
        self.assertEqual(status, 503, doc)
        self.assertIn("store commits failing", doc["reason"], doc)
        self.assertEqual(self.node.request("GET", "/healthz")[0], 200)
        # Still failing: the probe batches it sends fail too.
        self.assertFalse(wait_for(lambda: self.ready()[0] == 200, 1.5))
        # The disk is back: ready again without any webhook traffic.
        os.remove(self.fault)
        self.assertTrue(wait_for(lambda: self.ready()[0] == 200, 5),
                        self.ready())
        self.assertEqual(self.post("rf-1", route="")[0], 200)

    def test_an_outcome_whose_commit_fails_is_never_executed_again(self):
        # The claim commits; the commit of the upstream's answer fails. The
        # record stays in flight (in doubt after a restart): a key that did
        # execute must never execute again.
        self.up.set_mode("slow", 10)
        sender = Senders(self.node, "/v1/webhook/fwd", ["cf-outcome"])
        self.assertTrue(wait_for(
            lambda: self.up.executions("cf-outcome") == 1, 5))
        open(self.fault, "w").close()
        self.up.set_mode("normal")  # the held request is answered now
        status, _, body = sender.join()["cf-outcome"]
        self.assertIsNotNone(status, body)
        # During the fault a retry is refused or told the key is taken.
        status, _, body = self.post("cf-outcome")
        self.assertIn(status, (409, 503), body)
        os.remove(self.fault)
        status, _, body = self.post("cf-outcome")
        self.assertEqual(status, 409, body)
        self.assertEqual(self.node.stop(), 0)
        self.node.start()
        rec = self.record("cf-outcome")
        self.assertIn(rec["state"], ("in_doubt", "completed"), rec)
        status, _, body = self.post("cf-outcome")
        self.assertEqual(status, 409, body)
        self.assertEqual(self.up.executions("cf-outcome"), 1)


class StoreOverloadTest(UpstreamNodeCase, unittest.TestCase):
    """`store.max-pending-bytes=1`: with an operation queued, every further
    one is refused ("the first always fits")."""

    node_args = ("--store.max-pending-bytes=1",)
    senders = 16

    def config(self, url):
        return '[route.fwd]\nupstream="%s"\n' % url

    def overload(self, prefix):
        """Stalls the store, queues `senders` claims behind the stall, lets
        it go; returns the answers by key."""
        keys = ["%s-%d" % (prefix, i) for i in range(self.senders)]
        spawned = metric(self.node, "oncegate_key_actors_spawned_total")
        with StoreLock(self.tmp.path):
            senders = Senders(self.node, "/v1/webhook/fwd", keys)
            # Every claim reached its key actor, which asked the store.
            self.assertTrue(wait_for(
                lambda: metric(self.node, "oncegate_key_actors_spawned_total")
                >= spawned + self.senders, 3), "claims did not arrive")
        return senders.join()

    def check_overload(self, results):
        refused = {k: r for k, r in results.items() if r[0] == 503}
        granted = {k: r for k, r in results.items() if r[0] == 200}
        self.assertEqual(len(refused) + len(granted), len(results),
                         {k: r[0] for k, r in results.items()})
        overloaded = [k for k, r in refused.items()
                      if "overloaded" in problem(r[2])["detail"]]
        self.assertGreater(len(overloaded), 0, "nothing refused as overload")
        for key, (status, headers, body) in refused.items():
            doc = problem(body)
            self.assertEqual(doc["type"], PROBLEM + "unavailable", body)
            self.assertEqual(headers.get("retry-after"), "1")
            # Nothing stored, nothing forwarded.
            self.assertEqual(self.node.request(
                "GET", "/v1/keys/%s?route=fwd" % key)[0], 404, key)
            self.assertEqual(self.up.executions(key), 0, key)
        for key in granted:
            self.assertEqual(self.up.executions(key), 1, key)
            self.assertEqual(self.node.request(
                "POST", "/v1/webhook/fwd", {"order": key},
                {"Idempotency-Key": key})[0], 409, key)
        # A refused request's retry executes, once.
        for key in refused:
            status, _, body = self.node.request(
                "POST", "/v1/webhook/fwd", {"order": key},
                {"Idempotency-Key": key})
            self.assertEqual(status, 200, body)
            self.assertEqual(self.up.executions(key), 1, key)
        self.assertGreater(metric(
            self.node,
            'oncegate_decisions_total{route="fwd",outcome="unavailable"}'), 0)

    def test_an_overloaded_store_refuses_with_503_and_stores_nothing(self):
        self.check_overload(self.overload("bytes"))


class MaxPendingTest(StoreOverloadTest):
    """`store.max-pending=2` (and `max-batch=2`, the most it allows): at most
    two operations queued for the store, 503 beyond."""

    node_args = ("--store.max-pending=2", "--store.max-batch=2")

    # Every operation waiting in the store's mailbox is queued before a
    # commit starts, so the bound covers claims that arrive while a commit
    # stalls. Before that fix the store flushed as soon as `max-batch` were
    # queued and this bound was never reached: 16 claims behind a 3 s stall
    # were all answered 200.


class ReadyzTest(UpstreamNodeCase, unittest.TestCase):
    def ready(self):
        status, headers, body = self.node.request("GET", "/readyz",
                                                  timeout=10)
        return status, headers, json.loads(body)

    def test_readyz_is_503_while_the_store_does_not_answer_and_200_after(
            self):
        status, headers, doc = self.ready()
        self.assertEqual((status, doc), (200, {"status": "ready"}))
        self.assertEqual(self.node.request("HEAD", "/readyz")[0], 200)
        self.assertEqual(self.node.request("POST", "/readyz", {})[0], 405)
        with StoreLock(self.tmp.path):
            # A write stalls the store in its busy timeout.
            sender = Senders(self.node, "/v1/webhook", ["rz-1"])
            answers = []

            def not_ready():
                started = time.monotonic()
                answers.append((self.ready(), time.monotonic() - started))
                return answers[-1][0][0] == 503

            # (The first probe may reach the store before the write does.)
            self.assertTrue(wait_for(not_ready, 4), answers)
            (status, headers, doc), took = answers[-1]
            self.assertEqual(doc["status"], "unavailable", doc)
            self.assertIsInstance(doc.get("reason"), str, doc)
            self.assertTrue(doc["reason"], doc)
            self.assertEqual(headers.get("retry-after"), "1")
            # Bounded: "when the store answers within 2 s".
            self.assertLess(took, 4.0)
            # Liveness is not readiness: the process still serves.
            self.assertEqual(self.node.request("GET", "/healthz")[0], 200)
        self.assertEqual(sender.join()["rz-1"][0], 200)
        self.assertTrue(wait_for(lambda: self.ready()[0] == 200, 5))


if __name__ == "__main__":
    unittest.main()
