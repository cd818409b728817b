#!/usr/bin/env python3
"""A counting test upstream for oncegate: the "order service" in tests,
drills and the README example.

It counts executions per `Idempotency-Key` (an execution is a complete
request received) and can be told to answer normally, slowly, with 500, or
to drop the connection after receiving the request; `refuse()` closes its
listening socket so connections are refused.

    python3 tools/test_upstream.py --port 9000      # serve until Ctrl-C
    curl -s localhost:9000/_counts                   # {"total":..,"keys":{..}}
    curl -s -X POST localhost:9000/_mode -d '{"mode":"slow","delay":5}'

Modes: normal, slow (answer after `delay` seconds, at most 60), error (500),
drop (close without answering).
"""

import argparse
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_DELAY = 60.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _reply(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        up = self.server.upstream
        if self.path == "/_counts":
            return self._reply(200, up.counts())
        self._reply(404, {"error": "not found"})

    def do_POST(self):
        up = self.server.upstream
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path == "/_mode":
            doc = json.loads(body or b"{}")
            up.set_mode(doc.get("mode", "normal"), doc.get("delay", 0))
            return self._reply(200, {"mode": up.mode})
        key = self.headers.get("Idempotency-Key", "")
        n = up.record(key, body)
        mode, delay = up.mode, up.delay
        if mode == "slow":
            up.wait(delay)
        if mode == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if mode == "error":
            return self._reply(500, {"error": "upstream failure", "key": key})
        self._reply(200, {"order": "accepted", "key": key, "execution": n})


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


class TestUpstream:
    """Threaded upstream on 127.0.0.1; `port` 0 picks a free one."""

    def __init__(self, host="127.0.0.1", port=0):
        self.host = host
        self.port = port
        self.mode = "normal"
        self.delay = 0.0
        self._lock = threading.Lock()
        self._counts = {}
        self._total = 0
        self._release = threading.Event()
        self._server = None
        self._thread = None

    def start(self):
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

    def resume(self):
        """Listen again on the same port."""
        self._release.clear()
        return self.start()

    @property
    def url(self):
        return "http://%s:%d/orders" % (self.host, self.port)

    def set_mode(self, mode, delay=0.0):
        if mode not in ("normal", "slow", "error", "drop"):
            raise ValueError("unknown mode " + mode)
        self.mode = mode
        self.delay = min(float(delay or 0), MAX_DELAY)
        if mode != "slow":
            self._release.set()
        else:
            self._release.clear()

    def wait(self, delay):
        """Holds a slow request; `stop` or a mode change ends it early."""
        self._release.wait(delay)

    def record(self, key, body):
        with self._lock:
            self._total += 1
            self._counts[key] = self._counts.get(key, 0) + 1
            return self._counts[key]

    def counts(self):
        with self._lock:
            return {"total": self._total, "keys": dict(self._counts)}

    def executions(self, key):
        with self._lock:
            return self._counts.get(key, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--mode", default="normal")
    parser.add_argument("--delay", type=float, default=0)
    args = parser.parse_args()
    up = TestUpstream(args.host, args.port)
    up.set_mode(args.mode, args.delay)
    up.start()
    print("test upstream listening on %s" % up.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        print(json.dumps(up.counts()), file=sys.stderr)
        up.stop()


if __name__ == "__main__":
    main()
