"""Wall clocks per node, stepped while the node runs: libfaketime with a
timestamp file per process, and a timerfd shim so that only the wall clock
moves (FakeClock), for the `clock-jump` fault.

Lives here: finding libfaketime, building the shim, the per-process
environment and offsets. Must not: start nodes (a LocalNode takes the
environment `FakeClock.env` gives) or judge time stamps (verdict.py).
"""

import glob
import os
import shutil
import subprocess

from .base import Skip


# -- clocks -------------------------------------------------------------------

# libfaketime's preload libraries, preferred first: the MT build serialises
# its clock calls (the nodes read the clock from many threads, and with
# FAKETIME_NO_CACHE every call re-reads the timestamp file into shared
# state).
LIBFAKETIME_NAMES = ("libfaketimeMT.so.1", "libfaketime.so.1")

# libfaketime (0.9.10, still so upstream) treats every timerfd as a
# CLOCK_REALTIME one and shifts absolute expiries by the offset, also for
# CLOCK_MONOTONIC timerfds and with FAKETIME_DONT_FAKE_MONOTONIC (upstream
# issues 378, 431). Boost.Asio arms its CLOCK_MONOTONIC timerfd with
# TFD_TIMER_ABSTIME for a timer that is already due: under an offset of
# -2h its timers would then stall for two hours, under +2h the call fails.
# This shim, preloaded before libfaketime, passes timerfd calls straight to
# the kernel, so only the wall clock moves.
TIMERFD_SHIM = r"""
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>
int timerfd_settime(int fd, int flags, const struct itimerspec *new_value,
                    struct itimerspec *old_value) {
  return (int)syscall(SYS_timerfd_settime, fd, flags, new_value, old_value);
}
int timerfd_gettime(int fd, struct itimerspec *curr_value) {
  return (int)syscall(SYS_timerfd_gettime, fd, curr_value);
}
"""


def find_libfaketime():
    """The path of libfaketime's preload library, or None. $LIBFAKETIME
    overrides the search (dpkg's file list of `libfaketime`, then the usual
    directories)."""
    forced = os.environ.get("LIBFAKETIME")
    if forced:
        return forced if os.path.isfile(forced) else None
    candidates = []
    try:
        candidates += subprocess.run(
            ["dpkg", "-L", "libfaketime"], capture_output=True, text=True,
            timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        pass
    for pattern in ("/usr/lib/*/faketime/*", "/usr/lib*/faketime/*",
                    "/usr/local/lib*/faketime/*",
                    "/usr/local/lib/*/faketime/*"):
        candidates += sorted(glob.glob(pattern))
    for name in LIBFAKETIME_NAMES:
        for path in candidates:
            if os.path.basename(path) == name and os.path.isfile(path):
                return path
    return None


class FakeClock:
    """A wall clock per process that can be stepped while it runs: each
    process starts under libfaketime (LD_PRELOAD) with its own timestamp
    file holding an offset from the real time ("+0", "+7200", "-7200"),
    re-read on every clock call (FAKETIME_NO_CACHE), so writing the file
    steps that process's CLOCK_REALTIME (time(), gettimeofday(),
    std::chrono::system_clock) and nothing else: CLOCK_MONOTONIC
    (std::chrono::steady_clock, libuv's uv_hrtime) is not faked
    (FAKETIME_DONT_FAKE_MONOTONIC), nor timed waits on it
    (FAKETIME_FORCE_MONOTONIC_FIX=0: the automatic "fix" for glibc >= 2.30
    makes pthread_cond_timedwait on a CLOCK_MONOTONIC condition variable,
    as libuv uses, return at once), nor Asio's timerfd (the shim above),
    nor file times (NO_FAKE_STAT). The host's clock and every other process
    are untouched.

    libfaketime keeps a semaphore and a shared memory segment per process
    in /dev/shm, removed only by a clean exit of the process that created
    them; `forget(pid)` removes what a killed (or exec'ed) one left."""

    def __init__(self, directory, lib=None):
        self.directory = directory
        self.lib = lib or find_libfaketime()
        if self.lib is None:
            raise Skip("libfaketime is not installed (Debian: apt-get "
                       "install faketime), so no node's clock can be moved")
        os.makedirs(directory, exist_ok=True)
        self.offsets = {}
        self.shim, self.shim_error = self._build_shim()

    def _build_shim(self):
        """(path, None), or (None, why not) without a C compiler."""
        cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang")
                   if c and shutil.which(c)), None)
        if cc is None:
            return None, "no C compiler (cc) for the timerfd shim"
        src = os.path.join(self.directory, "timerfd_shim.c")
        out = os.path.join(self.directory, "timerfd_shim.so")
        with open(src, "w") as f:
            f.write(TIMERFD_SHIM)
        try:
            res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", out,
                                  src], capture_output=True, text=True,
                                 timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            return None, "cannot build the timerfd shim: %s" % e
        if res.returncode != 0:
            return None, "cannot build the timerfd shim (%s, exit %d): %s" % (
                cc, res.returncode, res.stderr.strip()[-500:])
        return out, None

    def path(self, name):
        return os.path.join(self.directory, "clock-%s" % name)

    def env(self, name):
        """The environment for process `name`; its clock starts at its
        current offset (0 the first time)."""
        self.set(name, self.offsets.get(name, 0.0))
        preload = [p for p in (self.shim, self.lib) if p]
        return {"LD_PRELOAD": ":".join(preload),
                "FAKETIME_TIMESTAMP_FILE": self.path(name),
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_FORCE_MONOTONIC_FIX": "0",
                "NO_FAKE_STAT": "1"}

    @staticmethod
    def clean_environ(env):
        """`env` without libfaketime settings that would override the
        timestamp file (FAKETIME) or share another process's state."""
        return {k: v for k, v in env.items()
                if k not in ("FAKETIME", "FAKETIME_SHARED")}

    def set(self, name, seconds):
        """Puts process `name`'s clock `seconds` from the real time (at
        once: the next clock call reads it). The file is replaced, never
        rewritten in place, so no call reads half of it."""
        self.offsets[name] = seconds
        tmp = self.path(name) + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+d\n" % round(seconds))
        os.replace(tmp, self.path(name))

    def step(self, name, seconds):
        """Steps the clock by `seconds` (like `date -s`); returns the new
        offset from the real time."""
        self.set(name, self.offsets.get(name, 0.0) + seconds)
        return self.offsets[name]

    def offset(self, name):
        return self.offsets.get(name, 0.0)

    def reset(self):
        """Every clock back to the real time; returns the names moved."""
        moved = [n for n, off in sorted(self.offsets.items()) if off]
        for name in moved:
            self.set(name, 0.0)
        return moved

    @staticmethod
    def forget(pid):
        for path in ("/dev/shm/sem.faketime_sem_%d" % pid,
                     "/dev/shm/faketime_shm_%d" % pid):
            try:
                os.unlink(path)
            except OSError:
                pass


def format_offset(seconds):
    """+2h, -30m, +0."""
    if not seconds:
        return "+0"
    sign = "+" if seconds > 0 else "-"
    s = abs(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return "%s%d%s" % (sign, s // size, unit)
    return "%s%gs" % (sign, s)
