"""CAF 0.17's BASP, as much of it as a rogue member needs: frames, node ids,
handshakes (libcaf_io/src/io/basp/instance.cpp at 0.17.6; integers in
network byte order, sequences with varbyte lengths).

A frame is a 32-byte header (operation, two padding bytes, flags, payload
length, operation data, source actor, destination actor) and the payload.
A node id is CAF's `default` kind: the atom "default" (8 bytes), a process
id (4) and a 20-byte host id. oncegate's nodes under the peer policy use
the host id `caf_host_id(n)` for member n (routing/peer_basp.hpp)."""

import hashlib
import socket
import struct
import time

SERVER_HANDSHAKE = 0x00
CLIENT_HANDSHAKE = 0x01
DIRECT_MESSAGE = 0x02
ROUTED_MESSAGE = 0x03
MONITOR_MESSAGE = 0x04
DOWN_MESSAGE = 0x05
HEARTBEAT = 0x06

SELECT_CONNECTION_FLAG = 0x02

HEADER = struct.Struct(">BBBBIQQQ")
NODE_ID_SIZE = 32


def caf_host_id(node):
    """The CAF host id of cluster member `node` under the peer policy."""
    return hashlib.sha256(b"oncegate-caf-node-%d" % node).digest()[:20]


def frame(op, payload=b"", flags=0, op_data=0, src=0, dst=0):
    return HEADER.pack(op, 0, 0, flags, len(payload), op_data, src,
                       dst) + payload


def node_id(atom, pid, host):
    """A serialized node id; `atom` is the 8 bytes of "default" as a peer
    sent them (taken from its handshake)."""
    assert len(atom) == 8 and len(host) == 20
    return atom + struct.pack(">I", pid) + host


def split_node_id(raw):
    """(atom bytes, pid, host) of a serialized node id."""
    return raw[:8], struct.unpack(">I", raw[8:12])[0], raw[12:32]


def read_exactly(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed after %d of %d bytes" %
                                  (len(out), n))
        out += chunk
    return out


def read_frame(sock):
    """(operation, flags, op_data, src, dst, payload) of the next frame."""
    op, _, _, flags, size, op_data, src, dst = HEADER.unpack(
        read_exactly(sock, HEADER.size))
    return op, flags, op_data, src, dst, read_exactly(sock, size)


def varbyte(data, pos):
    """(value, next position) of a varbyte length at `pos`."""
    value, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def server_handshake(payload):
    """(node id bytes, published actor id) of a server handshake."""
    node = payload[:NODE_ID_SIZE]
    count, pos = varbyte(payload, NODE_ID_SIZE)
    for _ in range(count):  # application identifiers
        size, pos = varbyte(payload, pos)
        pos += size
    (aid,) = struct.unpack(">Q", payload[pos:pos + 8])
    return node, aid


def client_handshake(node, flags=SELECT_CONNECTION_FLAG):
    return frame(CLIENT_HANDSHAKE, node, flags=flags)


def read_until_closed(sock, bound, answer_heartbeats=False):
    """Reads frames for up to `bound` seconds, answering heartbeats if asked
    (CAF closes a connection that sends none within
    middleman.connection-timeout): (list of (op, dst) received, True if the
    peer closed the connection)."""
    seen = []
    deadline = time.monotonic() + bound
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return seen, False
            sock.settimeout(left)
            op, _, _, _, dst, _ = read_frame(sock)
            seen.append((op, dst))
            if answer_heartbeats and op == HEARTBEAT:
                sock.sendall(frame(HEARTBEAT))
    except socket.timeout:
        return seen, False
    except (ConnectionError, OSError):
        return seen, True


REQUEST = 0x1000000000000000  # a request id of the normal category
RESPONSE = 0x9000000000000000  # the id of its answer


def _str(x):
    x = x.encode() if isinstance(x, str) else x
    out, n = b"", len(x)
    while n > 0x7F:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n]) + x


def message(types, values=b""):
    """A direct message's content: no forwarding stack, a u16 zero, the
    type names ("@<>+..."), the values."""
    return b"\0" + b"\0\0" + _str(types) + values


def claim_result_accepted(route, key):
    """A serialized `claim_result{accepted}` for an in-flight record of
    `(route, key)` (common/record.hpp's field order; CAF writes integers in
    network byte order, enums as their underlying uint8)."""
    rec = (_str(route) + _str(key) + b"\0" + _str(b"")
           + struct.pack(">qqH", 1, 0, 0) + _str(b"") + _str(b"")
           + _str(b"") + struct.pack(">QQIqq", 0, 0, 0, 0, 0) + _str(b"")
           + struct.pack(">I", 0))
    return message("@<>+oncegate.claim_result", b"\0" + rec)
