"""Power cuts of a 3-node Raft cluster: the Raft log must hold every claim
that was acknowledged, whichever nodes lose power.

Each node runs under the raftcut library (tests/powerloss/raftcut_shim.c,
LD_PRELOAD): every change to `<data-dir>/raft` that libraft did not make
durable (fsync, fdatasync, or a completed O_DSYNC write, its kernel AIO
writes included) is journaled and rolled back after the SIGKILL
(raftcut.py), so a SIGKILL is a power cut of the Raft log. SQLite is cut
too: the nodes' SQLite runs with synchronous=NORMAL on purpose (the Raft log
is the record) and a real power cut loses its unsynced WAL, so the node runs
`oncegate_mutant` without a mutant (the product) with ONCEGATE_POWERLOSS_VFS=on
(tests/powerloss/powerloss_vfs.hpp). Without that, the page cache would keep
SQLite's copy of every claim and hide the loss of the Raft log: a node would
answer 409 from its SQLite for a claim its Raft log no longer has
(ONCEGATE_RAFTCUT_SQLITE=keep runs the nodes that way, with the normal
`oncegate`, to show it).

Per cycle: fresh load from several senders posting unique keys to all
nodes; once ACKS_BEFORE_CUT claims were answered 200, the power goes out at
once on a majority (the leader and one follower), or on all three nodes;
their unsynced Raft writes are rolled back, they restart, a leader is
elected, and every key answered 200 must be a 409 duplicate through every
node.

- the real build loses nothing in any cycle;
- under ONCEGATE_RAFTCUT_MODE=ignore-sync (syncs do not count: the Raft log
  never fsynced) the same detector must see at least one acknowledged key
  lost within MUTANT_CYCLES cycles.
"""

import http.client
import os
import signal
import sys
import threading
import time
import unittest

import raftcut
from harness import BIN, TempDir, join_threads, start_threads, wait_for
from test_cluster import Cluster

LIB = os.environ.get(
    "ONCEGATE_RAFTCUT_LIB",
    os.path.join(os.environ.get("ONCEGATE_BUILD_DIR", "build"), "tests",
                 "powerloss", "oncegate_raftcut.so"))
# The product with the power-loss VFS on demand.
VFS_BIN = os.environ.get(
    "ONCEGATE_MUTANT_BIN",
    os.path.join(os.environ.get("ONCEGATE_BUILD_DIR", "build"), "tests",
                 "mutants", "oncegate_mutant"))
# cut (default): SQLite loses its unsynced writes too; keep: the normal
# binary, SQLite's writes survive in the page cache.
SQLITE = os.environ.get("ONCEGATE_RAFTCUT_SQLITE", "cut")
SENDERS = 6
ACKS_BEFORE_CUT = 200
LOAD_TIMEOUT = 10.0
# The cycles the real build must survive: the leader and a follower lose
# power, twice (different followers), then all three.
CYCLES = os.environ.get("ONCEGATE_RAFTCUT_CYCLES",
                        "majority,majority,all,majority,all").split(",")
# The mutant's cycles, until one loses a key.
MUTANT_CYCLES = ["majority", "all", "majority", "all"]
CHECK_ATTEMPTS = 20  # per key and node, for answers that are no verdict


class PowerCluster(Cluster):
    """The cluster of test_cluster.py with a shorter leader-wait: a request
    to the survivor of a cut answers 503 after 1 s instead of 3 s."""

    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join).replace(
            "leader-wait=3s", "leader-wait=1s")


class PowerlossClusterTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.path.exists(LIB), "no raftcut library at %s" % LIB)
        if SQLITE == "cut":
            self.assertTrue(os.path.exists(VFS_BIN), "no %s" % VFS_BIN)
        self.tmp = TempDir()
        # The nodes never call an upstream: /v1/webhook is the default route.
        self.cluster = PowerCluster(self.tmp.path, "http://127.0.0.1:9/")
        for i in (1, 2, 3):
            self.cluster.add(i, [1, 2, 3])
        self.t0 = time.monotonic()
        self.acked = []  # every key answered 200, all cycles

    def tearDown(self):
        try:
            self.cluster.kill_all()
        finally:
            self.tmp.cleanup()

    def journal(self, i):
        return os.path.join(self.tmp.path, "journal%d" % i)

    def prepare(self, mode):
        """Every node under the library (in `mode`), SQLite over the VFS."""
        for i in (1, 2, 3):
            node = self.cluster.node(i)
            env = raftcut.env(os.path.join(node.data_dir, "raft"),
                              self.journal(i), LIB, mode)
            if SQLITE == "cut":
                env["ONCEGATE_POWERLOSS_VFS"] = "on"
                node.bin = VFS_BIN
            else:
                node.bin = BIN
            node.env = env

    def form(self, mode):
        """Bootstraps the cluster, then stops it cleanly: what it wrote is
        on disk (the journals are dropped), as for a cluster that has run
        for a while. The cycles then cut processes that started on it."""
        self.prepare(mode)
        for i in (1, 2, 3):
            self.cluster.node(i).start()
        self.cluster.wait_leader()
        self.cluster.wait_ready()
        for i in (1, 2, 3):
            self.assertEqual(self.cluster.node(i).stop(), 0)
            raftcut.discard(self.journal(i))

    def start_down(self):
        for i in (1, 2, 3):
            node = self.cluster.node(i)
            if not node.running:
                node.start()
        lid = self.cluster.wait_leader()
        self.cluster.wait_ready()
        return lid

    def post(self, node_id, key, timeout=5.0):
        node = self.cluster.node(node_id)
        port = node.port
        if not node.running or port is None:
            raise ConnectionRefusedError("node %d is down" % node_id)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("POST", "/v1/webhook", body='{"k":"%s"}' % key,
                         headers={"Content-Type": "application/json",
                                  "Idempotency-Key": key})
            res = conn.getresponse()
            res.read()
            return res.status
        finally:
            conn.close()

    def load_and_cut(self, tag, victims):
        """Senders post unique keys to the nodes in turn until
        ACKS_BEFORE_CUT were answered 200; then `victims(leader)` lose
        power at once. Returns (keys answered 200, the ids cut)."""
        acked = []
        lock = threading.Lock()
        stop = threading.Event()
        first = self.cluster.wait_leader()

        def sender(s):
            for i in range(20000):
                if stop.is_set():
                    return
                key = "%s-s%d-%d" % (tag, s, i)
                try:
                    status = self.post((s + i) % 3 + 1, key)
                except (OSError, http.client.HTTPException):
                    continue  # the power went out under it
                if status == 200:
                    with lock:
                        acked.append(key)

        threads = start_threads(sender, range(SENDERS), daemon=True)
        reached = wait_for(lambda: len(acked) >= ACKS_BEFORE_CUT,
                           LOAD_TIMEOUT)
        cut = victims(self.cluster.ready_leader() or first)
        # The power cut: SIGKILL to all of them before waiting for any.
        for i in cut:
            self.cluster.node(i).proc.send_signal(signal.SIGKILL)
        for i in cut:
            self.cluster.node(i).kill()
        stop.set()
        self.assertTrue(join_threads(threads, 15), "a sender hangs")
        self.assertTrue(reached, "%s: only %d acks in %ss"
                        % (tag, len(acked), LOAD_TIMEOUT))
        return acked, cut

    def lost(self, keys):
        """Every key that some node does not answer 409 (duplicate): key ->
        [(node, answer)]. A 5xx or no answer is no verdict and is asked
        again, bounded; still none is an answer too (None or the 5xx): the
        key is not known to be decided."""
        lost = {}
        lock = threading.Lock()

        def check(part):
            for k in part:
                for i in (1, 2, 3):
                    status = None
                    for _ in range(CHECK_ATTEMPTS):
                        try:
                            status = self.post(i, k)
                        except (OSError, http.client.HTTPException):
                            status = None
                        if status is not None and status < 500:
                            break
                        time.sleep(0.05)  # back off before asking again
                    if status != 409:
                        with lock:
                            lost.setdefault(k, []).append((i, status))

        threads = start_threads(check, (keys[n::SENDERS]
                                        for n in range(SENDERS)), daemon=True)
        self.assertTrue(join_threads(threads, 60), "a check hangs")
        return lost

    def cycle(self, n, kind):
        """One power cut; returns (the keys acked in this cycle, the keys
        acked in any cycle so far that are lost, rollback counts)."""
        self.start_down()

        def victims(lid):
            if kind == "all":
                return [1, 2, 3]
            # The leader and a follower, a different one each cycle.
            others = [i for i in (1, 2, 3) if i != lid]
            return [lid, others[n % 2]]

        acked, cut = self.load_and_cut("c%d" % n, victims)
        counts = {i: raftcut.rollback(self.journal(i)) for i in cut}
        lid = self.start_down()
        self.acked.extend(acked)
        lost = self.lost(self.acked)
        answers = {}
        for k, bad in lost.items():
            for _, status in bad:
                answers[status] = answers.get(status, 0) + 1
        print("powerloss_cluster: cycle %d (%s: nodes %s lost power, leader "
              "now %d): %d acked, %d of all %d acked so far lost (answers "
              "instead of 409: %s); bytes rolled back %s (%.1fs)"
              % (n, kind, cut, lid, len(acked), len(lost), len(self.acked),
                 answers, {i: c["bytes"] for i, c in counts.items()},
                 time.monotonic() - self.t0), file=sys.stderr)
        return acked, lost, counts

    def test_no_acknowledged_claim_is_lost_when_a_majority_or_all_lose_power(
            self):
        try:
            self.form("real")
            total = 0
            for n, kind in enumerate(CYCLES):
                acked, lost, _ = self.cycle(n, kind)
                self.assertEqual(
                    lost, {}, "cycle %d (%s): %d of %d acked keys lost, e.g. "
                    "%s" % (n, kind, len(lost), len(self.acked),
                            sorted(lost.items())[:5]))
                total += len(acked)
        except BaseException:
            print("\n" + self.cluster.logs(), file=sys.stderr)
            raise
        print("powerloss_cluster: real Raft log, %d cycles, %d acked keys, "
              "0 lost (%.1fs)" % (len(CYCLES), total,
                                  time.monotonic() - self.t0),
              file=sys.stderr)

    def test_catches_a_raft_log_that_is_never_synced(self):
        try:
            self.form("ignore-sync")
            for n, kind in enumerate(MUTANT_CYCLES):
                acked, lost, _ = self.cycle(n, kind)
                if lost:
                    print("powerloss_cluster: ignore-sync caught in cycle %d "
                          "(%s): %d of %d acked keys lost (%.1fs)"
                          % (n, kind, len(lost), len(self.acked),
                             time.monotonic() - self.t0), file=sys.stderr)
                    return
        except BaseException:
            print("\n" + self.cluster.logs(), file=sys.stderr)
            raise
        self.fail("a Raft log without fsync lost no acknowledged key in %d "
                  "power cuts" % len(MUTANT_CYCLES))


if __name__ == "__main__":
    unittest.main()
