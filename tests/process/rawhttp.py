"""A raw HTTP/1.1 client for process tests: one TCP connection with a
receive buffer and bounded reads, for what http.client hides (pipelining,
partial requests, resets, answers to HEAD)."""

import json
import socket
import struct
import time

HOST = "127.0.0.1"


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Response(%d, %r, %r)" % (self.status, self.headers,
                                         self.body[:300])


class Client:
    """One raw TCP connection with a receive buffer and bounded reads."""

    def __init__(self, port, timeout=5.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no complete response in time; got %r"
                                 % self.buf[:300])
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise AssertionError("no complete response in time; got %r"
                                 % self.buf[:300])
        if not data:
            raise AssertionError("connection closed before a complete "
                                 "response; got %r" % self.buf[:300])
        self.buf += data

    def read_response(self, timeout=5.0, head=False):
        """The next response (an interim 1xx one included); `head`: it
        answers a HEAD (headers only)."""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buf:
            self._fill(deadline)
        block, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = block.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise AssertionError("not an HTTP response: %r" % block[:300])
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode()] = value.strip().decode()
        # No body: an interim answer, 204 and 304, and a HEAD's answer.
        length = 0 if head or status < 200 or status in (204, 304) else int(
            headers.get("content-length", "0"))
        self.buf = rest
        while len(self.buf) < length:
            self._fill(deadline)
        body, self.buf = self.buf[:length], self.buf[length:]
        return Response(status, headers, body)

    def wait_closed(self, timeout):
        """Reads until the peer closes: (closed, bytes received meanwhile).

        A reset or a broken pipe counts as closed as well as an orderly
        end of stream; a timeout does not.
        """
        deadline = time.monotonic() + timeout
        extra = b""
        for _ in range(10000):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False, extra
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False, extra
            except (ConnectionResetError, BrokenPipeError):
                return True, extra
            if not data:
                return True, extra
            extra += data
        return False, extra

    def reset(self):
        """Abortive close: RST instead of FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
