"""SIGTERM with forwards in flight (docs/operations.md, Running: "The node
stops accepting, answers what is in flight (up to http.shutdown-grace),
then waits (again up to http.shutdown-grace) for forwards it already
answered 202 for ... and records their outcomes ... A forward still running
after that is logged (node.forwards_abandoned) and its key is in_doubt at
the next start").

A slow counting upstream holds every forward until the test lets it go, so
each test has requests in flight when the signal arrives (asserted through
the admin list of in-flight records). After the restart no acknowledged
decision is lost and nothing executes twice.
"""

import json
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import UpstreamNodeCase, wait_for

PROBLEM = "https://oncegate.dev/problems/"


def refuses_connections(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class ShutdownCase(UpstreamNodeCase):
    route_options = ""
    node_args = ("--log-level=info",)

    def config(self, url):
        return ('[route.fwd]\nupstream="%s"\nupstream-timeout=8s\n%s\n'
                % (url, self.route_options))

    def post(self, key, timeout=20.0):
        return self.node.request("POST", "/v1/webhook/fwd", {"order": key},
                                 {"Idempotency-Key": key}, timeout)

    def in_flight(self):
        status, _, body = self.node.request(
            "GET", "/v1/keys?state=in_flight&route=fwd")
        self.assertEqual(status, 200, body)
        return sorted(r["key"] for r in json.loads(body)["records"])

    def record(self, key):
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=fwd" % key)
        return json.loads(body) if status == 200 else None

    def send_all(self, keys):
        answers = {}

        def send(key):
            try:
                answers[key] = self.post(key)
            except OSError as e:
                answers[key] = (None, {}, repr(e).encode())

        threads = [threading.Thread(target=send, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        return threads, answers

    def sigterm(self):
        self.node.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout=20.0):
        try:
            code = self.node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("the node did not exit within %ss" % timeout)
        self.node.proc.stdout.close()
        self.node.proc = None
        return code


class DrainTest(ShutdownCase, unittest.TestCase):
    def test_requests_in_flight_at_sigterm_are_answered_and_recorded(self):
        keys = ["drain-%d" % i for i in range(5)]
        self.up.set_mode("slow", 30)
        threads, answers = self.send_all(keys)
        try:
            self.assertTrue(wait_for(
                lambda: self.up.counts()["total"] == len(keys), 5))
            # Something really is in flight at the signal.
            self.assertEqual(self.in_flight(), keys)
            port = self.node.port
            self.sigterm()
            # It stops accepting while it still answers what it holds.
            self.assertTrue(wait_for(lambda: refuses_connections(port), 5))
            self.assertEqual(answers, {})
            self.assertIsNone(self.node.proc.poll())
        finally:
            self.up.set_mode("normal")  # the upstream answers now
        for t in threads:
            t.join(20)
        self.assertEqual(self.wait_exit(), 0)
        for key in keys:
            status, _, body = answers[key]
            self.assertEqual(status, 200, (key, body))
            self.assertEqual(json.loads(body)["key"], key, body)

        self.node.start()
        for key in keys:
            rec = self.record(key)
            self.assertEqual((rec["state"], rec["status"]), ("completed", 200),
                             rec)
            status, _, body = self.post(key)
            self.assertEqual(status, 409, body)
            self.assertEqual(json.loads(body)["original_status"], 200, body)
        self.assertEqual(self.up.counts()["keys"], {k: 1 for k in keys})


class AcceptedForwardTest(ShutdownCase, unittest.TestCase):
    route_options = "respond-after=100ms"

    def test_forwards_answered_202_are_waited_for_and_recorded(self):
        self.up.set_mode("slow", 30)
        status, _, body = self.post("late-1")
        self.assertEqual(status, 202, body)
        self.assertEqual(json.loads(body)["status"], "in_progress", body)
        self.assertEqual(self.up.executions("late-1"), 1)
        self.assertEqual(self.in_flight(), ["late-1"])
        self.sigterm()
        try:
            # The HTTP side is done; the node waits for the forward.
            self.assertTrue(wait_for(
                lambda: "node.waiting_for_forwards" in self.node.log(), 10),
                self.node.log())
            self.assertIsNone(self.node.proc.poll())
        finally:
            self.up.set_mode("normal")
        self.assertEqual(self.wait_exit(), 0)
        log = self.node.log()
        self.assertIn("node.forwards_recorded", log)
        self.assertNotIn("node.forwards_abandoned", log)

        self.node.start()
        rec = self.record("late-1")
        self.assertEqual((rec["state"], rec["status"]), ("completed", 200), rec)
        self.assertEqual(json.loads(rec["response"])["key"], "late-1")
        status, _, body = self.post("late-1")
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["original_status"], 200, body)
        self.assertEqual(self.up.executions("late-1"), 1)


class AbandonedForwardTest(ShutdownCase, unittest.TestCase):
    route_options = "respond-after=100ms"
    node_args = ("--log-level=info", "--http.shutdown-grace=1s")

    def test_a_forward_running_past_the_grace_is_in_doubt_after_restart(self):
        self.up.set_mode("slow", 30)
        status, _, body = self.post("stuck-1")
        self.assertEqual(status, 202, body)
        self.assertEqual(self.in_flight(), ["stuck-1"])
        started = time.monotonic()
        self.sigterm()
        self.assertEqual(self.wait_exit(), 0)
        self.assertLess(time.monotonic() - started, 8)
        self.assertIn("node.forwards_abandoned", self.node.log())

        self.node.start()
        rec = self.record("stuck-1")
        self.assertEqual(rec["state"], "in_doubt", rec)
        status, _, body = self.post("stuck-1")
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "in-doubt", body)
        self.up.set_mode("normal")
        self.assertEqual(self.post("stuck-1")[0], 409)
        self.assertEqual(self.up.executions("stuck-1"), 1)


if __name__ == "__main__":
    unittest.main()
