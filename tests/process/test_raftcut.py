"""The raftcut library (tests/powerloss/raftcut_shim.c) and its rollback
(raftcut.py): a child process under LD_PRELOAD makes the calls libraft 0.15
and libuv 1.44 make on the Raft log (pwrite, syscall(SYS_pwritev),
syscall(SYS_close), ftruncate, posix_fallocate, fsync, fdatasync, O_DSYNC,
rename, unlink, and kernel AIO writes through syscall(SYS_io_submit) on an
O_DSYNC|O_DIRECT descriptor, reaped or still in flight), is SIGKILLed, and
after the rollback every file holds exactly what was durable. Under
ONCEGATE_RAFTCUT_MODE=ignore-sync nothing the child did survives.

The real node does the same: a one-node cluster under ignore-sync, cut and
rolled back, leaves its Raft directory byte for byte as it was at start
(the files it created empty), so no write path of libraft escapes.

CTest: `powerloss.raftcut` (ONCEGATE_RAFTCUT_LIB is the library,
ONCEGATE_BIN the node).
"""

import os
import signal
import subprocess
import sys
import threading
import unittest

import raftcut
from harness import Node, TempDir, wait_for
from test_cluster import free_ports

LIB = os.environ.get(
    "ONCEGATE_RAFTCUT_LIB",
    os.path.join(os.environ.get("ONCEGATE_BUILD_DIR", "build"), "tests",
                 "powerloss", "oncegate_raftcut.so"))

# The child: every case of the model on files in sys.argv[1], then "ready"
# and a wait for the kill.
CHILD = r'''
import ctypes, mmap, os, sys
d, outside = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_close, SYS_pwritev = 3, 296
SYS_io_setup, SYS_io_destroy, SYS_io_getevents, SYS_io_submit = 206, 207, 208, 209
IOCB_CMD_PWRITE, IOCB_CMD_PWRITEV = 1, 8
RWF_NOWAIT = 8
IOCB_FLAG_RESFD = 1

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

class iocb(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("rw_flags", ctypes.c_int32), ("opcode", ctypes.c_uint16),
                ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("offset", ctypes.c_int64), ("reserved2", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]

class io_event(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]

def sc(*args):
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    if r < 0:
        raise OSError(ctypes.get_errno(), "syscall %d" % args[0])
    return r

def p(name):
    return os.path.join(d, name)

def aligned(byte):
    m = mmap.mmap(-1, 4096)
    m.write(byte * 4096)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))

ctx = ctypes.c_ulong(0)
sc(SYS_io_setup, 8, ctypes.addressof(ctx))
idle = ctypes.c_ulong(0)  # requests left in flight, never reaped
sc(SYS_io_setup, 8, ctypes.addressof(idle))
keep = []

def aio_write(fd, byte, off, vectored, reap, resfd=-1):
    m, addr = aligned(byte)
    cb = iocb()
    cb.fildes = fd
    cb.offset = off
    if vectored:
        v = (iovec * 1)(iovec(addr, 4096))
        keep.append(v)
        cb.opcode, cb.buf, cb.nbytes = IOCB_CMD_PWRITEV, ctypes.addressof(v), 1
    else:
        cb.opcode, cb.buf, cb.nbytes = IOCB_CMD_PWRITE, addr, 4096
    if resfd >= 0:
        cb.rw_flags = RWF_NOWAIT
        cb.flags, cb.resfd = IOCB_FLAG_RESFD, resfd
    cbs = (ctypes.POINTER(iocb) * 1)(ctypes.pointer(cb))
    keep.extend([m, cb, cbs])
    assert sc(SYS_io_submit, (ctx if reap else idle).value, 1,
              ctypes.addressof(cbs)) == 1
    if reap:
        ev = io_event()
        assert sc(SYS_io_getevents, ctx.value, 1, 1, ctypes.addressof(ev), 0) == 1
        assert ev.obj == ctypes.addressof(cb)
        if ev.res == -11:  # RWF_NOWAIT would block: again, blocking (libraft)
            cb.rw_flags, cb.flags, cb.resfd = 0, 0, 0
            assert sc(SYS_io_submit, ctx.value, 1, ctypes.addressof(cbs)) == 1
            assert sc(SYS_io_getevents, ctx.value, 1, 1, ctypes.addressof(ev),
                      0) == 1
        assert ev.res == 4096, ev.res

# a: synced, then more not synced.
fd = os.open(p("a"), os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b"A" * 100)
os.fsync(fd)
os.pwrite(fd, b"B" * 50, 100)
# b: through O_DSYNC a write is durable; through another descriptor not.
fd = os.open(p("b"), os.O_CREAT | os.O_WRONLY | os.O_DSYNC, 0o600)
os.pwrite(fd, b"X" * 4096, 0)
fd2 = os.open(p("b"), os.O_WRONLY)
os.pwrite(fd2, b"Y" * 10, 10)
# c: a libraft open segment: O_DSYNC|O_DIRECT, preallocated, AIO writes
# with RWF_NOWAIT + eventfd completion; the first reaped, the second still
# in flight at the kill.
fd = os.open(p("open-c"), os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DSYNC,
             0o600)
os.posix_fallocate(fd, 0, 8192)
import fcntl
fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
aio_write(fd, b"Z", 0, vectored=True, reap=True, resfd=efd)
aio_write(fd, b"W", 4096, vectored=True, reap=False)
# d: an AIO write without O_DSYNC: reaped, still not durable.
fd = os.open(p("d"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
aio_write(fd, b"Q", 0, vectored=False, reap=True)
# e: a snapshot: temp file written, fsynced, renamed; f: renamed unsynced.
fd = os.open(p("tmp-e"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
os.write(fd, b"E" * 10)
os.fsync(fd)
os.close(fd)
os.rename(p("tmp-e"), p("e"))
fd = os.open(p("open-f"), os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b"F" * 10)
os.rename(p("open-f"), p("f"))
os.write(fd, b"f" * 10)
# g, pre: files from before the process: truncated, overwritten, unsynced.
fd = os.open(p("g"), os.O_WRONLY)
os.ftruncate(fd, 100)
fd = os.open(p("pre"), os.O_WRONLY)
os.pwrite(fd, b"p" * 8, 0)
# h: written and unlinked.
fd = os.open(p("h"), os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b"H" * 10)
os.unlink(p("h"))
os.write(fd, b"h" * 5000)  # to the unlinked file: no longer tracked
os.close(fd)
# k: a new file, likely on h's inode number, written and synced.
fd = os.open(p("k"), os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b"K" * 10)
os.fsync(fd)
# i: libuv's path: syscall(SYS_pwritev), fdatasync, syscall(SYS_close).
fd = os.open(p("i"), os.O_CREAT | os.O_WRONLY, 0o600)
buf = ctypes.create_string_buffer(b"I" * 10, 10)
v = (iovec * 1)(iovec(ctypes.addressof(buf), 10))
assert sc(SYS_pwritev, fd, ctypes.addressof(v), 1, 0, 0) == 10
os.fdatasync(fd)
buf2 = ctypes.create_string_buffer(b"J" * 10, 10)
v2 = (iovec * 1)(iovec(ctypes.addressof(buf2), 10))
assert sc(SYS_pwritev, fd, ctypes.addressof(v2), 1, 10, 0) == 10
sc(SYS_close, fd)
# A file outside the directory is not tracked.
fd = os.open(outside, os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b"O" * 10)
print("ready", flush=True)
sys.stdin.read()
'''


def read(path):
    with open(path, "rb") as f:
        return f.read()


class RaftcutTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.path.exists(LIB), "no raftcut library at %s" % LIB)
        self.tmp = TempDir()
        self.dir = os.path.join(self.tmp.path, "raft")
        self.journal = os.path.join(self.tmp.path, "journal")
        self.outside = os.path.join(self.tmp.path, "outside")
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, "g"), "wb") as f:
            f.write(b"G" * 8192)
        with open(os.path.join(self.dir, "pre"), "wb") as f:
            f.write(b"P" * 64)

    def tearDown(self):
        self.tmp.cleanup()

    def cut(self, mode):
        """Runs the child under the library, SIGKILLs it once it is ready,
        rolls back; returns the rollback's counts."""
        env = dict(os.environ, **raftcut.env(self.dir, self.journal, LIB,
                                             mode))
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.dir, self.outside],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env)
        line = {}
        reader = threading.Thread(
            target=lambda: line.update(text=child.stdout.readline()),
            daemon=True)
        reader.start()
        reader.join(20)
        try:
            if line.get("text") != b"ready\n":
                child.wait(10)
                self.fail("child not ready: %r" % child.stderr.read())
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            for s in (child.stdin, child.stdout, child.stderr):
                s.close()
        # Before the rollback the files hold everything (the page cache).
        self.assertEqual(read(self.f("a")), b"A" * 100 + b"B" * 50)
        self.assertEqual(read(self.f("g")), b"G" * 100)
        stats = raftcut.rollback(self.journal)
        self.assertEqual(raftcut.journals(self.journal), [])
        return stats

    def f(self, name):
        return os.path.join(self.dir, name)

    def test_what_was_synced_is_kept_and_the_rest_rolled_back(self):
        stats = self.cut("real")
        self.assertEqual(read(self.f("a")), b"A" * 100)
        self.assertEqual(read(self.f("b")), b"X" * 4096)
        c = read(self.f("open-c"))
        self.assertEqual(c[:4096], b"Z" * 4096, "reaped O_DSYNC AIO write")
        self.assertEqual(c[4096:].strip(b"\0"), b"", "in-flight AIO write")
        self.assertEqual(read(self.f("d")), b"", "AIO write without O_DSYNC")
        self.assertEqual(read(self.f("e")), b"E" * 10)
        self.assertEqual(read(self.f("f")), b"")
        self.assertFalse(os.path.exists(self.f("open-f")))
        self.assertEqual(read(self.f("g")), b"G" * 8192)
        self.assertEqual(read(self.f("pre")), b"P" * 64)
        self.assertFalse(os.path.exists(self.f("h")))
        self.assertEqual(read(self.f("k")), b"K" * 10)
        self.assertEqual(read(self.f("i")), b"I" * 10)
        self.assertEqual(read(self.outside), b"O" * 10)
        print("raftcut real: %s" % stats, file=sys.stderr)

    def test_ignore_sync_rolls_back_everything_since_start(self):
        stats = self.cut("ignore-sync")
        for name in ("a", "b", "open-c", "d", "e", "f", "i", "k"):
            self.assertEqual(read(self.f(name)), b"", name)
        self.assertEqual(read(self.f("g")), b"G" * 8192)
        self.assertEqual(read(self.f("pre")), b"P" * 64)
        self.assertEqual(read(self.outside), b"O" * 10)
        print("raftcut ignore-sync: %s" % stats, file=sys.stderr)

    def test_libraft_under_ignore_sync_rolls_back_to_the_state_at_start(self):
        """The real node (a one-node cluster): after a clean run the Raft
        directory is on disk; a second run under ignore-sync takes claims,
        is SIGKILLed and rolled back: every file from before is byte for
        byte what it was, every file the run created is empty. Any write
        path the library missed would leave a difference."""
        ini = os.path.join(self.tmp.path, "node.ini")
        peers = free_ports(2)
        with open(ini, "w") as f:
            f.write('[global]\nhttp-host="127.0.0.1"\n[cluster]\nid=1\n'
                    'insecure=true\n'
                    'peers=["1=127.0.0.1:%d,127.0.0.1:%d"]\n'
                    'election-timeout=200ms\nheartbeat-timeout=20ms\n'
                    % tuple(peers))
        data = os.path.join(self.tmp.path, "node")
        raft = os.path.join(data, "raft")

        def run(mode, keys, cut):
            node = Node(data, "--config-file=" + ini,
                        env=raftcut.env(raft, self.journal, LIB, mode))
            node.start()
            try:
                for k in keys:
                    self.assertTrue(wait_for(
                        lambda: node.webhook({"k": k}, key=k)[0] == 200, 10,
                        0.05), k)
            finally:
                if cut:
                    node.kill()
                else:
                    self.assertEqual(node.stop(), 0)

        run("real", ["before-%d" % i for i in range(20)], cut=False)
        raftcut.discard(self.journal)
        before = {f: read(os.path.join(raft, f)) for f in os.listdir(raft)}
        run("ignore-sync", ["during-%d" % i for i in range(50)], cut=True)
        changed = {f for f in os.listdir(raft)
                   if f not in before or read(os.path.join(raft, f))
                   != before[f]}
        self.assertTrue(changed, "the run changed nothing in %s" % raft)
        stats = raftcut.rollback(self.journal)
        after = {f: read(os.path.join(raft, f)) for f in os.listdir(raft)}
        for f, content in before.items():
            self.assertEqual(after.get(f), content, f)
        for f in set(after) - set(before):
            self.assertEqual(after[f], b"", "%s, created by the run" % f)
        print("raftcut libraft: %d files changed by the run, %s; created "
              "and now empty: %s" % (len(changed), stats,
                                     sorted(set(after) - set(before))),
              file=sys.stderr)

    def test_without_the_directory_the_library_does_nothing(self):
        env = dict(os.environ, LD_PRELOAD=LIB)
        env.pop("ONCEGATE_RAFTCUT_DIR", None)
        out = subprocess.run(
            [sys.executable, "-c",
             "import os; fd = os.open(%r, os.O_CREAT | os.O_WRONLY, 0o600); "
             "os.write(fd, b'x'); os.fsync(fd); print('ok')" % self.f("z")],
            env=env, capture_output=True, timeout=20)
        self.assertEqual(out.stdout, b"ok\n", out.stderr)
        self.assertEqual(raftcut.journals(self.journal), [])


if __name__ == "__main__":
    unittest.main()
