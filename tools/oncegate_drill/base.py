"""The package's small shared vocabulary: exit codes, the errors that map to
them, progress lines, durations and sizes, bounded polling, short
administrative commands and one HTTP call on a fresh connection.

Lives here: what every other module may import without pulling in a
concept of its own. Must not: know about scenarios, nodes, traffic or the
verdict (nothing here imports another module of the package).
"""

import http.client
import os
import re
import socket
import subprocess
import sys
import time

EXIT_PASS = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_SKIPPED = 77


class UsageError(Exception):
    """A bad command line or scenario file (exit 2)."""


class DrillError(Exception):
    """The drill could not run as asked (exit 3)."""


class Skip(Exception):
    """The scenario cannot run here (exit 77); the message says why."""


class Aborted(Exception):
    """SIGINT, SIGTERM or SIGHUP: clean up and stop."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# -- durations ----------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text):
    """'500ms', '2s', '1.5', '2m' -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise UsageError("not a duration: %r" % text)
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_span(text):
    """A duration or a range 'A..B' (uniformly random in it) -> (lo, hi)."""
    if ".." in text:
        lo, hi = text.split("..", 1)
        lo, hi = parse_duration(lo), parse_duration(hi)
        if hi < lo:
            raise UsageError("empty range: %r" % text)
        return lo, hi
    d = parse_duration(text)
    return d, d


def parse_size(text):
    m = re.match(r"^\s*(\d+)\s*([kmg]?)\s*$", text.lower())
    if not m:
        raise UsageError("not a size: %r" % text)
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20,
                              "g": 1 << 30}[m.group(2)]


# -- processes --------------------------------------------------------------


def run_cmd(args, check=True):
    """Runs a short administrative command (ip, mount); returns its result."""
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise DrillError("%s failed (%d): %s" % (" ".join(args),
                                                 res.returncode,
                                                 res.stderr.strip()))
    return res


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_until(predicate, timeout, interval=0.05):
    """Polls `predicate` until true or `timeout` seconds passed; returns the
    last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


# -- HTTP ---------------------------------------------------------------------

TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


def http_call(host, port, method, path, body=None, headers=None, timeout=5.0):
    """One request on a fresh connection: (status, headers, body).
    TCP_NODELAY: http.client sends the headers and the body in two writes,
    and Nagle's algorithm against the server's delayed ACK would add 40 ms
    to every request."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request(method, path, body=body, headers=headers or {})
        res = conn.getresponse()
        data = res.read()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, data
    finally:
        conn.close()


def transport_error_name(exc):
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError,
                        http.client.RemoteDisconnected,
                        http.client.IncompleteRead)):
        return "reset"
    if isinstance(exc, OSError) and exc.errno in (101, 113):
        return "unreachable"  # ENETUNREACH, EHOSTUNREACH
    return "error"
