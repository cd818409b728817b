"""The drill's supervisor keeps restarting nodes that ask for it (exit 75)
while a `wait-ready` fault waits: drill.disk-full-follower failed once in CI
with "node 1,2,3 not ready within 30s" because the follower had exited 75
just before the wait began and nothing restarted it until the wait was
over (it came back 29 s later, when the drill reaped again). A fake
cluster here is ready only once a node's due restart has been reaped.
A node already reaped, down with its restart still due (a disk that was
full a moment ago), is waited for too: it is part of the cluster the next
fault expects."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from oncegate_drill.faults import FaultSchedule  # noqa: E402


class FakeNode:
    def __init__(self, up=True):
        self.can_serve = up


class FakeCluster:
    def __init__(self, pending=()):
        self.reaped = 0
        # Nodes down with a restart due: up from the third reap on.
        self.pending = set(pending)
        self.nodes = {i: FakeNode(i not in self.pending) for i in (1, 2, 3)}

    def reap_crashes(self):
        self.reaped += 1
        if self.reaped >= 3:
            for i in self.pending:
                self.nodes[i].can_serve = True
            self.pending = set()

    def restart_pending(self, i):
        return i in self.pending

    def ready(self, i):
        # Node 1 exited asking for a restart: ready once the supervisor
        # (reap_crashes) has run.
        return self.nodes[i].can_serve and (i != 1 or self.reaped > 0)

    def statuses(self):
        return {}


class FakeScenario:
    def duration(self, section, name):
        return 1.0

    def get(self, section, name):
        return "1s"


class Drill(FaultSchedule):
    def __init__(self, pending=()):
        self.cluster = FakeCluster(pending)
        self.sc = FakeScenario()

    def node(self, i):
        return self.cluster.nodes[i]


class SupervisorDuringWaitTest(unittest.TestCase):
    def test_wait_ready_restarts_nodes_that_asked_for_it(self):
        d = Drill()
        d.do_wait_ready([1, 2, 3], None)  # raises FaultFailed when not ready
        self.assertGreater(d.cluster.reaped, 0)

    def test_wait_ready_waits_for_a_node_whose_restart_is_due(self):
        d = Drill(pending=[2])
        d.do_wait_ready([1, 2, 3], None)
        self.assertTrue(d.node(2).can_serve,
                        "wait-ready returned with node 2 still down")


if __name__ == "__main__":
    unittest.main()
