"""The drills' upstream outage (tools/test_upstream.py run as a script):
SIGUSR1 stops listening and cuts the open connections, SIGUSR2 listens
again on the same port, whichever of the script's threads the kernel
delivers the signal to.

A signal sent to a process goes to any thread that does not block it; the
kernel prefers the thread named by the pid it was sent to. CPython runs
signal handlers in the main thread only, so a signal taken by a connection
thread waited for the main thread's next wake-up: drill.upstream-outage
failed once in CI with "the upstream still accepts connections after 20s".
Here the signal is sent to the pid of the accept loop's thread
(kill(2) with a thread id: still process-directed, that thread preferred),
with connections open."""

import os
import signal
import socket
import subprocess
import sys
import time
import unittest

from harness import free_port, wait_for

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                      "..", "tools", "test_upstream.py")
# How long a signal may take to take effect.
BOUND = 5.0


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def threads(pid):
    return sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))


class UpstreamOutageTest(unittest.TestCase):
    def setUp(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, SCRIPT, "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        self.assertIn("listening on", line)
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()
        self.proc.kill()
        self.proc.wait(10)
        self.proc.stdout.close()

    def busy_thread(self):
        """Opens connections and returns the id of the accept loop's thread
        (the first after the main one: it runs before the script says it
        listens)."""
        for _ in range(3):
            self.conns.append(socket.create_connection(
                ("127.0.0.1", self.port), 5))
        others = [t for t in threads(self.proc.pid) if t != self.proc.pid]
        self.assertTrue(others, "no thread but the main one")
        return others[0]

    def kill_another_thread(self, sig):
        """Sends `sig` to a thread other than the main one that still
        exists (a connection thread may end between listing and kill),
        else to the process."""
        for t in threads(self.proc.pid):
            if t == self.proc.pid:
                continue
            try:
                os.kill(t, sig)
                return
            except ProcessLookupError:
                continue
        os.kill(self.proc.pid, sig)

    def signal_thread(self, sig):
        os.kill(self.busy_thread(), sig)

    def test_an_outage_signal_taken_by_any_thread_takes_the_upstream_down(self):
        self.assertTrue(accepts(self.port))
        t0 = time.monotonic()
        self.signal_thread(signal.SIGUSR1)
        down = wait_for(lambda: not accepts(self.port), BOUND)
        self.assertTrue(down, "SIGUSR1 taken by another thread: still "
                        "accepting after %.1fs" % BOUND)
        print("down after %.2fs" % (time.monotonic() - t0), file=sys.stderr)
        # The open connections are cut (EOF, or a reset for one the accept
        # loop had not taken yet).
        for c in self.conns:
            c.settimeout(BOUND)
            try:
                self.assertEqual(c.recv(100), b"")
            except ConnectionResetError:
                pass
        # And back on the same port, again through another thread's pid.
        self.kill_another_thread(signal.SIGUSR2)
        self.assertTrue(wait_for(lambda: accepts(self.port), BOUND),
                        "SIGUSR2: not listening again after %.1fs" % BOUND)
        self.assertIsNone(self.proc.poll())


if __name__ == "__main__":
    unittest.main()
