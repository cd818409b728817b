"""Who may use the admin endpoints (docs/http-api.md, "Access"; operations.md,
"Admin endpoints"):

- with an admin token (`admin.token`, `admin.token-env`, `admin.token-file`)
  every admin endpoint (`/v1/keys...`, `/v1/cluster...`), reads as well as
  changes, needs `Authorization: Bearer <token>`: otherwise `401
  unauthorized` with `WWW-Authenticate: Bearer`, and nothing changes;
- without a token they answer only on a loopback listener; elsewhere `403
  forbidden`, and nothing changes;
- webhooks, /healthz, /readyz and /metrics never need the token.

The non-loopback listener is 0.0.0.0 (the only address that is not
loopback and that every host has); requests still go to 127.0.0.1.
"""

import json
import os
import secrets
import sys
import unittest
from urllib.parse import quote

from harness import Node, TempDir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402

PROBLEM = "https://oncegate.dev/problems/"
TOKEN = "adm-" + secrets.token_hex(16)
TOKEN_ENV = "ONCEGATE_TEST_ADMIN_TOKEN"


class AdminCase(unittest.TestCase):
    host = "127.0.0.1"
    admin_config = ""
    env = None

    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.up = TestUpstream().start()
        self.addCleanup(self.up.stop)
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write('[route.fwd]\nupstream="%s"\n\n%s\n'
                    % (self.up.url, self.admin_config.format(tmp=self.tmp.path)))
        if "{tmp}/token" in self.admin_config:
            with open(os.path.join(self.tmp.path, "token"), "w") as f:
                f.write(TOKEN + "\n")
        self.node = Node(os.path.join(self.tmp.path, "data"),
                         "--config-file=" + ini,
                         "--http-host=" + self.host, env=self.env).start()
        self.addCleanup(self.node.kill)

    # -- requests --------------------------------------------------------

    def call(self, method, path, auth=None, body=None):
        headers = {} if auth is None else {"Authorization": auth}
        status, hdrs, raw = self.node.request(method, path, body, headers)
        return status, hdrs, json.loads(raw) if raw else None

    def endpoints(self, key):
        """Every admin endpoint: (method, path, body)."""
        k = quote(key, safe="")
        return [
            ("GET", "/v1/keys/%s?route=fwd" % k, None),
            ("HEAD", "/v1/keys/%s?route=fwd" % k, None),
            ("GET", "/v1/keys?state=in_doubt&route=fwd", None),
            ("GET", "/v1/keys?state=in_flight&route=fwd", None),
            ("POST", "/v1/keys/%s/complete?route=fwd" % k,
             {"status": 200, "body": "done"}),
            ("DELETE", "/v1/keys/%s?route=fwd" % k, None),
            ("DELETE", "/v1/keys/%s?route=fwd&force=true" % k, None),
            ("GET", "/v1/cluster", None),
            ("POST", "/v1/cluster/transfer?to=2", None),
            ("POST", "/v1/cluster/members/2", None),
            ("DELETE", "/v1/cluster/members/2", None),
        ]

    def in_doubt_key(self, key):
        """A record an operator would settle: the upstream dropped it."""
        self.up.set_mode("drop")
        status, _, body = self.node.request(
            "POST", "/v1/webhook/fwd", {"order": key}, {"Idempotency-Key": key})
        self.up.set_mode("normal")
        self.assertEqual(status, 502, body)
        return key

    def state(self, key, auth=None):
        status, _, doc = self.call("GET", "/v1/keys/%s?route=fwd" % key, auth)
        self.assertEqual(status, 200, doc)
        return doc["state"]

    def duplicate_status(self, key):
        """What a sender's retry gets (tells the record without admin)."""
        return self.node.request("POST", "/v1/webhook/fwd", {"order": key},
                                 {"Idempotency-Key": key})[0]

    def assert_public_endpoints_need_nothing(self):
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        self.assertEqual(self.call("GET", "/readyz")[0], 200)
        self.assertEqual(self.node.request("GET", "/metrics")[0], 200)
        status, _, body = self.node.request(
            "POST", "/v1/webhook", {"n": 1},
            {"Idempotency-Key": "public-" + self._testMethodName[-20:]})
        self.assertEqual(status, 200, body)


class TokenTest(AdminCase):
    admin_config = '[admin]\ntoken-env="%s"\n' % TOKEN_ENV
    env = {TOKEN_ENV: TOKEN}
    bad = [None, "", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + TOKEN[:-1],
           "Bearer " + TOKEN + "x", "Bearer  " + TOKEN, "Basic " + TOKEN,
           TOKEN, "Token " + TOKEN]

    def test_every_admin_endpoint_refuses_a_missing_or_wrong_token_with_401(
            self):
        key = self.in_doubt_key("tok-doubt")
        for method, path, body in self.endpoints(key):
            for auth in self.bad:
                with self.subTest(method=method, path=path, auth=auth):
                    status, headers, doc = self.call(method, path, auth, body)
                    self.assertEqual(status, 401, doc)
                    self.assertEqual(headers.get("www-authenticate"), "Bearer")
                    if method != "HEAD":
                        self.assertEqual(doc["type"], PROBLEM + "unauthorized")
        # Nothing changed: the record is still in doubt (neither released
        # nor completed), and a retry is still told so.
        self.assertEqual(self.state(key, "Bearer " + TOKEN), "in_doubt")
        self.assertEqual(self.duplicate_status(key), 409)
        self.assertEqual(self.up.executions(key), 1)

    def test_the_right_token_opens_every_admin_endpoint(self):
        key = self.in_doubt_key("tok-ok")
        auth = "Bearer " + TOKEN
        self.assertEqual(self.state(key, auth), "in_doubt")
        status, _, doc = self.call("GET", "/v1/keys?state=in_doubt&route=fwd",
                                   auth)
        self.assertEqual(status, 200, doc)
        self.assertEqual([r["key"] for r in doc["records"]], [key])
        status, _, doc = self.call("GET", "/v1/cluster", auth)
        self.assertEqual((status, doc), (200, {"mode": "single"}))
        status, _, doc = self.call("POST", "/v1/cluster/transfer", auth)
        self.assertEqual(status, 409, doc)
        self.assertEqual(doc["type"], PROBLEM + "not-a-cluster")
        # The scheme name is case-insensitive (RFC 9110 11.1).
        status, _, doc = self.call(
            "POST", "/v1/keys/%s/complete?route=fwd" % key, "bearer " + TOKEN,
            {"status": 200, "body": "filled"})
        self.assertEqual(status, 200, doc)
        self.assertEqual(self.state(key, auth), "completed")
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                                   "BEARER " + TOKEN)
        self.assertEqual((status, doc.get("released")), (200, True), doc)
        self.assertEqual(self.call("GET", "/v1/keys/%s?route=fwd" % key,
                                   auth)[0], 404)

    def test_webhooks_health_readiness_and_metrics_need_no_token(self):
        self.assert_public_endpoints_need_nothing()


class TokenFileTest(AdminCase):
    """`admin.token-file` (its trailing newline is not part of the token),
    on a listener that is not loopback: the token is what admits."""

    admin_config = '[admin]\ntoken-file="{tmp}/token"\n'
    host = "0.0.0.0"

    def test_a_token_from_a_file_admits_anywhere_and_only_with_it(self):
        key = self.in_doubt_key("file-doubt")
        for auth in (None, "Bearer wrong", "Bearer " + TOKEN + "x"):
            status, headers, doc = self.call(
                "DELETE", "/v1/keys/%s?route=fwd" % key, auth)
            self.assertEqual(status, 401, doc)
            self.assertEqual(headers.get("www-authenticate"), "Bearer")
        self.assertEqual(self.duplicate_status(key), 409)
        auth = "Bearer " + TOKEN
        self.assertEqual(self.state(key, auth), "in_doubt")
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                                   auth)
        self.assertEqual(status, 200, doc)
        # Released: the sender's next retry executes.
        self.assertEqual(self.duplicate_status(key), 200)
        self.assertEqual(self.up.executions(key), 2)
        self.assert_public_endpoints_need_nothing()


class NoTokenLoopbackTest(AdminCase):
    def test_without_a_token_a_loopback_listener_answers_admin_requests(self):
        key = self.in_doubt_key("lo-doubt")
        self.assertEqual(self.state(key), "in_doubt")
        status, _, doc = self.call("GET", "/v1/keys?state=in_doubt&route=fwd")
        self.assertEqual(status, 200, doc)
        status, _, doc = self.call("GET", "/v1/cluster")
        self.assertEqual((status, doc), (200, {"mode": "single"}))
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key)
        self.assertEqual(status, 200, doc)
        self.assertEqual(self.duplicate_status(key), 200)
        self.assert_public_endpoints_need_nothing()


class NoTokenElsewhereTest(AdminCase):
    host = "0.0.0.0"

    def test_without_a_token_a_non_loopback_listener_forbids_admin_requests(
            self):
        key = self.in_doubt_key("any-doubt")
        for method, path, body in self.endpoints(key):
            for auth in (None, "Bearer anything"):
                with self.subTest(method=method, path=path, auth=auth):
                    status, _, doc = self.call(method, path, auth, body)
                    self.assertEqual(status, 403, doc)
                    if method != "HEAD":
                        self.assertEqual(doc["type"], PROBLEM + "forbidden")
        # Neither released nor completed: the retry is still in doubt.
        status, _, body = self.node.request(
            "POST", "/v1/webhook/fwd", {"order": key}, {"Idempotency-Key": key})
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "in-doubt")
        self.assertEqual(self.up.executions(key), 1)
        self.assert_public_endpoints_need_nothing()


if __name__ == "__main__":
    unittest.main()
