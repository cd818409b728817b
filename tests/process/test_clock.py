"""Wall-clock steps on one node: no key renewed, none purged early.

The node runs under libfaketime with a clock of its own (the drill's
FakeClock, tools/oncegate-drill: the same way the clock-jump drill drives
it): writing its timestamp file steps the node's CLOCK_REALTIME at once,
while CLOCK_MONOTONIC, the host and this test keep the real time. With a
TTL of 1 h, a step of 2 h either way is the difference between live and
expired for every key, and the alarm runs every 200 ms, so a purge by the
stepped clock would happen within the test. Ground truth: the answers, the
node's SQLite (read-only) and the alarm's counters in /metrics, judged
against this test's clock.

Skipped when libfaketime is not installed (Debian: apt-get install
faketime).
"""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

from harness import Node, TempDir, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
# The drill package's clock module is the one way to run a node under
# libfaketime.
from oncegate_drill import clock  # noqa: E402
from oncegate_drill.verdict import iso_ms  # noqa: E402
LIB = clock.find_libfaketime()

HOUR = 3600
TTL_MS = HOUR * 1000
# first_seen of a new record vs this test's clock at its request.
STAMP_TOLERANCE_S = 5.0
ALARM_TIMEOUT = 10.0  # the alarm runs every 200 ms
KEYS = 20


@unittest.skipIf(LIB is None, "libfaketime is not installed (Debian: "
                 "apt-get install faketime)")
class ClockTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.clock = clock.FakeClock(os.path.join(self.tmp.path, "clocks"),
                                     LIB)
        self.assertIsNone(self.clock.shim_error)
        self.pids = []
        self.node = Node(os.path.join(self.tmp.path, "node"),
                         "--keys.ttl=1h", "--alarm.max-interval=200ms",
                         env=self.clock.env("node"))
        self.db = os.path.join(self.node.data_dir, "oncegate.db")

    def tearDown(self):
        try:
            self.node.kill()
        finally:
            for pid in self.pids:
                clock.FakeClock.forget(pid)
            self.tmp.cleanup()

    # -- helpers --------------------------------------------------------------

    def start(self):
        self.node.start()
        self.pids.append(self.node.proc.pid)

    def claim(self, key):
        status, _, body = self.node.webhook({"key": key}, key=key)
        self.assertIn(status, (200, 409), body)
        return status

    def claim_new(self, key):
        """Claims a new key; returns this test's clock at the request (ms)."""
        before = time.time()
        self.assertEqual(self.claim(key), 200, key)
        return (before + time.time()) / 2 * 1000

    def records(self):
        """{key: (first_seen_ms, expires_at_ms)} from the node's SQLite."""
        db = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True,
                             timeout=10)
        try:
            return {k: (f, e) for k, f, e in db.execute(
                "SELECT key, first_seen_ms, expires_at_ms FROM records")}
        finally:
            db.close()

    def metric(self, name):
        status, _, body = self.node.request("GET", "/metrics")
        self.assertEqual(status, 200)
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        self.fail("no %s in /metrics" % name)

    def let_the_alarm_run(self, runs=3):
        """Waits (bounded) until the expiry alarm has run `runs` more
        times: a purge it would do by a stepped clock is done by then."""
        base = self.metric("oncegate_purge_runs_total")
        self.assertTrue(wait_for(
            lambda: self.metric("oncegate_purge_runs_total") >= base + runs,
            ALARM_TIMEOUT), "the alarm did not run within %ss" % ALARM_TIMEOUT)

    def step(self, seconds):
        self.clock.step("node", seconds)

    def assert_nothing_purged(self, keys, when):
        have = self.records()
        gone = [k for k in keys if k not in have]
        self.assertEqual(len(gone), 0, "%s: %d of %d live keys (TTL 1h, "
                         "claimed seconds ago) purged early from SQLite: %s"
                         % (when, len(gone), len(keys), gone[:5]))
        self.assertEqual(self.metric("oncegate_purged_records_total"), 0,
                         "%s: the alarm purged records" % when)

    def assert_not_renewed(self, keys, when):
        renewed = [k for k in keys if self.claim(k) != 409]
        self.assertEqual(len(renewed), 0, "%s: %d of %d live keys executed "
                         "again (200, not 409): %s"
                         % (when, len(renewed), len(keys), renewed[:5]))
        for k in keys:
            status, _, body = self.node.request("GET", "/v1/keys/" + k)
            self.assertEqual(status, 200, "%s: /v1/keys/%s: %s"
                             % (when, k, body))

    def assert_stamped(self, key, sent_ms, when):
        first, expires = self.records()[key]
        self.assertLess(abs(first - sent_ms), STAMP_TOLERANCE_S * 1000, (
            "%s: %s first_seen %s is %+.1fs from the real time of its "
            "request %s" % (when, key, iso_ms(first),
                            (first - sent_ms) / 1000.0,
                            iso_ms(sent_ms))))
        self.assertEqual(expires - first, TTL_MS,
                         "%s: expires_at is not first_seen + 1h" % when)

    # -- tests ----------------------------------------------------------------

    def test_the_fake_clock_steps_the_wall_clock_of_one_process_only(self):
        # The method itself: a process under the fake clock sees its wall
        # clock step at once and its monotonic clock go on; this test's own
        # clock does not move.
        script = ("import sys, time\n"
                  "for line in sys.stdin:\n"
                  "    print(time.time(), time.monotonic(), flush=True)\n")
        env = dict(clock.FakeClock.clean_environ(os.environ),
                   **self.clock.env("probe"))
        proc = subprocess.Popen([sys.executable, "-c", script], env=env,
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        watchdog = threading.Timer(20.0, proc.kill)
        watchdog.start()
        try:
            def sample():
                proc.stdin.write("\n")
                proc.stdin.flush()
                wall, mono = map(float, proc.stdout.readline().split())
                return wall - time.time(), mono

            seen = [sample()]
            for offset in (2 * HOUR, -2 * HOUR, 0):
                self.clock.set("probe", offset)
                seen.append(sample())
            proc.stdin.close()
            self.assertEqual(proc.wait(10), 0)
        finally:
            watchdog.cancel()
            proc.kill()
            proc.wait()
            proc.stdout.close()
            clock.FakeClock.forget(proc.pid)
        for (skew, _), offset in zip(seen, (0, 2 * HOUR, -2 * HOUR, 0)):
            self.assertAlmostEqual(skew, offset, delta=2.0)
        monos = [m for _, m in seen]
        self.assertEqual(monos, sorted(monos))
        self.assertLess(monos[-1] - monos[0], 10.0)

    def test_a_step_forward_delays_no_retry_of_a_queued_signal(self):
        """Queued signals are retried by the node's clock: a step of the
        wall clock 5 minutes forward (beyond the route's deadline) neither
        postpones their retries nor fails them."""
        from test_upstream import TestUpstream
        from harness import free_port
        # Outside the ephemeral range: no other process takes it while the
        # upstream is down.
        up = TestUpstream(port=free_port()).start()
        try:
            ini = os.path.join(self.tmp.path, "async.ini")
            with open(ini, "w") as f:
                f.write('[admin]\nallow-unauthenticated-loopback=true\n'
                        '[route.async]\nupstream="%s"\ndelivery="async"\n'
                        'delivery-first-retry=200ms\ndelivery-max-retry=1s\n'
                        'delivery-deadline=120s\n'
                        'upstream-connect-timeout=300ms\n' % up.url)
            self.node = Node(os.path.join(self.tmp.path, "async"),
                             "--config-file=" + ini,
                             env=self.clock.env("node"))
            self.start()
            keys = ["step-%d" % i for i in range(3)]

            def record(k):
                status, _, body = self.node.request(
                    "GET", "/v1/keys/%s?route=async" % k)
                self.assertEqual(status, 200, body)
                return json.loads(body)

            up.refuse()
            for k in keys:
                status, _, body = self.node.request(
                    "POST", "/v1/webhook/async", {"order": k},
                    {"Idempotency-Key": k})
                self.assertEqual(status, 202, body)
            self.assertTrue(wait_for(
                lambda: all(record(k)["attempts"] >= 2 for k in keys), 20))
            self.step(300)
            # One more refused attempt each, timed after the step.
            tried = {k: record(k)["attempts"] for k in keys}
            self.assertTrue(wait_for(
                lambda: all(record(k)["attempts"] > tried[k] for k in keys),
                20))
            up.resume()
            # Retries come every second at most: 30 s is a wide margin,
            # and a retry timed by the stepped clock comes 300 s late.
            self.assertTrue(
                wait_for(lambda: all(up.executions(k) == 1 for k in keys),
                         30),
                {k: (up.executions(k), record(k)["state"]) for k in keys})
            for k in keys:
                self.assertTrue(wait_for(
                    lambda: record(k)["state"] == "completed", 10), record(k))
        finally:
            up.stop()

    def test_a_step_forward_renews_no_key_and_purges_none(self):
        self.start()
        keys = ["fwd-%d" % i for i in range(KEYS)]
        for k in keys:
            self.claim_new(k)
        self.step(+2 * HOUR)
        self.let_the_alarm_run()
        self.assert_nothing_purged(keys, "after +2h")
        self.assert_not_renewed(keys, "after +2h")
        sent = self.claim_new("fwd-new")
        self.assert_stamped("fwd-new", sent, "after +2h")

    def test_a_step_back_stamps_new_records_with_the_real_time(self):
        self.start()
        old = ["back-%d" % i for i in range(KEYS)]
        for k in old:
            self.claim_new(k)
        self.step(-2 * HOUR)
        fresh = {}
        for i in range(5):
            key = "back-new-%d" % i
            fresh[key] = self.claim_new(key)
        for key, sent in fresh.items():
            self.assert_stamped(key, sent, "after -2h")
        self.let_the_alarm_run()
        self.assert_nothing_purged(old + list(fresh), "after -2h")
        self.assert_not_renewed(old + list(fresh), "after -2h")

    def test_steps_back_and_forth_under_the_alarm_purge_nothing_early(self):
        self.start()
        keys = []
        # Offsets from the real time: +2h, -2h, +2h, -2h, then right again.
        for n, step in enumerate((+2, -4, +4, -4, +2)):
            self.step(step * HOUR)
            when = "step %d (%+dh, now %s)" % (
                n + 1, step, clock.format_offset(self.clock.offset("node")))
            batch = {}
            for i in range(5):
                key = "swing-%d-%d" % (n, i)
                batch[key] = self.claim_new(key)
            keys += list(batch)
            for key, sent in batch.items():
                self.assert_stamped(key, sent, when)
            self.let_the_alarm_run()
            self.assert_nothing_purged(keys, when)
        self.assert_not_renewed(keys, "after the steps")
        self.assertEqual(len(self.records()), len(keys))

    def test_a_restart_two_hours_behind_renews_and_purges_nothing(self):
        self.start()
        keys = ["restart-%d" % i for i in range(KEYS)]
        for k in keys:
            self.claim_new(k)
        latest = max(f for f, _ in self.records().values())
        self.assertEqual(self.node.stop(), 0)
        # The node reads its wall clock 2 h behind when it starts: the
        # store's clock (the latest time it applied) must keep it from
        # going back.
        self.clock.set("node", -2 * HOUR)
        self.start()
        self.let_the_alarm_run()
        self.assert_nothing_purged(keys, "restarted 2h behind")
        self.assert_not_renewed(keys, "restarted 2h behind")
        sent = self.claim_new("restart-new")
        first, expires = self.records()["restart-new"]
        self.assertGreaterEqual(first, latest, (
            "restarted 2h behind: a new record's first_seen %s is before the "
            "latest one before the restart %s: the clock went back"
            % (iso_ms(first), iso_ms(latest))))
        # The store's clock stands at the latest time applied until the
        # node's clock passes it: seconds behind here, never 2 h.
        self.assertLess(sent - first, 60 * 1000, (
            "restarted 2h behind: first_seen %s is %.1fs before the real time"
            % (iso_ms(first), (sent - first) / 1000.0)))
        self.assertEqual(expires - first, TTL_MS)
        self.assertEqual(self.node.stop(), 0)


if __name__ == "__main__":
    unittest.main()
