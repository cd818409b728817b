"""Rogue peers against a 3-node cluster on mutual TLS: whoever reaches the
cluster ports on 127.0.0.1 without a member's certificate (or with a
member's certificate, claiming another member) gets nothing in, and the
cluster serves on as if nobody had knocked.

Each node has one cluster port, the node link's (link/, its `cluster.peers`
entry `ID=HOST:PORT`): mutual TLS, then frames (tests/process/linkwire.py);
the dialler (the lower id) says its hello first, the accepting node answers
with its own only once it checked that hello. A rogue (Python's socket and
ssl modules) tries every node's port while steady Traffic runs:

1. plain TCP: random bytes, an HTTP request, zeros; one connection that
   stays silent (dropped at the handshake deadline, 2 s): reason=handshake;
2. TLS without a certificate, with a self-signed one and with one of a
   foreign CA (made by scripts/cluster-certs.sh, so it names
   node-2.oncegate, under the wrong CA), each then sending a valid hello:
   reason=handshake;
3. TLS with a valid certificate of the cluster CA for node 9, which is not a
   member, and with the node's own certificate: refused as soon as the TLS
   handshake is done, before any hello (reason=identity);
4. a member's valid certificate with a hello that lies: claiming another
   member (the stolen-certificate case: node 2's certificate claiming
   node 3 at node 1, followed at once by a Raft stream carrying a
   RequestVote of a much higher term, which libraft never reads: no node's
   term moves), claiming its own id at another address, a higher id than
   the node's (the node of the lower id dials) (reason=identity); a
   malformed hello, a frame before the hello and libraft's own preamble
   instead of a hello (reason=hello).

Each connection must be closed by the node, never answered with a byte
after TLS before a valid hello (a stranger gets no hello: not the node's
link versions or Raft address), and leave exactly one refusal line in that
node's log, found by the rogue's source port
(`link.refused conn=N remote=127.0.0.1:PORT ... reason=...`);
no `link.open` names a rogue. The nodes' own links (one connection per
pair, from /proc/net/tcp) are the same before and after: a refused
stranger must not cost the members a connection, and with it the requests
in flight on it. Throughout, the Traffic decides (no gap between decisions
above MAX_GAP, below cluster.remote-timeout), the leader and the term stay
what they were, no message reaches the actors
(oncegate_peer_messages_refused stays 0).

4b. A member's key misbehaving after a valid hello: follower F1's
   certificate (the lower id of the two followers) says F1's true hello to
   follower F2, then junk: a frame of an unknown type, a header announcing
   4 GiB, a request whose payload is malformed. The link opens (the node
   answers its hello: this IS F1's identity, and a newer link of F1's
   replaces the older one by design, so the real F1's link to F2 is closed
   and F1 dials again), then the node closes it (reason=frame); the node
   lives on, the real link is back, the Traffic (which never crosses the
   link between two followers) keeps deciding.

5. An impostor node: a follower's id, correct config and addresses, a fresh
   data dir, certificates of the foreign CA; started while the real node is
   stopped. It never sees a leader, never answers /readyz 200, stores
   nothing; the nodes it dials (those of a higher id) log its refused
   connections; the two real nodes keep serving, with the same term, leader
   and link. Then it is stopped and the real node restarted: it catches up.
   At the end every acknowledged key executed once and is stored on all
   three nodes, the tables are equal, and every node stops with 0 without
   the exit watchdog.

6. Silent connections held open on the port (reconnected whenever the node
   drops one) must not make the node spin: the leader's CPU (utime+stime
   from /proc/PID/stat, the Traffic stopped) over CPU_WINDOW with
   SILENT_CONNECTIONS of them, minus the same window without, stays below
   CPU_BOUND of one core (the link waits for TLS bytes in libuv, and drops
   the connection at the handshake deadline). From a stranger's address
   (127.0.0.2) each connection is closed at accept
   (`cluster.member-sources-only`, reason=source): what a connect flood
   costs per connection stays below STRANGER_CPU.
"""

import os
import re
import select
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import unittest

import linkwire
from harness import wait_for
from test_cluster import (ClusterNode, OwnClusterCase, Traffic, metric,
                          with_logs)
from test_cluster_faults import log_size, log_text
from oncegate_drill.cluster import make_certs  # noqa: E402 (test_cluster's path)

# link::options::handshake_timeout: a silent or slow rogue is dropped after
# this long.
HANDSHAKE_TIMEOUT = 2.0
# Every rogue connection is closed by the node within this long.
CLOSE_BOUND = HANDSHAKE_TIMEOUT + 3.0
# A rogue that got through TLS and sent a hello (or a frame) the node
# refuses is closed at once, not at the deadline.
HELLO_CLOSE_BOUND = 1.0
# The largest gap between two decisions of the Traffic while the rogue
# knocks: below cluster.remote-timeout (1 s in Cluster's configs), so that
# a request lost between the nodes shows (steady state: under 0.1 s, also
# while the rogue knocks, when nothing is lost).
MAX_GAP = 0.8
# Part 6.
SILENT_CONNECTIONS = 4
CPU_WINDOW = 3.0
CPU_BOUND = 0.30  # of one core, above the baseline
STRANGER_CPU = 0.0001  # seconds of CPU per connection refused at accept

RAFT_PROTOCOL = 1  # libraft's preamble version
RAFT_IO_REQUEST_VOTE = 3  # raft.h


def ports_of(cluster, node_id):
    """The cluster port of a member (its node link), from its cluster.peers
    entry `ID=127.0.0.1:PORT`."""
    entry = cluster.peer_lines[node_id - 1].strip('"')
    return int(entry.split("=", 1)[1].rsplit(":", 1)[1])


def address(cluster, node_id):
    """A member's Raft address, as its hello must say it."""
    return "127.0.0.1:%d" % ports_of(cluster, node_id)


def preamble(node_id, address):
    """libraft's connection preamble (what a build before the node link
    sent first on its Raft port): protocol, the connecting node's id,
    the address buffer's length (NUL included, rounded up to 8), the
    NUL-padded address."""
    raw = address.encode() + b"\0"
    size = (len(raw) + 7) // 8 * 8
    return (struct.pack("<QQQ", RAFT_PROTOCOL, node_id, size)
            + raw.ljust(size, b"\0"))


def request_vote(term, candidate):
    """A RequestVote as raft_uv frames it: type and body size, then term,
    candidate, last log index and term, flags (disrupt the leader)."""
    body = struct.pack("<QQQQQ", term, candidate, 1 << 40, term, 1)
    return struct.pack("<QQ", RAFT_IO_REQUEST_VOTE, len(body)) + body


def tls_context(cert=None, key=None):
    """A rogue's client context: trusts any server, offers `cert`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def self_signed(directory, name):
    """A self-signed certificate naming `name` (openssl CLI)."""
    cert = os.path.join(directory, "self.pem")
    key = os.path.join(directory, "self.key")
    res = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
         cert, "-days", "2", "-subj", "/CN=" + name, "-addext",
         "subjectAltName=DNS:" + name],
        capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError("openssl req failed: " + res.stderr)
    return cert, key


def cpu_seconds(pid):
    """utime + stime of every thread of `pid` so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def socket_inodes(pid):
    """Inodes of the sockets process `pid` holds."""
    out = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def member_connections(cluster, ids):
    """The established links between the nodes `ids` themselves:
    {(dialling node, node dialled, client port)} from /proc/net/tcp, the
    client's end held by one of these nodes (not the rogue, not another
    process). One per pair."""
    ports = {ports_of(cluster, i): i for i in ids}
    owner = {}
    for i in ids:
        owner.update((inode, i) for inode in
                     socket_inodes(cluster.node(i).pid))
    out = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, remote, state, inode = (fields[1], fields[2], fields[3],
                                           int(fields[9]))
            rport = int(remote.split(":")[1], 16)
            if state == "01" and rport in ports and inode in owner:
                out.add((owner[inode], ports[rport],
                         int(local.split(":")[1], 16)))
    return out


class Probe:
    """One rogue connection: what it did and how it ended."""

    def __init__(self, node_id, name, expect, opens=False):
        self.node_id = node_id
        self.name = name
        # What its refusal line must contain (a text or a tuple of them).
        self.expect = expect
        # Its hello is true (a member's own): the node answers with its own
        # hello (and may open Raft streams) before the refusal.
        self.opens = opens
        self.src = None  # the rogue's source port
        self.outcome = None  # "closed" | "open" | "data" | "no-connect"
        self.detail = ""
        self.received = b""
        self.took = None  # seconds from the last byte sent to the close

    def __repr__(self):
        return "%d %s src=%s -> %s after %s (%s)" % (
            self.node_id, self.name, self.src, self.outcome,
            None if self.took is None else "%.2fs" % self.took,
            self.detail[:120])

    def run(self, port, send=b"", context=None, bound=CLOSE_BOUND):
        """Connects to 127.0.0.1:`port` (TLS with `context`), sends `send`
        and reads until the node closes the connection (or `bound`)."""
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=bound)
        except OSError as e:
            self.outcome, self.detail = "no-connect", repr(e)
            return self
        self.src = sock.getsockname()[1]
        t0 = time.monotonic()
        try:
            if context is not None:
                try:
                    sock = context.wrap_socket(sock)
                except socket.timeout:
                    self.outcome, self.detail = "open", "handshake hangs"
                    return self
                except (ssl.SSLError, OSError) as e:
                    self.outcome, self.detail = "closed", "handshake: %r" % e
                    self.took = time.monotonic() - t0
                    return self
            if send:
                try:
                    # One write: one TLS record, taken by the node at once.
                    sock.sendall(send)
                except (ssl.SSLError, OSError) as e:
                    self.outcome, self.detail = "closed", "send: %r" % e
                    self.took = time.monotonic() - t0
                    return self
            t0 = time.monotonic()
            data, closed = linkwire.read_until_closed(sock, bound)
            self.received = data
            if not closed:
                self.outcome, self.detail = "open", "still open"
                return self
            self.took = time.monotonic() - t0
            if data and not self.opens:
                self.outcome, self.detail = "data", repr(data[:64])
            elif self.opens and not self.answered_hello():
                self.outcome = "data"
                self.detail = "no hello of the node first: %r" % data[:64]
            else:
                self.outcome = "closed"
                self.detail = "EOF after %d bytes" % len(data)
            return self
        finally:
            sock.close()

    def answered_hello(self):
        """The node's reply began with its hello (its id)."""
        frames, _ = linkwire.split_frames(self.received)
        if not frames or frames[0][0] != linkwire.HELLO:
            return False
        try:
            return linkwire.decode_hello(frames[0][3])[2] == self.node_id
        except ValueError:
            return False


class SilentHolder:
    """Keeps `n` plain TCP connections to a port open and silent: one the
    node drops is replaced at once (a rogue does not give up). Records how
    long the node let each one live."""

    def __init__(self, port, n, source="127.0.0.1"):
        self.port = port
        self.n = n
        self.source = source  # a stranger's address: 127.0.0.2
        self.lifetimes = []
        self.errors = []  # failed connects
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join(10)

    def _run(self):
        socks = {}
        try:
            while not self.stop_flag.is_set():
                while len(socks) < self.n:
                    try:
                        s = socket.create_connection(
                            ("127.0.0.1", self.port), timeout=5,
                            source_address=(self.source, 0))
                    except OSError as e:
                        self.errors.append(repr(e))
                        break
                    socks[s] = time.monotonic()
                ready, _, _ = select.select(list(socks), [], [], 0.05)
                for s in ready:
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if not data:
                        self.lifetimes.append(time.monotonic() - socks.pop(s))
                        s.close()
        finally:
            for s in socks:
                s.close()


class PeerSecurityTest(OwnClusterCase):

    def setUp(self):
        super().setUp()
        self.t0 = time.monotonic()
        root = self.tmp.path
        tls = self.cluster.tls_dir
        # Node 9: a valid certificate of the cluster CA, not a member.
        make_certs(tls, [9])
        # A second CA with certificates naming the members.
        self.foreign = make_certs(os.path.join(root, "foreign"), [1, 2, 3])
        rogue = os.path.join(root, "rogue")
        os.makedirs(rogue)
        self.ctx = {
            "no certificate": tls_context(),
            "self-signed": tls_context(*self_signed(rogue,
                                                    "node-2.oncegate")),
            "foreign CA": tls_context(
                os.path.join(self.foreign, "node-2.pem"),
                os.path.join(self.foreign, "node-2.key")),
            "node 9": tls_context(os.path.join(tls, "node-9.pem"),
                                  os.path.join(tls, "node-9.key")),
        }
        # The members' own (stolen) certificates.
        for i in (1, 2, 3):
            self.ctx[i] = tls_context(os.path.join(tls, "node-%d.pem" % i),
                                      os.path.join(tls, "node-%d.key" % i))

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            print("\n%s: %.1fs" % (self._testMethodName,
                                   time.monotonic() - self.t0),
                  file=sys.stderr)

    # -- what the nodes say ---------------------------------------------------

    def leadership(self, ids):
        """{id: (term, leader id)} of the nodes in `ids`."""
        st = self.cluster.statuses(ids)
        return {i: (s["term"], s["leader_id"]) if s else None
                for i, s in st.items()}

    def metric_of(self, node_id, name):
        status, _, body = self.cluster.node(node_id).request("GET",
                                                             "/metrics")
        self.assertEqual(status, 200)
        return metric(body.decode(), name)

    def assert_steady(self, ids, before, after_what):
        """Same term, same leader on every node in `ids`."""
        now = self.leadership(ids)
        self.assertEqual(now, {i: before for i in ids},
                         "term/leader changed %s (was term %d, leader %d)"
                         % (after_what, before[0], before[1]))

    def assert_no_gap(self, traffic, start, end, what):
        """Decisions all through [start, end], none further apart than
        MAX_GAP."""
        times = [t for t in traffic.decisions() if start <= t <= end]
        points = [start] + times + [end]
        gap, at = max((b - a, a) for a, b in zip(points, points[1:]))
        # The keys decided right after the gap: where they waited.
        held = sorted((e["at"], k, [(n, round(t0 - start, 2), st)
                                    for n, t0, st in e["attempts"]])
                      for k, e in list(traffic.keys.items())
                      if e["at"] is not None and at < e["at"] <= at + gap
                      + 0.001)[:3]
        print("%s: %d decisions in %.1fs, largest gap %.2fs from %+.2fs "
              "(then %s)" % (what, len(times), end - start, gap, at - start,
                             [(round(t - start, 2), k, a)
                              for t, k, a in held]), file=sys.stderr)
        self.assertLessEqual(gap, MAX_GAP, "the Traffic stalled %.2fs %s: %s"
                             % (gap, what, traffic.summary()))

    # -- the rogue --------------------------------------------------------------

    def probes_for(self, node_id):
        """(probe, port, bytes to send, TLS context, bound) for every rogue
        connection to node `node_id`, the silent one first."""
        port = ports_of(self.cluster, node_id)
        other = 2 if node_id != 2 else 1  # a member's certificate: not refused
        third = ({1, 2, 3} - {node_id, other}).pop()  # at the handshake
        noise = bytearray(os.urandom(4096))
        # The first byte neither a TLS record type (the node would wait for
        # the record) nor one with the high bit set: OpenSSL reads that as
        # an SSLv2 record header and may answer "packet length too long"
        # with a TLS alert (seen in CI: a refusal, but the probe counts any
        # byte back as data).
        noise[0] &= 0x7F
        if 0x14 <= noise[0] <= 0x18:
            noise[0] = 0x7F
        # Nor a version byte of 3: OpenSSL then takes bytes 3-4 as a record
        # length and waits for that many bytes (up to 16 KiB: more than
        # sent), so the node drops it at the handshake deadline instead
        # (seen in CI, about 1 run in 100).
        if noise[1] == 0x03:
            noise[1] = 0x7F
        out = [(Probe(node_id, "silent TCP", "reason=handshake detail=no TLS "
                      "handshake within 2000 ms"), port, b"", None,
                CLOSE_BOUND)]
        for name, data in (
                ("random bytes", bytes(noise)),
                ("an HTTP request",
                 b"GET /v1/cluster HTTP/1.1\r\nHost: x\r\n\r\n"),
                ("zeros", b"\0" * 4096)):
            out.append((Probe(node_id, "TCP " + name,
                              "reason=handshake detail=TLS: "),
                        port, data, None, CLOSE_BOUND))
        ctx = self.ctx
        claim = linkwire.hello(other, address(self.cluster, other))
        for name, expect in (
                ("no certificate", ("reason=handshake detail=TLS: ",
                                    "peer did not return a certificate")),
                ("self-signed", ("reason=handshake detail=TLS: ",
                                 "self-signed certificate")),
                ("foreign CA", ("reason=handshake detail=TLS: ",
                                "unable to get local issuer certificate"))):
            out.append((Probe(node_id, "TLS %s, hello of %d" % (name, other),
                              expect), port, claim, ctx[name], CLOSE_BOUND))
        # Refused once TLS is done, before a hello is read.
        out.append((Probe(node_id, "TLS node 9, hello of 9",
                          "reason=identity detail=client certificate names "
                          "node 9, which is no other member"),
                    port, linkwire.hello(9, "127.0.0.1:9"), ctx["node 9"],
                    HELLO_CLOSE_BOUND))
        out.append((Probe(node_id, "TLS with the node's own certificate",
                          "reason=identity detail=client certificate names "
                          "node %d, which is no other member" % node_id),
                    port, claim, ctx[node_id], HELLO_CLOSE_BOUND))
        # A member's certificate, a hello that lies.
        out.append((Probe(node_id, "node %d's certificate claiming %d"
                          % (other, third),
                          "reason=identity detail=claims node %d but its "
                          "certificate names node-%d.oncegate"
                          % (third, other)),
                    port, linkwire.hello(third, address(self.cluster, third)),
                    ctx[other], HELLO_CLOSE_BOUND))
        out.append((Probe(node_id, "node %d's certificate at another address"
                          % other,
                          "reason=identity detail=claims address "
                          "127.0.0.1:9 but node %d is at %s"
                          % (other, address(self.cluster, other))),
                    port, linkwire.hello(other, "127.0.0.1:9"), ctx[other],
                    HELLO_CLOSE_BOUND))
        if node_id < 3:
            out.append((Probe(node_id, "node 3 dials node %d" % node_id,
                              "reason=identity detail=node 3 dials node %d, "
                              "but the node of the lower id dials" % node_id),
                        port, linkwire.hello(3, address(self.cluster, 3)),
                        ctx[3], HELLO_CLOSE_BOUND))
        bad_magic = bytearray(claim)
        bad_magic[linkwire.HEADER.size] ^= 0xFF
        for name, data, expect in (
                ("a malformed hello", bytes(bad_magic),
                 "reason=hello detail=malformed hello: bad magic"),
                ("a frame before the hello",
                 linkwire.frame(linkwire.RAFT_OPEN, id_=1) + claim,
                 "reason=hello detail=a frame before the hello"),
                ("libraft's preamble instead of a hello",
                 preamble(other, address(self.cluster, other)),
                 "reason=hello detail=the peer speaks libraft's own "
                 "preamble")):
            out.append((Probe(node_id, "node %d's certificate, %s"
                              % (other, name), expect),
                        port, data, ctx[other], HELLO_CLOSE_BOUND))
        return out

    def knock(self, ids):
        """Every probe against every node in `ids`: the silent ones on
        threads (they last until the deadline), the others one after the
        other meanwhile. Returns the probes."""
        plan = [p for i in ids for p in self.probes_for(i)]
        silent = [p for p in plan if p[0].name == "silent TCP"]
        threads = [threading.Thread(target=p.run, args=(port, data, ctx, b),
                                    daemon=True)
                   for p, port, data, ctx, b in silent]
        for t in threads:
            t.start()
        for p, port, data, ctx, b in plan:
            if p.name != "silent TCP":
                p.run(port, data, ctx, b)
        for t in threads:
            t.join(CLOSE_BOUND + 5)
        return [p for p, *_ in plan]

    def stolen_certificate(self, term):
        """Node 2's certificate claims node 3 at node 1's port, and opens a
        Raft stream carrying a RequestVote of `term` right behind the
        hello."""
        p = Probe(1, "stolen node-2 certificate claiming 3, then a "
                  "RequestVote of term %d" % term,
                  "reason=identity detail=claims node 3 but its certificate "
                  "names node-2.oncegate")
        vote = request_vote(term, 3)
        data = (linkwire.hello(3, address(self.cluster, 3))
                + linkwire.frame(linkwire.RAFT_OPEN, id_=1)
                + linkwire.frame(linkwire.RAFT_DATA, vote, id_=1))
        return p.run(ports_of(self.cluster, 1), data, self.ctx[2],
                     HELLO_CLOSE_BOUND)

    def misbehaving_member(self, lower, higher):
        """Part 4b: `lower`'s certificate and true hello to `higher`, then
        a bad frame, each on a new connection."""
        hello = linkwire.hello(lower, address(self.cluster, lower))
        out = []
        for name, frame, expect in (
                ("a frame of unknown type 7", linkwire.header(0, 7),
                 "detail=frame header: unknown_type (type 7)"),
                ("a header announcing 4 GiB",
                 linkwire.header(0xFFFFFFFF, linkwire.RAFT_DATA, id_=1),
                 "detail=frame header: too_large (type 3)"),
                ("a malformed request",
                 linkwire.frame(linkwire.REQUEST, b"\0\1\2", id_=1),
                 "detail=malformed request: ")):
            p = Probe(higher, "node %d's true hello, then %s" % (lower, name),
                      ("reason=frame", expect), opens=True)
            out.append(p.run(ports_of(self.cluster, higher), hello + frame,
                             self.ctx[lower], HELLO_CLOSE_BOUND))
            # The real node's link is back before the next one.
            self.assertTrue(wait_for(lambda: self.pair_linked(lower, higher),
                                     5, 0.02),
                            "node %d's link to node %d did not come back"
                            % (lower, higher))
        return out

    def pair_linked(self, lower, higher):
        return any(c[:2] == (lower, higher) for c in
                   member_connections(self.cluster, [lower, higher]))

    def refusal_lines(self, node_id, start):
        """{source port: [lines]} of the node's refusals of inbound
        connections since log offset `start`."""
        text = log_text(self.cluster.node(node_id), start)
        out = {}
        for line in text.splitlines():
            m = re.search(r"link\.refused conn=\d+ remote=127\.0\.0\.1:(\d+) ",
                          line)
            if m:
                out.setdefault(int(m.group(1)), []).append(line)
        return out

    def assert_refused(self, probes, marks):
        """Every probe was closed by the node without data (but the node's
        hello for a true one), and left exactly one refusal line in its
        node's log saying what it expects; no other inbound connection was
        refused meanwhile; none but the true ones was opened."""
        ids = sorted({p.node_id for p in probes})
        by_node = {}

        def all_logged():
            by_node.update((i, self.refusal_lines(i, marks[i])) for i in ids)
            return all(p.src in by_node[p.node_id] for p in probes)

        wait_for(all_logged, 5, 0.05)
        for p in probes:
            lines = by_node[p.node_id].get(p.src, [])
            print("  %r\n      %s" % (p, " | ".join(
                re.sub(r"^\S+ \w+ \[cluster\] ", "", line)
                for line in lines)[:240]), file=sys.stderr)
        wrong = [p for p in probes if p.outcome != "closed"]
        self.assertEqual(wrong, [], "rogue connections the node did not "
                         "close (or answered)")
        problems = []
        for p in probes:
            lines = by_node[p.node_id].get(p.src, [])
            expect = (p.expect,) if isinstance(p.expect, str) else p.expect
            if len(lines) != 1 or not all(x in lines[0] for x in expect):
                problems.append("%r: expected one line with %r, got %s"
                                % (p, p.expect, lines))
        self.assertEqual(problems, [], "refusals not logged as expected")
        for i in ids:
            mine = {p.src for p in probes if p.node_id == i}
            others = {k: v for k, v in by_node[i].items() if k not in mine}
            self.assertEqual(others, {}, "node %d refused connections that "
                             "were not the rogue's" % i)
            text = log_text(self.cluster.node(i), marks[i])
            for p in probes:
                if p.node_id != i:
                    continue
                opened = [line for line in text.splitlines()
                          if "link.open " in line and
                          " remote=127.0.0.1:%d " % p.src in line]
                self.assertEqual(len(opened), 1 if p.opens else 0,
                                 "node %d: %r opened %s" % (i, p, opened))

    # -- the case ---------------------------------------------------------------

    @with_logs
    def test_rogue_peers_get_nothing_in_and_the_cluster_serves_on(self):
        ids = [1, 2, 3]
        lid = self.start_nodes(ids, ids)
        steady = self.leadership([lid])[lid]
        self.assert_steady(ids, steady, "at the start")
        changes = {i: self.metric_of(i, "oncegate_raft_leader_changes_total")
                   for i in ids}
        traffic = Traffic(self.cluster, "rogue").start()
        try:
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(self.t0) >= 30, 15),
                "no traffic: %s" % traffic.summary())
            self.knock_everywhere(traffic, ids, steady)
            self.misbehaving_members(traffic, ids, lid, steady)
            with self.part("part 5: an impostor with a foreign CA's "
                           "certificate never joins"):
                self.impostor(traffic, lid, steady)
            self.cluster.wait_ready(ids)
            since = time.monotonic()
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(since) >= 20, 10),
                "no decisions at the end: %s" % traffic.summary())
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        print("answers %s" % traffic.summary(), file=sys.stderr)
        self.assert_steady(ids, steady, "by the end")
        self.assertEqual({i: self.metric_of(
            i, "oncegate_raft_leader_changes_total") for i in ids}, changes)
        self.assertEqual([k for k, e in traffic.keys.items()
                          if e["status"] is None], [], "keys undecided")
        self.assert_tables_equal(ids)
        self.assert_at_most_once(self.up, traffic, ids)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight(ids, "rogue-", traffic)
        with self.part("part 6b: connections from an address that is no "
                       "member's are refused before any TLS"):
            self.no_spin(lid, source="127.0.0.2")
        with self.part("part 6: %d silent connections held open on the "
                       "port do not make the node spin"
                       % SILENT_CONNECTIONS):
            self.no_spin(lid)
        self.assert_steady(ids, steady, "after the CPU measurements")
        for i in ids:
            node = self.cluster.node(i)
            self.assertIsNone(node.check_alive(), "node %d exited" % i)
        for i in ids:
            # stop() fails on a node that needed the exit watchdog.
            self.assertEqual(self.cluster.node(i).stop(), 0, "node %d" % i)

    def knock_everywhere(self, traffic, ids, steady):
        refused_msgs = {i: self.metric_of(
            i, "oncegate_peer_messages_refused_total") for i in ids}
        links = member_connections(self.cluster, ids)
        marks = {i: log_size(self.cluster.node(i)) for i in ids}
        t_start = time.monotonic()
        probes = self.knock(ids)
        stolen = self.stolen_certificate(steady[0] + 1000)
        probes.append(stolen)
        t_end = time.monotonic()
        with self.part("parts 1-4: every rogue connection is closed and "
                       "logged as refused, none accepted"):
            self.assert_refused(probes, marks)
            self.assertLessEqual(stolen.took, HELLO_CLOSE_BOUND, stolen)
        with self.part("parts 1-4: the nodes' own connections survive the "
                       "rogue"):
            after = member_connections(self.cluster, ids)
            self.assertEqual(
                after, links,
                "the rogue's refused connections broke connections between "
                "the members (kind, node connected to, client port): gone "
                "%s, new %s. Requests in flight on them are lost: every "
                "follower's forward waits for cluster.remote-timeout"
                % (sorted(links - after), sorted(after - links)))
        with self.part("parts 1-4: the cluster serves on"):
            self.assert_no_gap(traffic, t_start, t_end,
                               "while the rogue knocked")
            self.assert_steady(ids, steady, "by the rogue")
            self.assertEqual({i: self.metric_of(
                i, "oncegate_peer_messages_refused_total") for i in ids},
                refused_msgs, "rogue messages reached the actors")
            since = time.monotonic()
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(since) >= 20, 10),
                "no decisions after the rogue: %s" % traffic.summary())

    def misbehaving_members(self, traffic, ids, lid, steady):
        """Part 4b, between the two followers (their link carries no
        request of the Traffic)."""
        lower, higher = sorted(i for i in ids if i != lid)
        links = member_connections(self.cluster, ids)
        marks = {i: log_size(self.cluster.node(i)) for i in ids}
        t_start = time.monotonic()
        probes = self.misbehaving_member(lower, higher)
        t_end = time.monotonic()
        with self.part("part 4b: a member's key that sends junk after its "
                       "true hello is closed (reason=frame)"):
            self.assert_refused(probes, marks)
            self.assertTrue(all(p.took <= HELLO_CLOSE_BOUND for p in probes),
                            probes)
        with self.part("part 4b: the nodes live on, the links are back"):
            for i in ids:
                self.assertIsNone(self.cluster.node(i).check_alive(),
                                  "node %d exited" % i)
            after = member_connections(self.cluster, ids)
            pair = {c for c in after if c[:2] == (lower, higher)}
            self.assertEqual(len(pair), 1, "node %d's links to node %d: %s"
                             % (lower, higher, sorted(pair)))
            self.assertEqual(
                {c for c in after if c[:2] != (lower, higher)},
                {c for c in links if c[:2] != (lower, higher)},
                "the links to the leader changed: before %s, after %s"
                % (sorted(links), sorted(after)))
            self.assert_no_gap(traffic, t_start, t_end,
                               "while a member's key sent junk")
            self.assert_steady(ids, steady, "by the junk frames")

    def impostor(self, traffic, lid, steady):
        """Part 5: a follower's slot taken by a node with a foreign CA's
        certificates (the real one stopped)."""
        # The lower id of the followers: the impostor dials a node (the
        # higher ids), which logs the refusal (a node's failed dial to it
        # is logged at debug level only).
        victim = min(i for i in (1, 2, 3) if i != lid)
        others = [i for i in (1, 2, 3) if i != victim]
        dialled = [i for i in others if i > victim]
        self.assertEqual(self.cluster.node(victim).stop(), 0)
        text = self.cluster.ini_text(victim, [1, 2, 3]).replace(
            os.path.abspath(self.cluster.tls_dir),
            os.path.abspath(self.foreign))
        self.assertIn(os.path.abspath(self.foreign), text)
        ini = os.path.join(self.tmp.path, "impostor.ini")
        with open(ini, "w") as f:
            f.write(text)
        node = ClusterNode(os.path.join(self.tmp.path, "impostor"), ini,
                           victim)
        # The two real nodes serve (their links re-made after the stop).
        since = time.monotonic()
        self.assertTrue(wait_for(
            lambda: traffic.count_decided_since(since) >= 20, 10),
            "no decisions with node %d stopped: %s"
            % (victim, traffic.summary()))
        links = member_connections(self.cluster, others)
        marks = {i: log_size(self.cluster.node(i)) for i in dialled}
        seen = []

        def refusals():
            return {i: sum(1 for line in log_text(self.cluster.node(i),
                                                  marks[i]).splitlines()
                           if "link.refused" in line
                           and "reason=handshake" in line)
                    for i in dialled}

        def watched():
            """The impostor is a stranger; true once each real node has
            refused it a few times, for at least a few election
            timeouts."""
            s = node.status()
            try:
                ready = node.request("GET", "/readyz", timeout=1)[0]
            except OSError:
                ready = None
            seen.append((s and s["leader_id"], s and s["role"], ready))
            if s is None or s["leader_id"] != 0 or ready == 200:
                return True  # fails below
            return (time.monotonic() - t0 > 3.0
                    and all(n >= 3 for n in refusals().values()))

        t0 = time.monotonic()
        node.start()
        try:
            wait_for(watched, 15, 0.1)
            self.assertTrue(seen)
            bad = [x for x in seen if x[0] != 0 or x[2] == 200]
            self.assertEqual(bad, [], "the impostor saw a leader or was "
                             "ready: %s" % seen[-5:])
            self.assertTrue(all(n >= 3 for n in refusals().values()),
                            "the real nodes did not refuse the impostor: %s"
                            % refusals())
            self.assertEqual(node.count_records(), 0,
                             "the impostor got records")
            # The two real nodes serve on, with the same term and leader.
            since = time.monotonic()
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(since) >= 20, 10),
                "no decisions with the impostor: %s" % traffic.summary())
            self.assert_no_gap(traffic, t0, time.monotonic(),
                               "with the impostor in node %d's slot" % victim)
            self.assert_steady(others, steady, "by the impostor")
            after = member_connections(self.cluster, others)
            self.assertEqual(after, links, "the impostor broke connections "
                             "between the real nodes: gone %s, new %s"
                             % (sorted(links - after),
                                sorted(after - links)))
            print("impostor in node %d's slot for %.1fs: refusals by the "
                  "real nodes %s; it saw %s"
                  % (victim, time.monotonic() - t0, refusals(),
                     sorted(set(seen))), file=sys.stderr)
        finally:
            code = node.stop()  # fails on the exit watchdog
            print("impostor log (tail):\n" + node.log_tail(8),
                  file=sys.stderr)
        self.assertEqual(code, 0, "the impostor's exit")
        # The real one comes back and catches up (under traffic: to what
        # the leader had committed when it came back).
        real = self.cluster.node(victim)
        real.start()
        target = self.cluster.node(lid).status()["commit_index"]
        self.cluster.wait_ready([1, 2, 3])

        def caught_up():
            s = real.status()
            return s is not None and s["applied_index"] >= target

        self.assertTrue(wait_for(caught_up, 20, 0.05),
                        "node %d did not catch up to %d: %s"
                        % (victim, target, self.cluster.statuses()))
        self.assert_steady([1, 2, 3], steady, "by node %d's restart" % victim)

    def no_spin(self, node_id, source="127.0.0.1"):
        """Part 6 on `node_id`'s port, connecting from `source`."""
        node = self.cluster.node(node_id)
        port = ports_of(self.cluster, node_id)

        def usage():
            c0, t0 = cpu_seconds(node.pid), time.monotonic()
            time.sleep(CPU_WINDOW)  # the observation window
            return (cpu_seconds(node.pid) - c0) / (time.monotonic() - t0)

        baseline = usage()
        with SilentHolder(port, SILENT_CONNECTIONS, source) as holder:
            loaded = usage()
        lives = holder.lifetimes
        report = ("from %s, node %d: CPU %.0f%% of a core with %d silent "
                  "connections held open vs %.0f%% without (%.1fs windows); "
                  "the node dropped %d of them, after %s s"
                  % (source, node_id, 100 * loaded, SILENT_CONNECTIONS,
                     100 * baseline, CPU_WINDOW, len(lives),
                     "%.2f-%.2f" % (min(lives), max(lives)) if lives
                     else "-"))
        print(report, file=sys.stderr)
        self.assertEqual(holder.errors, [], "the rogue could not connect")
        if source != "127.0.0.1":
            # A stranger gets no handshake: each connection is closed at
            # accept (reason=source), before the link makes a TLS session
            # for it, so the rogue can only flood connects; what it costs
            # is per connection (an accept and a close), bounded, not a
            # spin.
            self.assertTrue(lives, report)
            self.assertLess(max(lives), 0.5, report)
            per_conn = (loaded - baseline) * CPU_WINDOW / max(len(lives), 1)
            self.assertLess(per_conn, STRANGER_CPU, "%s: %.3f ms of CPU per "
                            "refused connection" % (report, 1000 * per_conn))
            return
        self.assertLess(
            loaded - baseline, CPU_BOUND,
            "PRODUCT BUG: silent connections make the node spin: %s. A rogue "
            "that keeps a few TCP connections open without starting TLS "
            "(reconnecting at each deadline) costs the node %.0f%% of a core "
            "for nothing." % (report, 100 * (loaded - baseline)))


if __name__ == "__main__":
    unittest.main()
