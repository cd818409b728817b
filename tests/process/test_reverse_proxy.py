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
import shutil
import signal
import socket
import subprocess
import unittest

from harness import Node, TempDir, free_port, http_call, wait_for

PROBLEM = "https://oncegate.dev/problems/"
NGINX = shutil.which("nginx") or (
    "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
PROXY_SOURCE = "127.0.0.2"  # nginx's address towards the node
CLIENT = "127.0.0.3"  # the outside client's address
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

NGINX_CONF = """# written by tests/process/test_reverse_proxy.py
{user}
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
  worker_connections 64;
}}

http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;

  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{node_port};
      proxy_bind {source};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
  }}
}}
"""

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


class Nginx:
    """One nginx master (and its worker) in `directory`, reaped by
    `stop`."""

    def __init__(self, directory, node_port):
        self.dir = directory
        self.port = free_port()
        user = "user %s;" % _user_name() if os.geteuid() == 0 else ""
        self.conf = os.path.join(directory, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(user=user, dir=directory, port=self.port,
                                      node_port=node_port,
                                      source=PROXY_SOURCE))
        self.proc = None

    def start(self):
        out = open(os.path.join(self.dir, "stdout.log"), "wb")
        # Its own session, so that stop() can reach the worker too.
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.dir, "-c", self.conf,
             "-e", os.path.join(self.dir, "error.log")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()
        if not wait_for(self._accepts, START_TIMEOUT, 0.02):
            self.stop()
            raise RuntimeError("nginx did not start: %s" % self.log())
        return self

    def _accepts(self):
        if self.proc.poll() is not None:
            raise RuntimeError("nginx exited with %s: %s"
                               % (self.proc.returncode, self.log()))
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def log(self):
        text = []
        for name in ("stdout.log", "error.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text.append(f.read()[-2000:])
            except OSError:
                pass
        return "\n".join(text)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown, workers too
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def request(self, method, path, body=None, headers=None):
        """A request of the outside client, through nginx."""
        return http_call("127.0.0.1", self.port, method, path, body, headers,
                         source=CLIENT)


def _user_name():
    import pwd
    return pwd.getpwuid(os.geteuid()).pw_name


class ReverseProxyTest(unittest.TestCase):
    def setUp(self):
        if NGINX is None:
            if IN_CI:
                self.fail("nginx is missing (Debian: apt-get install nginx; "
                          "scripts/setup.sh installs it)")
            self.skipTest("nginx is not installed (Debian: apt-get install "
                          "nginx); this test runs in CI")
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write(NODE_INI.format(source=PROXY_SOURCE, client=CLIENT))
        self.node = Node(os.path.join(self.tmp.path, "data"),
                         "--config-file=" + ini).start()
        self.addCleanup(self.node.kill)
        self.nginx = Nginx(self.tmp.path, self.node.port).start()
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
