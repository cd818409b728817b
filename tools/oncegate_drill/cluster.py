"""Local clusters: the one Python way to run oncegate nodes. A node
process (LocalNode: start and wait for its ready line, SIGKILL, SIGTERM,
SIGSTOP/SIGCONT, exit codes, logs), remote nodes (Endpoint), and the
cluster's view of them (Cluster: GET /v1/cluster, /readyz, the ready
leader, convergence), with free ports and the status rules shared by the
drill, tests/process/test_cluster.py (its ClusterNode and Cluster build on
these) and bench/lib (benchlib.py, flood.py). scripts/cluster.sh is the
operator's shell tool for a shipped config dir; this module is the
canonical one for code.

Lives here: processes and what their HTTP status endpoints say. Must not:
write INI files (config.py), send webhook traffic (traffic.py) or judge
(verdict.py).
"""

import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time

from .base import TRANSPORT_ERRORS, DrillError, http_call, log, wait_until
from .clock import FakeClock

START_TIMEOUT = 20.0  # a node prints its ready line within this long
STOP_TIMEOUT = 20.0  # SIGTERM to exit (a clean stop drains requests)
STATUS_TIMEOUT = 1.0  # one GET /v1/cluster or /readyz
LEADER_TIMEOUT = 15.0  # a fault that targets the leader waits for one
# The exit code with which a node asks its supervisor for a restart
# (app/node_main.cpp: Raft stopped for good after an I/O error).
RESTART_EXIT = 75
RESTART_DELAY = 1.0  # like systemd's RestartSec (the unit has 2 s)
RESTART_ATTEMPTS = 30  # starts that may fail in a row (a disk still full)


def certs_script():
    """scripts/cluster-certs.sh of this source tree, or the installed
    oncegate-cluster-certs."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "scripts", "cluster-certs.sh")
    if os.path.exists(script):
        return os.path.abspath(script)
    found = shutil.which("oncegate-cluster-certs")
    if found is None:
        raise DrillError("neither scripts/cluster-certs.sh nor "
                         "oncegate-cluster-certs found")
    return found


def make_certs(cert_dir, ids):
    """A cluster CA and one certificate per node id in `cert_dir` (what
    config.tls_lines names), made by the operators' script."""
    res = subprocess.run([certs_script(), cert_dir] + [str(i) for i in ids],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise DrillError("cluster-certs failed: %s" % res.stderr.strip())
    return cert_dir


def pdeathsig_prefix():
    """Children die with the drill (even if it is SIGKILLed, e.g. by a CTest
    timeout): `setpriv --pdeathsig KILL` when util-linux has it. The signal
    follows the *thread* that spawned the child, so every spawn happens on
    the main thread."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    try:
        out = subprocess.run([setpriv, "--help"], capture_output=True,
                             text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"] if "pdeathsig" in out else []


def assert_main_thread():
    assert threading.current_thread() is threading.main_thread(), \
        "children are spawned on the main thread (parent-death signal)"


def ephemeral_range():
    """The kernel's range for port-0 binds and outgoing connections
    (net.ipv4.ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


_ports_lock = threading.Lock()
_ports_given = set()
# The locks of the ports this process holds (open files, never closed: the
# kernel drops each lock when the process ends, however it ends).
_ports_held = []


def ports_lock_dir():
    """Where the per-port lock files live: one directory for every process
    of the machine that picks ports here (tests, drills, bench). Not under
    $TMPDIR: processes with another TMPDIR (a test that sets its own) must
    meet the same locks. The files stay (unlinking one that another
    process has open would let two processes hold the same port)."""
    path = "/tmp/oncegate-ports"
    try:
        os.mkdir(path, 0o1777)
        os.chmod(path, 0o1777)  # whoever runs next may be another user
    except FileExistsError:
        pass
    return path


def hold_port(port):
    """Takes `port`'s lock (an flock on its file in ports_lock_dir) for the
    rest of this process's life; False if another live process holds it.
    Processes that pick ports at random from the same range would otherwise
    both take one that the first had tested free and not bound yet (or that
    a restarting node of its own had let go for a moment)."""
    path = os.path.join(ports_lock_dir(), "%d.lock" % port)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _ports_held.append(fd)
    return True


def free_ports(n, span=None):
    """n distinct TCP ports free on 127.0.0.1 right now, for listeners whose
    port is fixed in a configuration and bound again after a restart (a
    node's raft and front ports, an upstream's). They come from outside the
    kernel's ephemeral range (below it, or above it when the range starts
    low): a port from bind(0) could be handed to any
    program's bind(0) or outgoing connection while its node was down (a
    restarted node found its front port taken by another node's HTTP
    listener). Random, each bound to test it (all at once, so they differ;
    released before returning), never the same one twice in this
    process, and never one that another live process took here (each is
    held with hold_port until this process ends). `span` (first, end),
    tests only: where to pick instead."""
    if span is not None:
        first, end = span
    else:
        low, high = ephemeral_range()
        # Below the range (from 10000 up, clear of common service ports,
        # when there is room), else above it, whichever is wider.
        below = (10000 if low > 12000 else 1024, low)
        above = (high + 1, 65536)
        first, end = max(below, above, key=lambda r: r[1] - r[0])
        if end - first < 4 * n:
            raise DrillError("the ephemeral port range is %d-%d: no room "
                             "outside it for %d fixed ports" % (low, high, n))
    rng = random.SystemRandom()
    socks = []
    ports = []
    try:
        with _ports_lock:
            for _ in range(100 * n + 1000):
                if len(ports) == n:
                    break
                port = rng.randrange(first, end)
                if port in _ports_given:
                    continue
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                if not hold_port(port):
                    s.close()
                    continue
                socks.append(s)
                ports.append(port)
                _ports_given.add(port)
    finally:
        for s in socks:
            s.close()
    if len(ports) < n:
        raise DrillError("found only %d of %d free ports in %d-%d"
                         % (len(ports), n, first, end - 1))
    return ports



def port_free(host, port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# -- what /v1/cluster says -----------------------------------------------------

def ready_leader(statuses):
    """{node id: /v1/cluster document or None}: the id of the one node
    that is the ready leader and that every answering node names as
    leader; None when there is none or no agreement."""
    st = {i: s for i, s in statuses.items() if s}
    leaders = [i for i, s in st.items()
               if s.get("role") == "leader" and s.get("leader_ready")]
    if len(leaders) != 1:
        return None
    lid = leaders[0]
    if all(s.get("leader_id") == lid for s in st.values()):
        return lid
    return None


def caught_up(statuses, index="commit_index", exact=False):
    """The leader's `index` (commit_index, last_index) when every node in
    `statuses` answered, exactly one is the leader and every node has
    applied that index (`exact`: no more, no less); else None. With
    several partitions, the same for each: the tuple of their indexes."""
    if any(s is None for s in statuses.values()):
        return None
    docs = list(statuses.values())
    parts = [d.get("partitions") or [d] for d in docs]
    if len({len(p) for p in parts}) != 1:
        return None
    targets = []
    for g in range(len(parts[0])):
        views = [p[g] for p in parts]
        leaders = [v for v in views if v.get("role") == "leader"]
        if len(leaders) != 1:
            return None
        target = leaders[0].get(index, leaders[0].get("commit_index"))
        if not all(v["applied_index"] == target if exact
                   else v["applied_index"] >= target for v in views):
            return None
        targets.append(target)
    return targets[0] if len(targets) == 1 else tuple(targets)


def partition_leaders(status):
    """{partition: leader id} of one node's /v1/cluster document (a
    cluster without partitions: {0: leader})."""
    if not status:
        return {}
    parts = status.get("partitions") or [dict(status, partition=0)]
    return {p["partition"]: p["leader_id"] for p in parts}


# -- nodes --------------------------------------------------------------------

class Endpoint:
    """Where a node's HTTP listener is; the same for local and remote nodes."""

    def __init__(self, node_id, host, port, data_dir=None):
        self.id = node_id
        self.host = host
        self.port = port
        self.data_dir = data_dir

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    @property
    def can_serve(self):
        return True

    @property
    def controllable(self):
        return False

    def call(self, method, path, body=None, headers=None, timeout=10.0):
        """One request to the node: (status, headers, body)."""
        return http_call(self.host, self.port, method, path, body, headers,
                         timeout)


class LocalNode(Endpoint):
    """One oncegate process the drill controls. stdout (the ready line) and
    stderr (the log) go to files, so nothing can block on a full pipe. A
    node started on port 0 takes the port its ready line names.

    States: down --start--> up --hang--> hung --resume--> up; kill from up
    or hung, term from up (a hung node is resumed first) lead to down."""

    start_timeout = START_TIMEOUT
    # True: every start takes its port from the ready line (a node on
    # --http-port=0); else only a node created with port 0 does.
    port_from_ready_line = False
    # Written to the log before every start (None: nothing).
    start_marker = b"----- drill: start %d -----\n"

    def __init__(self, node_id, host, port, data_dir, ini, node_dir, argv,
                 wrap=None, env=None):
        super().__init__(node_id, host, port, data_dir)
        self.ini = ini
        self.log_path = os.path.join(node_dir, "node.log")
        self.out_path = os.path.join(node_dir, "node.out")
        self.argv = argv
        self.wrap = wrap or (lambda a: a)
        self.env = env  # extra environment (libfaketime), or None
        self.proc = None
        self.state = "down"
        self.starts = 0
        self.exits = []  # exit codes of earlier processes (None: killed)

    @property
    def can_serve(self):
        return self.state == "up"

    @property
    def controllable(self):
        return True

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def command(self):
        """The command line of the next start."""
        return self.wrap(self.argv)

    def start(self, prefix=()):
        """Starts the process (`prefix`: pdeathsig_prefix(), then every
        start must happen on the main thread) and waits for its ready
        line; DrillError when there is none."""
        if prefix:
            assert_main_thread()
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "ab") as err, \
                open(self.out_path, "wb") as out:
            if self.start_marker:
                err.write(self.start_marker % (self.starts + 1))
                err.flush()
            env = None
            if self.env:
                env = dict(FakeClock.clean_environ(os.environ), **self.env)
            self.proc = subprocess.Popen(
                list(prefix) + self.command(), stdout=out, stderr=err,
                stdin=subprocess.DEVNULL, env=env)
        self.starts += 1
        ready = wait_until(self._ready_line, self.start_timeout, 0.01)
        code = self.proc.poll()
        if not ready or code is not None:
            self.kill()
            raise DrillError("node %s did not start (exit %s); log %s:\n%s"
                             % (self.id, code, self.log_path, self.log_tail()))
        if self.reads_port():
            self.port = int(ready.strip().rsplit(":", 1)[1])
        self.state = "up"

    def reads_port(self):
        return self.port_from_ready_line or not self.port

    def _ready_line(self):
        """The ready line, True when the process exited, else None."""
        if self.proc.poll() is not None:
            return True  # exited: reported by the caller
        try:
            with open(self.out_path) as f:
                for line in f:
                    at = line.find("oncegate ready http=")
                    # Whole, when the port is still to be read from it.
                    if at >= 0 and (line.endswith("\n")
                                    or not self.reads_port()):
                        return line[at:]
        except OSError:
            pass
        return None

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def _reap(self, code):
        if self.env and self.proc is not None:
            FakeClock.forget(self.proc.pid)
        self.exits.append(code)
        self.proc = None
        self.state = "down"

    def kill(self):
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self._reap(None)

    def term(self):
        """SIGTERM and wait (a clean stop); SIGKILL after STOP_TIMEOUT.
        Returns the exit code, None when it had to be killed."""
        self.send_term()
        return self.wait_exit(STOP_TIMEOUT)

    def send_term(self):
        if self.proc is None:
            return
        if self.state == "hung":
            self.resume()
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout):
        if self.proc is None:
            return 0
        try:
            code = self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self._reap(code)
        return code

    def log_lines(self, text):
        """Lines of the whole log that contain `text`."""
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.rstrip() for line in f if text in line]
        except OSError:
            return []

    def hang(self):
        """SIGSTOP, and wait until the whole process has stopped: kill()
        returns before the group stop completes, and meanwhile the node's
        other threads run on (a follower still appends and acknowledges
        what the leader sends, for milliseconds; a test that then expects
        nothing to commit sees claims commit). The parent hears of the stop
        once the last thread stopped (waitpid, WUNTRACED)."""
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + STOP_TIMEOUT
        while True:
            pid, status = os.waitpid(self.proc.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                break
            if pid:  # it exited meanwhile: Popen must know
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise DrillError("node %s did not stop within %ss of SIGSTOP"
                                 % (self.id, STOP_TIMEOUT))
            time.sleep(0.0005)
        self.state = "hung"

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.state = "up"

    def check_alive(self):
        """A node that exited by itself (a crash) is down; returns its code."""
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            self._reap(code)
            return code
        return None


class Cluster:
    """The nodes under test, local (controlled) or remote (`--targets`)."""

    def __init__(self, nodes=(), admin_token=None, single=False):
        self.nodes = {n.id: n for n in nodes}
        self.admin_token = admin_token
        self.single = single
        self.crashes = []  # (node id, exit code) of nodes that died alone
        # Supervision (`supervise`): nodes that exit with RESTART_EXIT are
        # restarted like systemd's Restart=on-failure would, not counted as
        # crashes; a restart that fails is tried again after the delay.
        self.supervisor_prefix = None
        self.restarts = []  # (node id, drill-monotonic time) of each restart
        self._due = {}  # node id -> (monotonic due time, failed attempts)

    def ids(self):
        return sorted(self.nodes)

    def serving(self):
        return [i for i in self.ids() if self.nodes[i].can_serve]

    def get(self, node_id, path, timeout=STATUS_TIMEOUT):
        """GET path as JSON: (status, doc); (None, None) when no answer."""
        n = self.nodes[node_id]
        if not n.can_serve:
            return None, None
        headers = {}
        if self.admin_token:
            headers["Authorization"] = "Bearer " + self.admin_token
        try:
            status, _, body = n.call("GET", path, headers=headers,
                                     timeout=timeout)
            return status, json.loads(body or b"null")
        except (TRANSPORT_ERRORS + (ValueError,)):
            return None, None

    def post(self, node_id, path, timeout=10.0):
        n = self.nodes[node_id]
        headers = {"Content-Length": "0"}
        if self.admin_token:
            headers["Authorization"] = "Bearer " + self.admin_token
        try:
            status, _, body = n.call("POST", path, b"", headers, timeout)
            return status, body
        except TRANSPORT_ERRORS as e:
            return None, repr(e).encode()

    def status(self, node_id):
        status, doc = self.get(node_id, "/v1/cluster")
        return doc if status == 200 and isinstance(doc, dict) else None

    def statuses(self, ids=None):
        return {i: self.status(i) for i in (ids or self.serving())}

    def ready(self, node_id, timeout=STATUS_TIMEOUT):
        return self.get(node_id, "/readyz", timeout)[0] == 200

    def leader(self, ids=None):
        """The ready leader that every answering node among `ids` (default:
        the serving ones) names; None when there is none (or no agreement
        yet). A single node leads."""
        if self.single:
            ids = self.serving()
            return ids[0] if ids and self.ready(ids[0]) else None
        return ready_leader(self.statuses(ids))

    def agreed_partition_leaders(self, ids=None):
        """{partition: leader} when every answering node among `ids`
        (default: the serving ones) names the same leader, one of them, for
        every partition; else None."""
        st = {i: s for i, s in self.statuses(ids).items() if s}
        if not st:
            return None
        views = [partition_leaders(s) for s in st.values()]
        first = views[0]
        if any(v != first for v in views[1:]):
            return None
        if any(lid not in st for lid in first.values()):
            return None
        return first

    def wait_leader(self, ids=None, timeout=LEADER_TIMEOUT, interval=0.05):
        """The leader (see `leader`) once there is one; None after
        `timeout` seconds."""
        return wait_until(lambda: self.leader(ids), timeout, interval)

    def converged(self, ids):
        """Every node in ids is ready and has applied the leader's commit
        index (single node: ready)."""
        if not all(self.ready(i) for i in ids):
            return False
        if self.single:
            return True
        return caught_up(self.statuses(ids)) is not None

    def wait_converged(self, ids, timeout):
        """Converged twice in a row, 0.2 s apart (nothing left in flight)."""
        deadline = time.monotonic() + timeout
        streak = 0
        while time.monotonic() < deadline:
            streak = streak + 1 if self.converged(ids) else 0
            if streak >= 2:
                return True
            time.sleep(0.2)
        return False

    def supervise(self, prefix):
        """Restarts nodes that ask for it (RESTART_EXIT), spawning with
        `prefix` (pdeathsig_prefix(); on the main thread, like every
        spawn)."""
        self.supervisor_prefix = prefix

    def reap_crashes(self):
        """Notes nodes that exited on their own (a product crash), and
        restarts those that asked for it when supervising."""
        for n in self.nodes.values():
            if not n.controllable:
                continue
            code = n.check_alive()
            if code is None:
                continue
            if code == RESTART_EXIT and self.supervisor_prefix is not None:
                log("drill: node %d exited with %d (restart requested)"
                    % (n.id, code))
                self._due[n.id] = (time.monotonic() + RESTART_DELAY, 0)
            else:
                self.crashes.append((n.id, code))
                log("drill: node %d exited by itself with code %s"
                    % (n.id, code))
        self._restart_due()

    def restart_pending(self, i):
        """Whether node `i` is down with a supervised restart still due."""
        return i in self._due

    def _restart_due(self):
        now = time.monotonic()
        for i, (due, failed) in list(self._due.items()):
            n = self.nodes[i]
            if n.state != "down":  # started meanwhile (e.g. by restore)
                del self._due[i]
                continue
            if now < due:
                continue
            try:
                n.start(self.supervisor_prefix)
            except DrillError as e:
                if failed + 1 >= RESTART_ATTEMPTS:
                    del self._due[i]
                    self.crashes.append((i, "restart failed %d times: %s"
                                         % (failed + 1, e)))
                else:
                    self._due[i] = (time.monotonic() + RESTART_DELAY,
                                    failed + 1)
                continue
            del self._due[i]
            self.restarts.append((i, now))
            log("drill: node %d restarted by the supervisor (pid %d)"
                % (i, n.pid))
