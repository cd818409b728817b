"""Plain-text routes (`body = "text"`): TradingView sends an alert's message
as text/plain, and it need not be JSON (`BTCUSDT buy {{close}}
{{timenow}}`).

What must hold, against real nodes in front of the counting upstream:
- a text alert is executed once and reaches the upstream byte for byte
  (its Content-Type too); the same bytes again are a duplicate (409), other
  bytes another signal; bytes that are not UTF-8 or hold a NUL are kept as
  they are;
- with an Idempotency-Key header the header is the key: other bytes under
  it are a reused key (422), never executed;
- the route's token (`?token=`) is required as on JSON routes; an empty
  body is refused (400 empty-body), never executed;
- a JSON route keeps its rules: text there is 400 malformed-json;
- on a 3-node cluster (8 partitions) one alert sent to every node at once
  executes once.
"""

import hashlib
import json
import os
import sys
import threading
import unittest

from harness import UpstreamNodeCase, join_threads, start_threads, wait_for
from test_cluster import (Cluster, OwnClusterCase, with_logs)

TOKEN = "tv-secret"


def routes(url):
    return """
[route.tv]
body="text"
auth="token"
secret="{token}"
upstream="{url}"

[route.json]
upstream="{url}"
""".format(token=TOKEN, url=url)


def alert_key(body):
    return hashlib.sha256(body).hexdigest()


class TextRouteTest(UpstreamNodeCase, unittest.TestCase):
    def config(self, url):
        return routes(url)

    def setUp(self):
        super().setUp()
        self.up.keep_bodies = True

    def alert(self, body, key=None, token=TOKEN,
              content_type="text/plain; charset=utf-8"):
        headers = {"Content-Type": content_type}
        if key is not None:
            headers["Idempotency-Key"] = key
        path = "/v1/webhook/tv" + ("?token=" + token if token else "")
        return self.node.request("POST", path, body, headers)

    def test_a_text_alert_executes_once_byte_for_byte(self):
        body = b"BTCUSDT buy 42000.5 2026-12-07T01:00:00Z"
        status, headers, answer = self.alert(body)
        self.assertEqual(status, 200, answer)
        key = alert_key(body)
        self.assertEqual(headers.get("idempotency-key"), key)
        self.assertEqual(self.up.bodies(key),
                         [(body, "text/plain; charset=utf-8")])
        status, _, answer = self.alert(body)
        self.assertEqual(status, 409, answer)
        # One byte more is another signal.
        other = body + b" "
        status, _, answer = self.alert(other)
        self.assertEqual(status, 200, answer)
        self.assertEqual(self.up.executions(key), 1)
        self.assertEqual(self.up.executions(alert_key(other)), 1)

    def test_bytes_that_are_not_utf8_are_kept_as_they_are(self):
        body = b"ETHUSDT sell \xff\xfe\x00 close=3100"
        status, _, answer = self.alert(body, content_type="text/plain")
        self.assertEqual(status, 200, answer)
        self.assertEqual(self.up.bodies(alert_key(body)),
                         [(body, "text/plain")])

    def test_the_header_names_the_key_and_other_bytes_under_it_are_refused(
            self):
        status, _, answer = self.alert(b"SOLUSDT buy 1", key="tv-alert-1")
        self.assertEqual(status, 200, answer)
        status, _, answer = self.alert(b"SOLUSDT buy 1", key="tv-alert-1")
        self.assertEqual(status, 409, answer)
        status, _, answer = self.alert(b"SOLUSDT buy 2", key="tv-alert-1")
        self.assertEqual(status, 422, answer)
        self.assertEqual(json.loads(answer)["type"].rsplit("/", 1)[1],
                         "key-reused")
        self.assertEqual(self.up.executions("tv-alert-1"), 1)

    def test_token_and_empty_bodies_are_checked_and_json_routes_unchanged(
            self):
        status, _, answer = self.alert(b"XRPUSDT buy", token=None)
        self.assertEqual(status, 401, answer)
        status, _, answer = self.alert(b"XRPUSDT buy", token="wrong")
        self.assertEqual(status, 401, answer)
        status, _, answer = self.alert(b"")
        self.assertEqual(status, 400, answer)
        self.assertEqual(json.loads(answer)["type"].rsplit("/", 1)[1],
                         "empty-body")
        status, _, answer = self.node.request(
            "POST", "/v1/webhook/json", b"BTCUSDT buy 1",
            {"Content-Type": "text/plain", "Idempotency-Key": "j-1"})
        self.assertEqual(status, 400, answer)
        self.assertEqual(json.loads(answer)["type"].rsplit("/", 1)[1],
                         "malformed-json")
        self.assertEqual(self.up.counts()["total"], 0)


class TextRouteCluster(Cluster):
    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join) + routes(
            self.upstream_url)


class TextRouteClusterTest(OwnClusterCase):
    PARTITIONS = 8

    def setUp(self):
        super().setUp()
        self.cluster = TextRouteCluster(self.tmp.path + "/text",
                                        self.up.url, partitions=8)

    @with_logs
    def test_one_alert_sent_to_every_node_at_once_executes_once(self):
        self.start_nodes([1, 2, 3], [1, 2, 3])
        body = b"BTCUSDT buy 42000 {{timenow}} 2026-12-07T01:02:03Z"
        results = []
        lock = threading.Lock()

        def send(i):
            code, _, _ = self.cluster.node(1 + i % 3).request(
                "POST", "/v1/webhook/tv?token=" + TOKEN, body,
                {"Content-Type": "text/plain"}, timeout=15)
            with lock:
                results.append(code)

        self.up.set_mode("slow", 0.3)
        self.assertTrue(join_threads(start_threads(send, range(12)), 60))
        self.assertEqual(sorted(results), [200] + [409] * 11, results)
        self.assertEqual(self.up.executions(alert_key(body)), 1)


if __name__ == "__main__":
    unittest.main()
