"""Process-level test harness: runs the real `oncegate` binary on loopback.

Nodes bind port 0 and report the bound port on stdout; every wait is a
bounded poll on a condition, and every started process is reaped.
"""

import http.client
import json
import os
import shutil
import sys
import signal
import subprocess
import tempfile
import threading
import time
from urllib.parse import quote

BIN = os.environ.get("ONCEGATE_BIN", "build/tools/oncegate")
# The test build (tests/mutants): the product unless ONCEGATE_MUTANT is set,
# plus test-only switches such as ONCEGATE_COMMIT_FAULT_FILE. Unset when
# the tests run outside CTest without it.
MUTANT_BIN = os.environ.get("ONCEGATE_MUTANT_BIN")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0


class Node:
    """One oncegate process with its own data directory."""

    def __init__(self, data_dir, *extra_args, env=None, bin=None):
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        # Another build of the node (a test or mutant binary); default BIN.
        self.bin = bin
        # Extra environment variables for the process (e.g. LD_PRELOAD).
        self.env = dict(env) if env else None
        self.proc = None
        self.port = None
        self.log_path = os.path.join(data_dir, "node.log")

    def start(self):
        os.makedirs(self.data_dir, exist_ok=True)
        log = open(self.log_path, "ab")
        args = [self.bin or BIN, "--http-port=0", "--data-dir=" + self.data_dir,
                "--log-level=warn"] + self.extra_args
        env = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=log, stdin=subprocess.DEVNULL,
                                     env=env)
        log.close()
        # Read the ready line with a bound: a reader thread, joined with a
        # timeout, so a hung start cannot hang the test.
        line = {}

        def read_ready():
            line["text"] = self.proc.stdout.readline().decode()

        reader = threading.Thread(target=read_ready, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT)
        text = line.get("text", "")
        if not text.startswith("oncegate ready http="):
            self.kill()
            raise RuntimeError("node did not start: %r, log:\n%s"
                               % (text, self.log()))
        self.port = int(text.strip().rsplit(":", 1)[1])
        return self

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        """SIGTERM, then wait; returns the exit code."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("node did not stop within %ss" % STOP_TIMEOUT)
        finally:
            self.proc.stdout.close()
        self.proc = None
        # The exit watchdog is a last resort that no test may need: its line
        # means the teardown hung (test_cluster.ClusterNode checks it too).
        if "node.exit_forced" in self.log():
            raise AssertionError("the node needed the exit watchdog:\n%s"
                                 % self.log())
        return code

    def kill(self):
        """SIGKILL: the crash case."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc = None

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        """Returns (status, headers dict with lower-case names, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            hdrs = {"Content-Type": "application/json"}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            res = conn.getresponse()
            data = res.read()
            return (res.status,
                    {k.lower(): v for k, v in res.getheaders()}, data)
        finally:
            conn.close()

    def request_to(self, host, method, path, body=None, headers=None,
                   timeout=10.0, content_type="application/json"):
        """`request` to this node through `host` (e.g. "::1" for a node
        listening there); `content_type` None sends no Content-Type."""
        return http_call(host, self.port, method, path, body, headers,
                         timeout, content_type)

    def webhook(self, body, key=None, headers=None, timeout=10.0):
        hdrs = dict(headers or {})
        if key is not None:
            hdrs["Idempotency-Key"] = key
        return self.request("POST", "/v1/webhook", body, hdrs, timeout)


def http_call(host, port, method, path, body=None, headers=None,
              timeout=10.0, content_type="application/json", source=None):
    """One request on a fresh connection to host:port (from the local
    address `source`, e.g. "127.0.0.3", if given); returns (status, headers
    dict with lower-case names, body bytes). A dict or list body is sent as
    JSON; `content_type` None sends no Content-Type (the caller's `headers`
    win either way)."""
    conn = http.client.HTTPConnection(
        host, port, timeout=timeout,
        source_address=(source, 0) if source else None)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        hdrs = {} if content_type is None else {"Content-Type": content_type}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        res = conn.getresponse()
        data = res.read()
        return (res.status, {k.lower(): v for k, v in res.getheaders()}, data)
    finally:
        conn.close()


def free_port():
    """A TCP port free on 127.0.0.1 right now, below the ephemeral range
    (for a program that cannot bind port 0 and report it, such as nginx, or
    one bound again after a restart): oncegate_drill.cluster.free_ports."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                    "tools"))
    from oncegate_drill.cluster import free_ports
    return free_ports(1)[0]


class TempDir:
    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="oncegate-proc-")

    def cleanup(self):
        # ONCEGATE_KEEP_TMP=1 keeps it, to read a failed test's data dirs.
        if os.environ.get("ONCEGATE_KEEP_TMP") == "1":
            print("kept " + self.path, file=sys.stderr)
            return
        shutil.rmtree(self.path, ignore_errors=True)


def metric(node, name):
    """The value of the sample `name` (labels included, as in the text
    format: 'x_total{route="a"}') in the node's /metrics, or None."""
    status, _, body = node.request("GET", "/metrics")
    if status != 200:
        return None
    for line in body.decode().splitlines():
        head, _, value = line.rpartition(" ")
        if head == name:
            return float(value)
    return None


def wait_for(predicate, timeout, interval=0.01):
    """Polls `predicate` until it is true or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def start_threads(target, items, daemon=False):
    """Starts a thread running `target(item)` for each of `items`; returns
    them."""
    threads = [threading.Thread(target=target, args=(item,), daemon=daemon)
               for item in items]
    for t in threads:
        t.start()
    return threads


def join_threads(threads, timeout):
    """Joins each thread for up to `timeout` seconds; True when every one
    ended."""
    for t in threads:
        t.join(timeout)
    return not any(t.is_alive() for t in threads)


class UniqueKeyLoad:
    """Load on one node: `senders` threads, each posting keys of its own
    ("TAG-sSENDER-N", body {"k": key}) until `stop()`, or until the node
    goes away under it. `acked` is every key answered 200. With `kill_at`,
    the sender whose answer makes it the `kill_at`-th 200 SIGKILLs the node
    at once: a crash right behind an answer, while the commits around it
    are still in flight (a poll from another thread would land anywhere up
    to its interval later)."""

    KEYS_PER_SENDER = 100000

    def __init__(self, node, tag, senders, kill_at=None):
        self.node = node
        self.tag = tag
        self.acked = []
        self._kill_at = kill_at
        self._pid = node.proc.pid if node.proc is not None else None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = start_threads(self._send, range(senders))

    def _send(self, sender):
        for i in range(self.KEYS_PER_SENDER):
            if self._stop.is_set():
                return
            key = "%s-s%d-%d" % (self.tag, sender, i)
            try:
                status = self.node.webhook({"k": key}, key=key, timeout=5)[0]
            except OSError:
                return  # the node died under us
            if status == 200:
                with self._lock:
                    # Killed before the key counts: whoever waits for the
                    # count reaps the process only after this kill.
                    if len(self.acked) + 1 == self._kill_at:
                        os.kill(self._pid, signal.SIGKILL)
                    self.acked.append(key)

    def stop(self, timeout=15):
        """Stops the senders; True when each ended within `timeout` s."""
        self._stop.set()
        return join_threads(self._threads, timeout)


class TempDirCase:
    """Mixin for unittest cases: `self.tmp`, a TempDir of its own for every
    test, removed after it."""

    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)


class UpstreamNodeCase:
    """Mixin for unittest cases: a node in front of the counting test
    upstream (tools/test_upstream.py), fresh for every test. A subclass sets
    `config(url)` (the INI text) and may set `node_args`."""

    node_args = ()

    def config(self, url):
        return ""

    def node_kwargs(self):
        """Extra `Node` arguments (`bin`, `env`); called after `self.tmp`
        exists."""
        return {}

    def setUp(self):
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                        "..", "tools"))
        from test_upstream import TestUpstream
        # Below the ephemeral range and held (free_port): an upstream that
        # goes down (refuse, outage) and comes back finds its port free;
        # a port from bind(0) could be taken meanwhile by any process's
        # bind(0), which would then answer the node's retries.
        self.up = TestUpstream(port=free_port()).start()
        self.tmp = TempDir()
        try:
            self.ini = os.path.join(self.tmp.path, "node.ini")
            with open(self.ini, "w") as f:
                f.write(self.config(self.up.url))
            self.node = Node(self.tmp.path, "--config-file=" + self.ini,
                             *self.node_args, **self.node_kwargs()).start()
        except BaseException:
            # unittest runs no tearDown after a failed setUp: what was made
            # goes here (a node that did not start left its log in tmp).
            self.up.stop()
            self.tmp.cleanup()
            raise
        self.n = 0

    def tearDown(self):
        try:
            self.node.kill()
            self.up.stop()
        finally:
            self.tmp.cleanup()

    def key(self):
        """A key of its own for each call in a test."""
        self.n += 1
        return "%s-%d" % (self._testMethodName[-24:], self.n)


class ForwardingCase(UpstreamNodeCase):
    """An UpstreamNodeCase whose node forwards its default route to the
    test upstream too (`--upstream`), with requests by key and route."""

    @property
    def node_args(self):
        return ("--upstream=" + self.up.url,)

    def post(self, key, route="", body=None, timeout=10):
        """POSTs `body` (default {"order": key}) to the route ("": the
        default route) with `key` as its Idempotency-Key."""
        path = "/v1/webhook" + ("/" + route if route else "")
        return self.node.request("POST", path, body or {"order": key},
                                 {"Idempotency-Key": key}, timeout)

    def post_new_key(self, route, expected_status, *upstream_mode):
        """Sets the upstream to `upstream_mode` (TestUpstream.set_mode),
        posts a new key to `route` and asserts the answer's status; returns
        (key, headers, body)."""
        k = self.key()
        self.up.set_mode(*upstream_mode)
        status, headers, body = self.post(k, route)
        self.assertEqual(status, expected_status, body)
        return k, headers, body

    def record(self, key, route="default"):
        """(status, the record as JSON or None) of GET /v1/keys/KEY."""
        status, _, body = self.node.request(
            "GET", "/v1/keys/%s?route=%s" % (quote(key, safe=""), route))
        return status, (json.loads(body) if status == 200 else None)
