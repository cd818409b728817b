"""Partitions: real 3-node clusters with `cluster.partitions=8` on loopback,
in front of the counting test upstream, on a route that forwards to it.

What must hold:
- every partition gets a leader, the same on every node, and the leaders
  spread: each node leads floor(8/3) or ceil(8/3) partitions once calm;
  /v1/cluster, `oncegate cluster status` and /metrics show each partition;
- keys sent to any node are decided once, in their partition only (the
  documented hash, computed here): each executes once at the upstream,
  its record is in that partition's SQLite on every node and in no other,
  and a duplicate through another node is answered from the first
  decision; 30 identical webhooks at once on all nodes execute once;
- one partition's leadership moves on its own (`transfer --partition`);
  a partition beyond the count is refused (409), a malformed one 400;
- the node leading most partitions is killed under traffic: the others
  lead every partition, nothing acked is lost or executed twice, and
  after its restart it catches up and leads its share again;
- the partition count is fixed: a node whose data dir has another count
  (its `partitions` file, or data of a build before partitions), or whose
  file is damaged, refuses to start with the reason; a node configured
  with another count than its peers is refused by their links and never
  joins, while the cluster goes on.
Every wait is a bounded poll; every process is killed in tearDown.
"""

import hashlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import unittest

from harness import BIN, join_threads, metric, start_threads, wait_for
import test_cluster as tc
from test_cluster import (ROUTE, Cluster, OwnClusterCase, SharedClusterCase,
                          Traffic, with_logs)

P = 8
SPREAD_TIMEOUT = 30.0


def partition_of(route, key, partitions):
    """docs/cluster.md, "Partitions" (common/partition.hpp)."""
    r, k = route.encode(), key.encode()
    digest = hashlib.sha256(struct.pack("<I", len(r)) + r + k).digest()
    return int.from_bytes(digest[:8], "big") % partitions


class PartitionedCluster(Cluster):
    def __init__(self, root, upstream_url, **kw):
        kw.setdefault("partitions", P)
        super().__init__(root, upstream_url, **kw)


def partition_leaders(status):
    """{partition: leader id} of one node's /v1/cluster (None: no answer)."""
    if status is None:
        return None
    return {p["partition"]: p["leader_id"] for p in status["partitions"]}


def agreed_leaders(cluster, ids):
    """{partition: leader} when every node in `ids` names the same, known,
    ready leader for every partition; else None."""
    seen = [partition_leaders(cluster.node(i).status()) for i in ids]
    if any(s is None or len(s) != P for s in seen):
        return None
    if any(s != seen[0] for s in seen[1:]):
        return None
    if any(lid == 0 or lid not in ids for lid in seen[0].values()):
        return None
    # The leader itself says it is ready.
    for g, lid in seen[0].items():
        parts = cluster.node(lid).status()["partitions"]
        if not parts[g]["leader_ready"]:
            return None
    return seen[0]


def led_counts(leaders, ids):
    return {i: sum(1 for lid in leaders.values() if lid == i) for i in ids}


def spread(leaders, ids):
    """Each node leads floor(P/N) or ceil(P/N) partitions."""
    counts = led_counts(leaders, ids)
    lo, hi = P // len(ids), -(-P // len(ids))
    return all(lo <= n <= hi for n in counts.values())


class PartitionedClusterTest(SharedClusterCase):
    """One 3-node cluster of 8 partitions for the cases that leave it whole
    again."""

    cluster_class = PartitionedCluster

    def wait_spread(self, ids=(1, 2, 3)):
        ids = list(ids)
        got = {}

        def calm():
            leaders = agreed_leaders(self.cluster, ids)
            if leaders is None or not spread(leaders, ids):
                return False
            got["leaders"] = leaders
            return True

        self.assertTrue(wait_for(calm, SPREAD_TIMEOUT, 0.1),
                        "partition leaders not agreed and spread within %ss: "
                        "%s" % (SPREAD_TIMEOUT, {
                            i: partition_leaders(self.cluster.node(i).status())
                            for i in ids}))
        return got["leaders"]

    def post(self, node_id, key, body=None, timeout=15):
        body = body or json.dumps({"order": key, "qty": 1})
        return self.cluster.node(node_id).request(
            "POST", "/v1/webhook/" + ROUTE, body=body,
            headers={"Idempotency-Key": key, "Content-Type":
                     "application/json"}, timeout=timeout)

    @with_logs
    def test_partition_leaders_spread_and_show_in_status_and_metrics(self):
        leaders = self.wait_spread()
        print("\npartition leaders %s, per node %s" % (
            leaders, led_counts(leaders, (1, 2, 3))), file=sys.stderr)
        st = self.cluster.node(1).status()
        self.assertEqual([p["partition"] for p in st["partitions"]],
                         list(range(P)))
        for p in st["partitions"]:
            for field in ("role", "term", "commit_index", "applied_index",
                          "lag", "leader_ready", "leader_changes"):
                self.assertIn(field, p)
        # Partition 0's fields stay at the top (clients of one partition).
        self.assertEqual(st["leader_id"], leaders[0])
        # Metrics: one series per partition.
        node2 = self.cluster.node(2)
        for g in range(P):
            self.assertEqual(metric(node2, 'oncegate_partition_leader_id'
                                    '{partition="%d"}' % g), leaders[g])
        led = sum(metric(node2, 'oncegate_partition_is_leader'
                         '{partition="%d"}' % g) for g in range(P))
        self.assertEqual(led, led_counts(leaders, (1, 2, 3))[2])
        # The CLI's table.
        n = self.cluster.node(3)
        out = subprocess.run(
            [BIN, "cluster", "status", "--node=http://127.0.0.1:%d" % n.port],
            capture_output=True,
            text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("PARTITION", out.stdout)
        lines = [l.split() for l in out.stdout.splitlines()]
        rows = {int(l[0]): int(l[1]) for l in lines
                if len(l) == 6 and l[0].isdigit() and l[1].isdigit()}
        self.assertEqual(rows, leaders)

    @with_logs
    def test_keys_through_any_node_are_decided_once_in_their_partition(self):
        self.wait_spread()
        keys = ["part-%02d" % i for i in range(48)]
        homes = {k: partition_of(ROUTE, k, P) for k in keys}
        self.assertEqual(len(set(homes.values())), P,
                         "the keys do not cover every partition")
        for i, k in enumerate(keys):
            code, _, body = self.post(1 + i % 3, k)
            self.assertEqual(code, 200, body)
        # The same keys again, each through another node: the first decision.
        for i, k in enumerate(keys):
            code, _, body = self.post(1 + (i + 1) % 3, k)
            self.assertIn(code, (200, 409), body)
            if code == 200:  # a replay, never a second execution
                pass
        counts = self.up.counts()["keys"]
        self.assertEqual({k: counts.get(k) for k in keys},
                         {k: 1 for k in keys}, "executions per key")
        self.cluster.wait_converged()

        def placed():
            for i in (1, 2, 3):
                node = self.cluster.node(i)
                for g in range(P):
                    have = {r[0] for r in node.query(
                        "SELECT key FROM records WHERE route = ?", ROUTE,
                        partition=g) if r[0].startswith("part-")}
                    want = {k for k in keys if homes[k] == g}
                    if have != want:
                        placed.last = (i, g, sorted(have ^ want))
                        return False
            return True

        placed.last = None
        self.assertTrue(wait_for(placed, 20, 0.1),
                        "node, partition, keys misplaced: %s"
                        % (placed.last,))

    @with_logs
    def test_a_backup_has_every_partition(self):
        self.wait_spread()
        keys = ["backup-%02d" % i for i in range(24)]
        for i, k in enumerate(keys):
            code, _, body = self.post(1 + i % 3, k)
            self.assertEqual(code, 200, body)
        self.cluster.wait_converged()
        node = self.cluster.node(2)
        target = os.path.join(self.tmp.path, "backup-%d.db" % time.time_ns())
        out = subprocess.run([BIN, "--data-dir=" + node.data_dir,
                              "--backup-to=" + target],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.count("backup of"), P, out.stdout)
        files = [target] + ["%s.p%d" % (target, g) for g in range(1, P)]
        for g, path in enumerate(files):
            db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
            try:
                have = {k for (k,) in db.execute(
                    "SELECT key FROM records WHERE route = ?", (ROUTE,))
                    if k.startswith("backup-")}
            finally:
                db.close()
            self.assertEqual(have, {k for k in keys
                                    if partition_of(ROUTE, k, P) == g}, g)

    @with_logs
    def test_concurrent_identical_webhooks_on_all_nodes_execute_once(self):
        self.wait_spread()
        n = 30
        key = "same-partitioned-key"
        body = json.dumps({"order": key, "qty": 1})
        self.up.set_mode("slow", 0.3)
        results = []
        lock = threading.Lock()

        def send(i):
            code, _, _ = self.post(1 + i % 3, key, body)
            with lock:
                results.append(code)

        threads = start_threads(send, range(n))
        self.assertTrue(join_threads(threads, 60), "senders hung")
        self.assertEqual(results.count(200), 1, results)
        self.assertEqual(len(results), n)
        self.assertTrue(all(c in (200, 409) for c in results), results)
        self.assertEqual(self.up.counts()["keys"].get(key), 1)

    @with_logs
    def test_one_partition_moves_alone_and_bad_partitions_are_refused(self):
        leaders = self.wait_spread()
        g = max(leaders)  # the last partition
        old = leaders[g]
        to = 1 if old != 1 else 2
        code, _, body = self.cluster.node(3).request(
            "POST", "/v1/cluster/transfer?to=%d&partition=%d" % (to, g))
        self.assertEqual(code, 200, body)
        self.assertEqual(json.loads(body)["leader_id"], to)

        def moved():
            now = agreed_leaders(self.cluster, [1, 2, 3])
            return now is not None and now[g] == to
        self.assertTrue(wait_for(moved, 10, 0.05),
                        "partition %d did not move to %d" % (g, to))
        code, _, body = self.cluster.node(1).request(
            "POST", "/v1/cluster/transfer?to=2&partition=%d" % P)
        self.assertEqual(code, 409, body)
        self.assertIn(b"no partition", body)
        for bad in ("x", "-1", "256", "1000"):
            code, _, body = self.cluster.node(1).request(
                "POST", "/v1/cluster/transfer?to=2&partition=" + bad)
            self.assertEqual(code, 400, (bad, body))
        # The balancer spreads them again (the move left one node with
        # one more or one fewer).
        self.wait_spread()

    @with_logs
    def test_the_node_leading_most_is_killed_and_leads_its_share_again(self):
        leaders = self.wait_spread()
        counts = led_counts(leaders, (1, 2, 3))
        victim = max(counts, key=lambda i: (counts[i], -i))
        survivors = [i for i in (1, 2, 3) if i != victim]
        traffic = Traffic(self.cluster, "pkill").start()
        try:
            t0 = time.monotonic()
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(t0) >= 30, 15),
                "no traffic: %s" % traffic.summary())
            t_fail = time.monotonic()
            self.cluster.node(victim).kill()
            self.assertTrue(wait_for(
                lambda: agreed_leaders(self.cluster, survivors) is not None,
                15, 0.02), "the survivors do not lead every partition: %s"
                % self.cluster.statuses(survivors))
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(t_fail) >= 60, 20),
                "no traffic after the failover: %s" % traffic.summary())
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        gap, at = traffic.largest_gap_around(t_fail)
        print("\nkilled node %d (led %d of %d partitions): largest gap "
              "between decisions %.2fs (from %+.2fs); %s"
              % (victim, counts[victim], P, gap, at, traffic.summary()),
              file=sys.stderr)
        undecided = [k for k, e in traffic.keys.items() if e["status"] is None]
        self.assertEqual(undecided, [])
        self.cluster.wait_converged(survivors)
        self.assert_at_most_once(self.up, traffic, survivors)
        node = self.cluster.node(victim)
        node.start()
        self.cluster.wait_ready()
        leaders = self.wait_spread()
        self.assertGreaterEqual(led_counts(leaders, (1, 2, 3))[victim],
                                P // 3)
        self.assert_tables_equal([1, 2, 3])
        self.assert_at_most_once(self.up, traffic, [1, 2, 3])
        self.assert_nothing_left_in_flight([1, 2, 3], "pkill-", traffic)


class MembershipOfEveryPartitionTest(OwnClusterCase):
    """`oncegate cluster add/remove` change every partition's
    configuration: a fourth node joins all eight, leads its share, and
    leaves all eight (handing on the partitions it leads first)."""

    PEERS = 4
    PARTITIONS = P

    def partitions(self, node_id):
        s = self.cluster.node(node_id).status()
        return None if s is None else s["partitions"]

    def all_voters(self, ids, want):
        for i in ids:
            parts = self.partitions(i)
            if parts is None or any(sorted(p["voters"]) != want
                                    for p in parts):
                return False
        return True

    @with_logs
    def test_a_fourth_node_joins_every_partition_leads_its_share_and_leaves(
            self):
        self.start_nodes([1, 2, 3], [1, 2, 3])
        for i in (1, 2, 3):
            self.assertEqual(self.cluster.node(i).stop(), 0)
        self.start_nodes([1, 2, 3], [1, 2, 3, 4])
        for n in range(8):
            self.assertEqual(self.post(n % 3 + 1, "early-%d" % n)[0], 200)
        n4 = self.cluster.add(4, [1, 2, 3, 4], join=True).start()
        status, _, body = self.cluster.node(2).request(
            "POST", "/v1/cluster/members/4", timeout=30)
        self.assertEqual(status, 200, body)
        self.assertTrue(wait_for(
            lambda: self.all_voters((1, 2, 3, 4), [1, 2, 3, 4]), 20, 0.05),
            self.cluster.statuses())
        # The balancer gives the newcomer its share: 2 of 8.
        ids = [1, 2, 3, 4]

        def shared():
            leaders = agreed_leaders(self.cluster, ids)
            return leaders is not None and spread(leaders, ids)

        self.assertTrue(wait_for(shared, SPREAD_TIMEOUT, 0.1),
                        {i: partition_leaders(self.cluster.node(i).status())
                         for i in ids})
        for n in range(8):
            self.assertEqual(self.post(4, "under-4-%d" % n)[0], 200)
        status, _, body = self.cluster.node(1).request(
            "DELETE", "/v1/cluster/members/4", timeout=30)
        self.assertEqual(status, 200, body)
        self.assertTrue(wait_for(
            lambda: self.all_voters((1, 2, 3), [1, 2, 3]), 20, 0.05),
            self.cluster.statuses([1, 2, 3]))
        self.assertTrue(wait_for(
            lambda: agreed_leaders(self.cluster, [1, 2, 3]) is not None, 20,
            0.05), self.cluster.statuses([1, 2, 3]))
        self.assertEqual(n4.stop(), 0)
        for n in range(6):
            self.assertEqual(self.post(n % 3 + 1, "after-%d" % n)[0], 200)
        self.cluster.wait_converged([1, 2, 3])
        self.assert_tables_equal([1, 2, 3])
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], "")
        counts = self.up.counts()
        self.assertEqual(counts["total"], 22)
        self.assertEqual(set(counts["keys"].values()), {1})


class SlowTimeoutCluster(PartitionedCluster):
    """cluster.remote-timeout 10 s: far beyond an election."""

    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join).replace(
            "remote-timeout=1s", "remote-timeout=10s")


class HungLeaderTest(OwnClusterCase):
    """A request forwarded to a partition's leader that hangs (SIGSTOP) is
    retried at the partition's next leader as soon as the forwarding node
    learns of it, with its request id, not after cluster.remote-timeout:
    with 10 s of that and 3 s of leader-wait, the build before answered
    503 after 10 s; now 200, executed once."""

    def setUp(self):
        super().setUp()
        self.cluster = SlowTimeoutCluster(self.tmp.path + "/slow",
                                          self.up.url)

    @with_logs
    def test_a_request_to_a_hung_leader_is_retried_at_the_next(self):
        for i in (1, 2, 3):
            self.cluster.add(i, [1, 2, 3])
        for i in (1, 2, 3):
            self.cluster.node(i).start()
        self.cluster.wait_leader()
        self.cluster.wait_ready()
        leaders = None

        def agreed():
            nonlocal leaders
            leaders = agreed_leaders(self.cluster, [1, 2, 3])
            return leaders is not None and spread(leaders, [1, 2, 3])
        self.assertTrue(wait_for(agreed, SPREAD_TIMEOUT, 0.05))
        # A key whose partition another node than node 1 leads.
        key = next(k for k in ("hung-%d" % n for n in range(1000))
                   if leaders[partition_of(ROUTE, k, P)] != 1)
        victim = leaders[partition_of(ROUTE, key, P)]
        self.cluster.node(victim).sigstop()
        try:
            code, _, body = self.cluster.node(1).request(
                "POST", "/v1/webhook/" + ROUTE, body=json.dumps({"k": key}),
                headers={"Idempotency-Key": key}, timeout=30)
        finally:
            self.cluster.node(victim).sigcont()
        self.assertEqual(code, 200, body)
        self.assertEqual(self.up.executions(key), 1)


# The cluster suite's cases on a cluster of eight partitions (their
# "leader" is partition 0's; every partition decides).
class P8SharedClusterTest(tc.SharedClusterTest):
    cluster_class = PartitionedCluster


class P8QuorumLossTest(tc.QuorumLossTest):
    PARTITIONS = P


class P8LeaderShutdownTest(tc.LeaderShutdownTest):
    PARTITIONS = P


class PartitionCountTest(OwnClusterCase):
    """The partition count is fixed when a cluster is created."""

    def setUp(self):
        super().setUp()
        self.cluster = PartitionedCluster(self.tmp.path + "/p", self.up.url)

    def refused_start(self, node, text):
        """Starts `node` expecting it to exit at start with `text`."""
        out = subprocess.run(node.command(), capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        log = out.stderr + out.stdout
        try:
            with open(node.log_path, errors="replace") as f:
                log += f.read()
        except OSError:
            pass
        self.assertIn(text, log)
        return log

    @with_logs
    def test_another_count_in_the_data_dir_is_refused_with_the_reason(self):
        node = self.cluster.add(1, [1, 2, 3])
        # A data dir of a one-partition cluster (a build before partitions
        # wrote no `partitions` file): refused with 8, data untouched.
        os.makedirs(os.path.join(node.data_dir, "raft"), exist_ok=True)
        self.refused_start(node, "holds a cluster of 1 partition(s)")
        self.assertFalse(os.path.exists(os.path.join(node.data_dir,
                                                     "partitions")))
        self.assertFalse(os.path.exists(os.path.join(node.data_dir,
                                                     "oncegate-p1.db")))
        # A `partitions` file that says 4.
        with open(os.path.join(node.data_dir, "partitions"), "w") as f:
            f.write("4\n")
        self.refused_start(node, "cluster.partitions is 8 but")
        # A damaged one.
        for junk in ("", "eight\n", "0\n", "300\n", "8\n8\n"):
            with open(os.path.join(node.data_dir, "partitions"), "w") as f:
                f.write(junk)
            self.refused_start(node, "does not hold a partition count")

    @with_logs
    def test_a_one_group_cluster_upgrades_in_place_and_keeps_its_count(self):
        """The upgrade path (docs/cluster.md, Partitions): the data dirs of
        a cluster of the builds before partitions (one group, no
        `partitions` file) start with this build at P = 1 and keep every
        decision; the count they hold is fixed: P = 8 on them is refused."""
        old = tc.Cluster(self.tmp.path + "/old", self.up.url)
        self.cluster = old
        for i in (1, 2, 3):
            old.add(i, [1, 2, 3])
        for i in (1, 2, 3):
            old.node(i).start()
        old.wait_leader()
        old.wait_ready()
        keys = ["upgrade-%d" % n for n in range(6)]
        for n, k in enumerate(keys):
            code, _, body = old.node(n % 3 + 1).request(
                "POST", "/v1/webhook/" + ROUTE, body=json.dumps({"k": k}),
                headers={"Idempotency-Key": k}, timeout=15)
            self.assertEqual(code, 200, body)
        old.wait_converged()
        for i in (1, 2, 3):
            self.assertEqual(old.node(i).stop(), 0)
            # As a build before partitions left it.
            os.remove(os.path.join(old.node(i).data_dir, "partitions"))
        for i in (1, 2, 3):
            old.node(i).start()
        old.wait_leader()
        old.wait_ready()
        for n, k in enumerate(keys):
            code, _, body = old.node((n + 1) % 3 + 1).request(
                "POST", "/v1/webhook/" + ROUTE, body=json.dumps({"k": k}),
                headers={"Idempotency-Key": k}, timeout=15)
            self.assertEqual(code, 409, body)
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 1 for k in keys})
        for i in (1, 2, 3):
            with open(os.path.join(old.node(i).data_dir, "partitions")) as f:
                self.assertEqual(f.read(), "1\n")
        node = old.node(1)
        self.assertEqual(node.stop(), 0)
        with open(node.ini) as f:
            text = f.read()
        with open(node.ini, "w") as f:
            f.write(text.replace("[cluster]\n", "[cluster]\npartitions=8\n"))
        self.refused_start(node, "cluster.partitions is 8 but")
        self.assertFalse(os.path.exists(os.path.join(node.data_dir,
                                                     "oncegate-p1.db")))

    @with_logs
    def test_a_node_with_another_count_is_refused_by_the_others(self):
        for i in (1, 2, 3):
            self.cluster.add(i, [1, 2, 3])
        # Node 3 is told 4 partitions (a fresh data dir: it writes 4).
        ini = self.cluster.node(3).ini
        with open(ini) as f:
            text = f.read()
        with open(ini, "w") as f:
            f.write(text.replace("partitions=8", "partitions=4"))
        for i in (1, 2, 3):
            self.cluster.node(i).start()
        self.cluster.wait_leader([1, 2])
        self.cluster.wait_ready([1, 2])
        for i, k in enumerate(["mixed-%d" % j for j in range(16)]):
            code, _, body = self.cluster.node(1 + i % 2).request(
                "POST", "/v1/webhook/" + ROUTE, body=json.dumps({"k": k}),
                headers={"Idempotency-Key": k,
                         "Content-Type": "application/json"}, timeout=15)
            self.assertEqual(code, 200, body)
        self.assertTrue(wait_for(
            lambda: self.cluster.node(1).log_count("reason=hello") > 0
            or self.cluster.node(2).log_count("reason=hello") > 0, 15),
            "no link refused node 3's hello")
        self.assertFalse(self.cluster.ready(3, 2))
        st = self.cluster.node(3).status()
        self.assertTrue(st is None or st["leader_id"] == 0, st)
        self.assertEqual(self.cluster.node(3).count_records(), 0)


if __name__ == "__main__":
    unittest.main()
