"""A node behind a real nginx (docs/operations.md, "Behind a reverse proxy").

nginx runs as the test user from a temp dir (`-p`/`-c`/`-e`, pid, logs and
temp paths there, `daemon off;`) on a free 127.0.0.1 port and proxies to a
node on loopback. It connects to the node from 127.0.0.2 (`proxy_bind`),
the only address in the node's `http.trusted-proxies`, while this test, the
"outside" client, talks to nginx from 127.0.0.3 (and to the node directly
from 127.0.0.1 or 127.0.0.3). So:

- the route allowlists see the address nginx appends to X-Forwarded-For
  (127.0.0.3), never nginx's own (127.0.0.2), and never what the client
  wrote into X-Forwarded-For or Forwarded itself;
- admin through nginx is not local, even though listener, direct peer and
  forwarded address are all loopback: reads are `403 forbidden`, changes
  `403 admin-token-required` (the node runs without a token and with
  `admin.allow-unauthenticated-loopback=true`, which still admits this
  test's direct requests);
- webhooks work end to end through nginx.

nginx (Debian: apt-get install nginx; scripts/setup.sh installs it) must be
there in CI (CI set in the environment); elsewhere the test is skipped
without it.
"""

import json
import os
import unittest

import nginx
from harness import Node, TempDir, http_call

PROBLEM = "https://oncegate.dev/problems/"
PROXY_SOURCE = "127.0.0.2"  # nginx's address towards the node
CLIENT = "127.0.0.3"  # the outside client's address

LOCATIONS = """    location / {{
      proxy_pass http://127.0.0.1:{node_port};
      proxy_bind {source};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}"""

NODE_INI = """[http]
trusted-proxies=["{source}/32"]

[admin]
allow-unauthenticated-loopback=true

; only the outside client's address (as nginx saw it)
[route.near]
allow=["{client}/32"]

; only nginx's address: never the client's
[route.proxy]
allow=["{source}/32"]

; an address only a forged header could claim
[route.spoofed]
allow=["10.1.2.3/32"]
"""


class ReverseProxyTest(unittest.TestCase):
    def setUp(self):
        nginx.require(self)
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write(NODE_INI.format(source=PROXY_SOURCE, client=CLIENT))
        self.node = Node(os.path.join(self.tmp.path, "data"),
                         "--config-file=" + ini).start()
        self.addCleanup(self.node.kill)
        self.nginx = nginx.Nginx(self.tmp.path, LOCATIONS.format(
            node_port=self.node.port, source=PROXY_SOURCE),
            client=CLIENT).start()
        self.addCleanup(self.nginx.stop)
        self.n = 0

    def key(self):
        self.n += 1
        return "%s-%d" % (self._testMethodName[-24:], self.n)

    def post(self, route, headers=None, via_proxy=True, key=None,
             source=None):
        """POSTs a webhook through nginx, or (`via_proxy` False) straight
        to the node from `source` (default 127.0.0.1)."""
        key = key or self.key()
        hdrs = {"Idempotency-Key": key}
        hdrs.update(headers or {})
        path = "/v1/webhook/" + route
        if via_proxy:
            return self.nginx.request("POST", path, {"k": key}, hdrs)
        return http_call("127.0.0.1", self.node.port, "POST", path,
                         {"k": key}, hdrs, source=source)

    def assert_problem(self, got, status, name):
        code, headers, body = got
        self.assertEqual(code, status, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + name, body)
        # The answer is the node's, relayed.
        self.assertEqual(headers.get("cache-control"), "no-store")

    def test_the_allowlist_sees_the_address_the_proxy_forwarded(self):
        # nginx saw this client as 127.0.0.3 and appends that; its own
        # address (127.0.0.2) is not what the allowlist sees.
        self.assertEqual(self.post("near")[0], 200)
        self.assert_problem(self.post("proxy"), 403, "forbidden")
        # Straight to the node, the allowlists see the peer itself.
        self.assert_problem(self.post("near", via_proxy=False), 403,
                            "forbidden")
        self.assertEqual(self.post("near", via_proxy=False, source=CLIENT)[0],
                         200)
        # ... and ignore what an untrusted peer claims.
        self.assert_problem(
            self.post("near", {"X-Forwarded-For": CLIENT}, via_proxy=False),
            403, "forbidden")
        self.assert_problem(
            self.post("spoofed", {"X-Forwarded-For": "10.1.2.3"},
                      via_proxy=False, source=CLIENT), 403, "forbidden")

    def test_what_the_client_writes_into_forwarding_headers_counts_for_nothing(
            self):
        """nginx appends to the client's X-Forwarded-For and passes a
        client's Forwarded header on untouched: the node takes the
        right-most untrusted X-Forwarded-For entry (the one nginx wrote)
        and, by default (http.forwarded-headers), reads no Forwarded."""
        for hdr in ({"X-Forwarded-For": "10.1.2.3"},
                    {"X-Forwarded-For": "10.1.2.3, " + PROXY_SOURCE},
                    {"X-Forwarded-For": "garbage, [::1]:80, 10.1.2.3"},
                    {"Forwarded": "for=10.1.2.3"},
                    {"X-Real-IP": "10.1.2.3"}):
            with self.subTest(header=hdr):
                self.assert_problem(self.post("spoofed", hdr), 403,
                                    "forbidden")
                # ... and the real address is still the client's.
                self.assertEqual(self.post("near", hdr)[0], 200)

    def test_admin_through_the_proxy_is_not_local(self):
        key = self.key()
        self.assertEqual(self.post("near", key=key)[0], 200)
        path = "/v1/keys/%s?route=near" % key
        # Directly from loopback: reads open, the opt-out admits changes.
        status, _, body = self.node.request("GET", path)
        self.assertEqual(status, 200, body)
        # Through nginx: nothing local about it, whatever the client says.
        for hdr in ({}, {"X-Forwarded-For": "127.0.0.1"},
                    {"X-Forwarded-For": "127.0.0.1, " + PROXY_SOURCE},
                    {"Forwarded": "for=127.0.0.1"}):
            with self.subTest(header=hdr):
                self.assert_problem(self.nginx.request("GET", path, None, hdr),
                                    403, "forbidden")
                self.assert_problem(
                    self.nginx.request("DELETE", path, None, hdr), 403,
                    "admin-token-required")
                self.assert_problem(
                    self.nginx.request("POST", "/v1/cluster/transfer", None,
                                       hdr), 403, "admin-token-required")
        # Nothing was released: a retry through nginx is still a duplicate.
        self.assertEqual(self.post("near", key=key)[0], 409)
        status, _, body = self.node.request("DELETE", path)
        self.assertEqual((status, json.loads(body).get("released")),
                         (200, True), body)

    def test_webhooks_work_end_to_end_through_the_proxy(self):
        key = self.key()
        status, headers, body = self.post("near", key=key)
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual((doc["status"], doc["idempotency_key"]),
                         ("accepted", key))
        self.assertEqual(headers.get("idempotency-key"), key)
        status, headers, body = self.post("near", key=key)
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"], PROBLEM + "duplicate")
        self.assertEqual(headers.get("idempotent-replayed"), "true")
        self.assertEqual(self.nginx.request("GET", "/healthz")[0], 200)
        self.assertEqual(self.nginx.request("GET", "/readyz")[0], 200)
        # Keys and duplicates are the node's, whichever way they come.
        self.assertEqual(
            self.post("near", via_proxy=False, key=key, source=CLIENT)[0], 409)


if __name__ == "__main__":
    unittest.main()
