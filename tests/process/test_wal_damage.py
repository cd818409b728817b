"""A damaged WAL must not make the node forget what it acknowledged.

After kill -9 the node's last commits live only in oncegate.db-wal. SQLite
replays that file frame by frame and stops at the first frame whose
checksum fails, taking everything after it for never written: one flipped
byte in an early frame silently dropped most acknowledged keys, which then
answered 200 (executed) again. The node now reads the WAL itself before
SQLite opens it and refuses to start (exit 65, a message naming the file,
the frame and the way out); `--accept-wal-loss` starts it anyway.
"""

import os
import subprocess
import threading
import unittest

from harness import BIN, START_TIMEOUT, Node, TempDir, http_call
from test_cluster import OwnClusterCase, with_logs

KEYS = 30
EXIT_WAL_DAMAGED = 65
PAGE_SIZE = 4096
FRAME_SIZE = 24 + PAGE_SIZE


def frame_offset(k):
    return 32 + (k - 1) * FRAME_SIZE


class WalDamageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.dir = os.path.join(self.tmp.path, "data")
        self.wal = os.path.join(self.dir, "oncegate.db-wal")
        self.node = Node(self.dir)

    def tearDown(self):
        try:
            self.node.kill()
        finally:
            self.tmp.cleanup()

    def acknowledge_then_crash(self):
        self.node.start()
        keys = ["wal-%d" % i for i in range(KEYS)]
        for k in keys:
            self.assertEqual(self.node.webhook({"k": k}, key=k)[0], 200)
        self.node.kill()
        return keys

    def flip_early_frame(self):
        with open(self.wal, "r+b") as f:
            data = bytearray(f.read())
            self.assertGreater(len(data), frame_offset(KEYS),
                               "the acknowledged keys are in the WAL")
            at = frame_offset(2) + 24 + 100  # page data of frame 2
            data[at] ^= 0x10
            f.seek(0)
            f.write(data)
        return bytes(data)

    def replayed(self, node, keys):
        """Acknowledged keys the node would execute again (not 409)."""
        return [k for k in keys if node.webhook({"k": k}, key=k)[0] != 409]

    def test_a_damaged_wal_stops_the_start_instead_of_forgetting_keys(self):
        keys = self.acknowledge_then_crash()
        damaged = self.flip_early_frame()
        with open(self.wal[:-4], "rb") as f:
            database = f.read()
        args = [BIN, "--http-port=0", "--data-dir=" + self.dir,
                "--log-level=warn"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        try:
            # The ready line, or end of file when the start is refused.
            line = {}
            reader = threading.Thread(
                target=lambda: line.update(text=proc.stdout.readline()),
                daemon=True)
            reader.start()
            reader.join(START_TIMEOUT)
            text = line.get("text", b"").decode()
            if text.startswith("oncegate ready http="):
                # What the damage did before the check: the node serves.
                port = int(text.strip().rsplit(":", 1)[1])
                lost = [k for k in keys
                        if http_call("127.0.0.1", port, "POST", "/v1/webhook",
                                     {"k": k},
                                     {"Idempotency-Key": k})[0] != 409]
                self.fail("the node started on a damaged WAL; %d of %d "
                          "acknowledged keys answered as new: %r"
                          % (len(lost), len(keys), lost[:3]))
            proc.wait(START_TIMEOUT)
            err = proc.stderr.read().decode(errors="replace")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.assertEqual(proc.returncode, EXIT_WAL_DAMAGED, err)
        for text in ("oncegate.db-wal is damaged", "frame 2 of",
                     "--accept-wal-loss", "backup"):
            self.assertIn(text, err)
        # A backup of the stopped node would lack the dropped keys: refused.
        backup = subprocess.run(
            [BIN, "--data-dir=" + self.dir,
             "--backup-to=" + os.path.join(self.tmp.path, "backup.db")],
            stdin=subprocess.DEVNULL, capture_output=True,
            timeout=START_TIMEOUT)
        self.assertEqual(backup.returncode, EXIT_WAL_DAMAGED, backup.stderr)
        self.assertIn(b"backup refused", backup.stderr)
        # Nothing was opened: database and WAL are byte for byte as they
        # were.
        with open(self.wal, "rb") as f:
            self.assertEqual(f.read(), damaged)
        with open(self.wal[:-4], "rb") as f:
            self.assertEqual(f.read(), database)
        # The operator accepts the loss: the node starts, says so loudly,
        # keeps the damaged WAL and executes the dropped keys again.
        accepting = Node(self.dir, "--accept-wal-loss").start()
        try:
            self.assertIn("store.wal_loss_accepted", accepting.log())
            self.assertGreater(len(self.replayed(accepting, keys)), 0)
            self.assertEqual(accepting.stop(), 0)
        finally:
            accepting.kill()
        copies = [n for n in os.listdir(self.dir)
                  if n.startswith("oncegate.db-wal.damaged-")]
        self.assertEqual(len(copies), 1)
        # Once accepted, the next start is an ordinary one.
        self.node.start()
        self.assertEqual(self.replayed(self.node, keys), [])

    def test_an_intact_wal_after_kill_starts_normally(self):
        keys = self.acknowledge_then_crash()
        self.node.start()
        self.assertEqual(self.replayed(self.node, keys), [])


def flip_byte(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


class ClusterWalDamageTest(OwnClusterCase):
    """A cluster node's decisions are durable in its Raft log: a damaged
    WAL is logged, and the node starts and replays what SQLite dropped."""

    @with_logs
    def test_a_cluster_node_replays_what_a_damaged_wal_dropped(self):
        lid = self.start_nodes([1, 2, 3], [1, 2, 3])
        keys = ["cwal-%d" % i for i in range(KEYS)]
        for k in keys:
            self.assertEqual(self.post(lid, k)[0], 200)
        self.cluster.wait_converged()
        follower = self.cluster.node([i for i in (1, 2, 3) if i != lid][0])
        self.assertEqual(set(keys) - follower.keys(), set())
        follower.kill()
        wal = os.path.join(follower.data_dir, "oncegate.db-wal")
        self.assertGreater(os.path.getsize(wal), frame_offset(KEYS))
        flip_byte(wal, frame_offset(2) + 24 + 100)
        follower.start()
        self.cluster.wait_converged()
        self.assertEqual(follower.log_count("store.wal_damaged"), 1)
        self.assertEqual(sorted(set(keys) - follower.keys()), [])


if __name__ == "__main__":
    unittest.main()
