"""The node link's wire format, as much of it as a rogue member needs
(link/frames.hpp, link/frames.cpp): frames, hellos, raw headers.

Every frame is a 16-byte header and a payload, little-endian:

    u32 payload length | u8 type | u8 0 | u16 group | u64 id

A hello's payload is u32 magic "OGL1" (0x314C474F), u16 min_version, u16
max_version, u64 node id, u32 length and the Raft address bytes."""

import socket
import ssl
import struct
import time

HELLO = 1
RAFT_OPEN = 2
RAFT_DATA = 3
RAFT_CLOSE = 4
REQUEST = 5
ANSWER = 6

HEADER = struct.Struct("<IBBHQ")
HELLO_MAGIC = 0x314C474F
VERSION = 1


def header(length, type_, group=0, id_=0, reserved=0):
    """A header with any field, however wrong (a rogue's)."""
    return HEADER.pack(length, type_, reserved, group, id_)


def frame(type_, payload=b"", id_=0, group=0):
    return header(len(payload), type_, group, id_) + payload


def hello_payload(node_id, address, min_version=VERSION,
                  max_version=VERSION):
    raw = address.encode() if isinstance(address, str) else address
    return (struct.pack("<IHHQI", HELLO_MAGIC, min_version, max_version,
                        node_id, len(raw)) + raw)


def hello(node_id, address, **kw):
    """A hello frame saying node `node_id` at Raft address `address`."""
    return frame(HELLO, hello_payload(node_id, address, **kw))


def decode_hello(payload):
    """(min_version, max_version, node id, address) of a hello payload;
    raises ValueError on anything else."""
    if len(payload) < 20:
        raise ValueError("hello too short: %d bytes" % len(payload))
    magic, lo, hi, node_id, size = struct.unpack_from("<IHHQI", payload)
    if magic != HELLO_MAGIC or len(payload) != 20 + size:
        raise ValueError("not a hello: %r" % payload[:32])
    return lo, hi, node_id, payload[20:].decode(errors="replace")


def split_frames(data):
    """[(type, group, id, payload)] of the whole frames in `data` and the
    bytes left over."""
    out = []
    while len(data) >= HEADER.size:
        length, type_, _, group, id_ = HEADER.unpack_from(data)
        if len(data) < HEADER.size + length:
            break
        out.append((type_, group, id_,
                    data[HEADER.size:HEADER.size + length]))
        data = data[HEADER.size + length:]
    return out, data


def read_until_closed(sock, bound):
    """Everything `sock` receives until the peer closes it or `bound`
    seconds pass: (bytes, closed)."""
    data = b""
    deadline = time.monotonic() + bound
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        except (ssl.SSLError, OSError):
            return data, True
        if not chunk:
            return data, True
        data += chunk
