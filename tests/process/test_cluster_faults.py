"""Raft cluster under faults: the documented guarantees of docs/cluster.md,
each checked by a case that fails on the bug it names (the standing mutants
of tests/mutants/mutants.cmake).

One 3-node cluster (helpers from test_cluster.py) for every case: each one
leaves it whole again (all nodes running, one ready leader). The nodes take
snapshots every SNAPSHOT_THRESHOLD entries and keep SNAPSHOT_TRAILING behind
them, so that the snapshot case sees libraft compact its log, send a
snapshot and restore one within seconds.

- A claim without a majority is never answered 200 (mutant
  `answer-before-majority`): both followers SIGSTOPped, claims to the
  leader fail closed (503, Retry-After, after cluster.leader-wait), nothing
  executes; after SIGCONT the sender's retry executes once.
- Key actors forget their cached records when leadership moves (mutant
  `skip-key-reset`): a key completed on node A, released by an operator
  while B led, is answered from the current state when A leads again: the
  retry executes (no stale 409 duplicate).
- A claim retried after its leader lost leadership keeps its request id
  (mutant `drop-request-id`): a claim that committed although its answer was
  lost is recognised as the sender's own: 200, executed once, nothing
  stranded in flight. Deterministic: both followers SIGSTOPped while the
  claims are proposed; the leader steps down (its entries "may still
  commit"), SIGCONT, the next leader commits them, the gateway's retries
  find them. The same under load with repeated leadership transfers.
- Snapshots on the real Raft storage path: taken under traffic, installed
  on a follower that was down past the trailing window, restored at a
  restart; every acknowledged key stays a duplicate on every node.
"""

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

from harness import join_threads, start_threads, wait_for
from test_cluster import (ROUTE, Cluster, SharedClusterCase, Traffic,
                          with_logs)

SNAPSHOT_THRESHOLD = 64
SNAPSHOT_TRAILING = 32
LEADER_WAIT = 3.0  # cluster.leader-wait in Cluster.ini_text
SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)-(\d+)-(\d+)$")
RESTORED = re.compile(r"fsm\.restored bytes=(\d+) applied_index=(\d+)")
LEADERSHIP_LOST = re.compile(
    r"store\.proposal_failed commands=(\d+) error=oncegate\.leadership_lost")


class FaultCluster(Cluster):
    """test_cluster's cluster with a small snapshot threshold and trailing
    window (libraft's defaults here are 100000 and 8192)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # node id -> its own snapshot threshold (see the snapshot case)
        self.threshold = {}

    def ini_text(self, node_id, peer_ids, join=False):
        return super().ini_text(node_id, peer_ids, join) + (
            "snapshot-threshold=%d\nsnapshot-trailing=%d\nrepair-after=2s\n"
            % (self.threshold.get(node_id, SNAPSHOT_THRESHOLD),
               SNAPSHOT_TRAILING))


def snapshots(node):
    """Indexes of the snapshots in the node's raft directory (libraft names
    them snapshot-TERM-INDEX-TIMESTAMP, with a .meta file each)."""
    try:
        names = os.listdir(os.path.join(node.data_dir, "raft"))
    except OSError:
        return []
    return sorted(int(m.group(2)) for m in map(SNAPSHOT_FILE.match, names)
                  if m)


def traffic_body(key):
    """The body Traffic sent for `key` (TAG-sS-I)."""
    return {"order": key, "qty": int(key.rsplit("-", 1)[1]) % 7 + 1}


def log_text(node, start=0):
    try:
        with open(node.log_path, "r", errors="replace") as f:
            return f.read()[start:]
    except OSError:
        return ""


def log_size(node):
    try:
        return os.path.getsize(node.log_path)
    except OSError:
        return 0


def leadership_lost_commands(node, start=0):
    """Commands whose proposal ended with RAFT_LEADERSHIPLOST ("the entry
    may still commit": the gateway retries them) since log offset
    `start`."""
    return sum(int(m.group(1))
               for m in LEADERSHIP_LOST.finditer(log_text(node, start)))


class FaultsTest(SharedClusterCase):
    cluster_class = FaultCluster

    def setUp(self):
        super().setUp()
        self.t0 = time.monotonic()

    def tearDown(self):
        for n in self.cluster.nodes.values():
            if n.stopped:
                n.sigcont()
        print("\n%s: %.1fs" % (self._testMethodName,
                               time.monotonic() - self.t0), file=sys.stderr)

    # -- helpers ---------------------------------------------------------------

    def post(self, node_id, key, timeout=15):
        """(status, headers, body, seconds); status None on a connection
        error."""
        t = time.monotonic()
        try:
            r = self.cluster.node(node_id).request(
                "POST", "/v1/webhook/" + ROUTE, {"order": key},
                {"Idempotency-Key": key}, timeout)
        except (OSError, http.client.HTTPException) as e:
            r = (None, {}, repr(e).encode())
        return r + (time.monotonic() - t,)

    def post_all(self, node_id, keys, timeout=15):
        """Posts every key at once (a thread each); {key: post()}."""
        results = {}
        lock = threading.Lock()

        def send(k):
            r = self.post(node_id, k, timeout)
            with lock:
                results[k] = r

        join_threads(start_threads(send, keys, daemon=True), timeout + 5)
        return results

    def complete_and_cache(self, node_id, keys):
        """Posts `keys` to `node_id` (each answered 200), then once more:
        the node's key actors hold the completed records now, and answer
        the duplicates 409 from them."""
        first = self.post_all(node_id, keys)
        self.assertEqual({k: r[0] for k, r in first.items()},
                         {k: 200 for k in keys})
        self.assertEqual({k: self.post(node_id, k)[0] for k in keys},
                         {k: 409 for k in keys})

    def assert_decided_from_now(self, traffic, count, after=None):
        """`traffic` has at least `count` keys decided within 10 s from
        now."""
        since = time.monotonic()
        decided = wait_for(
            lambda: traffic.count_decided_since(since) >= count, 10)
        msg = traffic.summary()
        if after:
            msg = "no decisions %s: %s" % (after, msg)
        self.assertTrue(decided, msg)

    @staticmethod
    def problem(r):
        """The problem type of a 409 answer ("in-flight", "duplicate"...)."""
        try:
            return json.loads(r[2])["type"].rsplit("/", 1)[1]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def retry_until_final(self, keys, timeout=10):
        """A sender's retries: each key is posted (to the nodes in turn)
        again while it is answered 503, a connection error or 409
        in-flight (its abandoned attempt is still being released), bounded;
        returns {key: last answer}."""
        last = {}

        def final():
            for n, k in enumerate(keys):
                r = last.get(k)
                if r is None or r[0] is None or r[0] >= 500 or (
                        r[0] == 409 and self.problem(r) == "in-flight"):
                    last[k] = self.post(n % 3 + 1, k)
            return all(r[0] is not None and r[0] < 500
                       and not (r[0] == 409 and self.problem(r) ==
                                "in-flight") for r in last.values())

        wait_for(final, timeout, 0.2)
        return last

    def transfer(self, via, to):
        status, _, body = self.cluster.node(via).request(
            "POST", "/v1/cluster/transfer?to=%d" % to, timeout=15)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.cluster.wait_leader(timeout=10), to,
                         self.cluster.statuses())
        self.cluster.wait_ready()

    def release(self, via, key):
        status, _, body = self.cluster.node(via).request(
            "DELETE", "/v1/keys/%s?route=%s" % (key, ROUTE), timeout=15)
        self.assertEqual(status, 200, body)

    def assert_duplicates_everywhere(self, keys, ids=(1, 2, 3),
                                     body_of=lambda k: {"order": k}):
        """Every key, posted again (its original body: `body_of(key)`) to
        every node, is a 409 duplicate (one keep-alive connection per node)
        and executes nothing more."""
        before = self.up.counts()["total"]
        for i in ids:
            node = self.cluster.node(i)
            conn = http.client.HTTPConnection("127.0.0.1", node.port,
                                              timeout=15)
            wrong = []
            try:
                for k in keys:
                    conn.request("POST", "/v1/webhook/" + ROUTE,
                                 body=json.dumps(body_of(k)),
                                 headers={"Content-Type": "application/json",
                                          "Idempotency-Key": k})
                    res = conn.getresponse()
                    data = res.read()
                    if res.status != 409 or b"/duplicate" not in data:
                        wrong.append((k, res.status, data[:120]))
                    if res.getheader("connection", "").lower() == "close":
                        conn.close()
            finally:
                conn.close()
            self.assertEqual(wrong[:5], [], "acknowledged keys that node %d "
                             "does not answer as duplicates (%d of %d)"
                             % (i, len(wrong), len(keys)))
        self.assertEqual(self.up.counts()["total"], before)

    def assert_traffic_once(self, traffic, ids=(1, 2, 3)):
        """assert_at_most_once for the keys of `traffic` only (other cases
        execute their own keys twice on purpose); returns the acked keys."""
        prefix = traffic.tag + "-"
        counts = {k: n for k, n in self.up.counts()["keys"].items()
                  if k.startswith(prefix)}
        self.assertEqual({k: n for k, n in counts.items() if n > 1}, {},
                         "keys executed more than once")
        acked = traffic.final(200)
        self.assertGreater(len(acked), 0)
        self.assertEqual([k for k in acked if counts.get(k) != 1], [],
                         "acked keys not executed once")
        for i in ids:
            stored = self.cluster.node(i).keys()
            self.assertEqual([k for k in acked if k not in stored], [],
                             "acked keys missing on node %d" % i)
        return acked

    def assert_all_executed_once(self, keys):
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 1 for k in keys})

    # -- a claim without a majority ---------------------------------------------

    @with_logs
    def test_a_claim_without_a_majority_is_never_answered_200(self):
        """Kills `answer-before-majority`: the leader, cut off from both
        followers (SIGSTOP), proposes the claims but cannot commit them; it
        must not answer them before a majority has. They fail closed: 503
        with Retry-After once cluster.leader-wait passed, nothing executed
        upstream. After SIGCONT the sender's retry executes each key
        once."""
        lid = self.cluster.wait_leader()
        followers = [i for i in (1, 2, 3) if i != lid]
        keys = ["nomajority-%d" % n for n in range(4)]
        executed = self.up.counts()["total"]
        for i in followers:
            self.cluster.node(i).sigstop()
        try:
            results = self.post_all(lid, keys)
            executed_meanwhile = self.up.counts()["total"] - executed
        finally:
            for i in followers:
                self.cluster.node(i).sigcont()
        self.assertEqual(sorted(results), keys)
        self.assertEqual(
            {k: r[0] for k, r in results.items()}, {k: 503 for k in keys},
            "claims answered without a majority: %s"
            % {k: r[2][:100] for k, r in results.items()})
        for key, (status, headers, body, took) in sorted(results.items()):
            self.assertEqual(headers.get("retry-after"), "1", key)
            # Failed closed after cluster.leader-wait, not at once, not hung.
            self.assertGreaterEqual(took, LEADER_WAIT - 0.2, key)
            self.assertLess(took, LEADER_WAIT + 5, key)
        self.assertEqual(executed_meanwhile, 0)
        with self.part("the sender's retry executes each key once"):
            self.cluster.wait_leader()
            self.cluster.wait_ready()
            retried = self.retry_until_final(keys)
            self.assertEqual({k: r[0] for k, r in retried.items()},
                             {k: 200 for k in keys},
                             {k: r[2][:100] for k, r in retried.items()})
            self.assert_all_executed_once(keys)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], "nomajority-")

    # -- key actors across a change of leadership ---------------------------------

    @with_logs
    def test_a_leader_regained_answers_from_the_current_state(self):
        """Kills `skip-key-reset`: node A completes keys (its key actors
        cache the records), hands leadership to B; an operator releases the
        keys (through the third node) while B leads; leadership comes back
        to A. A's next answer for each key must reflect the release: the
        retry executes (once more), not a stale 409 duplicate."""
        a = self.cluster.wait_leader()
        b, c = [i for i in (1, 2, 3) if i != a]
        keys = ["regained-%d" % n for n in range(3)]
        self.complete_and_cache(a, keys)
        self.transfer(a, b)
        for k in keys:
            self.release(c, k)
        self.cluster.wait_converged()
        self.assertEqual([r for r in self.cluster.node(a).record_rows(keys)
                          if r], [], "A did not apply the releases")
        self.transfer(b, a)
        again = {k: self.post(a, k) for k in keys}
        self.assertEqual(
            {k: r[0] for k, r in again.items()}, {k: 200 for k in keys},
            "A answered released keys from records cached before it lost "
            "leadership: %s" % {k: r[2][:100] for k, r in again.items()})
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 2 for k in keys})
        # And a duplicate now is one of the new execution, on every node.
        self.cluster.wait_converged()
        self.assert_duplicates_everywhere(keys)

    # -- retries keep their request id ---------------------------------------------

    @with_logs
    def test_a_claim_committed_while_its_answer_was_lost_is_ours(self):
        """Kills `drop-request-id`, deterministically: both followers are
        SIGSTOPped as the claims reach the leader; it proposes them, cannot
        commit them and steps down (RAFT_LEADERSHIPLOST: may still commit).
        The gateway retries. SIGCONT: the followers append the buffered
        entries and the next leader commits them. The retries, carrying the
        same request ids, are recognised as the claims' own: 200 within
        cluster.leader-wait, executed once, and nothing stays in flight. A
        retry with another request id would get 409 in-flight for its own
        first attempt, and the record would be stranded."""
        lid = self.cluster.wait_leader()
        leader = self.cluster.node(lid)
        followers = [i for i in (1, 2, 3) if i != lid]
        keys = ["lostanswer-%d" % n for n in range(3)]
        mark = log_size(leader)
        results = {}
        for i in followers:
            self.cluster.node(i).sigstop()
        try:
            sender = threading.Thread(
                target=lambda: results.update(self.post_all(lid, keys)),
                daemon=True)
            sender.start()
            # The leader gave up its proposals ("may still commit") and
            # stepped down; the gateway is retrying.
            gave_up = wait_for(
                lambda: leadership_lost_commands(leader, mark) >= len(keys),
                LEADER_WAIT, 0.02)
        finally:
            for i in followers:
                self.cluster.node(i).sigcont()
        sender.join(20)
        self.assertTrue(gave_up, "the leader never lost leadership with the "
                        "claims in flight: %s" % self.cluster.statuses())
        rows = self.cluster.node(lid).record_rows(keys)
        self.assertEqual(
            {k: r[0] for k, r in results.items()}, {k: 200 for k in keys},
            "first requests of claims that committed while their answers "
            "were lost: %s; records (route, key, state, owner, request_id, "
            "first_seen_ms): %s"
            % ({k: r[2][:100] for k, r in results.items()}, rows))
        self.assert_all_executed_once(keys)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], "lostanswer-")

    TRANSFERS = 8

    def test_certificates_are_renewed_by_a_rolling_restart(self):
        """Rotation without downtime (docs/cluster.md): every node gets a
        new certificate from the same CA (scripts/cluster-certs.sh
        --renew) and is restarted one at a time under traffic; decisions
        go on through each restart, every key is executed once, and each
        node serves the new certificate."""
        tls = self.cluster.tls_dir
        script = os.path.join(os.path.dirname(__file__), "..", "..",
                              "scripts", "cluster-certs.sh")

        def pem(i):
            with open(os.path.join(tls, "node-%d.pem" % i), "rb") as f:
                return f.read()

        traffic = Traffic(self.cluster, "renew").start()
        try:
            self.assert_decided_from_now(traffic, 20)
            for i in (1, 2, 3):
                old = pem(i)
                subprocess.run([script, "--renew", tls, str(i)], check=True,
                               capture_output=True, timeout=60)
                self.assertNotEqual(pem(i), old)
                node = self.cluster.node(i)
                self.assertEqual(node.stop(), 0)
                node.start()
                self.cluster.wait_leader()
                self.assert_decided_from_now(traffic, 20,
                                             "after renewing node %d" % i)
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        self.cluster.wait_converged()
        self.assert_traffic_once(traffic)

    @with_logs
    def test_unique_keys_through_leadership_transfers_execute_once(self):
        """Unique-key traffic through all nodes while leadership is handed
        on TRANSFERS times: claims in flight at a transfer end with
        RAFT_LEADERSHIPLOST and are retried with their request ids on the
        next leader. Every key is answered 200 (after 5xx retries by the
        sender at most), executed once, stored on every node; nothing stays
        in flight. Transfers rarely leave a claim retried after it
        committed (libraft hands over once the target is caught up, so the
        entries in flight have mostly committed): 0 commands ended with
        leadership_lost in most runs of 8 transfers (0-5 seen); this
        caught `drop-request-id` in 1 of 4 runs. The deterministic case
        above is the one that kills it."""
        traffic = Traffic(self.cluster, "transfer").start()
        marks = {i: log_size(n) for i, n in self.cluster.nodes.items()}
        try:
            self.assertTrue(wait_for(
                lambda: traffic.count_decided_since(self.t0) >= 30, 15),
                traffic.summary())
            for n in range(self.TRANSFERS):
                lid = self.cluster.wait_leader()
                to = lid % 3 + 1
                self.transfer(n % 3 + 1, to)
                self.assert_decided_from_now(traffic, 20,
                                             "after transfer %d" % n)
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        lost = {i: leadership_lost_commands(n, marks[i])
                for i, n in self.cluster.nodes.items()}
        print("\n%d transfers: answers %s; commands retried after "
              "leadership_lost by node: %s"
              % (self.TRANSFERS, traffic.summary(), lost), file=sys.stderr)
        self.assertEqual(
            {k: (e["status"], e.get("body", b"")[:100], e["attempts"])
             for k, e in traffic.keys.items() if e["status"] != 200}, {},
            "keys not answered 200")
        self.cluster.wait_converged()
        self.assert_traffic_once(traffic)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight([1, 2, 3], "transfer-",
                                               traffic)

    # -- snapshots ----------------------------------------------------------------------

    def kill_until_compacted(self, traffic):
        """Under `traffic`: waits until every node took a snapshot, kills a
        follower and keeps it down until the leader compacted its log past
        the follower's last entry. Returns (follower id, its last index)."""
        nodes = self.cluster.nodes
        lid = self.cluster.wait_leader()
        down = [i for i in (1, 2, 3) if i != lid][0]
        with self.part("every node takes snapshots under traffic"):
            self.assertTrue(wait_for(
                lambda: all(snapshots(nodes[i]) for i in nodes), 20, 0.1),
                {i: snapshots(nodes[i]) for i in nodes})
        node = nodes[down]
        behind = node.status()["last_index"]
        node.kill()
        # The leader keeps SNAPSHOT_TRAILING entries behind its latest
        # snapshot: past this one, the follower's next entry is gone.
        compacted = behind + SNAPSHOT_TRAILING + SNAPSHOT_THRESHOLD
        self.assertTrue(wait_for(
            lambda: max(snapshots(nodes[self.cluster.ready_leader() or lid])
                        or [0]) > compacted, 20, 0.1),
            "the leader did not snapshot past %d: %s"
            % (compacted, {i: snapshots(nodes[i]) for i in nodes}))
        return down, behind

    @with_logs
    def test_a_follower_that_installed_a_snapshot_answers_released_keys(self):
        """A follower whose HTTP decision cache holds completed keys misses
        their release because it comes back past the leader's trailing
        window: it catches up by installing a snapshot, not by applying the
        release entries. Its next answer for those keys must be the current
        state (the sender's retry executes), not a 409 from its cache:
        every cache of decisions is dropped when a snapshot replaces the
        database. (Issue #15: seen answering 409 for as long as the TTL.)

        The follower runs with a large snapshot threshold of its own (see
        the snapshot case below: libraft 0.15 leaves a follower behind for
        good when its own snapshot races the install)."""
        ids = [1, 2, 3]
        nodes = self.cluster.nodes
        lid = self.cluster.wait_leader()
        f = [i for i in ids if i != lid][0]
        self.cluster.threshold[f] = 100000
        self.cluster.add(f, ids)
        try:
            nodes[f].stop()
            nodes[f].start()
        finally:
            del self.cluster.threshold[f]
            self.cluster.add(f, ids)
        self.cluster.wait_ready(timeout=20)
        lid = self.cluster.wait_leader()
        self.assertNotEqual(lid, f)
        keys = ["restored-release-%d" % n for n in range(3)]
        self.complete_and_cache(f, keys)  # now in the follower's caches
        follower = nodes[f]
        behind = follower.status()["last_index"]
        mark = log_size(follower)
        follower.sigstop()
        # The leader pipelines appends to a follower, and the ones it sent
        # while the follower was stopped wait in the follower's socket: they
        # would catch it up without an install. A new leader only probes a
        # follower that does not answer, so hand leadership over at once.
        c = [i for i in ids if i not in (lid, f)][0]
        self.transfer(lid, c)
        # What the stopped follower may still catch up without an install:
        # the old leader's appends (up to its last index) that wait in its
        # socket. (Counting from `behind` instead failed once: it resumed,
        # applied those and caught up from the new leader's trailing
        # window, the releases and no snapshot needed.)
        floor = max(nodes[i].status()["last_index"] for i in (lid, c))
        lid = c
        traffic = Traffic(self.cluster, "past").start()
        try:
            for k in keys:
                self.release(lid, k)
            # Past this, every entry after `floor` (the releases among
            # them) is gone from the leader's log: the follower must be
            # sent a snapshot.
            compacted = floor + SNAPSHOT_TRAILING + SNAPSHOT_THRESHOLD
            self.assertTrue(wait_for(
                lambda: max(snapshots(nodes[lid]) or [0]) > compacted, 20,
                0.1), "the leader did not snapshot past %d: %s"
                % (compacted, snapshots(nodes[lid])))
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        follower.sigcont()

        def restored():
            return [int(m.group(2))
                    for m in RESTORED.finditer(log_text(follower, mark))]
        wait_for(lambda: any(x > behind for x in restored()), 20, 0.05)
        self.cluster.wait_converged()
        restored = restored()
        self.assertTrue(any(x > behind for x in restored),
                        "node %d (stopped at index %d) installed no "
                        "snapshot beyond it: %s; its log: %s"
                        % (f, behind, restored,
                           {i: (nodes[i].status().get("applied_index"),
                                snapshots(nodes[i])[-2:]) for i in ids}))
        self.assertEqual([r for r in follower.record_rows(keys) if r], [],
                         "the snapshot did not carry the releases")
        again = {k: self.post(f, k) for k in keys}
        self.assertEqual(
            {k: r[0] for k, r in again.items()}, {k: 200 for k in keys},
            "the follower answered released keys from a cache older than "
            "the snapshot it installed: %s"
            % {k: r[2][:100] for k, r in again.items()})
        self.assertEqual({k: self.up.executions(k) for k in keys},
                         {k: 2 for k in keys})

    @with_logs
    def test_snapshots_are_taken_installed_and_restored(self):
        """With snapshot-threshold=64 and trailing=32: under traffic every
        node takes snapshots (files in its raft dir); a follower killed and
        kept down until the leader compacted its log past the follower's
        last entry gets the leader's snapshot installed when it comes back
        (its log shows a restore to an index beyond everything it had); a
        node restarted restores its last snapshot and replays the log after
        it. After each, every acknowledged key is a duplicate on every
        node, executed once, and the tables are equal.

        The follower comes back with a large snapshot threshold of its own:
        libraft 0.15 rejects an install while the follower takes a snapshot
        of its own (RAFT_BUSY) and then leaves it behind for good, which
        with a threshold of 64 happens on most restarts (the leader's
        queued stale appends carry the follower across its threshold just
        before the install arrives): see the known-bug case below."""
        ids = [1, 2, 3]
        nodes = self.cluster.nodes
        traffic = Traffic(self.cluster, "snap").start()
        try:
            down, behind = self.kill_until_compacted(traffic)
            node = self.cluster.node(down)
            self.cluster.threshold[down] = 100000
            self.cluster.add(down, ids)
            mark = log_size(node)
            try:
                node.start()
            finally:
                del self.cluster.threshold[down]
                self.cluster.add(down, ids)
            self.cluster.wait_ready(timeout=20)
            self.assert_decided_from_now(traffic, 20)
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        self.cluster.wait_converged()
        restored = [int(m.group(2))
                    for m in RESTORED.finditer(log_text(node, mark))]
        print("\nsnapshots: follower %d down at index %d; restores after "
              "its restart at %s; snapshot files %s; answers %s"
              % (down, behind, restored,
                 {i: snapshots(nodes[i])[-3:] for i in ids},
                 traffic.summary()), file=sys.stderr)
        self.assertTrue(any(x > behind for x in restored),
                        "node %d (down at index %d) installed no snapshot "
                        "beyond it: %s" % (down, behind, restored))
        # A key not answered 200 (409: its attempt's record is in flight or
        # in doubt) had an attempt on the killed node, whose forward died
        # with it.
        self.assertEqual(
            {k: e["attempts"] for k, e in traffic.keys.items()
             if e["status"] != 200
             and down not in [a[0] for a in e["attempts"]]}, {},
            "keys refused although no attempt met the killed node")
        self.assert_tables_equal(ids)
        acked = self.assert_traffic_once(traffic)
        with self.part("acked keys are duplicates after the install"):
            self.assert_duplicates_everywhere(acked, body_of=traffic_body)
        with self.part("no record is left in flight"):
            self.assert_nothing_left_in_flight(ids, "snap-", traffic)
        # Restore at restart: another node's state is in its snapshot (and
        # the log after it).
        with self.part("a restarted node restores its snapshot"):
            other = [i for i in ids if i != down][0]
            node = nodes[other]
            node.kill()
            taken = snapshots(node)
            self.assertTrue(taken)
            mark = log_size(node)
            node.start()
            self.cluster.wait_leader()
            self.cluster.wait_ready(timeout=20)
            self.cluster.wait_converged()
            restored = [int(m.group(2))
                        for m in RESTORED.finditer(log_text(node, mark))]
            self.assertIn(taken[-1], restored,
                          "node %d did not restore its snapshot %d at start"
                          % (other, taken[-1]))
            self.assert_tables_equal(ids)
            self.assert_duplicates_everywhere(acked, body_of=traffic_body)

    @with_logs
    def test_a_follower_back_from_downtime_catches_up_or_is_not_ready(self):
        """The snapshot case without the workaround: the follower restarts
        with the cluster's threshold (64). libraft 0.15 (seen in 5 of 6 runs
        before the repair): the leader's appends queued while the follower
        was down carry it across its own threshold; it starts a snapshot;
        the leader's install arrives meanwhile and is refused (RAFT_BUSY);
        from then on the leader only probes below what the follower kept,
        and its commit and applied index stay where they are while /readyz
        says 200. The leader notices (cluster.repair-after, 2 s here) and
        hands leadership to the other voter; the new leader sends the
        snapshot again and the follower catches up."""
        traffic = Traffic(self.cluster, "behind").start()
        try:
            down, behind = self.kill_until_compacted(traffic)
            node = self.cluster.node(down)
            node.start()
            self.assert_decided_from_now(traffic, 50)
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")

        def caught_up_or_unready():
            lid = self.cluster.ready_leader()
            if lid is None or lid == down:
                return False
            lead = self.cluster.node(lid).status()
            mine = node.status()
            if mine is None or lead is None:
                return False
            if mine["applied_index"] >= lead["commit_index"]:
                return True
            try:
                return node.request("GET", "/readyz", timeout=2)[0] == 503
            except (OSError, http.client.HTTPException):
                return False

        ok = wait_for(caught_up_or_unready, 12, 0.2)
        stuck = self.cluster.statuses()
        try:
            self.assertTrue(ok, "node %d (down at index %d) neither caught "
                            "up nor reports not ready: %s; /readyz %s"
                            % (down, behind, stuck,
                               node.request("GET", "/readyz")[:3:2]))
        finally:
            # Unstick it for the other cases (docs/cluster.md, Limits):
            # hand leadership to another node.
            lid = self.cluster.ready_leader()
            if not ok and lid is not None:
                self.transfer(lid, [i for i in (1, 2, 3)
                                    if i not in (lid, down)][0])
                self.cluster.wait_converged()


if __name__ == "__main__":
    unittest.main()
