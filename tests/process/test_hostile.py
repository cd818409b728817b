"""Hostile HTTP traffic against the real binary: limits, timeouts, caps.

Raw sockets on loopback send what a well-behaved client never would (bodies
over the limit, trickled headers and bodies, slowloris, garbage, pipelining,
abrupt disconnects) and check the transport answers as the contract says:
413 / 408 / 431 / 400 / 503 problems followed by a closed connection, and a
node that keeps serving everybody else. Every socket has a timeout, every
loop is bounded in count and in time, and every process and socket is
closed in tearDown.
"""

import datetime
import select
import socket
import time
import unittest

from harness import Node, TempDir, wait_for
from rawhttp import Client, HOST


def parse_time(text):
    """An answer's timestamp as seconds since the epoch."""
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


PROBLEM = "https://oncegate.dev/problems/"

BODY_LIMIT = 1024
HEADER_LIMIT = 2048
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
MAX_CONNECTIONS = 8

# The node most cases run against: small limits, short timeouts, a small
# connection cap (so a leaked connection slot shows up as a 503).
DEFAULTS = {
    "http.body-limit": str(BODY_LIMIT),
    "http.header-limit": str(HEADER_LIMIT),
    "http.header-timeout": "1s",
    "http.body-timeout": "1s",
    "http.idle-timeout": "5s",
    "http.max-connections": str(MAX_CONNECTIONS),
}


def padded_body(size):
    """A JSON object of exactly `size` bytes."""
    head, tail = b'{"pad":"', b'"}'
    body = head + b"a" * (size - len(head) - len(tail)) + tail
    assert len(body) == size
    return body


def webhook_head(key=None, length=None, chunked=False, extra=()):
    """Request line and header block of a POST /v1/webhook."""
    lines = [b"POST /v1/webhook HTTP/1.1", b"Host: 127.0.0.1",
             b"Content-Type: application/json"]
    if key is not None:
        lines.append(b"Idempotency-Key: " + key.encode())
    if length is not None:
        lines.append(b"Content-Length: %d" % length)
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
    lines.extend(extra)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def webhook_request(body, key=None, extra=()):
    return webhook_head(key, len(body), extra=extra) + body


def get_request(path="/healthz"):
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class HostileTest(unittest.TestCase):
    def setUp(self):
        self.tmps = []
        self.nodes = []
        self.socks = []
        self.node = None

    def tearDown(self):
        try:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass
            for n in self.nodes:
                n.kill()
        finally:
            for t in self.tmps:
                t.cleanup()

    # -- helpers -----------------------------------------------------------

    def start_node(self, **overrides):
        """Starts a node with DEFAULTS updated by `overrides` (use '_' for
        '-' and '__' for '.': http__max_connections=5)."""
        opts = dict(DEFAULTS)
        for name, value in overrides.items():
            opts[name.replace("__", ".").replace("_", "-")] = str(value)
        tmp = TempDir()
        self.tmps.append(tmp)
        node = Node(tmp.path, *["--%s=%s" % kv for kv in opts.items()])
        self.nodes.append(node)
        node.start()
        self.node = node
        return node

    def connect(self, timeout=5.0):
        c = Client(self.node.port, timeout)
        self.socks.append(c.sock)
        return c

    def raw_socket(self, timeout=5.0):
        s = socket.create_connection((HOST, self.node.port), timeout=timeout)
        self.socks.append(s)
        return s

    def assertProblem(self, res, status, name):
        self.assertEqual(res.status, status, res)
        self.assertEqual(res.headers.get("content-type"),
                         "application/problem+json", res)
        self.assertEqual(res.headers.get("cache-control"), "no-store", res)
        doc = res.json()
        self.assertEqual(doc["type"], PROBLEM + name, res)
        self.assertEqual(doc["status"], status, res)
        self.assertIn("title", doc)

    def assertClosesConnection(self, res):
        self.assertEqual(res.headers.get("connection", "").lower(), "close",
                         res)

    def assertClosed(self, client, timeout=2.0):
        closed, extra = client.wait_closed(timeout)
        self.assertTrue(closed, "connection still open after %.1fs"
                        % timeout)
        self.assertEqual(extra, b"", "bytes after the final response")

    def over_cap(self, status, body):
        """A transport 503 for the connection cap: the server has not yet
        noticed that connections the test just closed are gone (it learns
        that asynchronously); nothing was executed, a retry is safe."""
        return status == 503 and b"connection limit reached" in body

    def request_settled(self, method, path, body=None, headers=None):
        """A request, retried (bounded) while it only hits the connection
        cap because of connections closed a moment ago."""
        result = []

        def attempt():
            result[:] = [self.node.request(method, path, body, headers,
                                           timeout=5)]
            return not self.over_cap(result[0][0], result[0][2])

        wait_for(attempt, 5.0, 0.02)
        return result[0]

    def assertAlive(self):
        """The process runs and still answers a normal request."""
        self.assertIsNone(self.node.proc.poll(), self.node.log())
        status, _, body = self.request_settled("GET", "/healthz")
        self.assertEqual(status, 200, body)

    def assertKeyFree(self, key):
        """Nothing was stored under `key`: a small request executes."""
        status, _, body = self.request_settled(
            "POST", "/v1/webhook", {"n": 1}, {"Idempotency-Key": key})
        self.assertEqual(status, 200, body)

    def slots_free(self, n):
        """True when `n` keep-alive connections at once are all served (no
        connection slot leaked by what happened before)."""
        clients = []
        try:
            for _ in range(n):
                clients.append(Client(self.node.port, 5.0))
            for c in clients:
                c.send(get_request())
            for c in clients:
                if c.read_response(5.0).status != 200:
                    return False
            return True
        except (AssertionError, OSError):
            return False
        finally:
            for c in clients:
                c.close()

    def assertSlotsFree(self, n=MAX_CONNECTIONS):
        self.assertTrue(wait_for(lambda: self.slots_free(n), 5.0, 0.1),
                        "fewer than %d connection slots free" % n)

    # -- body limit --------------------------------------------------------

    def test_a_content_length_over_the_limit_is_413_closes_and_stores_nothing(
            self):
        self.start_node()
        c = self.connect()
        body = padded_body(2 * BODY_LIMIT)
        c.send(webhook_request(body, key="too-big"))
        res = c.read_response()
        self.assertProblem(res, 413, "body-too-large")
        self.assertClosesConnection(res)
        self.assertClosed(c)
        # The announced length alone is enough: 413 at once, without the
        # body and long before the body timeout.
        c = self.connect()
        start = time.monotonic()
        c.send(webhook_head(key="too-big", length=1000000))
        res = c.read_response(timeout=BODY_TIMEOUT / 2)
        self.assertLess(time.monotonic() - start, BODY_TIMEOUT / 2)
        self.assertProblem(res, 413, "body-too-large")
        self.assertClosed(c)
        self.assertKeyFree("too-big")
        self.assertSlotsFree()

    def test_a_chunked_body_growing_past_the_limit_is_413_without_reading_the_rest(
            self):
        self.start_node()
        c = self.connect()
        start = time.monotonic()
        c.send(webhook_head(key="chunky", chunked=True))
        # 64-byte chunks: the limit is crossed by a chunk in the middle of
        # a body that never ends (no last chunk is ever sent).
        chunk = b"40\r\n" + b"a" * 64 + b"\r\n"
        for _ in range(BODY_LIMIT // 64 + 1):
            c.send(chunk)
        res = c.read_response(timeout=BODY_TIMEOUT / 2)
        self.assertLess(time.monotonic() - start, BODY_TIMEOUT / 2,
                        "413 must not wait for the rest of the body")
        self.assertProblem(res, 413, "body-too-large")
        self.assertClosesConnection(res)
        self.assertClosed(c)
        # The server stopped reading: more body bytes are refused by the
        # peer (reset / broken pipe) long before 64 MiB went through.
        refused = False
        piece = b"1000\r\n" + b"a" * 4096 + b"\r\n"
        deadline = time.monotonic() + 5
        for _ in range(16384):
            if time.monotonic() > deadline:
                break
            try:
                c.sock.settimeout(1.0)
                c.sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                refused = True
                break
            except socket.timeout:
                break
        self.assertTrue(refused, "the server went on accepting body bytes")
        # A single chunk announced larger than the limit: 413 from its size
        # line alone.
        c = self.connect()
        c.send(webhook_head(key="chunky", chunked=True)
               + b"%x\r\n" % (BODY_LIMIT + 1) + b"a" * 16)
        res = c.read_response(timeout=BODY_TIMEOUT / 2)
        self.assertProblem(res, 413, "body-too-large")
        self.assertClosed(c)
        self.assertKeyFree("chunky")
        self.assertSlotsFree()

    def stream_until_answered(self, client, chunks, send_timeout,
                              deadline=None):
        """Sends up to `chunks` times 64 KiB of body bytes, stopping as soon
        as the server answers (or closes), refuses more bytes, lets one
        send block for `send_timeout` s, or `deadline` passes. Returns
        (the bytes sent, whether the server refused more)."""
        sent = 0
        for _ in range(chunks):
            if deadline is not None and time.monotonic() > deadline:
                break
            readable, _, _ = select.select([client.sock], [], [], 0)
            if readable:
                break
            try:
                client.sock.settimeout(send_timeout)
                client.sock.sendall(b"a" * 65536)
                sent += 65536
            except (BrokenPipeError, ConnectionResetError):
                return sent, True
            except socket.timeout:
                break
        return sent, False

    def test_chunk_extensions_or_trailers_past_the_limit_are_refused_without_reading_them(
            self):
        # The chunked body on the wire is what the limit bounds: a chunk
        # extension or a trailer section that never ends must not be read
        # (and buffered) without bound. Contract: body over the limit, also
        # when chunked -> 413, connection closed, stop reading.
        self.start_node()
        openers = [
            ("extension", b"1;ext=", (413,)),
            ("trailer", b"2\r\n{}\r\n0\r\nX-Trailer: ", (413, 431)),
        ]
        for name, opener, statuses in openers:
            with self.subTest(part=name):
                c = self.connect()
                start = time.monotonic()
                c.send(webhook_head(key="ext-" + name, chunked=True) + opener)
                _, refused = self.stream_until_answered(c, 64, 2.0)  # 4 MiB
                try:
                    res = c.read_response(timeout=BODY_TIMEOUT + 1.5)
                except ConnectionResetError:
                    self.fail("reset without a response (refused=%s)"
                              % refused)
                elapsed = time.monotonic() - start
                self.assertIn(res.status, statuses, res)
                self.assertProblem(res, res.status, res.json()["type"][
                    len(PROBLEM):])
                self.assertLess(elapsed, BODY_TIMEOUT,
                                "answered only by the body timeout")
                self.assertClosed(c)
                c.close()
                self.assertKeyFree("ext-" + name)
        self.assertSlotsFree()

    def test_a_client_streaming_without_pause_is_cut_off_within_the_body_timeout(
            self):
        # The body timeout must hold also while the socket never runs dry
        # (every read completes at once): 408 (or 413) and close, and the
        # connection must not stay open once the client stops sending.
        self.start_node(http__max_connections=2)
        c = self.connect()
        start = time.monotonic()
        c.send(webhook_head(key="stream", chunked=True) + b"1;ext=")
        deadline = start + BODY_TIMEOUT + 1.5
        sent, refused = self.stream_until_answered(  # at most 256 MiB
            c, 4096, 1.0, deadline)
        answered = None
        try:
            answered = c.read_response(
                timeout=max(0.05, deadline - time.monotonic()))
        except (AssertionError, ConnectionResetError):
            pass
        elapsed = time.monotonic() - start
        closed, _ = c.wait_closed(2.0)
        self.assertIsNotNone(
            answered, "no answer within body timeout + 1.5 s while the "
            "client streamed %d MiB (refused=%s)" % (sent >> 20, refused))
        self.assertIn(answered.status, (408, 413), answered)
        self.assertLessEqual(elapsed, BODY_TIMEOUT + 1.5)
        self.assertTrue(closed, "connection left open after the client "
                        "stopped sending")
        c.close()
        self.assertSlotsFree(2)

    def test_a_body_exactly_at_the_limit_is_accepted_and_one_byte_more_is_not(
            self):
        self.start_node()
        c = self.connect()
        c.send(webhook_request(padded_body(BODY_LIMIT), key="at-limit"))
        res = c.read_response()
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.json()["idempotency_key"], "at-limit")
        # Chunked, exactly at the limit in total, on the same connection.
        body = padded_body(BODY_LIMIT)
        half = BODY_LIMIT // 2
        c.send(webhook_head(key="at-limit-chunked", chunked=True)
               + b"%x\r\n" % half + body[:half] + b"\r\n"
               + b"%x\r\n" % (BODY_LIMIT - half) + body[half:] + b"\r\n"
               + b"0\r\n\r\n")
        res = c.read_response()
        self.assertEqual(res.status, 200, res)
        c.send(webhook_request(padded_body(BODY_LIMIT + 1), key="over"))
        self.assertProblem(c.read_response(), 413, "body-too-large")
        self.assertClosed(c)
        self.assertKeyFree("over")

    # -- timeouts ----------------------------------------------------------

    def trickle_until_answered(self, client, data, interval, deadline):
        """Sends `data` one byte per `interval` until the peer answers (or
        closes, or the deadline passes). Returns the bytes sent."""
        sent = 0
        for _ in range(len(data)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            readable, _, _ = select.select([client.sock], [], [],
                                           min(interval, remaining))
            if readable:
                break
            try:
                client.sock.send(data[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
        return sent

    def test_headers_trickled_slower_than_the_header_timeout_get_408_and_close(
            self):
        self.start_node()
        c = self.connect()
        c.send(b"POST /v1/webhook HTTP/1.1\r\n")
        start = time.monotonic()
        deadline = start + HEADER_TIMEOUT + 1.5
        # A byte every 0.2 s: each read makes progress, the header block
        # as a whole does not arrive in time.
        sent = self.trickle_until_answered(
            c, b"X-Slow: " + b"a" * 200, 0.2, deadline)
        res = c.read_response(timeout=max(0.05, deadline - time.monotonic()))
        elapsed = time.monotonic() - start
        self.assertProblem(res, 408, "request-timeout")
        self.assertClosesConnection(res)
        self.assertLessEqual(elapsed, HEADER_TIMEOUT + 1.5)
        self.assertGreaterEqual(elapsed, HEADER_TIMEOUT - 0.2,
                                "408 before the header timeout")
        self.assertGreater(sent, 2)
        self.assertClosed(c)
        self.assertSlotsFree()

    def test_a_body_trickled_slower_than_the_body_timeout_gets_408_closes_and_stores_nothing(
            self):
        self.start_node()
        c = self.connect()
        body = padded_body(200)
        c.send(webhook_head(key="slow-body", length=len(body)))
        start = time.monotonic()
        deadline = start + BODY_TIMEOUT + 1.5
        sent = self.trickle_until_answered(c, body, 0.2, deadline)
        res = c.read_response(timeout=max(0.05, deadline - time.monotonic()))
        elapsed = time.monotonic() - start
        self.assertProblem(res, 408, "request-timeout")
        self.assertClosesConnection(res)
        self.assertLessEqual(elapsed, BODY_TIMEOUT + 1.5)
        self.assertGreaterEqual(elapsed, BODY_TIMEOUT - 0.2)
        self.assertLess(sent, len(body))
        self.assertClosed(c)
        self.assertKeyFree("slow-body")
        self.assertSlotsFree()

    def test_an_idle_keep_alive_connection_is_closed_silently_after_the_idle_timeout(
            self):
        self.start_node(http__idle_timeout="1s")
        used = self.connect()
        used.send(webhook_request(b'{"n":1}', key="idle"))
        self.assertEqual(used.read_response().status, 200)
        used_start = time.monotonic()
        # A connection that never sends a byte is idle as well.
        silent = self.connect()
        silent_start = time.monotonic()
        closed, extra = used.wait_closed(3.0)
        used_elapsed = time.monotonic() - used_start
        self.assertTrue(closed, "idle keep-alive connection still open")
        self.assertEqual(extra, b"", "an idle close sends nothing")
        self.assertGreaterEqual(used_elapsed, 0.8, "closed before the idle "
                                "timeout")
        closed, extra = silent.wait_closed(
            max(0.05, silent_start + 3.0 - time.monotonic()))
        self.assertTrue(closed, "silent connection still open")
        self.assertEqual(extra, b"")
        self.assertAlive()

    # -- header limit ------------------------------------------------------

    def test_a_header_block_over_the_header_limit_is_431_and_closes(self):
        self.start_node()
        # One big field.
        c = self.connect()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
               + b"a" * (2 * HEADER_LIMIT) + b"\r\n\r\n")
        res = c.read_response()
        self.assertProblem(res, 431, "headers-too-large")
        self.assertClosesConnection(res)
        self.assertClosed(c)
        # Many small fields adding up to more than the limit.
        fields = b"".join(b"X-F%04d: v\r\n" % i
                          for i in range(HEADER_LIMIT // 8))
        self.assertGreater(len(fields), HEADER_LIMIT)
        c = self.connect()
        c.send(b"POST /v1/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields
               + b"Content-Type: application/json\r\nIdempotency-Key: many"
               b"\r\nContent-Length: 7\r\n\r\n{\"n\":1}")
        res = c.read_response()
        self.assertProblem(res, 431, "headers-too-large")
        self.assertClosed(c)
        self.assertKeyFree("many")
        self.assertSlotsFree()

    def test_a_request_with_a_thousand_small_headers_under_the_limit_is_served(
            self):
        self.start_node(http__header_limit=16384)
        fields = [b"X-H%04d: v" % i for i in range(1000)]
        c = self.connect()
        head = webhook_head(key="many-headers", length=7, extra=fields)
        self.assertLess(len(head), 16384)
        self.assertGreater(len(head), 12000)
        c.send(head + b'{"n":1}')
        res = c.read_response()
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.json()["idempotency_key"], "many-headers")
        # The connection stays usable.
        c.send(get_request())
        self.assertEqual(c.read_response().status, 200)

    # -- slowloris and the connection cap ----------------------------------

    def test_slowloris_connections_do_not_starve_a_normal_request_and_are_closed_by_the_header_timeout(
            self):
        timeout = 2.0
        self.start_node(http__max_connections=1000,
                        http__header_timeout="2s")
        count = 200
        line = (b"POST /v1/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                + b"a" * 200)
        socks, first = [], []
        for _ in range(count):
            s = self.raw_socket()
            s.sendall(line[:1])
            first.append(time.monotonic())
            s.setblocking(False)
            socks.append(s)
        pos = [1] * count
        closed_at = [None] * count
        received = [b""] * count
        index = {s.fileno(): i for i, s in enumerate(socks)}
        normal = None
        open_during_normal = None
        hard_deadline = first[-1] + timeout + 2.0
        next_send = time.monotonic() + 0.3
        for _ in range(100000):
            now = time.monotonic()
            live = [s for i, s in enumerate(socks) if closed_at[i] is None]
            if not live or now > hard_deadline:
                break
            readable, _, _ = select.select(
                live, [], [], max(0.0, min(0.05, hard_deadline - now)))
            for s in readable:
                i = index[s.fileno()]
                for _ in range(16):
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        break
                    except OSError:
                        closed_at[i] = time.monotonic()
                        break
                    if not data:
                        closed_at[i] = time.monotonic()
                        break
                    received[i] += data
            # While all of them trickle: a normal POST on a fresh
            # connection is answered promptly.
            if normal is None and time.monotonic() >= first[-1] + 0.3:
                open_during_normal = sum(1 for t in closed_at if t is None)
                t0 = time.monotonic()
                status, _, body = self.node.webhook({"n": 1}, key="normal",
                                                    timeout=5)
                normal = (status, time.monotonic() - t0, body)
            if time.monotonic() >= next_send:
                next_send += 0.3
                for i, s in enumerate(socks):
                    if closed_at[i] is not None or received[i]:
                        continue
                    try:
                        s.send(line[pos[i]:pos[i] + 1])
                        pos[i] += 1
                    except BlockingIOError:
                        pass
                    except OSError:
                        closed_at[i] = time.monotonic()
        self.assertIsNotNone(normal, "the normal request was never sent")
        self.assertEqual(normal[0], 200, normal)
        self.assertLess(normal[1], 1.0, "normal request took %.3fs"
                        % normal[1])
        self.assertEqual(open_during_normal, count,
                         "slow connections closed before the header timeout")
        still_open = [i for i, t in enumerate(closed_at) if t is None]
        self.assertEqual(still_open, [], "%d slow connections still open"
                         % len(still_open))
        late = [round(closed_at[i] - first[i], 2) for i in range(count)
                if closed_at[i] - first[i] > timeout + 2.0]
        self.assertEqual(late, [], "closed later than timeout + 2 s")
        early = [round(closed_at[i] - first[i], 2) for i in range(count)
                 if closed_at[i] - first[i] < timeout - 0.2]
        self.assertEqual(early, [], "closed before the header timeout")
        not_408 = [received[i][:40] for i in range(count)
                   if not received[i].startswith(b"HTTP/1.1 408 ")]
        self.assertEqual(not_408, [], "slow connections without a 408")
        self.assertAlive()

    def test_connections_over_the_cap_get_503_while_existing_ones_keep_working(
            self):
        cap = 5
        self.start_node(http__max_connections=cap)
        clients = []
        for i in range(cap):
            c = self.connect()
            c.send(webhook_request(b'{"n":1}', key="cap-%d" % i))
            self.assertEqual(c.read_response().status, 200)
            clients.append(c)
        # Over the cap: 503 problem with Retry-After, then closed; also
        # for a client that sent its request right away.
        for attempt in range(3):
            extra = self.connect()
            if attempt == 2:
                extra.send(webhook_request(b'{"n":1}', key="cap-extra"))
            res = extra.read_response()
            self.assertProblem(res, 503, "unavailable")
            self.assertEqual(res.headers.get("retry-after"), "1", res)
            self.assertClosesConnection(res)
            self.assertClosed(extra)
            extra.close()
        # The existing connections still get answers on the same sockets.
        for i, c in enumerate(clients):
            c.send(webhook_request(b'{"n":1}', key="cap-%d" % i))
            res = c.read_response()
            self.assertEqual(res.status, 409, res)
            c.send(webhook_request(b'{"n":2}', key="cap2-%d" % i))
            self.assertEqual(c.read_response().status, 200)
        for c in clients:
            c.close()
        # Once they are gone, new connections are served again.
        self.assertTrue(wait_for(
            lambda: self.node.request("GET", "/healthz", timeout=5)[0] == 200,
            5.0, 0.05))
        self.assertSlotsFree(cap)
        self.assertKeyFree("cap-extra")

    # -- request framing ---------------------------------------------------

    def test_pipelined_requests_in_one_write_are_answered_in_order(self):
        self.start_node()
        c = self.connect()
        body = b'{"n":1}'
        c.send(webhook_request(body, key="pipe")
               + webhook_request(body, key="pipe")
               + get_request("/healthz")
               + webhook_request(body, key="pipe-2"))
        first = c.read_response()
        self.assertEqual(first.status, 200, first)
        self.assertEqual(first.json()["idempotency_key"], "pipe")
        second = c.read_response()
        read_at = time.time()
        self.assertEqual(second.status, 409, second)
        self.assertEqual(second.json()["type"], PROBLEM + "duplicate")
        # The duplicate is of the first request: its record was stamped when
        # the store decided it, on the store's clock, which never runs
        # backwards. "pipe-2" was received 0-few ms after "pipe" and may
        # reach the store first (another key actor), moving that clock past
        # "pipe"'s receive time; so the stamp is at or after the first's
        # received_at, and before its answer came back (same host clock).
        received = parse_time(first.json()["received_at"])
        stamped = parse_time(second.json()["first_seen"])
        self.assertGreaterEqual(stamped, received)
        self.assertLessEqual(stamped, read_at + 0.05)
        self.assertEqual(c.read_response().status, 200)
        fourth = c.read_response()
        self.assertEqual(fourth.status, 200, fourth)
        self.assertEqual(fourth.json()["idempotency_key"], "pipe-2")
        # Nothing more, and the connection is still usable.
        self.assertEqual(c.buf, b"")
        c.send(webhook_request(body, key="pipe-2"))
        self.assertEqual(c.read_response().status, 409)

    def test_a_malformed_request_line_or_garbage_is_400_and_closes(self):
        self.start_node()
        tls_hello = (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"
                     + bytes(range(32)) + b"\x00\x00\x02\x13\x01\x01\x00"
                     + b"\r\n\r\n")
        cases = [
            b"GARBAGE\r\n\r\n",
            b"\x00\xff\xfe\xfd garbage \x01\x02\r\n\r\n",
            tls_hello,
            b"GET /healthz\r\n\r\n",
            b"GET /healthz HTTP/9.9\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
            webhook_head(key="bad-cl", extra=[b"Content-Length: abc"])
            + b"{}",
            webhook_head(key="bad-cl", length=2,
                         extra=[b"Content-Length: 3"]) + b"{}",
            webhook_head(key="bad-cl", length=2, chunked=True)
            + b"2\r\n{}\r\n0\r\n\r\n",
            webhook_head(key="bad-cl", chunked=True) + b"zz\r\n{}\r\n0\r\n\r\n",
        ]
        for raw in cases:
            with self.subTest(raw=raw[:60]):
                c = self.connect()
                c.send(raw)
                res = c.read_response()
                self.assertProblem(res, 400, "bad-request")
                self.assertClosesConnection(res)
                self.assertClosed(c)
                c.close()
        # The node keeps serving others.
        self.assertKeyFree("bad-cl")
        self.assertAlive()
        self.assertSlotsFree()

    def test_expect_100_continue_gets_100_before_the_body_and_then_200(self):
        self.start_node()
        body = b'{"n":1}'
        c = self.connect()
        c.send(webhook_head(key="expect", length=len(body),
                            extra=[b"Expect: 100-continue"]))
        interim = c.read_response(timeout=2.0)
        self.assertEqual(interim.status, 100, interim)
        self.assertEqual(c.buf, b"", "final response before the body")
        c.send(body)
        res = c.read_response()
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.json()["idempotency_key"], "expect")
        # Over the limit: 413 straight away, no 100 Continue first.
        c = self.connect()
        c.send(webhook_head(key="expect-big", length=BODY_LIMIT + 1,
                            extra=[b"Expect: 100-continue"]))
        res = c.read_response(timeout=2.0)
        self.assertProblem(res, 413, "body-too-large")
        self.assertClosed(c)
        self.assertKeyFree("expect-big")

    # -- abrupt clients ----------------------------------------------------

    def test_abrupt_disconnects_mid_body_and_mid_response_do_not_disturb_the_node(
            self):
        self.start_node()
        body = padded_body(500)
        for i in range(10):
            # Mid-headers, mid-body (reset and orderly close), and right
            # after a complete request, before its response is read.
            c = self.connect()
            c.send(webhook_head(key="mid-body-%d" % i)[:40])
            c.reset()
            c = self.connect()
            c.send(webhook_head(key="mid-body-%d" % i, length=len(body))
                   + body[:100])
            if i % 2:
                c.reset()
            else:
                c.close()
            c = self.connect()
            c.send(webhook_request(b'{"n":1}', key="mid-response-%d" % i))
            c.reset()
        # Many pipelined requests, reset while the answers are written.
        c = self.connect()
        c.send(get_request() * 50)
        c.reset()
        self.assertAlive()
        status, _, res = self.request_settled(
            "POST", "/v1/webhook", {"n": 2}, {"Idempotency-Key": "after"})
        self.assertEqual(status, 200, res)
        for i in range(10):
            self.assertKeyFree("mid-body-%d" % i)
        # No connection slot leaked.
        self.assertSlotsFree()
        self.assertAlive()


if __name__ == "__main__":
    unittest.main()
