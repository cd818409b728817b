"""/metrics is valid Prometheus text (promtool) and counts what happened."""

import os
import re
import shutil
import subprocess
import unittest

from harness import Node, TempDir


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        ini = os.path.join(cls.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write('[route.tv]\nauth="token"\nsecret="s3cret"\n')
        cls.node = Node(cls.tmp.path, "--config-file=" + ini).start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.node.kill()
        finally:
            cls.tmp.cleanup()

    def scrape(self):
        status, headers, body = self.node.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/plain"))
        return body.decode()

    def value(self, text, name, labels=""):
        pattern = "^" + re.escape(name + labels) + r" (\S+)$"
        m = re.search(pattern, text, re.M)
        self.assertIsNotNone(m, name + labels)
        return float(m.group(1))

    def test_metrics_pass_promtool_and_count_decisions(self):
        n = self.node
        self.assertEqual(n.webhook({"id": "m1"})[0], 200)
        self.assertEqual(n.webhook({"id": "m1"})[0], 409)
        self.assertEqual(n.webhook({"id": "m1", "x": 2})[0], 422)
        self.assertEqual(n.webhook("{bad")[0], 400)
        status = n.request("POST", "/v1/webhook/tv?token=wrong",
                           {"id": "t1"})[0]
        self.assertEqual(status, 401)
        self.assertEqual(n.request("POST", "/v1/webhook/tv?token=s3cret",
                                   {"id": "t1"})[0], 200)
        text = self.scrape()
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool missing: run scripts/setup.sh")
        check = subprocess.run([promtool, "check", "metrics"],
                               input=text.encode(), capture_output=True,
                               timeout=60)
        self.assertEqual(check.returncode, 0,
                         check.stdout.decode() + check.stderr.decode())
        d = 'oncegate_decisions_total{route="%s",outcome="%s"}'
        self.assertEqual(self.value(text, d % ("default", "new")), 1)
        self.assertEqual(self.value(text, d % ("default", "duplicate")), 1)
        self.assertEqual(self.value(text, d % ("default", "mismatch")), 1)
        self.assertEqual(self.value(text, d % ("default", "bad_request")), 1)
        self.assertEqual(self.value(text, d % ("tv", "rejected_auth")), 1)
        self.assertEqual(self.value(text, d % ("tv", "new")), 1)
        self.assertEqual(
            self.value(text, "oncegate_request_duration_seconds_count"), 6)
        self.assertGreaterEqual(self.value(text, "oncegate_live_key_actors"),
                                2)
        self.assertGreaterEqual(
            self.value(text, "oncegate_store_commits_total"), 2)
        self.assertGreaterEqual(
            self.value(text, "oncegate_store_batch_size_count"), 2)
        self.assertEqual(self.value(text, "oncegate_metrics_complete"), 1)
        # Bounds in the shortest form that reads back, as the Prometheus
        # client libraries print them (not 5.0000000000000002e-05).
        buckets = re.findall(
            r'^oncegate_request_duration_seconds_bucket\{le="([^"]+)"\}',
            text, re.M)
        self.assertEqual(buckets[:4], ["5e-05", "0.0001", "0.00015", "0.0002"])
        # Fine enough to read an unloaded p99 near 1 ms (#31).
        for le in ("0.00075", "0.001", "0.00125"):
            self.assertIn(le, buckets)
        self.assertEqual(buckets[-4:], ["2.5", "5", "10", "+Inf"])
        for le in re.findall(r'le="([^"]+)"', text):
            self.assertLessEqual(len(le), 7, le)

    def test_readyz_reports_a_ready_store(self):
        status, _, body = self.node.request("GET", "/readyz")
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    unittest.main()
