"""Raft cluster: real 3-node clusters on loopback in front of the counting
test upstream (tools/test_upstream.py), on a route that forwards to it.

What must hold:
- 30 identical webhooks sent at once to all nodes execute once: one 200,
  the rest 409;
- a killed (SIGKILL) or hung (SIGSTOP) leader, under traffic from senders
  that retry a key on 5xx or a connection error: a new ready leader within
  3 s, decisions again within 3 s, no key executed twice at the upstream,
  every key answered 200 executed once and stored on both survivors; the
  old leader (restarted, or SIGCONT) catches up and its `records` table
  equals the others' (every column), and no record stays in flight;
- two of three nodes down: the survivor answers 503 with Retry-After,
  /readyz 503, stores nothing, calls nothing upstream; and once the quorum
  is back, the keys it refused execute when the sender retries;
- membership: a fourth node joins (POST on a follower), catches up, takes
  over leadership, hands it back and is removed;
- /metrics on a follower: raft term, is_leader 0, the leader's id.

Every node gets its own INI (free ports picked up front), data dir and log
file in a temp dir; the tail of every log is printed when a test fails.
Every wait is a bounded poll; every process is killed in tearDown (and at
exit, should the interpreter get there first). The nodes, the [cluster]
text and the status rules are the drill's (tools/oncegate_drill: cluster.py,
config.py); ClusterNode and Cluster add what these tests assert on.
"""

import atexit
import contextlib
import json
import os
import sqlite3
import ssl
import subprocess
import socket
import sys
import threading
import time
import unittest
import http.client

from harness import (BIN, Node, TempDir, join_threads, start_threads,
                     wait_for)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402
from oncegate_drill import cluster as drill_cluster  # noqa: E402
from oncegate_drill.base import TRANSPORT_ERRORS, http_call  # noqa: E402
from oncegate_drill.cluster import caught_up, free_ports  # noqa: E402
from oncegate_drill.config import cluster_section, peer_entry  # noqa: E402
from oncegate_drill.verdict import COMPLETED, IN_DOUBT, IN_FLIGHT  # noqa: F401,E402

ROUTE = "orders"  # forwards to the counting upstream
# A new leader must serve within this long of losing the old one.
FAILOVER_BOUND = 3.0
START_TIMEOUT = 20.0
CONVERGE_TIMEOUT = 20.0
# Compared between nodes: every column. Each one is written by applying the
# same log entries, so none may differ (route and key first: keys() and the
# tests index rows by them).
RECORD_COLUMNS = ("route,key,state,fingerprint,status,response,first_seen_ms,"
                  "expires_at_ms,headers,signal,owner,request_id")

_live = set()  # every started node, killed at exit whatever happened


@atexit.register
def _kill_leftovers():
    for node in list(_live):
        try:
            node.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class ClusterNode(drill_cluster.LocalNode):
    """One cluster member: its INI file, data dir and log (the drill's
    LocalNode on port 0, with harness.Node's `request`, `log` and `stop`).
    `bin` and `env` may be changed before a start."""

    start_marker = None
    port_from_ready_line = True

    def __init__(self, data_dir, ini, node_id=None, bin=None, env=None):
        super().__init__(node_id, "127.0.0.1", None, data_dir, ini,
                         data_dir, None, env=env)
        self.bin = bin  # another build of the node; default harness.BIN

    def command(self):
        return [self.bin or BIN, "--http-port=0",
                "--data-dir=" + self.data_dir, "--log-level=warn",
                "--config-file=" + self.ini, "--log-level=info"]

    def start(self):
        super().start()
        _live.add(self)
        return self

    def kill(self):
        super().kill()
        _live.discard(self)

    def stop(self):
        """SIGTERM, then wait; returns the exit code."""
        if self.proc is None:
            return None
        code = self.term()
        _live.discard(self)
        if code is None:
            raise RuntimeError("node did not stop within %ss"
                               % drill_cluster.STOP_TIMEOUT)
        # The exit watchdog is a last resort that no test may need: its line
        # means the teardown hung.
        if self.log_count("node.exit_forced"):
            raise AssertionError("node %s needed the exit watchdog:\n%s"
                                 % (self.id, self.log()))
        return code

    sigstop = drill_cluster.LocalNode.hang
    sigcont = drill_cluster.LocalNode.resume

    @property
    def stopped(self):  # SIGSTOPped
        return self.state == "hung"

    @property
    def running(self):
        return self.proc is not None

    log = Node.log  # the tail of the log, as harness.Node's

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        """Returns (status, headers dict with lower-case names, body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        return self.call(method, path, body, hdrs, timeout)

    def get_json(self, path, timeout=1.0):
        """GET a JSON document; None when the node does not answer."""
        if not self.running or self.stopped:
            return None
        try:
            status, _, body = self.request("GET", path, timeout=timeout)
        except TRANSPORT_ERRORS:
            return None
        if status != 200:
            return None
        return json.loads(body)

    def status(self):
        return self.get_json("/v1/cluster")

    def databases(self):
        """The node's SQLite files: partition 0's `oncegate.db`, then
        partition g's `oncegate-p<g>.db` (g = 1, 2, ...)."""
        out = [os.path.join(self.data_dir, "oncegate.db")]
        g = 1
        while os.path.exists(os.path.join(self.data_dir,
                                          "oncegate-p%d.db" % g)):
            out.append(os.path.join(self.data_dir, "oncegate-p%d.db" % g))
            g += 1
        return out

    def query(self, sql, *args, partition=None):
        """Runs `sql` on a read-only connection to the node's SQLite (WAL:
        it reads the last committed state while the node writes): of
        `partition`, or of every partition (the rows of all, in order)."""
        paths = self.databases()
        if partition is not None:
            paths = [paths[partition]]
        rows = []
        for path in paths:
            db = sqlite3.connect("file:%s?mode=ro" % path, uri=True,
                                 timeout=10)
            try:
                rows.extend(db.execute(sql, args).fetchall())
            finally:
                db.close()
        return rows

    def rows(self):
        """The `records` table, sorted."""
        return sorted(self.query("SELECT %s FROM records" % RECORD_COLUMNS),
                      key=repr)

    def keys(self):
        return {row[1] for row in self.rows() if row[0] == ROUTE}

    def rows_in_state(self, state):
        return self.query("SELECT route, key, owner FROM records "
                          "WHERE state = ?", state)

    def record_rows(self, keys):
        return [self.query("SELECT route, key, state, owner, request_id, "
                           "first_seen_ms FROM records WHERE key = ?", k)
                for k in keys]

    def count_records(self):
        return sum(n for (n,) in self.query("SELECT count(*) FROM records"))

    def log_count(self, text):
        """How often `text` occurs in the whole log."""
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read().count(text)
        except OSError:
            return 0


class Cluster(drill_cluster.Cluster):
    """Up to `peers` nodes on loopback, ids 1..peers; each node's INI lists
    the peers it is told to (`add`). The waits raise AssertionError."""

    def __init__(self, root, upstream_url, peers=3, tls=True,
                 partitions=None, election_timeout="500ms"):
        super().__init__()
        self.root = root
        self.partitions = partitions
        self.election_timeout = election_timeout
        self.upstream_url = upstream_url
        # Mutual TLS between the nodes, as every cluster runs by default.
        self.tls_dir = drill_cluster.make_certs(
            os.path.join(root, "tls"), range(1, peers + 1)) if tls else None
        ports = free_ports(peers)
        self.peer_lines = [peer_entry(i + 1, "127.0.0.1", ports[i])
                           for i in range(peers)]

    def ini_text(self, node_id, peer_ids, join=False):
        return """
[global]
http-host="127.0.0.1"
http-threads=1

[scheduler]
policy='sharing'

; membership changes, transfers and releases from loopback, no token
[admin]
allow-unauthenticated-loopback=true

[route.{route}]
upstream="{url}"
""".format(route=ROUTE, url=self.upstream_url) + cluster_section(
            node_id, [self.peer_lines[i - 1] for i in peer_ids],
            remote_timeout="1s", join=join, tls_dir=self.tls_dir,
            partitions=self.partitions,
            election_timeout=self.election_timeout)

    def add(self, node_id, peer_ids, join=False):
        """Writes node `node_id`'s INI (peers: ids listed in cluster.peers)
        and returns its (not yet started) node."""
        data = os.path.join(self.root, "node%d" % node_id)
        os.makedirs(data, exist_ok=True)
        ini = os.path.join(self.root, "node%d.ini" % node_id)
        with open(ini, "w") as f:
            f.write(self.ini_text(node_id, peer_ids, join))
        if node_id not in self.nodes:
            self.nodes[node_id] = ClusterNode(data, ini, node_id)
        return self.nodes[node_id]

    def node(self, node_id):
        return self.nodes[node_id]

    def running(self):
        """Ids of the nodes running and not SIGSTOPped."""
        return self.serving()

    def kill_all(self):
        for n in self.nodes.values():
            n.kill()

    def logs(self):
        out = []
        for i, n in sorted(self.nodes.items()):
            out.append("----- node %d log (tail) -----\n%s" % (i, n.log()))
        return "\n".join(out)

    def statuses(self, ids=None):
        ids = self.running() if ids is None else ids
        return {i: self.nodes[i].status() for i in ids}

    def ready_leader(self, ids=None):
        """The id of a node among `ids` that says it is the ready leader and
        that every other answering node in `ids` names as leader; or None."""
        return self.leader(ids)

    def wait_leader(self, ids=None, timeout=START_TIMEOUT):
        lid = super().wait_leader(ids, timeout, 0.02)
        if lid is None:
            raise AssertionError("no ready leader among %s within %ss: %s"
                                 % (ids or self.running(), timeout,
                                    self.statuses(ids)))
        return lid

    def wait_ready(self, ids=None, timeout=START_TIMEOUT):
        """Every node in `ids` answers /readyz 200."""
        ids = self.running() if ids is None else ids
        if not wait_for(lambda: all(self.ready(i, 2) for i in ids), timeout,
                        0.05):
            raise AssertionError("not ready within %ss: %s"
                                 % (timeout, self.statuses(ids)))

    def wait_converged(self, ids=None, timeout=CONVERGE_TIMEOUT):
        """Every node in `ids` has applied the leader's commit index, twice
        in a row (nothing new committed in between); returns the index."""
        ids = self.running() if ids is None else ids
        last = {}

        def converged():
            commit = caught_up(self.statuses(ids), exact=True)
            if commit is None:
                last.clear()
                return False
            if last.get("commit") == commit:
                return True
            last["commit"] = commit
            return False

        if not wait_for(converged, timeout, 0.1):
            raise AssertionError("not converged within %ss: %s"
                                 % (timeout, self.statuses(ids)))
        return last["commit"]


class Traffic:
    """Sender threads posting unique keys to the nodes in turn, behind a
    load balancer that health-checks every node (GET /healthz, 0.3 s
    timeout, every 50 ms) and skips the ones that fail (all of them when
    none passes). A sender that gets a 5xx, a timeout or a connection error
    retries the same key and body at the next node, like a real sender; any
    other answer is final for the key. Bounded: MAX_KEYS keys per sender,
    MAX_ATTEMPTS attempts and KEY_DEADLINE seconds per key; `stop()` ends
    it."""

    SENDERS = 6
    MAX_KEYS = 5000
    MAX_ATTEMPTS = 40
    KEY_DEADLINE = 30.0  # seconds per key, all attempts
    TIMEOUT = 4.0  # per attempt: above leader-wait (3 s)

    def __init__(self, cluster, tag):
        self.cluster = cluster
        self.tag = tag
        self.ids = sorted(cluster.nodes)
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.healthy = set(self.ids)
        self.stopped_at = None
        # key -> {"status": final status or None, "at": time of the final
        # answer, "started": time of the first attempt, "attempts": [...]}
        self.keys = {}
        self.threads = [threading.Thread(target=self._sender, args=(s,),
                                         daemon=True)
                        for s in range(self.SENDERS)]
        self.threads.append(threading.Thread(target=self._health,
                                             daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout=60.0):
        if not self.stop_flag.is_set():
            self.stopped_at = time.monotonic()
        self.stop_flag.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def _health(self):
        while not self.stop_flag.is_set():
            for i in self.ids:
                node = self.cluster.node(i)
                ok = False
                if node.running and node.port is not None:
                    try:
                        ok = node.request("GET", "/healthz",
                                          timeout=0.3)[0] == 200
                    except (OSError, http.client.HTTPException):
                        pass
                with self.lock:
                    (self.healthy.add if ok else self.healthy.discard)(i)
            self.stop_flag.wait(0.05)

    def _pick(self, n):
        """The n-th node in turn among the healthy ones."""
        with self.lock:
            ids = sorted(self.healthy) or self.ids
        return ids[n % len(ids)]

    def _post(self, node_id, key, body):
        node = self.cluster.node(node_id)
        port = node.port
        if not node.running or port is None:
            raise ConnectionRefusedError("node %d is down" % node_id)
        status, _, data = http_call(
            "127.0.0.1", port, "POST", "/v1/webhook/" + ROUTE, body,
            {"Content-Type": "application/json", "Idempotency-Key": key},
            self.TIMEOUT)
        return status, data

    def _sender(self, s):
        for i in range(self.MAX_KEYS):
            if self.stop_flag.is_set():
                return
            key = "%s-s%d-%d" % (self.tag, s, i)
            body = json.dumps({"order": key, "qty": i % 7 + 1})
            entry = {"status": None, "at": None, "started": time.monotonic(),
                     "attempts": []}
            with self.lock:
                self.keys[key] = entry
            for attempt in range(self.MAX_ATTEMPTS):
                node_id = self._pick(s + i + attempt)
                t0 = time.monotonic()
                try:
                    status, data = self._post(node_id, key, body)
                except (OSError, http.client.HTTPException) as e:
                    status, data = None, repr(e).encode()
                entry["attempts"].append((node_id, t0, status))
                if status is not None and status < 500:
                    entry["status"] = status
                    entry["at"] = time.monotonic()
                    entry["body"] = data
                    break
                if time.monotonic() - entry["started"] > self.KEY_DEADLINE:
                    break
                time.sleep(0.02)  # back off a little before the retry

    # Results (call after stop()).
    def final(self, status):
        return sorted(k for k, e in list(self.keys.items())
                      if e["status"] == status)

    def decisions(self):
        """Times of every final answer (a decision was made)."""
        return sorted(e["at"] for e in list(self.keys.values())
                      if e["at"] is not None)

    def count_decided_since(self, t):
        with self.lock:
            entries = list(self.keys.values())
        return sum(1 for e in entries if e["at"] is not None and e["at"] > t)

    def first_new_success_after(self, t):
        """When the first key whose first attempt started after `t` got its
        final 200: the new leader serving new work."""
        times = [e["at"] for e in list(self.keys.values())
                 if e["started"] > t and e["status"] == 200]
        return min(times) if times else None

    def largest_gap_around(self, t):
        """The largest gap between consecutive decisions from the last one
        before `t` until the senders were told to stop (answers to
        stragglers after that say nothing about the cluster), and when it
        began (relative to `t`)."""
        times = [x for x in self.decisions() if x <= self.stopped_at]
        before = [x for x in times if x <= t]
        window = ([before[-1]] if before else [t]) + [x for x in times
                                                      if x > t]
        window.append(self.stopped_at)
        gaps = [(b - a, a - t) for a, b in zip(window, window[1:])]
        return max(gaps)

    def summary(self):
        by = {}
        # A copy: the senders add keys meanwhile (iterating the dict itself
        # raised "dictionary changed size" in a failure message).
        for e in list(self.keys.values()):
            by[e["status"]] = by.get(e["status"], 0) + 1
        return by


class LeaderWatch:
    """Polls /v1/cluster of the given nodes until one of them is the ready
    leader the other names; records when (bounded)."""

    def __init__(self, cluster, ids, since, timeout=15.0):
        self.cluster = cluster
        self.ids = ids
        self.since = since
        self.timeout = timeout
        self.at = None
        self.leader = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        deadline = self.since + self.timeout
        while time.monotonic() < deadline:
            lid = self.cluster.ready_leader(self.ids)
            if lid is not None:
                self.at = time.monotonic()
                self.leader = lid
                return
            time.sleep(0.01)

    def wait(self):
        self.thread.join(self.timeout + 5)
        return None if self.at is None else self.at - self.since


def with_logs(test):
    """Prints the tail of every node's log when the test fails."""
    def run(self, *args, **kwargs):
        try:
            return test(self, *args, **kwargs)
        except BaseException:
            print("\n" + self.cluster.logs(), file=sys.stderr)
            raise
    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


class ClusterCase(unittest.TestCase):
    """Shared assertions; subclasses set self.cluster and self.up."""

    @contextlib.contextmanager
    def part(self, name):
        """A named part of a case (a subTest): its failure is reported on
        its own, with the logs, and the case goes on."""
        with self.subTest(name):
            try:
                yield
            except Exception:
                print("\n" + self.cluster.logs(), file=sys.stderr)
                raise

    def assert_at_most_once(self, up, traffic, survivors):
        """No key executed twice; every key answered 200 executed exactly
        once and is in every survivor's SQLite."""
        counts = up.counts()["keys"]
        dups = {k: n for k, n in counts.items() if n > 1}
        self.assertEqual(dups, {}, "keys executed more than once")
        acked = traffic.final(200)
        self.assertGreater(len(acked), 0)
        not_once = [k for k in acked if counts.get(k) != 1]
        self.assertEqual(not_once, [], "acked keys not executed once")
        for i in survivors:
            stored = self.cluster.node(i).keys()
            lost = [k for k in acked if k not in stored]
            self.assertEqual(lost, [], "acked keys missing on node %d" % i)
        return acked

    def assert_tables_equal(self, ids, timeout=CONVERGE_TIMEOUT):
        """The `records` tables of `ids` become equal (followers apply what
        the leader committed a moment later, so this polls, bounded);
        returns the number of rows."""
        seen = {}

        def equal():
            try:
                self.cluster.wait_converged(ids, timeout=2.0)
            except AssertionError:
                return False
            seen.update((i, self.cluster.node(i).rows()) for i in ids)
            return all(seen[i] == seen[ids[0]] for i in ids)

        if wait_for(equal, timeout, 0.1):
            return len(seen[ids[0]])
        first = ids[0]
        for i in ids[1:]:
            a, b = set(seen[first]), set(seen[i])
            if a != b:
                self.fail("records of node %d and node %d differ: only on "
                          "%d: %s; only on %d: %s"
                          % (first, i, first, sorted(a - b, key=repr)[:5], i,
                             sorted(b - a, key=repr)[:5]))

    def assert_nothing_left_in_flight(self, ids, prefix, traffic=None):
        """No record of a key starting with `prefix` stays in flight: every
        upstream call ends within upstream-timeout (8 s) and is recorded,
        and a restarted owner doubts what it had in flight. A record in
        flight for longer belongs to nobody: every retry of its key gets
        `409 in-flight` until it expires, and the signal never executes."""
        def in_flight():
            return {i: [r for r in self.cluster.node(i).rows_in_state(
                IN_FLIGHT) if r[1].startswith(prefix)] for i in ids}

        def quiet():
            try:
                self.cluster.wait_converged(ids, timeout=2.0)
            except AssertionError:
                return False
            return not any(in_flight().values())

        if wait_for(quiet, CONVERGE_TIMEOUT, 0.1):
            return
        left = in_flight()
        detail = []
        for i in ids:
            for route, key, owner in left[i][:5]:
                detail.append("node %d: %s owner=%s upstream executions=%d "
                              "sender saw %s" % (
                                  i, key, owner, self.up.executions(key),
                                  traffic.keys[key] if traffic and key in
                                  traffic.keys else "-"))
        self.fail("records still in flight after %ss (nobody will settle "
                  "them): %s; cluster: %s"
                  % (CONVERGE_TIMEOUT, "; ".join(detail),
                     self.cluster.statuses(ids)))


class SharedClusterCase(ClusterCase):
    """One 3-node cluster (of `cluster_class`) shared by a class's cases,
    each of which leaves it whole again (or this setUp makes it so)."""

    cluster_class = Cluster

    @classmethod
    def setUpClass(cls):
        cls.up = TestUpstream().start()
        cls.tmp = TempDir()
        cls.cluster = cls.cluster_class(cls.tmp.path, cls.up.url)
        try:
            for i in (1, 2, 3):
                cls.cluster.add(i, [1, 2, 3])
            for i in (1, 2, 3):
                cls.cluster.node(i).start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.cluster.kill_all()
            cls.up.stop()
        finally:
            cls.tmp.cleanup()

    def setUp(self):
        # Whatever an earlier case left behind: every node up, one leader.
        self.up.set_mode("normal")
        for n in self.cluster.nodes.values():
            if n.stopped:
                n.sigcont()
            if not n.running:
                n.start()
        try:
            self.cluster.wait_leader()
            self.cluster.wait_ready()
        except BaseException:
            print("\n" + self.cluster.logs(), file=sys.stderr)
            raise


class SharedClusterTest(SharedClusterCase):
    """One 3-node cluster for the cases that leave it whole again."""

    @with_logs
    def test_concurrent_identical_webhooks_on_all_nodes_execute_once(self):
        n = 30
        key = "same-key"
        body = json.dumps({"order": key, "qty": 1})
        self.up.set_mode("slow", 0.3)  # all 30 overlap the first one
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(n)

        def send(i):
            node = self.cluster.node(i % 3 + 1)
            barrier.wait(10)
            try:
                r = node.request("POST", "/v1/webhook/" + ROUTE, body,
                                 {"Idempotency-Key": key}, timeout=15)
            except (OSError, http.client.HTTPException) as e:
                r = (None, {}, repr(e).encode())
            with lock:
                results.append(r)

        join_threads(start_threads(send, range(n), daemon=True), 30)
        self.up.set_mode("normal")
        self.assertEqual(len(results), n)
        statuses = sorted(r[0] for r in results if r[0] is not None)
        self.assertEqual(self.up.executions(key), 1)
        self.assertEqual(statuses.count(200), 1, results)
        self.assertEqual(statuses.count(409), n - 1, results)
        for status, _, data in results:
            if status == 409:
                self.assertIn(json.loads(data)["type"].rsplit("/", 1)[1],
                              ("in-flight", "duplicate"))
        self.assert_tables_equal([1, 2, 3])
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], key)
        for i in (1, 2, 3):
            self.assertIn((ROUTE, key, COMPLETED),
                          [r[:3] for r in self.cluster.node(i).rows()])

    @with_logs
    def test_a_follower_reports_the_raft_gauges_in_metrics(self):
        lid = self.cluster.wait_leader()
        follower = [i for i in (1, 2, 3) if i != lid][0]
        status, _, body = self.cluster.node(follower).request("GET",
                                                              "/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        term = self.cluster.node(lid).status()["term"]
        self.assertEqual(metric(text, "oncegate_raft_is_leader"), 0)
        self.assertEqual(metric(text, "oncegate_raft_leader_id"), lid)
        self.assertEqual(metric(text, "oncegate_raft_term"), term)
        self.assertEqual(metric(text, "oncegate_raft_members"), 3)
        status, _, body = self.cluster.node(lid).request("GET", "/metrics")
        self.assertEqual(metric(body.decode(), "oncegate_raft_is_leader"), 1)
        # One node link to each other node, carrying Raft's streams; no
        # refusals among members.
        def links():
            _, _, body = self.cluster.node(follower).request("GET",
                                                             "/metrics")
            return body.decode()
        self.assertTrue(wait_for(
            lambda: metric(links(), "oncegate_link_open") == 2, 10),
            links())
        text = links()
        self.assertGreaterEqual(metric(text, "oncegate_link_streams"), 2)
        for reason in ("identity", "hello", "frame"):
            self.assertIn('oncegate_link_refused_total{reason="%s"} 0'
                          % reason, text)

    def run_failover(self, tag, fail_leader, label):
        """Traffic, then `fail_leader(node)` on the leader; once the
        survivors served again, the senders stopped and the survivors hold
        the same records, each executed at most once, returns (the old
        leader's node, traffic)."""
        old = self.cluster.wait_leader()
        survivors = [i for i in (1, 2, 3) if i != old]
        traffic = Traffic(self.cluster, tag).start()
        try:
            t_start = time.monotonic()
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(t_start) >= 30, 15),
                "no traffic before the failure: %s" % traffic.summary())
            t_fail = time.monotonic()
            fail_leader(self.cluster.node(old))
            watch = LeaderWatch(self.cluster, survivors, t_fail)
            elected = watch.wait()
            self.assertIsNotNone(elected, "no new leader among %s: %s"
                                 % (survivors,
                                    self.cluster.statuses(survivors)))
            # Traffic goes on after the new leader took over, and for the
            # whole failover bound (so that a stall within it is measured).
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(watch.at) >= 30
                and time.monotonic() > t_fail + FAILOVER_BOUND + 0.5, 15),
                "no traffic after the failover: %s" % traffic.summary())
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        first = traffic.first_new_success_after(t_fail)
        gap, gap_at = traffic.largest_gap_around(t_fail)
        report = ("%s: new leader %d ready after %.2fs; first new key "
                  "acknowledged %.2fs after the failure; largest gap between "
                  "decisions %.2fs (from %+.2fs); answers %s"
                  % (label, watch.leader, elected,
                     (first - t_fail) if first else -1, gap, gap_at,
                     traffic.summary()))
        print("\n" + report, file=sys.stderr)
        self.assertLessEqual(elected, FAILOVER_BOUND, report)
        self.assertIsNotNone(first, report)
        self.assertLessEqual(first - t_fail, FAILOVER_BOUND, report)
        self.assertLessEqual(gap, FAILOVER_BOUND, report)
        # Nothing is left undecided: every key got a final answer.
        undecided = [k for k, e in traffic.keys.items() if e["status"] is None]
        self.assertEqual(undecided, [], report)
        self.cluster.wait_converged(survivors)
        self.assert_at_most_once(self.up, traffic, survivors)
        return self.cluster.node(old), traffic

    def assert_whole_again(self, label, traffic):
        """All three nodes hold the same records, each executed at most
        once, none left in flight."""
        rows = self.assert_tables_equal([1, 2, 3])
        self.assert_at_most_once(self.up, traffic, [1, 2, 3])
        print("%s: %d records equal on all three nodes" % (label, rows),
              file=sys.stderr)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], traffic.tag + "-",
                                               traffic)

    @with_logs
    def test_a_killed_leader_is_replaced_and_catches_up_after_restart(self):
        node, traffic = self.run_failover("kill", lambda n: n.kill(),
                                          "SIGKILL")
        # Restart: it doubts its own in-flight records through the leader,
        # then catches up.
        doubted = node.log_count("cluster.own_in_flight_doubted")
        node.start()
        self.assertTrue(wait_for(
            lambda: node.log_count("cluster.own_in_flight_doubted")
            > doubted, 15), "the restarted node never doubted its records")
        self.cluster.wait_converged([1, 2, 3])
        self.assert_whole_again("SIGKILL", traffic)

    @with_logs
    def test_a_hung_leader_is_replaced_and_steps_down_after_sigcont(self):
        node, traffic = self.run_failover("stop", lambda n: n.sigstop(),
                                          "SIGSTOP")
        node.sigcont()

        def stepped_down():
            s = node.status()
            return (s is not None and s["role"] != "leader"
                    and s["leader_id"] == self.cluster.ready_leader())

        self.assertTrue(wait_for(stepped_down, 10, 0.02),
                        "old leader did not step down: %s"
                        % self.cluster.statuses())
        self.assert_whole_again("SIGSTOP", traffic)


class OwnClusterCase(ClusterCase):
    """A fresh cluster per test (the case does not leave it whole)."""

    PEERS = 3
    PARTITIONS = None  # cluster.partitions (None: not set, one)

    def setUp(self):
        # A port that stays this test's while its upstream is down
        # (harness.UpstreamNodeCase).
        self.up = TestUpstream(port=free_ports(1)[0]).start()
        self.tmp = TempDir()
        self.cluster = Cluster(self.tmp.path, self.up.url, peers=self.PEERS,
                               partitions=self.PARTITIONS)

    def tearDown(self):
        try:
            self.cluster.kill_all()
            self.up.stop()
        finally:
            self.tmp.cleanup()

    def start_nodes(self, ids, peer_ids):
        for i in ids:
            self.cluster.add(i, peer_ids)
        for i in ids:
            self.cluster.node(i).start()
        lid = self.cluster.wait_leader(ids)
        self.cluster.wait_ready(ids)
        return lid

    def post(self, node_id, key, timeout=15):
        return self.cluster.node(node_id).request(
            "POST", "/v1/webhook/" + ROUTE, {"order": key},
            {"Idempotency-Key": key}, timeout)


class LinkClosedFailoverTest(OwnClusterCase):
    """A leader whose process dies closes its node links at once (its
    kernel does): the followers campaign then (replication/leader_watch.cpp)
    instead of after an election timeout without heartbeats. With a 4 s
    timeout no follower could campaign within 4 s of the kill by the
    timeout; a new leader within that is the link's doing. A hung leader
    (SIGSTOP) closes nothing and is still replaced by the timeout."""

    TIMEOUT = 4.0

    def setUp(self):
        super().setUp()
        self.cluster = Cluster(self.tmp.path, self.up.url,
                               election_timeout="%ds" % self.TIMEOUT)

    @with_logs
    def test_a_killed_leader_is_replaced_before_the_election_timeout(self):
        lid = self.start_nodes([1, 2, 3], [1, 2, 3])
        survivors = [i for i in (1, 2, 3) if i != lid]
        self.assertEqual(self.post(survivors[0], "before")[0], 200)
        t_fail = time.monotonic()
        self.cluster.node(lid).kill()
        watch = LeaderWatch(self.cluster, survivors, t_fail, timeout=20.0)
        elected = watch.wait()
        self.assertIsNotNone(elected, "no new leader among %s: %s"
                             % (survivors, self.cluster.statuses(survivors)))
        print("\nSIGKILL with a %.0f s election timeout: node %d ready "
              "after %.2f s" % (self.TIMEOUT, watch.leader, elected),
              file=sys.stderr)
        self.assertLess(elected, self.TIMEOUT)
        self.assertTrue(any(self.cluster.node(i).log_count(
            "raft.leader_link_closed") > 0 for i in survivors))
        self.assertEqual(self.post(watch.leader, "after")[0], 200)


class QuorumLossTest(OwnClusterCase):
    @with_logs
    def test_a_node_without_quorum_decides_nothing(self):
        lid = self.start_nodes([1, 2, 3], [1, 2, 3])
        others = [i for i in (1, 2, 3) if i != lid]
        for n in range(3):
            self.assertEqual(self.post(others[n % 2], "before-%d" % n)[0],
                             200)
        self.cluster.wait_converged()
        # The leader survives: the harder case, it still believes it leads
        # when the first requests arrive. One peer stops cleanly, one dies.
        survivor = self.cluster.node(lid)
        records = survivor.count_records()
        executed = self.up.counts()["total"]
        self.assertEqual(self.cluster.node(others[0]).stop(), 0)
        self.cluster.node(others[1]).kill()
        keys = ["lonely-%d" % n for n in range(4)]
        results = {}
        lock = threading.Lock()

        def send(key):
            t0 = time.monotonic()
            try:
                r = self.post(lid, key)
            except (OSError, http.client.HTTPException) as e:
                r = (None, {}, repr(e).encode())
            with lock:
                results[key] = r + (time.monotonic() - t0,)

        join_threads(start_threads(send, keys, daemon=True), 30)
        self.assertEqual(sorted(results), keys)
        for key, (status, headers, body, took) in sorted(results.items()):
            self.assertEqual(status, 503, (key, body))
            self.assertEqual(headers.get("retry-after"), "1", key)
            # Bounded by cluster.leader-wait (3 s), not a hang.
            self.assertLess(took, 10.0, key)

        def readyz():
            try:
                return survivor.request("GET", "/readyz", timeout=3)
            except (OSError, http.client.HTTPException):
                return (None, {}, b"")

        self.assertTrue(wait_for(lambda: readyz()[0] == 503, 5, 0.05),
                        readyz())
        status, headers, body = readyz()
        self.assertEqual(status, 503, body)
        self.assertEqual(headers.get("retry-after"), "1")
        st = survivor.status()
        self.assertFalse(st["role"] == "leader" and st["leader_ready"], st)
        self.assertEqual(survivor.count_records(), records)
        self.assertEqual(self.up.counts()["total"], executed)
        # Told "nothing was executed; retry later", the sender retries once
        # the quorum is back: each key executes, once.
        with self.part("a key refused without quorum executes when retried"):
            for i in others:
                self.cluster.node(i).start()
            self.cluster.wait_leader([1, 2, 3])
            self.cluster.wait_ready([1, 2, 3])
            # A real sender honours Retry-After on 409 in-flight: retry
            # (bounded) until every key has a final answer.
            retried = {}

            def final():
                for n, k in enumerate(keys):
                    if k not in retried or self.in_flight_answer(retried[k]):
                        retried[k] = self.post((n % 3) + 1, k)
                return not any(self.in_flight_answer(r)
                               for r in retried.values())

            wait_for(final, 6, 0.5)
            rows = self.cluster.node(1).record_rows(keys)
            self.assertEqual(
                {k: r[0] for k, r in retried.items()}, {k: 200 for k in keys},
                "keys answered 503 during the outage, retried: %s; their "
                "records (route, key, state, owner, request_id, "
                "first_seen_ms): %s; the survivor was node %d"
                % ({k: r[2] for k, r in retried.items()}, rows, lid))
            self.assertEqual({k: self.up.executions(k) for k in keys},
                             {k: 1 for k in keys})

    @staticmethod
    def in_flight_answer(r):
        return r[0] == 409 and b"/in-flight" in r[2]


class MembershipTest(OwnClusterCase):
    PEERS = 4

    def change(self, node_id, method, path):
        status, _, body = self.cluster.node(node_id).request(method, path,
                                                             timeout=15)
        return status, body

    def voters(self, node_id):
        s = self.cluster.node(node_id).status()
        if s is None:
            return None
        return sorted(m["id"] for m in s["members"] if m["role"] == "voter")

    @with_logs
    def test_a_fourth_node_joins_takes_over_leadership_and_leaves(self):
        # Bootstrapping puts every cluster.peers entry into the first Raft
        # configuration (node 4 would be a voter that never came), so the
        # three bootstrap with peers 1-3 and are then restarted with node 4
        # in cluster.peers, as an operator adds a node to every config.
        self.start_nodes([1, 2, 3], [1, 2, 3])
        for i in (1, 2, 3):
            self.assertEqual(self.cluster.node(i).stop(), 0)
        lid = self.start_nodes([1, 2, 3], [1, 2, 3, 4])
        self.assertEqual(self.voters(lid), [1, 2, 3])
        for n in range(5):
            self.assertEqual(self.post(n % 3 + 1, "early-%d" % n)[0], 200)
        n4 = self.cluster.add(4, [1, 2, 3, 4], join=True).start()
        follower = [i for i in (1, 2, 3) if i != lid][0]
        status, body = self.change(follower, "POST", "/v1/cluster/members/4")
        self.assertEqual(status, 200, body)
        self.assertTrue(wait_for(
            lambda: all(self.voters(i) == [1, 2, 3, 4] for i in (1, 2, 3, 4)),
            15, 0.05), self.cluster.statuses())
        self.cluster.wait_converged([1, 2, 3, 4])
        self.assert_tables_equal([1, 2, 3, 4])
        # Leadership to the newcomer; the others route to it.
        status, body = self.change(follower, "POST",
                                   "/v1/cluster/transfer?to=4")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.cluster.wait_leader([1, 2, 3, 4], 10), 4)
        for n in range(4):
            self.assertEqual(self.post(n + 1, "under-4-%d" % n)[0], 200)
        # Away again, then out.
        status, body = self.change(1, "POST", "/v1/cluster/transfer?to=1")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.cluster.wait_leader([1, 2, 3, 4], 10), 1)
        status, body = self.change(2, "DELETE", "/v1/cluster/members/4")
        self.assertEqual(status, 200, body)
        self.assertTrue(wait_for(
            lambda: all(self.voters(i) == [1, 2, 3] for i in (1, 2, 3)),
            15, 0.05), self.cluster.statuses())
        self.assertEqual(n4.stop(), 0)
        for n in range(3):
            self.assertEqual(self.post(n + 1, "after-%d" % n)[0], 200)
        self.cluster.wait_converged([1, 2, 3])
        self.assert_tables_equal([1, 2, 3])
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], "")
        counts = self.up.counts()
        self.assertEqual(counts["total"], 12)
        self.assertEqual(set(counts["keys"].values()), {1})


class LongGraceCluster(Cluster):
    """Nodes whose exit watchdog waits a minute: a teardown that hangs
    shows as a node that does not stop, not as a forced exit."""

    def ini_text(self, node_id, peer_ids, join=False):
        return (super().ini_text(node_id, peer_ids, join)
                + "\n[http]\nshutdown-grace=60s\n")


class LeaderShutdownTest(OwnClusterCase):
    """The teardown hang (docs/cluster.md): a leader whose detached store
    had answered another node (its start-up doubt) could hang in
    ~actor_system for good, 13-21 % of leader stops under load; the front
    now answers other nodes itself. Eight leader stops, each right after
    every node's doubt was answered by that leader, must each end with 0
    within the stop bound; the leaders hand leadership on as they stop."""

    def setUp(self):
        super().setUp()
        self.cluster = LongGraceCluster(self.tmp.path, self.up.url,
                                        partitions=self.PARTITIONS)

    def test_a_leader_stops_cleanly_after_answering_the_other_nodes(self):
        lid = self.start_nodes([1, 2, 3], [1, 2, 3])
        for round in range(8):
            nodes = [self.cluster.node(i) for i in (1, 2, 3)]
            self.assertTrue(wait_for(
                lambda: all(n.log_count("cluster.own_in_flight_doubted")
                            >= n.starts for n in nodes), 10, 0.05),
                "the nodes' start-up doubts were not all answered")
            self.assertEqual(self.post(lid, "stop-%d" % round)[0], 200)
            leader = self.cluster.node(lid)
            t0 = time.monotonic()
            self.assertEqual(leader.stop(), 0, "round %d" % round)
            self.assertLess(time.monotonic() - t0, 5.0, "round %d" % round)
            leader.start()
            lid = self.cluster.wait_leader([1, 2, 3])
            self.cluster.wait_ready([1, 2, 3])
        # A stopping leader hands its leadership on first (a transfer, not
        # an election timeout; best effort: a transfer whose target does not
        # catch up in time is left to the election).
        handed = sum(self.cluster.node(i).log_count("cluster.handed_off")
                     for i in (1, 2, 3))
        self.assertGreaterEqual(handed, 1, "no stop handed leadership on")


class ShippedConfigTest(unittest.TestCase):
    """The shipped cluster-config/three-node, as an operator starts it with
    scripts/cluster.sh (mutual TLS, its certificates made on start), on free
    ports and a temp data dir: a signal through one follower is 200, the
    same through the other 409, and every node serves its cluster ports
    over TLS only."""

    def test_the_shipped_three_node_config_runs_over_tls(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "..")
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        conf = os.path.join(tmp.path, "three-node")
        os.makedirs(conf)
        ports = free_ports(6)
        # Every shipped port gets a free one; data under the temp dir.
        shipped = {8081 + i: ports[i] for i in range(3)}
        shipped.update({7101 + i: ports[3 + i] for i in range(3)})
        for i in (1, 2, 3):
            with open(os.path.join(root, "cluster-config", "three-node",
                                   "node%d.ini" % i)) as f:
                text = f.read()
            for old, new in shipped.items():
                text = text.replace(":%d" % old, ":%d" % new).replace(
                    "http-port=%d" % old, "http-port=%d" % new)
            text = text.replace("./data/three-node",
                                os.path.join(tmp.path, "data"))
            with open(os.path.join(conf, "node%d.ini" % i), "w") as f:
                f.write(text)
        env = dict(os.environ, ONCEGATE_BIN=os.path.abspath(BIN))
        script = os.path.join(root, "scripts", "cluster.sh")

        def cluster_sh(cmd):
            return subprocess.run([script, cmd, conf], env=env,
                                  capture_output=True, text=True, timeout=90)

        self.addCleanup(cluster_sh, "stop")
        out = cluster_sh("start")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertTrue(os.path.exists(
            os.path.join(tmp.path, "data", "tls", "node-3.key")))
        statuses = {}
        for i in (1, 2, 3):
            status, _, body = http_call("127.0.0.1", ports[i - 1], "GET",
                                        "/v1/cluster", None, {}, 5)
            self.assertEqual(status, 200, body)
            statuses[i] = json.loads(body)
        lid = [i for i, s in statuses.items() if s["role"] == "leader"]
        self.assertEqual(len(lid), 1, statuses)
        followers = [i for i in (1, 2, 3) if i != lid[0]]
        answers = []
        for i in followers:
            status, _, _ = http_call(
                "127.0.0.1", ports[i - 1], "POST", "/v1/webhook",
                json.dumps({"symbol": "BTCUSD", "action": "buy"}),
                {"Content-Type": "application/json",
                 "Idempotency-Key": "shipped-1"}, 10)
            answers.append(status)
        self.assertEqual(answers, [200, 409])
        # The node links' ports speak TLS with the cluster's certificates:
        # a client holding node 1's pair completes the handshake, the server
        # proving it is a member (its name is checked by the nodes).
        tls = os.path.join(tmp.path, "data", "tls")
        ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
        ctx.check_hostname = False
        ctx.load_cert_chain(os.path.join(tls, "node-1.pem"),
                            os.path.join(tls, "node-1.key"))
        for port in ports[3:]:
            with socket.create_connection(("127.0.0.1", port), 2) as raw:
                with ctx.wrap_socket(raw) as s:
                    name = s.getpeercert()["subjectAltName"]
                    self.assertEqual(len(name), 1, name)
                    self.assertTrue(name[0][1].endswith(".oncegate"), name)
                    # Mozilla's intermediate profile (docs/tls.md).
                    self.assertEqual(s.version(), "TLSv1.3")
                    self.assertIn(s.cipher()[0], (
                        "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                        "TLS_CHACHA20_POLY1305_SHA256"))

        def tls12(port, suites):
            """A TLS 1.2 handshake offering only `suites`: the suite
            chosen, or None when the node refused."""
            old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            old.load_verify_locations(os.path.join(tls, "ca.pem"))
            old.check_hostname = False
            old.load_cert_chain(os.path.join(tls, "node-1.pem"),
                                os.path.join(tls, "node-1.key"))
            old.maximum_version = ssl.TLSVersion.TLSv1_2
            old.set_ciphers(suites + ":@SECLEVEL=0")
            with socket.create_connection(("127.0.0.1", port), 2) as raw:
                try:
                    with old.wrap_socket(raw) as s:
                        return s.cipher()[0]
                except (ssl.SSLError, OSError):
                    return None

        cbc = ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES128-SHA256",
               "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES256-SHA")
        aead = "ECDHE-ECDSA-AES128-GCM-SHA256"
        for port in ports[3:6]:   # the links: TLS 1.2 with AEAD suites only
            for suite in cbc:
                self.assertIsNone(tls12(port, suite), (port, suite))
            self.assertEqual(tls12(port, aead), aead)

        def tls13_with_group(port, group, cert_of):
            """Whether a TLS 1.3 handshake offering only the key-exchange
            `group` completes (Python's ssl cannot choose groups), with
            member `cert_of`'s certificate: another member's, since a node
            refuses a client certificate naming itself right after the
            handshake (which raced s_client's exit status)."""
            out = subprocess.run(
                ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                 "-tls1_3", "-groups", group,
                 "-CAfile", os.path.join(tls, "ca.pem"),
                 "-cert", os.path.join(tls, "node-%d.pem" % cert_of),
                 "-key", os.path.join(tls, "node-%d.key" % cert_of)],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            return out.returncode == 0
        # The profile's groups (X25519, P-256, P-384) and no others.
        for i, port in enumerate(ports[3:]):
            other = (i + 1) % 3 + 1  # node i + 1's port, another's cert
            self.assertTrue(tls13_with_group(port, "X25519", other), port)
            self.assertFalse(tls13_with_group(port, "secp521r1", other), port)


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)
