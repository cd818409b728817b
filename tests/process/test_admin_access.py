"""Who may use the admin endpoints (docs/http-api.md, "Access"; operations.md,
"Admin endpoints"):

- with an admin token (`admin.token`, `admin.token-env`, `admin.token-file`)
  every admin endpoint (`/v1/keys...`, `/v1/cluster...`), reads as well as
  changes, needs `Authorization: Bearer <token>`: otherwise `401
  unauthorized` with `WWW-Authenticate: Bearer`, and nothing changes;
- without a token, reads (GET, HEAD) answer only on a loopback listener
  (127.0.0.0/8, ::1, ::ffff:127.0.0.1) to a loopback peer; elsewhere `403
  forbidden`; every change (any other method) is `403
  admin-token-required` on every listener, unless
  `admin.allow-unauthenticated-loopback=true` (a warning at start) lets
  them through on a loopback listener, from a loopback peer;
- a request that was relayed (it carries Forwarded / X-Forwarded-For /
  X-Real-IP, or comes from an `http.trusted-proxies` address), or whose
  Host is not loopback (a page rebound to 127.0.0.1 by DNS), never gets
  those loopback exceptions;
- whatever the token: a foreign `Origin` (or `null`) or a `Sec-Fetch-Site`
  other than `same-origin` / `none` is `403 cross-site` (a CORS preflight
  included), and a change with a body that is not `application/json` is
  `415 unsupported-media-type`; nothing changes;
- `http.trusted-proxies`: forwarding headers from any other peer are
  ignored for route allowlists (through a real proxy:
  test_reverse_proxy.py);
- webhooks, /healthz, /readyz and /metrics never need the token.

The non-loopback listener is 0.0.0.0 (the only address that is not
loopback and that every host has); requests still go to 127.0.0.1.
"""

import json
import os
import secrets
import subprocess
import sys
import unittest
from urllib.parse import quote

from harness import BIN, Node, TempDir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402

PROBLEM = "https://oncegate.dev/problems/"
TOKEN = "adm-" + secrets.token_hex(16)
TOKEN_ENV = "ONCEGATE_TEST_ADMIN_TOKEN"
READS = ("GET", "HEAD")
OPT_OUT = "admin.allow-unauthenticated-loopback"


class AdminCase(unittest.TestCase):
    host = "127.0.0.1"
    # The address requests go to (the listener's, for a ::1 listener).
    connect = "127.0.0.1"
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

    def call(self, method, path, auth=None, body=None, headers=None,
             content_type="application/json"):
        hdrs = {} if auth is None else {"Authorization": auth}
        hdrs.update(headers or {})
        status, hdrs, raw = self.node.request_to(
            self.connect, method, path, body, hdrs, content_type=content_type)
        return status, hdrs, json.loads(raw) if raw else None

    def changes(self, key):
        """The admin endpoints that change something."""
        return [e for e in self.endpoints(key) if e[0] not in READS]

    def reads(self, key):
        return [e for e in self.endpoints(key) if e[0] in READS]

    def assert_problem(self, got, status, name):
        code, _, doc = got
        self.assertEqual(code, status, doc)
        if doc is not None:  # HEAD answers carry no body
            self.assertEqual(doc["type"], PROBLEM + name, doc)

    def assert_unchanged(self, key, auth=None):
        """The record is still in doubt and a retry is still told so."""
        self.assertEqual(self.state(key, auth), "in_doubt")
        self.assertEqual(self.duplicate_status(key), 409)
        self.assertEqual(self.up.executions(key), 1)

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
        status, _, body = self.node.request_to(
            self.connect, "POST", "/v1/webhook/fwd", {"order": key},
            {"Idempotency-Key": key})
        self.up.set_mode("normal")
        self.assertEqual(status, 502, body)
        return key

    def state(self, key, auth=None):
        status, _, doc = self.call("GET", "/v1/keys/%s?route=fwd" % key, auth)
        self.assertEqual(status, 200, doc)
        return doc["state"]

    def duplicate_status(self, key):
        """What a sender's retry gets (tells the record without admin)."""
        return self.node.request_to(self.connect, "POST", "/v1/webhook/fwd",
                                    {"order": key},
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
    def test_without_a_token_a_loopback_listener_answers_reads(self):
        key = self.in_doubt_key("lo-doubt")
        self.assertEqual(self.state(key), "in_doubt")
        status, _, doc = self.call("GET", "/v1/keys?state=in_doubt&route=fwd")
        self.assertEqual(status, 200, doc)
        self.assertEqual([r["key"] for r in doc["records"]], [key])
        status, _, doc = self.call("GET", "/v1/cluster")
        self.assertEqual((status, doc), (200, {"mode": "single"}))
        self.assertEqual(self.call("HEAD", "/v1/keys/%s?route=fwd" % key)[0],
                         200)
        self.assert_public_endpoints_need_nothing()

    def test_without_a_token_changes_are_refused_on_loopback_too(self):
        key = self.in_doubt_key("lo-change")
        for method, path, body in self.changes(key):
            with self.subTest(method=method, path=path):
                self.assert_problem(self.call(method, path, None, body), 403,
                                    "admin-token-required")
        # An unknown method is a change too (it is not a read).
        self.assert_problem(self.call("PUT", "/v1/keys/%s?route=fwd" % key,
                                      None, {"status": 200}), 403,
                            "admin-token-required")
        self.assert_unchanged(key)

    def test_a_relayed_request_gets_no_loopback_reads(self):
        """A proxy on this host that is not in http.trusted-proxies still
        says so in its headers: such a request is not local."""
        key = self.in_doubt_key("lo-relayed")
        for hdr in ({"X-Forwarded-For": "127.0.0.1"},
                    {"Forwarded": "for=127.0.0.1"},
                    {"X-Real-IP": "127.0.0.1"}):
            with self.subTest(header=hdr):
                self.assert_problem(
                    self.call("GET", "/v1/keys/%s?route=fwd" % key,
                              headers=hdr), 403, "forbidden")
        self.assertEqual(self.state(key), "in_doubt")


class NoTokenElsewhereTest(AdminCase):
    host = "0.0.0.0"

    def test_without_a_token_a_non_loopback_listener_forbids_admin_requests(
            self):
        key = self.in_doubt_key("any-doubt")
        for method, path, body in self.endpoints(key):
            for auth in (None, "Bearer anything"):
                with self.subTest(method=method, path=path, auth=auth):
                    self.assert_problem(
                        self.call(method, path, auth, body), 403,
                        "forbidden" if method in READS
                        else "admin-token-required")
        # Neither released nor completed: the retry is still in doubt.
        status, _, body = self.node.request(
            "POST", "/v1/webhook/fwd", {"order": key}, {"Idempotency-Key": key})
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "in-doubt")
        self.assertEqual(self.up.executions(key), 1)
        self.assert_public_endpoints_need_nothing()


class OptOutLoopbackTest(AdminCase):
    """The explicit opt-out for a loopback-only node."""

    admin_config = "[admin]\nallow-unauthenticated-loopback=true\n"

    def test_the_opt_out_lets_changes_through_on_loopback_and_warns(self):
        self.assertIn("config.warning " + OPT_OUT, self.node.log())
        key = self.in_doubt_key("opt-doubt")
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key)
        self.assertEqual((status, doc.get("released")), (200, True), doc)
        self.assertEqual(self.duplicate_status(key), 200)
        self.assertEqual(self.up.executions(key), 2)
        other = self.in_doubt_key("opt-complete")
        status, _, doc = self.call(
            "POST", "/v1/keys/%s/complete?route=fwd" % other, None,
            {"status": 200, "body": "filled"})
        self.assertEqual((status, doc["state"]), (200, "completed"), doc)
        self.assert_problem(self.call("POST", "/v1/cluster/transfer"), 409,
                            "not-a-cluster")

    def test_the_opt_out_does_not_admit_cross_site_requests(self):
        key = self.in_doubt_key("opt-cross")
        for hdr in ({"Origin": "http://evil.example"},
                    {"Sec-Fetch-Site": "cross-site"}):
            with self.subTest(header=hdr):
                self.assert_problem(
                    self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                              headers=hdr), 403, "cross-site")
        self.assert_unchanged(key)

    def test_the_opt_out_does_not_admit_a_page_rebound_to_loopback(self):
        """DNS rebinding: a page whose name now resolves to 127.0.0.1 is
        same-origin with itself, but its requests name that host."""
        key = self.in_doubt_key("opt-rebound")
        name = "rebound.example:%d" % self.node.port
        page = {"Host": name, "Origin": "http://" + name,
                "Sec-Fetch-Site": "same-origin"}
        self.assert_problem(
            self.call("DELETE", "/v1/keys/%s?route=fwd" % key, headers=page),
            403, "admin-token-required")
        self.assert_problem(
            self.call("GET", "/v1/keys/%s?route=fwd" % key, headers=page),
            403, "forbidden")
        self.assert_unchanged(key)
        # The same request naming the loopback address is local.
        page = {"Host": "localhost:%d" % self.node.port,
                "Origin": "http://localhost:%d" % self.node.port}
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                                   headers=page)
        self.assertEqual((status, doc.get("released")), (200, True), doc)

    def test_the_opt_out_does_not_admit_relayed_requests(self):
        key = self.in_doubt_key("opt-relayed")
        self.assert_problem(
            self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                      headers={"X-Forwarded-For": "127.0.0.1"}), 403,
            "admin-token-required")
        self.assert_unchanged(key)


class OptOutElsewhereTest(AdminCase):
    """The opt-out has no effect on a listener that is not loopback."""

    admin_config = "[admin]\nallow-unauthenticated-loopback=true\n"
    host = "0.0.0.0"

    def test_the_opt_out_opens_nothing_on_a_non_loopback_listener(self):
        self.assertIn("config.warning " + OPT_OUT, self.node.log())
        self.assertIn("no effect", self.node.log())
        key = self.in_doubt_key("opt-any")
        for method, path, body in self.endpoints(key):
            with self.subTest(method=method, path=path):
                self.assert_problem(
                    self.call(method, path, None, body), 403,
                    "forbidden" if method in READS
                    else "admin-token-required")
        self.assertEqual(self.duplicate_status(key), 409)
        self.assertEqual(self.up.executions(key), 1)


class LoopbackV6Test(AdminCase):
    host = "::1"
    connect = "::1"

    def test_an_ipv6_loopback_listener_is_loopback(self):
        key = self.in_doubt_key("v6-doubt")
        self.assertEqual(self.state(key), "in_doubt")
        self.assert_problem(self.call("DELETE", "/v1/keys/%s?route=fwd" % key),
                            403, "admin-token-required")


class MappedLoopbackTest(AdminCase):
    """An IPv6 socket on the IPv4-mapped loopback address serves IPv4
    clients of 127.0.0.1, whose addresses it sees as ::ffff:127.0.0.1."""

    host = "::ffff:127.0.0.1"

    def test_an_ipv4_mapped_loopback_listener_is_loopback(self):
        key = self.in_doubt_key("mapped-doubt")
        self.assertEqual(self.state(key), "in_doubt")
        status, _, doc = self.call("GET", "/v1/keys?state=in_doubt&route=fwd")
        self.assertEqual(status, 200, doc)
        self.assert_problem(self.call("DELETE", "/v1/keys/%s?route=fwd" % key),
                            403, "admin-token-required")


class CrossSiteTest(AdminCase):
    """What a browser could send from another site is refused, valid token
    or not."""

    admin_config = '[admin]\ntoken-env="%s"\n' % TOKEN_ENV
    env = {TOKEN_ENV: TOKEN}
    auth = "Bearer " + TOKEN

    def same_origin(self):
        return "http://127.0.0.1:%d" % self.node.port

    def foreign(self):
        return [{"Origin": "http://evil.example"},
                {"Origin": "https://evil.example"},
                {"Origin": "null"},
                {"Origin": "http://127.0.0.1:%d" % (self.node.port + 1)},
                {"Origin": "http://localhost:%d" % self.node.port},
                {"Origin": self.same_origin() + "/path"},
                {"Sec-Fetch-Site": "cross-site"},
                {"Sec-Fetch-Site": "same-site"},
                {"Sec-Fetch-Site": "bogus"},
                {"Origin": self.same_origin(), "Sec-Fetch-Site": "cross-site"}]

    def test_a_foreign_origin_or_fetch_site_is_refused_even_with_the_token(
            self):
        key = self.in_doubt_key("cross-doubt")
        for method, path, body in self.endpoints(key):
            for hdr in self.foreign():
                with self.subTest(method=method, path=path, header=hdr):
                    self.assert_problem(
                        self.call(method, path, self.auth, body, hdr), 403,
                        "cross-site")
        self.assert_unchanged(key, self.auth)

    def test_same_origin_and_direct_requests_pass(self):
        key = self.in_doubt_key("cross-same")
        path = "/v1/keys/%s?route=fwd" % key
        for hdr in ({"Origin": self.same_origin()},
                    {"Origin": self.same_origin().upper()},
                    {"Sec-Fetch-Site": "same-origin"},
                    {"Sec-Fetch-Site": "none"},
                    {"Origin": self.same_origin(),
                     "Sec-Fetch-Site": "same-origin"}):
            with self.subTest(header=hdr):
                status, _, doc = self.call("GET", path, self.auth, None, hdr)
                self.assertEqual(status, 200, doc)
        status, _, doc = self.call("DELETE", path, self.auth, None,
                                   {"Origin": self.same_origin(),
                                    "Sec-Fetch-Site": "same-origin"})
        self.assertEqual((status, doc.get("released")), (200, True), doc)

    def test_a_cors_preflight_never_succeeds(self):
        key = self.in_doubt_key("cross-preflight")
        path = "/v1/keys/%s?route=fwd" % key
        preflight = {"Origin": "http://evil.example",
                     "Access-Control-Request-Method": "DELETE",
                     "Access-Control-Request-Headers": "authorization"}
        for auth in (None, self.auth):
            with self.subTest(auth=auth):
                status, headers, doc = self.call("OPTIONS", path, auth, None,
                                                 preflight, None)
                self.assert_problem((status, headers, doc), 403, "cross-site")
                self.assertFalse([h for h in headers
                                  if h.startswith("access-control-")],
                                 headers)
        # Without an Origin (no browser) OPTIONS is no admin method either.
        status, headers, doc = self.call("OPTIONS", path, self.auth, None,
                                         None, None)
        self.assert_problem((status, headers, doc), 405, "method-not-allowed")
        self.assertFalse([h for h in headers if h.startswith("access-control-")])
        self.assert_unchanged(key, self.auth)

    def test_a_change_with_a_body_that_is_not_json_is_415(self):
        key = self.in_doubt_key("media-doubt")
        path = "/v1/keys/%s/complete?route=fwd" % key
        outcome = json.dumps({"status": 200, "body": "filled"})
        for ctype in ("text/plain", "text/plain;charset=UTF-8",
                      "application/x-www-form-urlencoded",
                      "multipart/form-data; boundary=x", "application/jsonx",
                      "application/problem+json", None):
            with self.subTest(content_type=ctype):
                self.assert_problem(
                    self.call("POST", path, self.auth, outcome, None, ctype),
                    415, "unsupported-media-type")
        self.assert_unchanged(key, self.auth)
        # JSON with parameters, any case: accepted.
        status, _, doc = self.call("POST", path, self.auth, outcome, None,
                                   "Application/JSON; charset=utf-8")
        self.assertEqual((status, doc.get("state")), (200, "completed"), doc)

    def test_a_change_without_a_body_needs_no_content_type(self):
        key = self.in_doubt_key("media-empty")
        self.assert_problem(self.call("POST", "/v1/cluster/transfer",
                                      self.auth, None, None, None),
                            409, "not-a-cluster")
        # Even a declared text type does not matter without a body.
        status, _, doc = self.call("DELETE", "/v1/keys/%s?route=fwd" % key,
                                   self.auth, None, None, "text/plain")
        self.assertEqual((status, doc.get("released")), (200, True), doc)


class TrustedProxiesDirectTest(AdminCase):
    """A peer outside http.trusted-proxies: its forwarding headers are
    ignored, the allowlists see the peer."""

    admin_config = """[http]
trusted-proxies=["10.0.0.0/8", "192.0.2.1"]
forwarded-headers=["forwarded", "x-forwarded-for"]

[route.near]
allow=["127.0.0.1/32"]

[route.far]
allow=["10.1.2.3/32"]
"""
    forged = ({"X-Forwarded-For": "10.1.2.3"},
              {"Forwarded": "for=10.1.2.3"},
              {"X-Forwarded-For": "10.1.2.3, 10.0.0.1"},
              {"Forwarded": "for=10.1.2.3, for=192.0.2.1"})

    def post(self, route, key, headers):
        hdrs = {"Idempotency-Key": key}
        hdrs.update(headers)
        return self.node.request("POST", "/v1/webhook/" + route, {"k": key},
                                 hdrs)

    def test_forwarding_headers_from_an_untrusted_peer_are_ignored(self):
        for i, hdr in enumerate(self.forged):
            with self.subTest(header=hdr):
                status, _, body = self.post("far", "far-%d" % i, hdr)
                self.assertEqual(status, 403, body)
                self.assertEqual(json.loads(body)["type"], PROBLEM + "forbidden")
                status, _, body = self.post("near", "near-%d" % i, hdr)
                self.assertEqual(status, 200, body)


class ConfigTest(unittest.TestCase):
    def run_check(self, *args):
        return subprocess.run([BIN, "--check-config", os.devnull] + list(args),
                              capture_output=True, timeout=30)

    def test_a_bad_trusted_proxy_is_a_start_error_naming_the_option(self):
        for value in ('["10.0.0.0/33"]', '["example.com"]', '["10.0.0.1 "]'):
            with self.subTest(value=value):
                out = self.run_check("--http.trusted-proxies=" + value)
                self.assertEqual(out.returncode, 2, out)
                self.assertIn(b"http.trusted-proxies", out.stderr)

    def test_a_bad_forwarded_header_name_is_a_start_error(self):
        out = self.run_check('--http.forwarded-headers=["x-real-ip"]')
        self.assertEqual(out.returncode, 2, out)
        self.assertIn(b"http.forwarded-headers", out.stderr)

    def test_check_config_warns_about_the_opt_out(self):
        out = self.run_check("--" + OPT_OUT)  # a flag
        self.assertEqual(out.returncode, 0, out)
        self.assertIn(b"# warning: " + OPT_OUT.encode(), out.stdout)


if __name__ == "__main__":
    unittest.main()
