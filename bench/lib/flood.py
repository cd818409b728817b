#!/usr/bin/env python3
"""Memory under a flood of large signals: unique keys with 60 KiB bodies,
forwarded to an upstream that answers 60 KiB, on a replay route (the worst
case: answers are kept for duplicates), on one node or a 3-node cluster.

Samples every node's RSS while the flood runs and reports the peak, the RSS
once the flood is over and its key actors idled out, and the bound the
node's byte limits promise (docs/benchmarks.md, "Memory under a flood"):

    R0 + keys.decision-cache-bytes + 2 x store.max-pending-bytes
       + live keys x (1.5 KiB + keys.actor-cache-bytes)
       + concurrent requests x (http.body-limit + upstream-max-response) x 2
       + cluster: cluster.max-log-bytes + 2 x the database file

where R0 is the node's RSS right after start. Prints result rows as CSV
(`scenario,system,metric,value,unit`) on stdout; exits 1 when a peak
exceeds its bound or a request failed.

    flood.py BIN {single|cluster} KEYS SENDERS TMPDIR
"""

import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from test_upstream import TestUpstream  # noqa: E402
from oncegate_drill.base import http_call, wait_until  # noqa: E402
from oncegate_drill.cluster import Cluster, LocalNode, free_ports, \
    make_certs  # noqa
from oncegate_drill.config import peer_entry  # noqa: E402

BODY_PAD = 60 * 1024
ANSWER_PAD = 60 * 1024
# The byte limits of the flooded node(s), small enough that a leak beyond
# them shows.
CACHE_BYTES = 16 * 1024 * 1024
PENDING_BYTES = 8 * 1024 * 1024
ACTOR_CACHE = 4096
LOG_BYTES = int(os.environ.get("FLOOD_LOG_BYTES", 32 * 1024 * 1024))
BODY_LIMIT = 64 * 1024
MAX_RESPONSE = 64 * 1024
KIB = 1024


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Proc(LocalNode):
    """One flooded node (the drill's LocalNode on port 0), started at once."""

    start_timeout = 60.0
    start_marker = None

    def __init__(self, bin_, data, args, node_id=None):
        super().__init__(node_id, "127.0.0.1", 0, data, None, data,
                         [bin_, "--http-port=0", "--data-dir=" + data,
                          "--log-level=warn"] + args)
        self.data = data
        self.start()

    def get(self, path):
        status, _, body = self.call("GET", path, timeout=5)
        return status, body

    def metric(self, name):
        status, body = self.get("/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def stop(self):
        self.send_term()
        self.wait_exit(60)


def wait_for(pred, timeout, interval=0.05):
    return bool(wait_until(pred, timeout, interval))


def route_ini(upstream_url):
    return ("[route.flood]\nupstream=\"%s\"\non-duplicate=\"replay\"\n"
            "upstream-max-response=%d\n" % (upstream_url, MAX_RESPONSE))


def node_args(ini):
    return ["--config-file=" + ini,
            "--keys.decision-cache-bytes=%d" % CACHE_BYTES,
            "--keys.actor-cache-bytes=%d" % ACTOR_CACHE,
            "--keys.idle-timeout=2s",
            "--store.max-pending-bytes=%d" % PENDING_BYTES,
            "--http.body-limit=%d" % BODY_LIMIT]


def start_single(bin_, tmp, url):
    ini = os.path.join(tmp, "node.ini")
    with open(ini, "w") as f:
        f.write(route_ini(url))
    return [Proc(bin_, os.path.join(tmp, "single"), node_args(ini))]


def start_cluster(bin_, tmp, url):
    ports = free_ports(3)
    ini = os.path.join(tmp, "cluster.ini")
    peers = ",".join(peer_entry(i, "127.0.0.1", ports[i - 1])
                     for i in (1, 2, 3))
    tls = make_certs(os.path.join(tmp, "tls"), (1, 2, 3))
    with open(ini, "w") as f:
        f.write(route_ini(url))
        f.write("[cluster]\npeers=[%s]\nelection-timeout=500ms\n"
                "heartbeat-timeout=50ms\nmax-log-bytes=%d\n"
                "tls-ca=\"%s/ca.pem\"\n"
                % (peers, LOG_BYTES, tls))
    nodes = [Proc(bin_, os.path.join(tmp, "node%d" % i),
                  node_args(ini) + [
                      "--cluster.id=%d" % i,
                      "--cluster.tls-certificate=%s/node-%d.pem" % (tls, i),
                      "--cluster.tls-key=%s/node-%d.key" % (tls, i)], i)
             for i in (1, 2, 3)]
    lid = Cluster(nodes).wait_leader(timeout=60)
    if lid is None:
        raise RuntimeError("no ready leader")
    lead = nodes[lid - 1]
    nodes.remove(lead)
    return [lead] + nodes  # the leader first: senders talk to it


def flood(node, keys, senders, prefix):
    """Sends every key once (60 KiB body); returns (statuses, seconds)."""
    statuses = {}
    lock = threading.Lock()
    pad = "p" * BODY_PAD

    def sender(t):
        conn = None
        for i in range(t, keys, senders):
            key = "%s-%d" % (prefix, i)
            body = json.dumps({"order": key, "pad": pad})
            for attempt in range(3):
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(
                            "127.0.0.1", node.port, timeout=30)
                    conn.request("POST", "/v1/webhook/flood", body,
                                 {"Content-Type": "application/json",
                                  "Idempotency-Key": key})
                    r = conn.getresponse()
                    r.read()
                    with lock:
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                    break
                except (OSError, http.client.HTTPException):
                    conn = None
        if conn is not None:
            conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=sender, args=(t,))
               for t in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return statuses, time.monotonic() - t0


def main(argv):
    if len(argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    bin_, mode, keys, senders, tmpbase = argv[1], argv[2], int(argv[3]), \
        int(argv[4]), argv[5]
    tmp = tempfile.mkdtemp(prefix="oncegate-flood-", dir=tmpbase)
    up = TestUpstream(pad=ANSWER_PAD).start()
    nodes = []
    scenario = "flood_" + mode
    system = "oncegate" if mode == "single" else "oncegate_cluster3"
    ok = True
    rows = []

    def emit(metric, value, unit):
        rows.append("%s,%s,%s,%s,%s" % (scenario, system, metric, value, unit))

    try:
        nodes = (start_single if mode == "single" else start_cluster)(
            bin_, tmp, up.url)
        r0 = {n.pid: rss_kib(n.pid) for n in nodes}
        peak = dict(r0)
        sampling = True

        def sample():
            while sampling:
                for n in nodes:
                    peak[n.pid] = max(peak[n.pid], rss_kib(n.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        statuses, secs = flood(nodes[0], keys, senders, "f")
        # Duplicates replay the stored 60 KiB answers (cache and store).
        dups, _ = flood(nodes[0], min(keys, 500), senders, "f")
        sampling = False
        sampler.join(5)
        executed = up.counts()["total"]
        emit("keys", keys, "count")
        emit("senders", senders, "count")
        emit("seconds", "%.2f" % secs, "s")
        emit("answered_200", statuses.get(200, 0), "count")
        emit("upstream_executions", executed, "count")
        if statuses.get(200, 0) != keys or executed != keys \
                or dups.get(200, 0) != min(keys, 500):
            sys.stderr.write("flood: statuses %r, duplicates %r, upstream "
                             "executions %d\n" % (statuses, dups, executed))
            ok = False
        # Let the key actors idle out, then the RSS they left behind.
        wait_for(lambda: all((n.metric("oncegate_live_key_actors") or 0) == 0
                             for n in nodes), 30)
        for idx, n in enumerate(nodes):
            db_kib = sum(os.path.getsize(os.path.join(n.data, f))
                         for f in ("oncegate.db", "oncegate.db-wal")
                         if os.path.exists(os.path.join(n.data, f))) // KIB
            live = keys  # every key was live at some point of the flood
            bound = (r0[n.pid] + CACHE_BYTES // KIB + 2 * PENDING_BYTES // KIB
                     + live * (1536 + ACTOR_CACHE) // KIB
                     + senders * 2 * (BODY_LIMIT + MAX_RESPONSE) // KIB)
            if mode == "cluster":
                bound += LOG_BYTES // KIB + 2 * db_kib
            name = "node%d" % (idx + 1) if mode == "cluster" else "node"
            after = rss_kib(n.pid)
            emit(name + "_rss_start_kib", r0[n.pid], "KiB")
            emit(name + "_rss_peak_kib", peak[n.pid], "KiB")
            emit(name + "_rss_after_kib", after, "KiB")
            emit(name + "_bound_kib", bound, "KiB")
            emit(name + "_database_kib", db_kib, "KiB")
            emit(name + "_peak_within_bound", int(peak[n.pid] <= bound),
                 "bool")
            if peak[n.pid] > bound:
                sys.stderr.write("flood: %s peak RSS %d KiB over its bound "
                                 "%d KiB\n" % (name, peak[n.pid], bound))
                ok = False
    finally:
        for n in nodes:
            n.stop()
        up.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for r in rows:
        print(r)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
