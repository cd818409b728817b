"""A node that cannot be knocked over: framing edge cases and descriptors.

Raw sockets on loopback check what a generic client library hides: a HEAD
answer carries no body (a pipelined answer after it parses), an HTTP/1.0
client asking for keep-alive is told it got it. Descriptor exhaustion is
provoked with RLIMIT_NOFILE (set before the node starts, or lowered on the
running node with prlimit): the listener must back off instead of spinning
on a failing accept(), count it, log a bounded amount, fit its connection
cap to the limit at start, and serve again once descriptors are free.
Every socket has a timeout, every wait is a bounded poll, and every process
and socket is closed in tearDown.
"""

import os
import re
import resource
import stat
import sys
import time
import unittest
from unittest import mock

import harness
from harness import Node, TempDir, wait_for
from rawhttp import Client, HOST

PROBLEM = "https://oncegate.dev/problems/"

# Bounds for a node out of descriptors with idle clients waiting: a core
# share over the measurement window, and the log written meanwhile. A node
# spinning on accept() writes megabytes per second and takes all the CPU
# it gets (on a loaded 2-core machine that was 20 %); a backing-off one
# stays near 1 %.
MAX_CPU_SHARE = 0.10
MAX_LOG_GROWTH = 100 * 1024
IDLE_CLIENTS = 100
NOFILE = 64


def request(method, path, version="HTTP/1.1", extra=()):
    lines = [("%s %s %s" % (method, path, version)).encode(),
             b"Host: 127.0.0.1"]
    lines.extend(extra)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far."""
    with open("/proc/%d/stat" % pid) as f:
        # The command name may contain spaces: fields follow the last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def nofile_soft_limit(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no 'Max open files' in /proc/%d/limits" % pid)


def metric_value(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


class ResilienceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.nodes = []
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        for n in self.nodes:
            try:
                n.stop()
            except RuntimeError:
                n.kill()
        self.tmp.cleanup()

    def start_node(self, *args, nofile=None):
        """A node; `nofile` = (soft, hard) RLIMIT_NOFILE it starts with."""
        node = Node(os.path.join(self.tmp.path, "n%d" % len(self.nodes)),
                    *args)
        self.nodes.append(node)
        if nofile is None:
            return node.start()
        # The harness starts BIN; a wrapper sets the limit and execs the
        # real binary in the same process (same pid).
        wrapper = os.path.join(self.tmp.path, "with-nofile-%d-%d" % nofile)
        with open(wrapper, "w") as f:
            f.write("#!%s\nimport os, resource, sys\n"
                    "resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d))\n"
                    "os.execv(%r, [%r] + sys.argv[1:])\n"
                    % (sys.executable, nofile[0], nofile[1],
                       os.path.abspath(harness.BIN),
                       os.path.abspath(harness.BIN)))
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        with mock.patch.object(harness, "BIN", wrapper):
            return node.start()

    def connect(self, node, timeout=5.0):
        c = Client(node.port, timeout)
        self.clients.append(c)
        return c

    def log_size(self, node):
        return os.path.getsize(node.log_path)

    def cpu_share(self, node, window=1.0):
        """Share of one core the node used over `window` seconds."""
        pid = node.proc.pid
        t0, c0 = time.monotonic(), cpu_seconds(pid)
        # A measurement window, not a wait for a condition.
        time.sleep(window)
        t1, c1 = time.monotonic(), cpu_seconds(pid)
        return (c1 - c0) / (t1 - t0)

    def open_idle_clients(self, node, n):
        """`n` connections that send nothing (the kernel queues those the
        node does not accept)."""
        return [self.connect(node, timeout=10.0) for _ in range(n)]

    def healthz_on_new_connection(self, node):
        try:
            return node.request("GET", "/healthz", timeout=2.0)[0] == 200
        except OSError:
            return False

    def metrics(self, node):
        status, _, body = node.request("GET", "/metrics")
        self.assertEqual(status, 200)
        return body.decode()

    # -- framing -----------------------------------------------------------

    def test_a_head_answer_has_no_body_and_the_next_pipelined_answer_parses(
            self):
        node = self.start_node()
        c = self.connect(node)
        c.send(request("HEAD", "/healthz") + request("GET", "/healthz"))
        head = c.read_response(head=True)
        self.assertEqual(head.status, 200, head)
        # The GET body's length is allowed (RFC 9110 9.3.2), the body not.
        get = c.read_response()
        self.assertEqual(get.status, 200, get)
        self.assertEqual(head.headers.get("content-length"),
                         str(len(get.body)))
        self.assertEqual(c.buf, b"")
        # The connection is still in step: one more request on it.
        c.send(request("HEAD", "/metrics") + request("GET", "/healthz"))
        self.assertEqual(c.read_response(head=True).status, 200)
        self.assertEqual(c.read_response().status, 200)
        self.assertEqual(c.buf, b"")

    def test_an_http_1_0_client_asking_for_keep_alive_keeps_its_connection(
            self):
        node = self.start_node()
        c = self.connect(node)
        for _ in range(3):
            c.send(request("GET", "/healthz", "HTTP/1.0",
                           [b"Connection: keep-alive"]))
            res = c.read_response()
            self.assertEqual(res.status, 200, res)
            self.assertEqual(res.headers.get("connection", "").lower(),
                             "keep-alive", res)

    def test_an_http_1_0_client_not_asking_for_keep_alive_is_closed_after_the_answer(
            self):
        node = self.start_node()
        c = self.connect(node)
        c.send(request("GET", "/healthz", "HTTP/1.0"))
        res = c.read_response()
        self.assertEqual(res.status, 200, res)
        self.assertNotEqual(res.headers.get("connection", "").lower(),
                            "keep-alive")
        self.assertTrue(c.wait_closed(5.0)[0])

    # -- descriptors -------------------------------------------------------

    def test_out_of_descriptors_the_listener_backs_off_counts_and_recovers(
            self):
        # Started with room for its cap, then the limit drops under it (an
        # operator's prlimit, or descriptors taken by something else): the
        # node runs out of descriptors with clients waiting in the backlog.
        node = self.start_node("--http.max-connections=1000",
                               "--http.idle-timeout=60s",
                               "--http.header-timeout=60s")
        pid = node.proc.pid
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        log_before = self.log_size(node)
        self.open_idle_clients(node, IDLE_CLIENTS)
        self.assertTrue(wait_for(lambda: open_fds(pid) >= NOFILE - 2, 10.0),
                        "the node did not take its descriptors: %d open"
                        % open_fds(pid))
        share = self.cpu_share(node)
        growth = self.log_size(node) - log_before
        self.assertLess(growth, MAX_LOG_GROWTH,
                        "%d bytes of log while out of descriptors" % growth)
        self.assertLess(share, MAX_CPU_SHARE,
                        "node at %.0f %% of a core while out of descriptors"
                        % (share * 100))
        # Free the descriptors: the listener tries again and serves.
        for c in self.clients:
            c.close()
        self.clients = []
        self.assertTrue(wait_for(lambda: self.healthz_on_new_connection(node),
                                 10.0), node.log())
        text = self.metrics(node)
        errors = metric_value(text, "oncegate_http_accept_errors_total")
        self.assertIsNotNone(errors, "no oncegate_http_accept_errors_total")
        self.assertGreater(errors, 0)
        log = node.log()
        failed = log.count("http.accept_failed")
        self.assertGreaterEqual(failed, 1, log)
        self.assertLessEqual(failed, 3, "accept failures not rate-limited")

    def test_a_soft_descriptor_limit_below_the_cap_is_raised_at_start(self):
        node = self.start_node("--http.max-connections=1000",
                               nofile=(NOFILE, 4096))
        self.assertGreaterEqual(nofile_soft_limit(node.proc.pid), 1000 + 64)
        self.assertNotIn("http.max_connections_lowered", node.log())

    def test_a_hard_descriptor_limit_below_the_cap_lowers_it_with_a_warning(
            self):
        node = self.start_node("--http.max-connections=1000",
                               "--http.idle-timeout=60s",
                               "--http.header-timeout=60s",
                               nofile=(NOFILE, NOFILE))
        pid = node.proc.pid
        log = node.log()
        m = re.search(r"http\.max_connections_lowered configured=1000 "
                      r"effective=(\d+) nofile_limit=%d" % NOFILE, log)
        self.assertIsNotNone(m, log)
        cap = int(m.group(1))
        self.assertLess(cap, NOFILE)
        log_before = self.log_size(node)
        clients = self.open_idle_clients(node, IDLE_CLIENTS)
        # Those over the lowered cap are told so and closed, instead of
        # waiting unaccepted while accept() fails.
        over = IDLE_CLIENTS - cap

        def refused():
            n = 0
            for c in clients:
                if c.buf.startswith(b"HTTP/1.1 503"):
                    n += 1
                    continue
                c.sock.setblocking(False)
                try:
                    c.buf += c.sock.recv(65536)
                except (BlockingIOError, ConnectionResetError):
                    pass
                finally:
                    c.sock.setblocking(True)
                if c.buf.startswith(b"HTTP/1.1 503"):
                    n += 1
            return n >= over

        self.assertTrue(wait_for(refused, 10.0),
                        "fewer than %d connections refused" % over)
        self.assertIn(b"connection limit reached",
                      next(c.buf for c in clients if c.buf))
        share = self.cpu_share(node)
        self.assertLess(share, MAX_CPU_SHARE,
                        "node at %.0f %% of a core" % (share * 100))
        self.assertLess(self.log_size(node) - log_before, MAX_LOG_GROWTH)
        for c in self.clients:
            c.close()
        self.clients = []
        self.assertTrue(wait_for(lambda: self.healthz_on_new_connection(node),
                                 10.0), node.log())
        self.assertEqual(
            metric_value(self.metrics(node),
                         "oncegate_http_accept_errors_total"), 0)
        self.assertLessEqual(open_fds(pid), NOFILE)


if __name__ == "__main__":
    unittest.main()
