"""Reconciliation through a real nginx in front of the order service, as an
operator deploys it (`location /orders/ { proxy_pass http://up/; }`: nginx
decodes and normalises the path before it proxies it).

A reconcile URL's 404 means "absent", and an absent order is delivered. A
key that reaches the URL as `.` or `..`, or holding `/`, would be turned
into another path on the way (`/orders/by-key/..` is `/orders/`), whose 404
delivered the signal a second time. Such keys are never asked about: they
stay in doubt for the operator, counted in
`oncegate_reconcile_skipped_total`, and are executed exactly once. A plain
key is still reconciled through the same nginx.
"""

import json
import os
import sys
import unittest

import nginx
from harness import Node, TempDir, metric, wait_for

# Keys that a URL normaliser changes (or that a decoding proxy turns into
# something else), with the Idempotency-Key header that carries each (a
# Structured Field string).
HOSTILE_KEYS = (".", "..", "...", "%2e", "a/.", "b/..")

LOCATIONS = """    location /orders/ {{
      proxy_pass http://127.0.0.1:{up_port}/;
    }}"""

NODE_INI = """[route.settle]
upstream="{url}"
delivery="async"
upstream-timeout=300ms
reconcile="http://127.0.0.1:{nginx_port}/orders/by-key/{{key}}"
reconcile-after=300ms
reconcile-interval=200ms
reconcile-attempts=50
"""


def sf_string(key):
    return '"%s"' % key.replace("\\", "\\\\").replace('"', '\\"')


class ReconcileBehindNginxTest(unittest.TestCase):
    def setUp(self):
        nginx.require(self)
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                        "..", "tools"))
        from test_upstream import TestUpstream
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.up = TestUpstream().start()
        self.addCleanup(self.up.stop)
        up_port = int(self.up.url.split(":")[2].split("/")[0])
        self.nginx = nginx.Nginx(self.tmp.path,
                                 LOCATIONS.format(up_port=up_port)).start()
        self.addCleanup(self.nginx.stop)
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write(NODE_INI.format(url=self.up.url,
                                    nginx_port=self.nginx.port))
        self.node = Node(os.path.join(self.tmp.path, "data"),
                         "--config-file=" + ini).start()
        self.addCleanup(self.node.kill)

    def post(self, key):
        return self.node.request("POST", "/v1/webhook/settle", {"k": key},
                                 {"Idempotency-Key": sf_string(key)})

    def in_doubt(self):
        status, _, body = self.node.request(
            "GET", "/v1/keys?route=settle&state=in_doubt&limit=100")
        self.assertEqual(status, 200, body)
        return {r["key"] for r in json.loads(body)["records"]}

    def skipped(self):
        return metric(self.node,
                      'oncegate_reconcile_skipped_total{route="settle"}') or 0

    def test_keys_a_normaliser_changes_are_never_delivered_twice(self):
        control = "plain.key-1"
        keys = HOSTILE_KEYS + (control,)
        # Each executes, and answers too late: in doubt.
        self.up.set_mode("slow", 60)
        for k in keys:
            status, _, body = self.post(k)
            self.assertEqual(status, 202, (k, body))
        self.assertTrue(wait_for(lambda: set(keys) <= self.in_doubt(), 15),
                        self.in_doubt())
        self.up.set_mode("normal")
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 1 for k in keys})
        # The plain key is reconciled through nginx: found, completed.
        self.assertTrue(wait_for(lambda: control not in self.in_doubt(), 15),
                        self.node.log())
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=settle" % control)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["state"], "completed", body)
        # Two more passes over every hostile key (each skip is counted), or
        # a second execution, whichever comes first.
        twice = 2 * len(HOSTILE_KEYS)
        wait_for(lambda: self.skipped() >= twice
                 or any(self.up.executions(k) > 1 for k in keys), 15)
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 1 for k in keys})
        self.assertGreaterEqual(self.skipped(), twice)
        # Left in doubt for the operator, asked nothing.
        self.assertLessEqual(set(HOSTILE_KEYS), self.in_doubt())
        for k in HOSTILE_KEYS:
            status, _, body = self.post(k)
            self.assertEqual(status, 409, (k, body))
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 1 for k in keys})


if __name__ == "__main__":
    unittest.main()
