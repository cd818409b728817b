"""The HTTP contract (team note http-contract.md), row by row, on the binary.

One node serves every test in this module: its INI file configures a route
for each behaviour (replay, token, github, standard-webhooks, allowlist,
body limit) and an admin token, and three routes forward to a counting test
upstream (tools/test_upstream.py). Tests use keys and symbols unique to the
test, so they do not depend on each other or on their order.
"""

import base64
import datetime
import hashlib
import http.client
import json
import math
import os
import re
import secrets
import socket
import sys
import threading
import time
import unittest
import urllib.parse
import uuid

from harness import Node, TempDir, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402
# What the gateway derives and how senders sign: the one Python copy.
from oncegate_drill.keys import (body_key, canonical_fingerprint,  # noqa
                                 derived_key, forwarded_key,
                                 github_signature, sw_signature)

PROBLEM = "https://oncegate.dev/problems/"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")

TV_TOKEN_ENV = "ONCEGATE_CONTRACT_TV_TOKEN"
TV_TOKEN = "tv-" + secrets.token_hex(16)
GH_SECRET = "gh-" + secrets.token_hex(16)
SW_KEY = secrets.token_bytes(24)
SW_SECRET = "whsec_" + base64.b64encode(SW_KEY).decode()
ADMIN_TOKEN = "admin-" + secrets.token_hex(16)
SMALL_LIMIT = 1024
# Short transport timeouts keep the 408 tests quick; every other request
# sends its headers and body at once.
SLOW_TIMEOUT_S = 2

CONFIG = """\
[route.replay]
on-duplicate="replay"

[route.alt]
ttl=1h

[route.tv]
auth="token"
secret-env="{tv_env}"
ttl=72h
allow=["127.0.0.1/32"]

[route.gh]
auth="github"
secret="{gh}"

[route.sw]
auth="standard-webhooks"
secret="{sw}"

[route.deny]
allow=["10.0.0.0/8"]

[route.small]
body-limit={small}

[route.short]
ttl=1s

[http]
header-timeout={slow}s
body-timeout={slow}s

[admin]
token="{admin}"
""".format(tv_env=TV_TOKEN_ENV, gh=GH_SECRET, sw=SW_SECRET,
           small=SMALL_LIMIT, slow=SLOW_TIMEOUT_S, admin=ADMIN_TOKEN)

# Routes that forward to the counting upstream (its URL is known only once
# it listens): what the upstream executed is what the sender caused.
UPSTREAM_CONFIG = """
[route.fwd]
upstream="{url}"

[route.ghup]
auth="github"
secret="{gh}"
upstream="{url}"

[route.swup]
auth="standard-webhooks"
secret="{sw}"
upstream="{url}"
"""

# 1700000000 s = 2023-11-14T22:13:20Z.
EPOCH_S = 1700000000
EPOCH_MS = EPOCH_S * 1000

NODE = None
TMP = None
UP = None


def setUpModule():
    global NODE, TMP, UP
    TMP = TempDir()
    try:
        UP = TestUpstream().start()
        config = os.path.join(TMP.path, "oncegate.ini")
        with open(config, "w") as f:
            f.write(CONFIG)
            f.write(UPSTREAM_CONFIG.format(url=UP.url, gh=GH_SECRET,
                                           sw=SW_SECRET))
        # The child copies the environment at spawn time; restore ours after.
        saved = os.environ.get(TV_TOKEN_ENV)
        os.environ[TV_TOKEN_ENV] = TV_TOKEN
        try:
            NODE = Node(os.path.join(TMP.path, "node"),
                        "--config-file=" + config).start()
        finally:
            if saved is None:
                del os.environ[TV_TOKEN_ENV]
            else:
                os.environ[TV_TOKEN_ENV] = saved
    except BaseException:
        if UP is not None:
            UP.stop()
        TMP.cleanup()
        raise


def tearDownModule():
    try:
        if NODE is not None:
            NODE.kill()
    finally:
        try:
            if UP is not None:
                UP.stop()
        finally:
            TMP.cleanup()


def unique(prefix="k"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:16])


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)


def to_bytes(body):
    if isinstance(body, (dict, list)):
        return json.dumps(body).encode()
    if isinstance(body, str):
        return body.encode()
    return body


class Response:
    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers
        self.raw = raw
        self.doc = None

    def __repr__(self):
        return "HTTP %d %r %r" % (self.status, self.headers, self.raw)


class ContractCase(unittest.TestCase):
    maxDiff = None

    # -- transport ------------------------------------------------------------

    @staticmethod
    def exchange(write_request, timeout=10.0):
        """A fresh connection to the node: `write_request(conn)` sends the
        request; returns the Response read back."""
        conn = http.client.HTTPConnection("127.0.0.1", NODE.port,
                                          timeout=timeout)
        try:
            write_request(conn)
            res = conn.getresponse()
            return Response(res.status,
                            {k.lower(): v for k, v in res.getheaders()},
                            res.read())
        finally:
            conn.close()

    def send(self, method, path, body=None, headers=None,
             content_type="application/json", timeout=10.0):
        """Any request; the body of every response must be JSON."""
        hdrs = {}
        if content_type is not None:
            hdrs["Content-Type"] = content_type
        hdrs.update(headers or {})
        data = None if body is None else to_bytes(body)
        out = self.exchange(
            lambda conn: conn.request(method, path, body=data, headers=hdrs),
            timeout)
        try:
            out.doc = json.loads(out.raw)
        except ValueError:
            self.fail("response body is not JSON: %r" % (out,))
        return out

    def send_lines(self, method, path, header_lines, body=b""):
        """Sends header lines as given (names may repeat)."""
        def write_request(conn):
            conn.putrequest(method, path)
            for name, value in header_lines:
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)

        out = self.exchange(write_request)
        out.doc = json.loads(out.raw)
        return out

    def send_raw(self, parts, timeout=SLOW_TIMEOUT_S + 10):
        """Writes `parts` on a fresh socket, then reads until the server
        closes the connection (bounded by `timeout`). Fails if it does not
        close."""
        sock = socket.create_connection(("127.0.0.1", NODE.port),
                                        timeout=timeout)
        try:
            for part in parts:
                sock.sendall(part)
            data = b""
            deadline = time.monotonic() + timeout
            while True:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    self.fail("connection not closed within %ss; got %r"
                              % (timeout, data))
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.assertTrue(lines[0].startswith("HTTP/1.1 "), data)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        out = Response(int(lines[0].split()[1]), headers, body)
        self.assertEqual(len(body), int(headers["content-length"]), data)
        out.doc = json.loads(body)
        return out

    def post(self, body, key=None, route=None, headers=None, query="",
             **kw):
        path = "/v1/webhook" + ("/" + route if route else "") + query
        hdrs = dict(headers or {})
        if key is not None:
            hdrs["Idempotency-Key"] = key
        return self.send("POST", path, body, hdrs, **kw)

    def admin(self, method, key, route="default", token=ADMIN_TOKEN):
        path = "/v1/keys/%s?route=%s" % (urllib.parse.quote(key, safe=""),
                                         urllib.parse.quote(route, safe=""))
        hdrs = {}
        if token is not None:
            hdrs["Authorization"] = "Bearer " + token
        return self.send(method, path, headers=hdrs, content_type=None)

    def post_github(self, body, delivery, secret=GH_SECRET, headers=None,
                    route="gh"):
        data = to_bytes(body)
        hdrs = {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": github_signature(secret, data)}
        hdrs.update(headers or {})
        return self.post(data, route=route, headers=hdrs)

    def post_sw(self, body, msg_id, timestamp=None, signature=None,
                headers=None, route="sw"):
        data = to_bytes(body)
        if timestamp is None:
            timestamp = int(time.time())
        if signature is None:
            signature = sw_signature(SW_KEY, msg_id, timestamp, data)
        hdrs = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                "webhook-signature": signature}
        hdrs.update(headers or {})
        return self.post(data, route=route, headers=hdrs)

    def assert_executed(self, res, key):
        """The upstream executed the request and answered it."""
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc["order"], "accepted", res)
        self.assertEqual(res.doc["key"], key, res)

    # -- assertions -----------------------------------------------------------

    def assert_accepted(self, res, key=None, source=None):
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.headers.get("content-type"), "application/json",
                         res)
        self.assertEqual(res.headers.get("cache-control"), "no-store", res)
        self.assertEqual(res.doc["status"], "accepted", res)
        self.assertRegex(res.doc["received_at"], TIMESTAMP)
        if key is not None:
            self.assertEqual(res.doc["idempotency_key"], key, res)
        if source is not None:
            self.assertEqual(res.doc["key_source"], source, res)
        return res.doc

    def assert_problem(self, res, status, name):
        self.assertEqual(res.status, status, res)
        self.assertEqual(res.headers.get("content-type"),
                         "application/problem+json", res)
        self.assertEqual(res.headers.get("cache-control"), "no-store", res)
        self.assertEqual(res.doc["type"], PROBLEM + name, res)
        self.assertEqual(res.doc["status"], status, res)
        self.assertIsInstance(res.doc["title"], str)
        self.assertIsInstance(res.doc["detail"], str)
        return res.doc

    def assert_not_stored(self, key, route="default"):
        res = self.admin("GET", key, route)
        self.assert_problem(res, 404, "not-found")

    def signal(self, **overrides):
        """A TradingView-like signal with a symbol unique to the test."""
        doc = {"exchange": "BINANCE", "symbol": unique("S").upper(),
               "action": "buy", "timestamp": EPOCH_S}
        doc.update(overrides)
        return doc


class AcceptedAndDuplicateTest(ContractCase):
    def test_a_first_request_is_accepted_with_key_source_and_received_at(self):
        key = unique()
        before = datetime.datetime.now(datetime.timezone.utc)
        res = self.post({"n": 1}, key=key)
        doc = self.assert_accepted(res, key, "header")
        self.assertEqual(set(doc), {"status", "idempotency_key", "key_source",
                                    "received_at"})
        received = parse_time(doc["received_at"])
        self.assertLess(abs((received - before).total_seconds()), 60)

    def test_an_accepted_response_echoes_the_key_and_is_not_cacheable(self):
        key = unique()
        res = self.post({"n": 1}, key=key)
        self.assert_accepted(res)
        self.assertEqual(res.headers.get("idempotency-key"), key)
        self.assertEqual(res.headers.get("cache-control"), "no-store")
        self.assertNotIn("idempotent-replayed", res.headers)

    def test_a_duplicate_is_a_409_problem_with_first_seen_and_original_status(
            self):
        key = unique()
        first = self.assert_accepted(self.post({"n": 1}, key=key))
        res = self.post({"n": 1}, key=key)
        doc = self.assert_problem(res, 409, "duplicate")
        self.assertEqual(res.headers.get("idempotent-replayed"), "true")
        self.assertEqual(res.headers.get("idempotency-key"), key)
        self.assertEqual(doc["first_seen"], first["received_at"])
        self.assertEqual(doc["original_status"], 200)
        self.assertEqual(doc["idempotency_key"], key)

    def test_a_replay_route_repeats_the_stored_status_and_body_byte_for_byte(
            self):
        key = unique()
        first = self.post({"n": 1}, key=key, route="replay")
        self.assert_accepted(first, key, "header")
        self.assertNotIn("idempotent-replayed", first.headers)
        again = self.post({"n": 1}, key=key, route="replay")
        self.assertEqual(again.status, first.status, again)
        self.assertEqual(again.raw, first.raw)
        self.assertEqual(again.headers.get("idempotent-replayed"), "true")
        self.assertEqual(again.headers.get("idempotency-key"), key)
        self.assertEqual(again.headers.get("cache-control"), "no-store")
        self.assertEqual(again.headers.get("content-type"),
                         "application/json")

    def test_a_reused_key_with_another_payload_is_422_and_changes_nothing(
            self):
        key = unique()
        first = self.assert_accepted(self.post({"n": 1}, key=key))
        before = self.admin("GET", key)
        self.assertEqual(before.status, 200, before)
        res = self.post({"n": 2}, key=key)
        doc = self.assert_problem(res, 422, "key-reused")
        self.assertEqual(doc["idempotency_key"], key)
        after = self.admin("GET", key)
        self.assertEqual(after.doc, before.doc)
        self.assertEqual(after.doc["fingerprint"],
                         canonical_fingerprint({"n": 1}))
        dup = self.post({"n": 1}, key=key)
        self.assertEqual(self.assert_problem(dup, 409, "duplicate")
                         ["first_seen"], first["received_at"])

    def test_a_body_without_any_key_source_is_422_naming_every_missing_field(
            self):
        res = self.post({"note": "no key here"})
        doc = self.assert_problem(res, 422, "missing-fields")
        for field in ("exchange", "symbol", "action", "timestamp"):
            self.assertIn(field, doc["detail"])

    def test_an_unparseable_timestamp_is_422_naming_only_that_field(self):
        res = self.post(self.signal(timestamp="yesterday at noon"))
        doc = self.assert_problem(res, 422, "missing-fields")
        self.assertIn("timestamp", doc["detail"])
        for field in ("exchange", "symbol", "action"):
            self.assertNotIn(field, doc["detail"])


class KeySourceTest(ContractCase):
    def test_the_idempotency_key_header_beats_a_body_key(self):
        key = unique()
        res = self.post({"idempotency_key": unique(), "id": unique()},
                        key=key)
        self.assert_accepted(res, key, "header")

    def test_an_idempotency_key_header_is_ignored_on_a_standard_webhooks_route(
            self):
        # The header is not signed; webhook-id is.
        key, msg_id = unique(), unique("msg")
        res = self.post_sw({"n": 1}, msg_id,
                           headers={"Idempotency-Key": key})
        self.assert_accepted(res, msg_id, "webhook-id")
        self.assert_not_stored(key, "sw")

    def test_a_malformed_idempotency_key_header_is_ignored_on_a_signed_route(
            self):
        msg_id = unique("msg")
        res = self.post_sw({"n": 1}, msg_id,
                           headers={"Idempotency-Key": "two words"})
        self.assert_accepted(res, msg_id, "webhook-id")

    def test_the_webhook_id_beats_a_body_key(self):
        msg_id = unique("msg")
        res = self.post_sw({"idempotency_key": unique()}, msg_id)
        self.assert_accepted(res, msg_id, "webhook-id")

    def test_a_github_route_keys_on_the_signed_body_not_a_body_key(self):
        data = to_bytes({"idempotency_key": unique()})
        res = self.post_github(data, str(uuid.uuid4()))
        self.assert_accepted(res, body_key(data), "github-body")

    def test_an_idempotency_key_header_is_ignored_on_a_github_route(self):
        key = unique()
        data = to_bytes({"n": unique()})
        res = self.post_github(data, str(uuid.uuid4()),
                               headers={"Idempotency-Key": key})
        self.assert_accepted(res, body_key(data), "github-body")
        self.assert_not_stored(key, "gh")

    def test_a_webhook_id_header_is_ignored_on_a_route_without_that_auth(
            self):
        key = unique()
        res = self.post({"id": key}, headers={"webhook-id": unique("msg")})
        self.assert_accepted(res, key, "body")

    def test_a_github_delivery_header_is_ignored_on_a_route_without_that_auth(
            self):
        key = unique()
        res = self.post({"id": key},
                        headers={"X-GitHub-Delivery": str(uuid.uuid4())})
        self.assert_accepted(res, key, "body")

    def test_a_body_key_beats_derivation(self):
        key = unique()
        res = self.post(self.signal(id=key))
        self.assert_accepted(res, key, "body")

    def test_the_idempotency_key_member_beats_trace_id_and_id(self):
        key = unique()
        res = self.post({"id": unique(), "trace_id": unique(),
                         "idempotency_key": key})
        self.assert_accepted(res, key, "body")

    def test_the_trace_id_member_beats_id(self):
        key = unique()
        res = self.post({"id": unique(), "trace_id": key})
        self.assert_accepted(res, key, "body")

    def test_a_non_string_id_is_skipped_and_the_key_is_derived(self):
        sig = self.signal(id=42)
        res = self.post(sig)
        self.assert_accepted(
            res, derived_key("BINANCE", sig["symbol"], "buy", EPOCH_MS),
            "derived")

    def test_a_non_string_id_is_skipped_in_favour_of_a_later_string_member(
            self):
        # idempotency_key is not a string: trace_id is the next candidate.
        key = unique()
        res = self.post({"idempotency_key": 7, "trace_id": key})
        self.assert_accepted(res, key, "body")

    def test_a_body_key_of_256_bytes_is_400_invalid_key(self):
        key = "b" * 256
        res = self.post({"id": key})
        self.assert_problem(res, 400, "invalid-key")


class KeyHeaderSyntaxTest(ContractCase):
    def test_a_structured_field_string_key_has_its_escapes_decoded(self):
        suffix = uuid.uuid4().hex[:12]
        res = self.post({"n": 1}, key='"a\\"b\\\\c-%s"' % suffix)
        self.assert_accepted(res, 'a"b\\c-' + suffix, "header")

    def test_a_quoted_key_and_the_same_bare_token_are_one_key(self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key='"%s"' % key), key)
        res = self.post({"n": 1}, key=key)
        self.assertEqual(self.assert_problem(res, 409, "duplicate")
                         ["idempotency_key"], key)

    def test_a_key_of_255_characters_is_accepted(self):
        key = (unique() + "x" * 255)[:255]
        self.assert_accepted(self.post({"n": 1}, key=key), key, "header")

    def test_a_key_of_256_characters_is_400_invalid_key(self):
        key = (unique() + "x" * 256)[:256]
        self.assert_problem(self.post({"n": 1}, key=key), 400, "invalid-key")
        self.assert_not_stored(key[:255])

    def test_an_empty_key_is_400_invalid_key(self):
        self.assert_problem(self.post({"n": 1}, key=""), 400, "invalid-key")

    def test_an_empty_quoted_key_is_400_invalid_key(self):
        self.assert_problem(self.post({"n": 1}, key='""'), 400,
                            "invalid-key")

    def test_a_non_ascii_key_is_400_invalid_key(self):
        key = ("cl\u00e9-" + uuid.uuid4().hex).encode("utf-8")
        self.assert_problem(self.post({"n": 1}, key=key), 400, "invalid-key")

    def test_a_quoted_key_with_an_escape_other_than_quote_or_backslash_is_400(
            self):
        self.assert_problem(self.post({"n": 1}, key='"a\\nb"'), 400,
                            "invalid-key")

    def test_a_key_with_a_tab_inside_is_400_invalid_key(self):
        self.assert_problem(self.post({"n": 1}, key="a\tb"), 400,
                            "invalid-key")

    def test_a_comma_separated_list_of_keys_is_400_invalid_key(self):
        first, second = unique(), unique()
        res = self.post({"n": 1}, key="%s, %s" % (first, second))
        self.assert_problem(res, 400, "invalid-key")
        self.assert_not_stored(first)

    def test_repeated_idempotency_key_header_lines_are_400_invalid_key(self):
        # Two field lines are one field whose value is the list "a, b"
        # (RFC 9110 5.3), which is neither an SF string nor a bare token.
        first, second = unique(), unique()
        res = self.send_lines("POST", "/v1/webhook",
                              [("Content-Type", "application/json"),
                               ("Idempotency-Key", first),
                               ("Idempotency-Key", second)], b'{"n":1}')
        self.assert_problem(res, 400, "invalid-key")
        self.assert_not_stored(first)
        self.assert_not_stored(second)

    def test_an_unquoted_key_with_a_space_is_400_invalid_key(self):
        self.assert_problem(self.post({"n": 1}, key="two words"), 400,
                            "invalid-key")


class DerivedKeyTest(ContractCase):
    def check_same_key(self, variant):
        """`variant` alone yields the key of epoch seconds; after it, the
        epoch-seconds form is the same key with another payload."""
        sig = self.signal()
        expected = derived_key("BINANCE", sig["symbol"], "buy", EPOCH_MS)
        res = self.post(dict(sig, timestamp=variant))
        self.assert_accepted(res, expected, "derived")
        res = self.post(sig)
        self.assertEqual(self.assert_problem(res, 422, "key-reused")
                         ["idempotency_key"], expected)

    def test_the_derived_key_is_the_sha256_of_the_normalised_fields(self):
        sig = self.signal()
        res = self.post(sig)
        self.assert_accepted(
            res, derived_key("BINANCE", sig["symbol"], "buy", EPOCH_MS),
            "derived")
        self.assertRegex(res.doc["idempotency_key"], HEX64)

    def test_the_derived_key_trims_and_upper_cases_exchange_and_symbol(self):
        sig = self.signal()
        expected = derived_key("BINANCE", sig["symbol"], "buy", EPOCH_MS)
        res = self.post(dict(sig, exchange="  binance\t",
                             symbol=" %s " % sig["symbol"].lower()))
        self.assert_accepted(res, expected, "derived")

    def test_the_derived_key_trims_and_lower_cases_the_action(self):
        sig = self.signal()
        expected = derived_key("BINANCE", sig["symbol"], "buy", EPOCH_MS)
        res = self.post(dict(sig, action=" BuY  "))
        self.assert_accepted(res, expected, "derived")

    def test_epoch_milliseconds_derive_the_same_key_as_epoch_seconds(self):
        self.check_same_key(EPOCH_MS)

    def test_a_numeric_string_timestamp_derives_the_same_key(self):
        self.check_same_key(str(EPOCH_S))

    def test_an_iso8601_timestamp_in_utc_derives_the_same_key(self):
        self.check_same_key("2023-11-14T22:13:20Z")

    def test_an_iso8601_timestamp_with_an_offset_derives_the_same_key(self):
        self.check_same_key("2023-11-15T00:13:20+02:00")

    def test_a_numeric_string_of_epoch_milliseconds_derives_the_same_key(
            self):
        self.check_same_key(str(EPOCH_MS))

    def test_an_iso8601_timestamp_with_a_negative_offset_derives_the_same_key(
            self):
        self.check_same_key("2023-11-14T17:13:20-05:00")

    def test_fractional_seconds_and_iso8601_milliseconds_derive_one_key(self):
        sig = self.signal(timestamp="2023-11-14T22:13:20.250Z")
        expected = derived_key("BINANCE", sig["symbol"], "buy",
                               EPOCH_MS + 250)
        self.assert_accepted(self.post(sig), expected, "derived")
        res = self.post(dict(sig, timestamp=1700000000.25))
        self.assertEqual(self.assert_problem(res, 422, "key-reused")
                         ["idempotency_key"], expected)

    def test_a_repeated_derived_signal_is_a_duplicate(self):
        sig = self.signal()
        self.assert_accepted(self.post(sig), source="derived")
        self.assert_problem(self.post(sig), 409, "duplicate")

    def test_a_bar_in_a_field_cannot_move_the_field_boundary(self):
        # v1 joined the fields with an unescaped `|`: these two were one key.
        suffix = unique("S").upper()
        first = self.signal(exchange="BINANCE|BTC", symbol=suffix)
        second = self.signal(exchange="BINANCE", symbol="BTC|" + suffix)
        self.assert_accepted(
            self.post(first),
            derived_key("BINANCE|BTC", suffix, "buy", EPOCH_MS), "derived")
        self.assert_accepted(
            self.post(second),
            derived_key("BINANCE", "BTC|" + suffix, "buy", EPOCH_MS),
            "derived")


class CanonicalisationTest(ContractCase):
    def check_duplicate(self, first, second, route=None, query=""):
        key = unique()
        self.assert_accepted(self.post(first, key=key, route=route,
                                       query=query), key)
        res = self.post(second, key=key, route=route, query=query)
        self.assert_problem(res, 409, "duplicate")

    def test_member_order_does_not_change_the_fingerprint(self):
        self.check_duplicate('{"a":1,"b":{"x":1,"y":2},"c":"z"}',
                             '{"c":"z","b":{"y":2,"x":1},"a":1}')

    def test_insignificant_whitespace_does_not_change_the_fingerprint(self):
        self.check_duplicate('{"a":[1,2],"b":"c d"}',
                             ' {\n  "a" : [ 1 ,\t2 ] ,\r\n  "b" : "c d" }\n')

    def test_a_unicode_escape_equals_the_character_it_encodes(self):
        self.check_duplicate('{"v":"\\u0042x","\\u006b":"\\u00e9"}',
                             '{"v":"Bx","k":"\u00e9"}'.encode("utf-8"))

    def test_one_point_zero_equals_one(self):
        self.check_duplicate('{"qty":1.0,"px":2.50,"n":1e2}',
                             '{"qty":1,"px":2.5,"n":100}')

    def test_an_escaped_solidus_equals_a_plain_one(self):
        self.check_duplicate('{"u":"a\\/b"}', '{"u":"a/b"}')

    def test_a_surrogate_pair_escape_equals_the_raw_character(self):
        self.check_duplicate('{"e":"\\ud83d\\ude00"}',
                             '{"e":"\U0001F600"}'.encode("utf-8"))

    def test_minus_zero_equals_zero(self):
        self.check_duplicate('{"n":-0}', '{"n":0}')

    def test_distinct_integers_beyond_2_to_the_53_stay_distinct(self):
        key = unique()
        self.assert_accepted(self.post('{"n":9007199254740993}', key=key))
        self.assert_problem(self.post('{"n":9007199254740992}', key=key), 422,
                            "key-reused")

    def test_distinct_integers_beyond_64_bits_stay_distinct(self):
        key = unique()
        self.assert_accepted(self.post('{"qty":18446744073709551616}',
                                       key=key))
        self.assert_problem(self.post('{"qty":18446744073709551617}',
                                      key=key), 422, "key-reused")

    def test_decimals_beyond_17_significant_digits_stay_distinct(self):
        key = unique()
        self.assert_accepted(self.post('{"px":0.1}', key=key))
        self.assert_problem(self.post('{"px":0.10000000000000001}', key=key),
                            422, "key-reused")

    def test_numbers_beyond_a_double_compare_by_exact_value(self):
        self.check_duplicate('{"n":18446744073709551617,"t":1e-400}',
                             '{"n":1.8446744073709551617e19,"t":0.1e-399}')

    def test_the_stored_fingerprint_of_an_exact_number(self):
        # Numbers the old form rendered exactly keep that text (`1e+20`);
        # others get the exact form with an upper-case E.
        key = unique()
        self.assert_accepted(self.post(
            '{"a":100000000000000000000,"b":0.10000000000000001}', key=key))
        res = self.admin("GET", key)
        self.assertEqual(res.doc["fingerprint"], hashlib.sha256(
            b'{"a":1e+20,"b":1.0000000000000001E-1}').hexdigest())

    def test_passphrase_secret_and_token_members_are_left_out(self):
        self.check_duplicate(
            {"n": 1, "passphrase": "p1", "secret": "s1", "token": "t1"},
            {"n": 1, "passphrase": "p2", "secret": "s2"})

    def test_a_body_passphrase_and_a_query_token_give_one_fingerprint(self):
        key = unique()
        res = self.post({"n": 1, "passphrase": TV_TOKEN}, key=key,
                        route="tv")
        self.assert_accepted(res, key, "header")
        res = self.post({"n": 1}, key=key, route="tv",
                        query="?token=" + urllib.parse.quote(TV_TOKEN))
        self.assert_problem(res, 409, "duplicate")

    def test_the_stored_fingerprint_is_the_sha256_of_the_canonical_body(self):
        key = unique()
        body = {"z": 1, "a": "x", "m": [1, 2], "secret": "drop me"}
        self.assert_accepted(self.post(body, key=key), key)
        res = self.admin("GET", key)
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc["fingerprint"], canonical_fingerprint(body))


class ForwardedKeyTest(ContractCase):
    def test_a_bare_key_is_forwarded_as_it_is(self):
        key = unique()
        self.assert_executed(self.post({"n": 1}, key=key, route="fwd"), key)
        self.assertEqual(UP.executions(key), 1)

    def test_keys_that_differ_by_spaces_are_forwarded_as_distinct_keys(self):
        # `k`, `" k "` and `"k "` are three keys here; the upstream must
        # not see one key three times.
        key = unique()
        variants = [key, '" %s "' % key, '"%s "' % key]
        expected = [key, "sha256:" + hashlib.sha256(
            (" %s " % key).encode()).hexdigest(), "sha256:" + hashlib.sha256(
            ("%s " % key).encode()).hexdigest()]
        for header, sent in zip(variants, expected):
            self.assert_executed(self.post({"n": 1}, key=header, route="fwd"),
                                 sent)
        for sent in expected:
            self.assertEqual(UP.executions(sent), 1, sent)

    def test_a_key_that_looks_like_a_hash_cannot_meet_a_hashed_key(self):
        # A non-printable body key is forwarded as its hash; a header key
        # spelling out that hash (with or without the prefix) is not it.
        body_key_value = "caf\u00e9-" + unique()
        decoded = json.loads('"%s"' % body_key_value)
        hashed = forwarded_key(decoded)
        self.assertTrue(hashed.startswith("sha256:"))
        res = self.post('{"id":"%s"}' % body_key_value, route="fwd")
        self.assert_executed(res, hashed)
        plain = hashed[len("sha256:"):]
        self.assert_executed(self.post({"n": 1}, key=plain, route="fwd"),
                             plain)
        res = self.post({"n": 1}, key=hashed, route="fwd")
        self.assert_executed(res, forwarded_key(hashed))
        self.assertNotEqual(forwarded_key(hashed), hashed)
        self.assertEqual(UP.executions(hashed), 1)


class BadRequestTest(ContractCase):
    def check_400(self, body, name, **kw):
        key = unique()
        res = self.post(body, key=key, **kw)
        doc = self.assert_problem(res, 400, name)
        self.assert_not_stored(key)
        return doc

    # Bodies refused 400 before anything is stored, with their problem type.
    BAD_BODIES = (
        ("malformed JSON", '{"id": "x",', "malformed-json"),
        ("invalid UTF-8 bytes", b'{"n":"\xff\xfe"}', "invalid-utf8"),
        ("a lone surrogate escape", '{"n":"\\ud800"}', "invalid-utf8"),
        ("duplicate member names", '{"a":1,"a":1}', "duplicate-member"),
        ("duplicate member names after unescaping", '{"a":1,"\\u0061":2}',
         "duplicate-member"),
        ("an array at the top level", '[{"id":"x"}]', "not-an-object"),
        ("duplicate member names in a nested object", '{"a":{"b":1,"b":2}}',
         "duplicate-member"),
        ("a string at the top level", '"just a string"', "not-an-object"),
        ("trailing data after the object", '{"a":1} {"b":2}',
         "malformed-json"),
        ("an empty body", b"", "malformed-json"),
    )

    def test_each_bad_body_is_400_with_its_problem_and_stores_nothing(self):
        for what, body, problem in self.BAD_BODIES:
            with self.subTest(what):
                self.check_400(body, problem)

    def test_a_malformed_body_does_not_burn_its_key(self):
        key = unique()
        self.assert_problem(self.post('{"n": 1', key=key), 400,
                            "malformed-json")
        self.assert_accepted(self.post({"n": 1}, key=key), key)


class MediaTypeMethodAndPathTest(ContractCase):
    def test_a_form_body_is_415(self):
        key = unique()
        res = self.post("a=b", key=key,
                        content_type="application/x-www-form-urlencoded")
        self.assert_problem(res, 415, "unsupported-media-type")
        self.assert_not_stored(key)

    def test_an_xml_body_is_415(self):
        res = self.post("<a/>", key=unique(), content_type="application/xml")
        self.assert_problem(res, 415, "unsupported-media-type")

    def test_text_plain_json_is_accepted(self):
        key = unique()
        res = self.post('{"n":1}', key=key, content_type="text/plain")
        self.assert_accepted(res, key)

    def test_json_with_a_charset_parameter_is_accepted(self):
        key = unique()
        res = self.post({"n": 1}, key=key,
                        content_type="application/json; charset=utf-8")
        self.assert_accepted(res, key)

    def test_a_missing_content_type_is_read_as_json(self):
        key = unique()
        res = self.post({"n": 1}, key=key, content_type=None)
        self.assert_accepted(res, key)

    def test_the_media_type_is_matched_case_insensitively(self):
        key = unique()
        res = self.post({"n": 1}, key=key, content_type="Application/JSON")
        self.assert_accepted(res, key)

    def test_get_on_the_webhook_is_405_with_allow(self):
        res = self.send("GET", "/v1/webhook", content_type=None)
        self.assert_problem(res, 405, "method-not-allowed")
        self.assertEqual(res.headers.get("allow"), "POST")

    def test_put_on_a_named_route_is_405_with_allow(self):
        res = self.send("PUT", "/v1/webhook/alt", {"n": 1})
        self.assert_problem(res, 405, "method-not-allowed")
        self.assertEqual(res.headers.get("allow"), "POST")

    def test_post_on_healthz_is_405_with_allow(self):
        res = self.send("POST", "/healthz", {})
        self.assert_problem(res, 405, "method-not-allowed")
        self.assertIn("GET", res.headers.get("allow", ""))

    def test_an_unknown_path_is_a_404_problem(self):
        self.assert_problem(self.send("POST", "/v2/hooks", {"n": 1}), 404,
                            "not-found")

    def test_an_unknown_route_is_a_404_problem(self):
        res = self.post({"n": 1}, key=unique(), route="no-such-route")
        self.assert_problem(res, 404, "not-found")

    def test_the_same_key_on_two_routes_is_two_keys(self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key=key), key)
        self.assert_accepted(self.post({"n": 1}, key=key, route="alt"), key)
        self.assert_problem(self.post({"n": 1}, key=key, route="alt"), 409,
                            "duplicate")


class TokenAuthTest(ContractCase):
    def test_the_token_can_come_as_a_query_parameter(self):
        key = unique()
        res = self.post({"n": 1}, key=key, route="tv",
                        query="?token=" + urllib.parse.quote(TV_TOKEN))
        self.assert_accepted(res, key, "header")

    def test_the_token_can_come_as_a_body_passphrase(self):
        key = unique()
        res = self.post({"id": key, "passphrase": TV_TOKEN}, route="tv",
                        content_type="text/plain")
        self.assert_accepted(res, key, "body")

    def test_a_wrong_token_is_401_and_a_later_correct_request_executes(self):
        key = unique()
        res = self.post({"n": 1, "passphrase": "wrong-" + TV_TOKEN}, key=key,
                        route="tv")
        self.assert_problem(res, 401, "unauthorized")
        self.assert_not_stored(key, "tv")
        res = self.post({"n": 1, "passphrase": TV_TOKEN}, key=key, route="tv")
        self.assert_accepted(res, key)

    def test_a_missing_token_is_401_and_a_later_correct_request_executes(
            self):
        key = unique()
        self.assert_problem(self.post({"n": 1}, key=key, route="tv"), 401,
                            "unauthorized")
        self.assert_not_stored(key, "tv")
        res = self.post({"n": 1}, key=key, route="tv",
                        query="?token=" + urllib.parse.quote(TV_TOKEN))
        self.assert_accepted(res, key)

    def test_a_wrong_query_token_is_not_rescued_by_a_right_passphrase(self):
        # The query parameter is the token when present (first match).
        key = unique()
        res = self.post({"n": 1, "passphrase": TV_TOKEN}, key=key, route="tv",
                        query="?token=nope")
        self.assert_problem(res, 401, "unauthorized")


class GitHubAuthTest(ContractCase):
    def delivery_body(self):
        return to_bytes({"action": "opened", "number": 1, "n": unique()})

    def test_a_signed_delivery_is_accepted_with_the_body_hash_as_key(self):
        data = self.delivery_body()
        res = self.post_github(data, str(uuid.uuid4()))
        self.assert_accepted(res, body_key(data), "github-body")
        self.assertEqual(res.headers.get("idempotency-key"), body_key(data))

    def test_a_redelivery_is_a_409_duplicate(self):
        delivery = str(uuid.uuid4())
        data = self.delivery_body()
        self.assert_accepted(self.post_github(data, delivery), body_key(data))
        self.assert_problem(self.post_github(data, delivery), 409,
                            "duplicate")

    def test_a_signed_body_resent_with_another_delivery_id_is_a_409(self):
        # X-GitHub-Delivery is not covered by the HMAC: anyone who saw the
        # delivery can resend it under a fresh id.
        data = self.delivery_body()
        key = body_key(data)
        res = self.post_github(data, str(uuid.uuid4()), route="ghup")
        self.assert_executed(res, key)
        res = self.post_github(data, str(uuid.uuid4()), route="ghup")
        self.assert_problem(res, 409, "duplicate")
        self.assertEqual(UP.executions(key), 1)

    def test_another_signed_body_is_another_key(self):
        first, second = self.delivery_body(), self.delivery_body()
        delivery = str(uuid.uuid4())
        self.assert_accepted(self.post_github(first, delivery),
                             body_key(first))
        self.assert_accepted(self.post_github(second, delivery),
                             body_key(second))

    def test_a_wrong_signature_is_401_and_a_later_signed_one_executes(self):
        delivery = str(uuid.uuid4())
        data = self.delivery_body()
        res = self.post_github(data, delivery, secret="not-" + GH_SECRET)
        self.assert_problem(res, 401, "unauthorized")
        self.assert_not_stored(body_key(data), "gh")
        self.assert_accepted(self.post_github(data, delivery), body_key(data))

    def test_a_missing_signature_is_401(self):
        res = self.post({"n": 1}, route="gh",
                        headers={"X-GitHub-Delivery": str(uuid.uuid4())})
        self.assert_problem(res, 401, "unauthorized")

    def test_a_tampered_body_is_401(self):
        delivery = str(uuid.uuid4())
        signed = b'{"amount":1}'
        hdrs = {"X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": github_signature(GH_SECRET, signed)}
        res = self.post(b'{"amount":9}', route="gh", headers=hdrs)
        self.assert_problem(res, 401, "unauthorized")


class StandardWebhooksAuthTest(ContractCase):
    def test_a_signed_message_is_accepted_with_the_webhook_id_as_key(self):
        msg_id = unique("msg")
        res = self.post_sw({"type": "invoice.paid"}, msg_id)
        self.assert_accepted(res, msg_id, "webhook-id")

    def test_a_resent_message_is_a_409_duplicate(self):
        msg_id = unique("msg")
        self.assert_accepted(self.post_sw({"n": 1}, msg_id), msg_id)
        self.assert_problem(self.post_sw({"n": 1}, msg_id), 409, "duplicate")

    def test_a_captured_delivery_replayed_with_a_new_idempotency_key_is_409(
            self):
        # Everything the signature covers, byte for byte, plus a header it
        # does not cover: still the same message.
        msg_id = unique("msg")
        ts = int(time.time())
        data = b'{"type":"invoice.paid","amount":100}'
        sig = sw_signature(SW_KEY, msg_id, ts, data)
        res = self.post_sw(data, msg_id, timestamp=ts, signature=sig,
                           route="swup")
        self.assert_executed(res, msg_id)
        key = unique()
        res = self.post_sw(data, msg_id, timestamp=ts, signature=sig,
                           route="swup", headers={"Idempotency-Key": key})
        self.assert_problem(res, 409, "duplicate")
        self.assertEqual(UP.executions(msg_id), 1)
        self.assertEqual(UP.executions(key), 0)
        self.assertEqual(UP.executions(forwarded_key(key)), 0)
        self.assert_not_stored(key, "swup")

    def test_one_valid_signature_among_several_passes(self):
        msg_id = unique("msg")
        ts = int(time.time())
        body = b'{"n":1}'
        wrong = sw_signature(b"x" * 24, msg_id, ts, body)
        right = sw_signature(SW_KEY, msg_id, ts, body)
        sig = " ".join([wrong, "v2,abc", right])
        res = self.post_sw(body, msg_id, timestamp=ts, signature=sig)
        self.assert_accepted(res, msg_id, "webhook-id")

    def test_a_wrong_signature_is_401_and_a_later_signed_one_executes(self):
        msg_id = unique("msg")
        ts = int(time.time())
        sig = sw_signature(b"y" * 24, msg_id, ts, b'{"n":1}')
        res = self.post_sw(b'{"n":1}', msg_id, timestamp=ts, signature=sig)
        self.assert_problem(res, 401, "unauthorized")
        self.assert_not_stored(msg_id, "sw")
        self.assert_accepted(self.post_sw(b'{"n":1}', msg_id), msg_id)

    def test_a_timestamp_301_seconds_old_is_401(self):
        # floor(now) - 301: at least 301 s from the node's clock.
        msg_id = unique("msg")
        res = self.post_sw({"n": 1}, msg_id,
                           timestamp=math.floor(time.time()) - 301)
        self.assert_problem(res, 401, "unauthorized")
        self.assert_not_stored(msg_id, "sw")

    def test_a_timestamp_301_seconds_ahead_is_401(self):
        # ceil(now) + 301: at least 301 s ahead unless the request takes 1 s.
        msg_id = unique("msg")
        res = self.post_sw({"n": 1}, msg_id,
                           timestamp=math.ceil(time.time()) + 301)
        self.assert_problem(res, 401, "unauthorized")
        self.assert_not_stored(msg_id, "sw")

    def test_a_timestamp_a_few_minutes_old_within_tolerance_passes(self):
        msg_id = unique("msg")
        res = self.post_sw({"n": 1}, msg_id, timestamp=int(time.time()) - 240)
        self.assert_accepted(res, msg_id, "webhook-id")

    def test_missing_webhook_headers_are_401(self):
        res = self.post({"n": 1}, route="sw")
        self.assert_problem(res, 401, "unauthorized")


class AllowListAndLimitTest(ContractCase):
    def test_a_source_outside_the_allow_list_is_403(self):
        key = unique()
        res = self.post({"n": 1}, key=key, route="deny")
        self.assert_problem(res, 403, "forbidden")
        self.assert_not_stored(key, "deny")

    def test_a_body_over_the_route_limit_is_413_and_closes_the_connection(
            self):
        key = unique()
        body = json.dumps({"pad": "x" * (SMALL_LIMIT + 10)})
        res = self.post(body, key=key, route="small")
        self.assert_problem(res, 413, "body-too-large")
        self.assertEqual(res.headers.get("connection", "").lower(), "close")
        self.assert_not_stored(key, "small")

    def test_a_chunked_body_over_the_route_limit_is_413_and_closes(self):
        key = unique()
        head = ("POST /v1/webhook/small HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nIdempotency-Key: %s\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" % key).encode()
        # Chunks up to just past the limit, in one write, and no last chunk:
        # the node must answer as soon as the limit is crossed (everything
        # sent has been read by then, so the close is clean).
        data = ('{"pad":"%s' % ("x" * (SMALL_LIMIT + 200))).encode()
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 256]),
                                               data[i:i + 256])
                          for i in range(0, len(data), 256))
        res = self.send_raw([head + chunks])
        self.assert_problem(res, 413, "body-too-large")
        self.assertEqual(res.headers.get("connection", "").lower(), "close")
        self.assert_not_stored(key, "small")

    def test_headers_that_arrive_too_slowly_get_408_and_the_connection_closes(
            self):
        res = self.send_raw([b"POST /v1/webhook HTTP/1.1\r\nHost: x\r\n"])
        self.assert_problem(res, 408, "request-timeout")
        self.assertEqual(res.headers.get("connection", "").lower(), "close")

    def test_a_body_that_arrives_too_slowly_gets_408_and_the_connection_closes(
            self):
        key = unique()
        res = self.send_raw([
            ("POST /v1/webhook HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s"
             "\r\nContent-Type: application/json\r\nContent-Length: 20"
             "\r\n\r\n{\"id\"" % key).encode()])
        self.assert_problem(res, 408, "request-timeout")
        self.assertEqual(res.headers.get("connection", "").lower(), "close")
        self.assert_not_stored(key)

    def test_a_body_at_the_route_limit_is_accepted(self):
        key = unique()
        body = '{"pad":"%s"}' % ("x" * (SMALL_LIMIT - 10))
        self.assertEqual(len(body), SMALL_LIMIT)
        self.assert_accepted(self.post(body, key=key, route="small"), key)

    def test_the_route_limit_does_not_apply_to_other_routes(self):
        key = unique()
        body = json.dumps({"pad": "x" * (SMALL_LIMIT * 4)})
        self.assert_accepted(self.post(body, key=key), key)


class AdminAndHealthTest(ContractCase):
    def test_the_admin_record_has_state_fingerprint_and_timestamps(self):
        key = unique()
        body = {"n": 1, "passphrase": TV_TOKEN}
        first = self.assert_accepted(self.post(body, key=key, route="tv"))
        res = self.admin("GET", key, "tv")
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.headers.get("cache-control"), "no-store")
        rec = res.doc
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["key"], key)
        self.assertEqual(rec["route"], "tv")
        self.assertRegex(rec["fingerprint"], HEX64)
        self.assertEqual(rec["fingerprint"], canonical_fingerprint(body))
        self.assertEqual(rec["first_seen"], first["received_at"])
        ttl = parse_time(rec["expires_at"]) - parse_time(rec["first_seen"])
        self.assertEqual(ttl, datetime.timedelta(hours=72))
        self.assertEqual(rec["status"], 200)

    def test_the_default_ttl_is_24_hours(self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key=key))
        rec = self.admin("GET", key).doc
        ttl = parse_time(rec["expires_at"]) - parse_time(rec["first_seen"])
        self.assertEqual(ttl, datetime.timedelta(hours=24))

    def test_admin_delete_releases_the_key_so_the_next_request_executes(
            self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key=key, route="alt"))
        self.assert_problem(self.post({"n": 1}, key=key, route="alt"), 409,
                            "duplicate")
        res = self.admin("DELETE", key, "alt")
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc.get("key"), key)
        self.assert_accepted(self.post({"n": 2}, key=key, route="alt"), key)

    def test_admin_finds_a_key_with_a_space_and_a_slash_percent_encoded(self):
        key = "a b/%s" % uuid.uuid4().hex
        self.assert_accepted(self.post({"n": 1}, key='"%s"' % key), key)
        res = self.admin("GET", key)
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc["key"], key)

    def test_admin_delete_of_an_unknown_key_is_404(self):
        self.assert_problem(self.admin("DELETE", unique()), 404, "not-found")

    def test_admin_lookup_on_an_unknown_route_is_404(self):
        self.assert_problem(self.admin("GET", unique(), "no-such-route"), 404,
                            "not-found")

    def test_admin_with_another_method_is_405_with_allow(self):
        res = self.send("POST", "/v1/keys/" + unique(), {},
                        headers={"Authorization": "Bearer " + ADMIN_TOKEN})
        self.assert_problem(res, 405, "method-not-allowed")
        self.assertEqual(res.headers.get("allow"), "GET, HEAD, DELETE")

    def test_a_key_executes_again_once_the_route_ttl_has_passed(self):
        key = unique()
        first = self.assert_accepted(self.post({"n": 1}, key=key,
                                               route="short"))
        rec = self.admin("GET", key, "short").doc
        self.assertEqual(parse_time(rec["expires_at"])
                         - parse_time(rec["first_seen"]),
                         datetime.timedelta(seconds=1))
        seen = []

        def executes_again():
            res = self.post({"n": 1}, key=key, route="short")
            seen.append(res)
            return res.status == 200

        self.assertTrue(wait_for(executes_again, 10, interval=0.1),
                        seen[-1:])
        # Until then, every answer was the duplicate problem.
        for res in seen[:-1]:
            self.assert_problem(res, 409, "duplicate")
        again = self.assert_accepted(seen[-1], key)
        self.assertGreater(parse_time(again["received_at"]),
                           parse_time(first["received_at"]))

    def test_admin_lookup_of_an_unknown_key_is_404(self):
        self.assert_problem(self.admin("GET", unique()), 404, "not-found")

    def test_admin_without_a_bearer_token_is_401(self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key=key))
        res = self.admin("GET", key, token=None)
        self.assert_problem(res, 401, "unauthorized")

    def test_admin_with_a_wrong_bearer_token_is_401_and_releases_nothing(
            self):
        key = unique()
        self.assert_accepted(self.post({"n": 1}, key=key))
        res = self.admin("DELETE", key, token="x" + ADMIN_TOKEN)
        self.assert_problem(res, 401, "unauthorized")
        self.assert_problem(self.post({"n": 1}, key=key), 409, "duplicate")

    def test_healthz_is_200(self):
        res = self.send("GET", "/healthz", content_type=None)
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc, {"status": "ok"})

    def test_readyz_is_200_ready(self):
        res = self.send("GET", "/readyz", content_type=None)
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.doc, {"status": "ready"})


class ConcurrencyTest(ContractCase):
    N = 50

    def burst(self, make_request):
        """Runs make_request(i) on N threads released together; returns the
        results in thread order."""
        results = [None] * self.N
        barrier = threading.Barrier(self.N)

        def run(i):
            try:
                barrier.wait(10)
                results[i] = make_request(i)
            except Exception as e:  # reported through results
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,), daemon=True)
                   for i in range(self.N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for t in threads:
            self.assertFalse(t.is_alive(), "a request did not finish")
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results

    def test_fifty_parallel_identical_requests_execute_exactly_once(self):
        key = unique()
        body = {"n": 1, "symbol": "BTCUSDT"}
        results = self.burst(
            lambda i: self.post(body, key=key, route="alt"))
        statuses = [r.status for r in results]
        self.assertEqual(statuses.count(200), 1, statuses)
        self.assertEqual(statuses.count(409), self.N - 1, statuses)
        for r in results:
            if r.status == 409:
                self.assert_problem(r, 409, "duplicate")
                self.assertEqual(r.headers.get("idempotent-replayed"), "true")

    def test_fifty_parallel_requests_with_two_payloads_execute_one(self):
        key = unique()
        bodies = [{"side": "buy"}, {"side": "sell"}]
        results = self.burst(
            lambda i: self.post(bodies[i % 2], key=key, route="alt"))
        winners = [i for i, r in enumerate(results) if r.status == 200]
        self.assertEqual(len(winners), 1, [r.status for r in results])
        won = winners[0] % 2
        for i, r in enumerate(results):
            if i == winners[0]:
                continue
            if i % 2 == won:
                self.assert_problem(r, 409, "duplicate")
            else:
                self.assert_problem(r, 422, "key-reused")
        rec = self.admin("GET", key, "alt").doc
        self.assertEqual(rec["fingerprint"],
                         canonical_fingerprint(bodies[won]))


if __name__ == "__main__":
    unittest.main()
