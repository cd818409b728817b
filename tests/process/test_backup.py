"""Online backup (`oncegate --backup-to=FILE`) of a running node, and the
documented restore (docs/operations.md#backups)."""

import os
import shutil
import sqlite3
import subprocess
import threading
import time
import unittest

from harness import BIN, Node, TempDir


class BackupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def backup(self, data_dir, out):
        res = subprocess.run([BIN, "--data-dir=" + data_dir,
                              "--backup-to=" + out],
                             capture_output=True, timeout=60)
        return res.returncode, (res.stdout + res.stderr).decode()

    def test_backup_under_load_then_restore_keeps_every_key_before_it(self):
        data = os.path.join(self.tmp.path, "data")
        node = Node(data)
        node.start()
        self.addCleanup(node.kill)
        acked_before = []
        for i in range(200):
            status, _, _ = node.webhook({"n": i}, key="pre-%d" % i)
            self.assertEqual(status, 200)
            acked_before.append("pre-%d" % i)
        # Writers keep going while the backup runs (bounded: 5 s or 2000).
        stop = threading.Event()
        during = []

        def writer():
            i = 0
            deadline = time.monotonic() + 5
            while not stop.is_set() and i < 2000 and time.monotonic() < deadline:
                status, _, _ = node.webhook({"n": i}, key="during-%d" % i)
                if status == 200:
                    during.append("during-%d" % i)
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        out = os.path.join(self.tmp.path, "backup.db")
        code, text = self.backup(data, out)
        stop.set()
        t.join()
        self.assertEqual(code, 0, text)
        self.assertIn("written to", text)
        self.assertTrue(os.path.exists(out))
        self.assertFalse(os.path.exists(out + ".tmp"))
        # A second backup to the same file is refused, the first untouched.
        size = os.path.getsize(out)
        code, text = self.backup(data, out)
        self.assertNotEqual(code, 0)
        self.assertIn("exists", text)
        self.assertEqual(os.path.getsize(out), size)
        # The copy is one self-contained, consistent SQLite file.
        db = sqlite3.connect(out)
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0],
                         "ok")
        keys = {k for (k,) in db.execute("SELECT key FROM records")}
        db.close()
        self.assertTrue(set(acked_before) <= keys)
        node.stop()

        # Restore (docs/operations.md): a stopped node, the file in place of
        # oncegate.db, its WAL and shm files removed.
        restored = os.path.join(self.tmp.path, "restored")
        os.makedirs(restored)
        shutil.copy(out, os.path.join(restored, "oncegate.db"))
        node2 = Node(restored)
        node2.start()
        self.addCleanup(node2.kill)
        for key in acked_before[:50] + acked_before[-50:]:
            status, _, _ = node2.webhook({"n": int(key.split("-")[1])},
                                         key=key)
            self.assertEqual(status, 409, key)
        # Keys the backup had are duplicates; newer ones are not known.
        in_backup = [k for k in during if k in keys]
        for key in in_backup[:20]:
            status, _, _ = node2.webhook({"n": int(key.split("-")[1])},
                                         key=key)
            self.assertEqual(status, 409, key)
        node2.stop()

    def test_backup_of_a_missing_database_fails(self):
        code, text = self.backup(os.path.join(self.tmp.path, "none"),
                                 os.path.join(self.tmp.path, "b.db"))
        self.assertNotEqual(code, 0)
        self.assertIn("backup failed", text)


if __name__ == "__main__":
    unittest.main()
