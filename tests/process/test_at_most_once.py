"""At most once against an unlucky clock, a careless operator and a clean
stop: unsettled records never expire, a release cannot race a running
forward, a clean stop records the forwards it answered 202 for, and a TTL
too short for its route's work is refused at start.

The real oncegate binary in front of the counting test upstream
(tools/test_upstream.py), both on loopback.
"""

import json
import os
import re
import subprocess
import threading
import time
import unittest
from urllib.parse import quote

from harness import BIN, ForwardingCase, TempDir, wait_for


# Short TTLs let a test outlive them; the HTTP response timeout must stay
# below every upstream route's TTL (the node refuses anything else).
TTL_S = 2


def config(url):
    # The operator's DELETEs below come from loopback without a token.
    return """
[http]
response-timeout=1500ms

[admin]
allow-unauthenticated-loopback=true

[alarm]
max-interval=100ms

[route.short]
upstream="{url}"
upstream-connect-timeout=200ms
upstream-timeout=1s
ttl={ttl}s

[route.early]
upstream="{url}"
respond-after=200ms
upstream-timeout=8s
""".format(url=url, ttl=TTL_S)


def metric(text, name, labels):
    """The value of `name{labels}` in a Prometheus exposition, or None."""
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)\{([^}]*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = ",".join(sorted(m.group(2).split(",")))
        if got == want:
            return float(m.group(3))
    return None


class AtMostOnceTest(ForwardingCase, unittest.TestCase):
    # Only the routes of `config` forward: the default route's upstream
    # timeouts (10 s) would exceed this node's response timeout, which the
    # node refuses.
    node_args = ()

    def config(self, url):
        return config(url)

    def metrics(self):
        status, _, body = self.node.request("GET", "/metrics")
        self.assertEqual(status, 200)
        return body.decode()

    def purge_runs(self):
        return metric(self.metrics().replace(
            "oncegate_purge_runs_total ", "oncegate_purge_runs_total{} "),
            "oncegate_purge_runs_total", {}) or 0

    def outlive_ttl(self):
        """Waits until the TTL has passed and the alarm purged after it."""
        deadline = time.time() + TTL_S + 0.2
        self.assertTrue(wait_for(lambda: time.time() > deadline, TTL_S + 5))
        runs = self.purge_runs()
        self.assertTrue(wait_for(lambda: self.purge_runs() >= runs + 2, 10),
                        "the alarm did not run")

    def test_an_in_doubt_key_never_expires(self):
        k, _, _ = self.post_new_key("short", 502, "drop")
        self.up.set_mode("normal")
        self.assertEqual(self.record(k, "short")[1]["state"], "in_doubt")
        self.outlive_ttl()
        # Past its TTL, through purges: still in doubt, never re-executed.
        _, rec = self.record(k, "short")
        self.assertIsNotNone(rec, "the in-doubt record was purged")
        self.assertEqual(rec["state"], "in_doubt")
        for _ in range(3):
            status, _, body = self.post(k, "short")
            self.assertEqual(status, 409, body)
            self.assertEqual(json.loads(body)["type"],
                             "https://oncegate.dev/problems/in-doubt")
        self.assertEqual(self.up.executions(k), 1)
        # A completed key of the same route does expire.
        done = self.key()
        self.assertEqual(self.post(done, "short")[0], 200)
        self.outlive_ttl()
        self.assertEqual(self.record(done, "short")[0], 404)
        self.assertEqual(self.post(done, "short")[0], 200)
        self.assertEqual(self.up.executions(done), 2)

    def test_in_doubt_records_are_a_gauge_per_route(self):
        k = self.key()
        text = self.metrics()
        self.assertEqual(metric(text, "oncegate_records",
                                {"route": "short", "state": "in_doubt"}), 0)
        self.up.set_mode("drop")
        self.assertEqual(self.post(k, "short")[0], 502)
        self.up.set_mode("normal")
        text = self.metrics()
        self.assertEqual(metric(text, "oncegate_records",
                                {"route": "short", "state": "in_doubt"}), 1)
        self.assertEqual(metric(text, "oncegate_records",
                                {"route": "default", "state": "in_doubt"}), 0)
        status, _, _ = self.node.request(
            "DELETE", "/v1/keys/%s?route=short" % quote(k))
        self.assertEqual(status, 200)
        self.assertEqual(metric(self.metrics(), "oncegate_records",
                                {"route": "short", "state": "in_doubt"}), 0)

    def test_releasing_an_in_flight_key_is_refused_unless_forced(self):
        k = self.key()
        self.up.set_mode("slow", 3)
        first = {}
        sender = threading.Thread(
            target=lambda: first.update(res=self.post(k, "early")))
        sender.start()
        self.assertTrue(wait_for(lambda: self.up.executions(k) == 1, 10))
        status, headers, body = self.node.request(
            "DELETE", "/v1/keys/" + quote(k) + "?route=early")
        self.assertEqual(status, 409, body)
        doc = json.loads(body)
        self.assertEqual(doc["type"], "https://oncegate.dev/problems/in-flight")
        self.assertEqual(headers.get("retry-after"), "1")
        # The record is untouched: a retry is still told to come back.
        status, _, body = self.post(k, "early")
        self.assertEqual(status, 409, body)
        self.assertEqual(self.up.executions(k), 1)
        self.assertEqual(self.node.request(
            "DELETE", "/v1/keys/" + quote(k) + "?route=early&force=maybe")[0],
            400)
        # Forcing is the operator's explicit choice: it releases.
        status, _, body = self.node.request(
            "DELETE", "/v1/keys/" + quote(k) + "?route=early&force=true")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.record(k, "early")[0], 404)
        sender.join(15)  # answered 202 by respond-after
        self.assertEqual(first["res"][0], 202)
        self.up.set_mode("normal")

    def test_a_clean_stop_records_forwards_answered_202(self):
        k, _, _ = self.post_new_key("early", 202, "slow", 1.5)
        self.assertEqual(self.up.executions(k), 1)
        started = time.monotonic()
        code = self.node.stop()  # SIGTERM while the upstream still works
        took = time.monotonic() - started
        self.assertEqual(code, 0, self.node.log())
        self.up.set_mode("normal")
        self.node.start()
        _, rec = self.record(k, "early")
        self.assertEqual(rec["state"], "completed",
                         "stopped after %.2fs with the forward running" % took)
        self.assertEqual(rec["status"], 200)
        status, _, body = self.post(k, "early")
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["original_status"], 200)
        self.assertEqual(self.up.executions(k), 1)


def orders_route(response_timeout, connect_timeout, upstream_timeout, ttl):
    """A config of one upstream route, `orders`, with these times."""
    return ("[http]\nresponse-timeout=%s\n"
            '[route.orders]\nupstream="http://127.0.0.1:9/x"\n'
            "upstream-connect-timeout=%s\nupstream-timeout=%s\nttl=%s\n"
            % (response_timeout, connect_timeout, upstream_timeout, ttl))


class RouteTtlConfigTest(unittest.TestCase):
    def run_node(self, ini_text):
        tmp = TempDir()
        try:
            ini = os.path.join(tmp.path, "node.ini")
            with open(ini, "w") as f:
                f.write(ini_text)
            proc = subprocess.run(
                [BIN, "--check-config", ini, "--data-dir=" + tmp.path],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                timeout=20)
            return proc.returncode, proc.stdout.decode()
        finally:
            tmp.cleanup()

    def assert_ttl_refused(self, ini_text, reason):
        """The config is refused (exit 2) for route.orders.ttl, naming
        `reason`."""
        code, out = self.run_node(ini_text)
        self.assertEqual(code, 2, out)
        self.assertIn("route.orders.ttl", out)
        self.assertIn(reason, out)

    def test_a_ttl_shorter_than_the_upstream_timeouts_is_refused(self):
        self.assert_ttl_refused(orders_route("1s", "2s", "8s", "5s"),
                                "upstream")

    def test_a_ttl_shorter_than_the_http_response_timeout_is_refused(self):
        self.assert_ttl_refused(orders_route("30s", "1s", "1s", "20s"),
                                "http.response-timeout")

    def test_a_signed_route_shorter_than_its_senders_retries_is_warned(self):
        code, out = self.run_node(
            '[route.svix]\nauth="standard-webhooks"\n'
            'secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\nttl=24h\n'
            '[route.svix72]\nauth="standard-webhooks"\n'
            'secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\nttl=72h\n')
        self.assertEqual(code, 0, out)
        warnings = [l for l in out.splitlines() if l.startswith("# warning")]
        self.assertEqual(len(warnings), 1, out)
        self.assertIn("route.svix.ttl", warnings[0])
        self.assertIn("retry", warnings[0])


if __name__ == "__main__":
    unittest.main()
