"""Crash test: SIGKILL under load, then every acknowledged key is still known.

Several cycles: senders post unique keys while the node is killed at a
random moment. After each restart, every key that was ever answered 200 must
be answered 409 (a duplicate). A lost acknowledged decision fails the test.
"""

import os
import random
import time
import unittest

from harness import Node, TempDir, UniqueKeyLoad

CYCLES = int(os.environ.get("ONCEGATE_CRASH_CYCLES", "6"))
SENDERS = 8


class CrashTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.node = Node(self.tmp.path)

    def tearDown(self):
        try:
            self.node.kill()
        finally:
            self.tmp.cleanup()

    def run_cycle(self, cycle, rng):
        load = UniqueKeyLoad(self.node, "c%d" % cycle, SENDERS)
        time.sleep(rng.uniform(0.05, 0.6))  # the random crash moment
        self.node.kill()
        self.assertTrue(load.stop(), "a sender hangs")
        return load.acked

    def test_no_acknowledged_claim_is_lost_across_kills(self):
        rng = random.Random(int(os.environ.get("ONCEGATE_SEED", "7")))
        all_acked = []
        for cycle in range(CYCLES):
            self.node.start()
            # Everything acknowledged before earlier crashes is a duplicate.
            lost = [k for k in all_acked
                    if self.node.webhook({"k": k}, key=k)[0] != 409]
            self.assertEqual(lost, [], "cycle %d lost keys" % cycle)
            all_acked += self.run_cycle(cycle, rng)
        self.node.start()
        lost = [k for k in all_acked
                if self.node.webhook({"k": k}, key=k)[0] != 409]
        self.assertEqual(lost, [])
        self.assertGreater(len(all_acked), 0)
        print("crash test: %d cycles, %d acknowledged keys, 0 lost"
              % (CYCLES, len(all_acked)))


if __name__ == "__main__":
    unittest.main()
