"""The ports the harnesses fix in configurations (a node's raft and front
ports, an upstream's, nginx's) lie below the kernel's ephemeral range, so
that no other program's bind(0) or outgoing connection takes one while its
node is down. process.powerloss_cluster failed once in CI with "cannot
publish the front actor on 127.0.0.1:34873": node 3's front port, from a
bind(0) at set-up, had been handed to node 2's HTTP listener (port 0)
while node 3 was down.

They are also held against the other test processes of the same run (CTest
runs several at once): drill.clock-jump failed once with "cannot listen on
127.0.0.1:24225: Address already in use", a port another process had
picked at random from the same range after this one tested and released
it."""

import os
import socket
import subprocess
import sys
import unittest

from harness import free_port

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from oncegate_drill import cluster  # noqa: E402
from oncegate_drill.cluster import (DrillError, ephemeral_range,  # noqa: E402
                                    free_ports)


class FixedPortsTest(unittest.TestCase):
    def test_fixed_ports_are_below_the_ephemeral_range_and_free(self):
        low, high = ephemeral_range()
        ports = free_ports(40) + [free_port() for _ in range(10)]
        self.assertEqual(len(set(ports)), len(ports), "a port given twice")
        inside = [p for p in ports if low <= p <= high]
        self.assertEqual(inside, [], "ports in the ephemeral range %d-%d"
                         % (low, high))
        for p in ports:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))  # free: raises otherwise

    def test_a_port_zero_bind_never_gets_one(self):
        ports = set(free_ports(20))
        got = []
        for _ in range(200):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                got.append(s.getsockname()[1])
        self.assertEqual([p for p in got if p in ports], [])

    def with_range(self, low, high, n):
        saved = cluster.ephemeral_range
        cluster.ephemeral_range = lambda: (low, high)
        try:
            return free_ports(n)
        finally:
            cluster.ephemeral_range = saved

    def test_a_port_is_held_against_other_processes_while_its_owner_lives(self):
        # A span of 40 ports: a child process takes 20 and keeps running;
        # this process asks for 20 of the same span and must get the other
        # 20, all still free to bind (the child released its test sockets).
        span = (31000, 31040)
        tools = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "tools")
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, sys.argv[1]);"
             "from oncegate_drill.cluster import free_ports;"
             "print(' '.join(map(str, free_ports(20, span=(%d, %d)))),"
             " flush=True);"
             "sys.stdin.read()" % span, tools],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            theirs = set(int(p) for p in child.stdout.readline().split())
            self.assertEqual(len(theirs), 20)
            ours = set(free_ports(20, span=span))
            self.assertEqual(ours & theirs, set(),
                             "ports held by a live process given again")
        finally:
            child.stdin.close()
            child.wait(timeout=30)
        # Its holds end with it (the kernel drops them, SIGKILL included).
        self.assertEqual(set(free_ports(20, span=span)), theirs)

    def test_a_range_that_starts_low_leaves_the_ports_above_it(self):
        # An ip_local_port_range of "1024 60999": nothing below it.
        ports = self.with_range(1024, 60999, 20)
        self.assertEqual([p for p in ports if p <= 60999], [])

    def test_a_range_with_no_room_outside_it_is_a_clear_error(self):
        with self.assertRaisesRegex(DrillError, "no room outside"):
            self.with_range(1024, 65535, 20)


if __name__ == "__main__":
    unittest.main()
