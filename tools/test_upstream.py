#!/usr/bin/env python3
"""A counting test upstream for oncegate: the "order service" in tests,
drills and the README example.

It counts executions per `Idempotency-Key` (an execution is a complete
request received) and can be told to answer normally, slowly, with 500, or
to drop the connection after receiving the request; `refuse()` closes its
listening socket so connections are refused, `outage()` also closes every
open connection (a crashed order service; SIGUSR1 to the script does it,
SIGUSR2 listens again on the same port). It can also misbehave the way
real HTTP servers do, to test the client side of oncegate.

    python3 tools/test_upstream.py --port 9000      # serve until Ctrl-C
    curl -s localhost:9000/_counts                   # {"total":..,"keys":{..}}
    curl -s -X POST localhost:9000/_mode -d '{"mode":"slow","delay":5}'
    curl -s -X POST localhost:9000/_mode -d '{"mode":"early-hints"}'

Modes: normal, slow (answer after `delay` seconds, at most 60), error (500),
drop (close without answering), and the misbehaving ones:

- early-hints: `100 Continue` and `103 Early Hints` before the answer;
  `interim` (a list of 1xx statuses, e.g. [103, 103]) overrides that list,
  and applies to every mode that answers;
- close: the answer carries `Connection: close` and the connection closes;
- bogus-status: the answer's status line says `status` (default 600; 99 is
  sent as `099`), which is no HTTP status;
- blackhole: reads the request, never counts nor answers it, and closes the
  connection after `delay` (a request lost before it was executed);
- extra: after the answer, an unsolicited second response on the kept-alive
  connection, in the same write (`split` false) or in a later one (`split`
  true); `extras()` counts the ones written.

`GET /by-key/KEY` answers 200 with the order if KEY executed here, else 404
(500 in mode error; in any mode `status` when it is 400..599): what a
reconcile URL asks.

`counts()` and `/_counts` also report `connections`, the connections
accepted (a client that pools connections opens fewer than it sends).

TLS (off unless asked for): with a certificate and key it serves https
(the handshake in each connection's own thread), and with a client CA it
requires a client certificate signed by it; `counts()` then also reports
`handshakes` (completed) and `handshake_failures`.

    python3 tools/test_upstream.py --port 9443 --tls-cert server.pem \
        --tls-key server.key [--tls-client-ca clients-ca.pem]
"""

import argparse
import json
import signal
import socket
import ssl
import sys
import threading
from urllib.parse import unquote
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_DELAY = 60.0
# A TLS client that stalls in its handshake holds only its own thread, and
# only this long.
HANDSHAKE_TIMEOUT = 10.0
MODES = ("normal", "slow", "error", "drop", "early-hints", "close",
         "bogus-status", "extra", "blackhole")
DEFAULT_INTERIM = {"early-hints": [100, 103]}
INTERIM_REASONS = {100: "Continue", 101: "Switching Protocols",
                   102: "Processing", 103: "Early Hints"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        up = self.server.upstream
        up.connected(self.request, self.server)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                self.request.do_handshake()
            except OSError as e:  # ssl.SSLError included: quiet, see below
                up.handshake_failed(e)
                raise
            self.request.settimeout(None)
            up.handshake_done()
        super().setup()

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.upstream.disconnected(self.request)

    def _reply(self, status, doc, close=False):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")  # sets close_connection
        self.end_headers()
        self.wfile.write(body)

    def _interim(self, statuses):
        # Each one on its own, as a real server flushes them as it goes.
        for status in statuses:
            self.wfile.write(b"HTTP/1.1 %03d %s\r\n" % (
                status, INTERIM_REASONS.get(status, "Interim").encode()))
            if status == 103:
                self.wfile.write(
                    b"Link: </style.css>; rel=preload; as=style\r\n")
            self.wfile.write(b"\r\n")
            self.wfile.flush()

    def do_GET(self):
        up = self.server.upstream
        if self.path == "/_counts":
            return self._reply(200, up.counts())
        if self.path.startswith("/by-key/"):
            # Reconciliation: 200 with the order if this key executed here.
            key = unquote(self.path[len("/by-key/"):])
            status = up.options["status"]
            if 400 <= status <= 599:
                return self._reply(status, {"error": "told to fail"})
            if up.mode == "error":
                return self._reply(500, {"error": "upstream failure"})
            if up.executions(key) > 0:
                return self._reply(200, {"order": "accepted", "key": key})
            return self._reply(404, {"error": "no such order", "key": key})
        self._reply(404, {"error": "not found"})

    def do_POST(self):
        up = self.server.upstream
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path == "/_mode":
            doc = json.loads(body or b"{}")
            try:
                up.set_mode(doc.get("mode", "normal"), doc.get("delay", 0),
                            doc.get("interim"), doc.get("status", 600),
                            doc.get("split", False))
            except (TypeError, ValueError) as e:
                return self._reply(400, {"error": str(e)})
            return self._reply(200, {"mode": up.mode})
        key = self.headers.get("Idempotency-Key", "")
        mode, delay, opts = up.mode, up.delay, dict(up.options)
        if mode == "blackhole":
            # Lost before it was executed: never counted, never answered.
            up.wait(delay)
            self.close_connection = True
            return
        n = up.record(key, body, self.headers.get("Oncegate-Attempt"),
                      self.headers.get("Content-Type"))
        if mode == "slow":
            up.wait(delay)
        if mode == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self._interim(opts["interim"])
        if mode == "error":
            return self._reply(500, {"error": "upstream failure", "key": key})
        doc = {"order": "accepted", "key": key, "execution": n}
        if up.pad > 0:
            doc["pad"] = "x" * up.pad
        if mode == "bogus-status":
            return self._raw(opts["status"], doc)
        if mode == "extra":
            return self._with_extra(doc, opts["split"])
        self._reply(200, doc, close=mode == "close")

    def _raw(self, status, doc):
        # send_response would write 99 as "99", which no parser reads.
        body = json.dumps(doc).encode()
        self.wfile.write(self._response_bytes(status, body))

    @staticmethod
    def _response_bytes(status, body):
        return (b"HTTP/1.1 %03d Whatever\r\nContent-Type: application/json"
                b"\r\nContent-Length: %d\r\n\r\n" % (status, len(body))
                + body)

    def _with_extra(self, doc, split):
        body = json.dumps(doc).encode()
        answer = self._response_bytes(200, body)
        stale = json.dumps({"order": "unsolicited", "key": "stale"}).encode()
        extra = self._response_bytes(200, stale)
        if split:
            self.wfile.write(answer)
            self.wfile.flush()
            self.wfile.write(extra)
        else:
            self.wfile.write(answer + extra)
        self.wfile.flush()
        self.server.upstream.extra_sent()


class _Server(ThreadingHTTPServer):
    # Many senders at once (drills, 100 concurrent requests in tests): the
    # default backlog of 5 left connections in SYN retransmission, which
    # delivered requests seconds after oncegate had given up on them.
    request_queue_size = 1024

    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that timed out or was killed mid-answer is part of the
        # game here (timeouts, crash tests): not worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _TLSServer(_Server):
    """Accepts plain TCP and leaves the handshake to the connection's
    thread (`_Handler.setup`): a handshake in `accept` would make one slow
    client stall everyone."""

    def __init__(self, address, handler, context):
        self.tls_context = context
        super().__init__(address, handler)

    def get_request(self):
        sock, address = self.socket.accept()
        return (self.tls_context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False), address)


class TestUpstream:
    """Threaded upstream on 127.0.0.1; `port` 0 picks a free one."""

    def __init__(self, host="127.0.0.1", port=0, pad=0, tls_cert=None,
                 tls_key=None, tls_client_ca=None):
        self.host = host
        self.port = port
        # https with this certificate and key; with `tls_client_ca`, a
        # client certificate signed by it is required.
        self.tls_context = None
        if tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert, tls_key)
            if tls_client_ca:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(tls_client_ca)
            self.tls_context = ctx
        self._handshakes = 0
        self._handshake_failures = []
        # Bytes of filler in every answer (large answers for memory tests).
        self.pad = int(pad)
        self.mode = "normal"
        self.delay = 0.0
        self.options = {"interim": [], "status": 600, "split": False}
        self._lock = threading.Lock()
        self._counts = {}
        self._attempts = {}
        # With `keep_bodies`: every request's body (and Content-Type) by
        # key, in arrival order (tests of what reaches the upstream).
        self.keep_bodies = False
        self._bodies = {}
        self._total = 0
        self._connections = 0
        self._extras = 0
        self._release = threading.Event()
        self._open = set()  # the sockets of the connections being served
        self._server = None
        self._stopping = None  # the accept loop an outage is ending
        self._thread = None

    def start(self):
        if self.tls_context is not None:
            self._server = _TLSServer((self.host, self.port), _Handler,
                                      self.tls_context)
        else:
            self._server = _Server((self.host, self.port), _Handler)
        self._server.upstream = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def refuse(self):
        """Close the listening socket: new connections are refused."""
        self.stop()

    def outage(self):
        """Stop as a crashed upstream would: the listening socket stops
        listening at once and every open connection is shut down (a request
        being read or answered is cut off). The accept loop ends in the
        background: `server_close` waits for the connection threads, which
        must not hold up the outage (or a signal handler calling this)."""
        # One step with `connected`: a connection either is in the list
        # taken here or sees the server gone and shuts itself down.
        with self._lock:
            server, self._server = self._server, None
            conns = list(self._open)
        if server is None:
            return
        self._release.set()
        try:
            server.socket.shutdown(socket.SHUT_RDWR)  # no longer listening
        except OSError:
            pass
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def finish():
            server.shutdown()
            server.server_close()
        self._stopping = threading.Thread(target=finish, daemon=True)
        self._stopping.start()

    def resume(self):
        """Listen again on the same port (serving already: nothing)."""
        if self._server is not None:
            return self
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            # The old accept loop must have let go of the port (bounded:
            # the loop polls every 0.5 s; its connections are shut down).
            stopping.join(10)
        self._release.clear()
        return self.start()

    @property
    def url(self):
        scheme = "https" if self.tls_context is not None else "http"
        return "%s://%s:%d/orders" % (scheme, self.host, self.port)

    def set_mode(self, mode, delay=0.0, interim=None, status=600,
                 split=False):
        """`interim`, `status` and `split`: see the module's doc."""
        if mode not in MODES:
            raise ValueError("unknown mode " + mode)
        if interim is None:
            interim = DEFAULT_INTERIM.get(mode, [])
        interim = [int(s) for s in interim]
        if any(s < 100 or s > 199 for s in interim):
            raise ValueError("interim statuses are 100..199")
        status = int(status)
        if status < 0 or status > 999:
            raise ValueError("status is three digits")
        # One assignment: a request in progress sees old or new options.
        self.options = {"interim": interim, "status": status,
                        "split": bool(split)}
        self.mode = mode
        self.delay = min(float(delay or 0), MAX_DELAY)
        if mode not in ("slow", "blackhole"):
            self._release.set()
        else:
            self._release.clear()

    def wait(self, delay):
        """Holds a slow request; `stop` or a mode change ends it early."""
        self._release.wait(delay)

    def record(self, key, body, attempt=None, content_type=None):
        with self._lock:
            self._total += 1
            self._counts[key] = self._counts.get(key, 0) + 1
            if attempt is not None:
                self._attempts.setdefault(key, []).append(attempt)
            if self.keep_bodies:
                self._bodies.setdefault(key, []).append((body, content_type))
            return self._counts[key]

    def bodies(self, key):
        """[(body bytes, Content-Type)] of the requests with `key` (only
        while `keep_bodies` is set)."""
        with self._lock:
            return list(self._bodies.get(key, []))

    def attempts(self, key):
        """The `Oncegate-Attempt` fences (`term.n`) of the requests with
        `key`, in arrival order."""
        with self._lock:
            return list(self._attempts.get(key, []))

    def connected(self, sock=None, server=None):
        with self._lock:
            self._connections += 1
            if sock is not None:
                self._open.add(sock)
            # Accepted by a server an outage has ended since: the outage's
            # list of open connections was taken before this one joined it.
            late = server is not None and server is not self._server
        if late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def disconnected(self, sock):
        with self._lock:
            self._open.discard(sock)

    def handshake_done(self):
        with self._lock:
            self._handshakes += 1

    def handshake_failed(self, error):
        with self._lock:
            self._handshake_failures.append(str(error))

    def extra_sent(self):
        with self._lock:
            self._extras += 1

    def counts(self):
        with self._lock:
            res = {"total": self._total, "keys": dict(self._counts),
                   "connections": self._connections}
            if self.tls_context is not None:
                res["handshakes"] = self._handshakes
                res["handshake_failures"] = len(self._handshake_failures)
            return res

    def handshakes(self):
        """TLS handshakes completed so far."""
        with self._lock:
            return self._handshakes

    def handshake_failures(self):
        """Why each failed TLS handshake failed (OpenSSL's words)."""
        with self._lock:
            return list(self._handshake_failures)

    def connections(self):
        """Connections accepted so far."""
        with self._lock:
            return self._connections

    def extras(self):
        """Unsolicited responses written so far (mode `extra`)."""
        with self._lock:
            return self._extras

    def executions(self, key):
        with self._lock:
            return self._counts.get(key, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--mode", default="normal", choices=MODES)
    parser.add_argument("--delay", type=float, default=0)
    parser.add_argument("--interim", default=None,
                        help="comma-separated 1xx statuses sent before "
                             "each answer, e.g. 100,103")
    parser.add_argument("--status", type=int, default=600,
                        help="the status line of mode bogus-status")
    parser.add_argument("--split", action="store_true",
                        help="mode extra: the unsolicited response in a "
                             "later write")
    parser.add_argument("--pad", type=int, default=0,
                        help="bytes of filler in every answer")
    parser.add_argument("--tls-cert", default=None,
                        help="serve https with this PEM certificate chain")
    parser.add_argument("--tls-key", default=None,
                        help="the PEM key of --tls-cert")
    parser.add_argument("--tls-client-ca", default=None,
                        help="require a client certificate signed by this "
                             "PEM CA (with --tls-cert)")
    args = parser.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        parser.error("--tls-client-ca needs --tls-cert and --tls-key")
    up = TestUpstream(args.host, args.port, args.pad, args.tls_cert,
                      args.tls_key, args.tls_client_ca)
    interim = None
    if args.interim is not None:
        interim = [int(s) for s in args.interim.split(",") if s]
    up.set_mode(args.mode, args.delay, interim, args.status, args.split)
    # A drill's upstream outage: SIGUSR1 stops serving (listener and open
    # connections closed), SIGUSR2 listens again on the same port; SIGINT
    # ends. Blocked in every thread (they inherit the mask: it is set before
    # the first one starts) and taken here with sigwait: a handler would run
    # in the main thread only, and a signal the kernel gave a connection
    # thread waited for the main thread's next wake-up.
    # SIGINT only if not ignored from the start (a background job of a
    # shell: a blocked signal is queued even when ignored, so sigwait would
    # take a Ctrl-C meant for the foreground job).
    signals = {signal.SIGUSR1, signal.SIGUSR2}
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        signals.add(signal.SIGINT)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    up.start()
    print("test upstream listening on %s" % up.url, flush=True)
    try:
        while True:
            sig = signal.sigwait(signals)
            if sig == signal.SIGUSR1:
                up.outage()
            elif sig == signal.SIGUSR2:
                up.resume()
            else:
                break
    finally:
        print(json.dumps(up.counts()), file=sys.stderr)
        up.stop()


if __name__ == "__main__":
    main()
