"""One drill run from set-up to verdict (Drill): the counting upstream,
the nodes (generated, a shipped config dir, or running ones with
--targets), traffic and the fault schedule, restoring every node, the
resend pass, reading the ground truth and handing it to the verdict.

Lives here: the order of a run and what it owns (work dir, upstream
process, cleanup). Must not: hold the pieces themselves: nodes
(cluster.py), INI text (config.py), namespaces and disks (netlab.py),
clocks (clock.py), faults (faults.py), traffic (traffic.py), checks
(verdict.py) or the text report (report.py).
"""

import json
import os
import random
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

from .base import DrillError, Skip, UsageError, http_call, log, \
    parse_duration, parse_size, wait_until
from .clock import FakeClock, find_libfaketime
from .cluster import START_TIMEOUT, STOP_TIMEOUT, Cluster, Endpoint, \
    LocalNode, assert_main_thread, free_ports, make_certs, pdeathsig_prefix, \
    port_free
from .config import DRILL_UPSTREAM_CONNECT_TIMEOUT, DRILL_UPSTREAM_TIMEOUT, \
    cluster_section, config_dir_files, config_ports, generated_ini, \
    ini_value, peer_entry, route_sections
from .faults import FaultFailed, FaultSchedule
from .netlab import Disks, NetLab, Registry, root_unavailable
from .senders import StandardWebhooksSender, TradingViewSender
from .traffic import Traffic, resend
from .verdict import IN_DOUBT, IN_FLIGHT, QUEUED, Findings, Verdict, \
    node_databases, read_node_records, read_records

# Settings of every node the drill starts, suited to its fast counting
# upstream (it answers within milliseconds; no drill sets a slow mode): a
# record a crash left in flight turns in_doubt within about 5 s, so the
# verdict can fail a record still in flight (stuck-in-flight). Before the
# scenario's `node-args`, which can override them.
DRILL_NODE_ARGS = ["--keys.in-flight-deadline=4s", "--alarm.max-interval=1s"]
IN_FLIGHT_MARGIN = 2.0  # seconds, on top of the deadline and 2 alarm ticks


class Drill(FaultSchedule):
    """One scenario run: set up, traffic and faults, restore, judge."""

    def __init__(self, args, sc):
        self.args = args
        self.sc = sc
        self.seed = args.seed if args.seed is not None \
            else random.SystemRandom().randrange(1 << 31)
        self.rng = random.Random(self.seed)
        self.run_id = "%06x" % random.SystemRandom().getrandbits(24)
        self.mode = ("targets" if args.targets else
                     "config-dir" if args.config_dir else "local")
        self.prefix = pdeathsig_prefix()
        self.work_dir = None
        self.registry = None
        self.netlab = None
        self.disks = None
        self.clock = None  # FakeClock, when the schedule jumps clocks
        self.upstream = None  # the subprocess, when the drill runs it
        self.upstream_url = None
        self.upstream_down = False  # an upstream-down fault is in force
        self.cluster = None
        self.traffic = None
        self.bindings = {}
        self.fault_log = []
        self.skipped = []
        self.findings = Findings()
        self.final_counts = {}
        self.clustered = False
        self.timeline = {}

    # -- set-up --------------------------------------------------------------

    def check_feasible(self):
        """Raises Skip when this scenario cannot run here."""
        if self.mode == "targets":
            return
        if self.sc.needs_root:
            why = root_unavailable()
            if why:
                wants = [f.action for f in self.sc.faults if f.needs_root]
                raise Skip("%s needs root for network namespaces and "
                           "tmpfs mounts (%s): %s" % (
                               self.sc.name,
                               ", ".join(sorted(set(wants))) or
                               "network=netns", why))
        if self.sc.network == "netns" and self.mode == "config-dir":
            raise Skip("scenario %s runs each node in a network namespace; "
                       "a --config-dir cluster's addresses cannot move there"
                       % self.sc.name)
        if self.sc.jumps_clocks and find_libfaketime() is None:
            raise Skip("scenario %s steps the nodes' wall clocks with "
                       "libfaketime, which is not installed (Debian: apt-get "
                       "install faketime)" % self.sc.name)

    def setup(self):
        self.work_dir = self.args.work_dir or tempfile.mkdtemp(
            prefix="oncegate-drill-%s-" % self.sc.name)
        os.makedirs(self.work_dir, exist_ok=True)
        if self.mode == "targets":
            self.setup_targets()
        else:
            self.setup_local()

    def start_upstream(self, host, port):
        script = self.args.upstream_script
        out = os.path.join(self.work_dir, "upstream.out")
        assert_main_thread()
        with open(out, "wb") as f:
            self.upstream = subprocess.Popen(
                self.prefix + [sys.executable, script, "--host", host,
                               "--port", str(port)],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def listening():
            if self.upstream.poll() is not None:
                return "exited"
            with open(out) as f:
                m = re.search(r"listening on (http://\S+)", f.read())
            return m.group(1) if m else None

        url = wait_until(listening, START_TIMEOUT, 0.02)
        if not url or url == "exited":
            raise DrillError("the test upstream (%s) did not start: %s"
                             % (script, open(out).read()[-2000:]))
        self.upstream_url = url

    def upstream_counts(self):
        base = self.upstream_url.split("/", 3)
        host, _, port = base[2].partition(":")
        status, _, body = http_call(host, int(port or 80), "GET", "/_counts",
                                    timeout=10)
        if status != 200:
            raise DrillError("upstream /_counts answered %d" % status)
        return json.loads(body)["keys"]

    def upstream_outage(self, down):
        """Takes the counting upstream down (SIGUSR1: no listener, every
        open connection cut) or brings it back on its port (SIGUSR2), and
        waits until a connection is refused or accepted."""
        if self.upstream is None or self.upstream.poll() is not None:
            raise FaultFailed("the drill does not run the upstream")
        self.upstream.send_signal(signal.SIGUSR1 if down else signal.SIGUSR2)
        host, _, port = self.upstream_url.split("/", 3)[2].partition(":")

        def accepts():
            try:
                socket.create_connection((host, int(port)), 1).close()
                return True
            except OSError:
                return False
        if not wait_until(lambda: accepts() != down, START_TIMEOUT, 0.02):
            raise FaultFailed("the upstream still %s connections after %ds"
                              % ("accepts" if down else "refuses",
                                 START_TIMEOUT))
        self.upstream_down = down
        return "upstream %s" % ("down (connections refused and cut)"
                                if down else "back on port %s" % port)

    def route_sections(self):
        return route_sections(self.sc, self.upstream_url)

    def node_args(self):
        """The drill's node settings, then the scenario's `node-args` (the
        last occurrence of an option wins, so a scenario can override)."""
        return DRILL_NODE_ARGS + shlex.split(self.sc.get("drill",
                                                         "node-args"))

    def in_flight_bound(self):
        """Seconds to wait for in-flight records to be doubted: the nodes'
        in-flight deadline + 2 alarm intervals + a margin."""
        opts = {}
        for arg in self.node_args():
            name, eq, value = arg.partition("=")
            if eq and name in ("--keys.in-flight-deadline",
                               "--alarm.max-interval"):
                opts[name] = value
        try:
            deadline = parse_duration(opts["--keys.in-flight-deadline"])
            interval = parse_duration(opts["--alarm.max-interval"])
        except (KeyError, UsageError):
            deadline, interval = 0.0, 60.0  # the node's defaults
        if deadline <= 0:  # derived: connect + response, >= http 10s, + 10s
            deadline = max(parse_duration(DRILL_UPSTREAM_CONNECT_TIMEOUT) +
                           parse_duration(DRILL_UPSTREAM_TIMEOUT), 10.0) + 10
        return deadline + 2 * interval + IN_FLIGHT_MARGIN

    def wait_in_flight(self, routes):
        """Waits (bounded by in_flight_bound) until no node's database holds
        an in_flight record of this run's keys: a record left in flight by
        a crash turns in_doubt at the first alarm tick past the in-flight
        deadline. With async delivery also until none is queued (and, with
        reconcile, none in doubt), bounded by [expect] delivered-within:
        the node delivers what it accepted. Returns the seconds waited and
        the keys still unsettled."""
        keys = {s.key for s in self.traffic.signals}
        waiting = {IN_FLIGHT}
        bound = self.in_flight_bound()
        if self.sc.delivery == "async":
            waiting.add(QUEUED)
            if self.sc.reconcile == "true":
                waiting.add(IN_DOUBT)
            bound = max(bound, self.sc.duration("expect", "delivered-within"))
        paths = [path for _, n in sorted(self.cluster.nodes.items())
                 if n.data_dir for path in node_databases(n.data_dir)]
        t0 = time.monotonic()
        deadline = t0 + bound
        while True:
            stuck = set()
            for path in paths:
                try:
                    records = read_records(path, routes)[0]
                except sqlite3.Error:
                    continue  # judged (database-unreadable) by the read after
                stuck.update(k for (_, k), (st, *_) in records.items()
                             if st in waiting and k in keys)
            if not stuck or time.monotonic() >= deadline:
                return time.monotonic() - t0, stuck
            time.sleep(0.2)

    def setup_local(self):
        ids = list(range(1, self.sc.nodes + 1))
        if self.mode == "config-dir":
            ids = [n for n, _ in self.config_dir_files()]
        if os.geteuid() == 0:
            Registry.sweep()
        if self.sc.needs_root:
            self.registry = Registry(self.run_id)
        if self.sc.network == "netns":
            self.netlab = NetLab(self.run_id, ids, self.registry).setup()
            self.start_upstream(self.netlab.service_ip(0), 0)
        else:
            self.start_upstream("127.0.0.1", 0)
        if self.sc.fills_disk:
            self.disks = Disks(parse_size(self.sc.get("drill", "disk-size")),
                               self.registry)
        if self.sc.jumps_clocks:
            self.clock = FakeClock(os.path.join(self.work_dir, "clocks"))
            if self.clock.shim_error:
                self.findings.warn("clock-shim", detail=(
                    "%s: libfaketime also shifts Asio's timerfd, so a node "
                    "stepped back may stall its HTTP timers"
                    % self.clock.shim_error))
        if self.mode == "config-dir":
            nodes = self.config_dir_nodes()
        else:
            nodes = self.generated_nodes(ids)
        self.cluster = Cluster(nodes, self.admin_token(),
                               single=len(nodes) == 1 and not self.clustered)
        # As systemd's Restart=on-failure would (packaging/oncegate.service).
        self.cluster.supervise(self.prefix)
        for n in nodes:
            if self.disks:
                self.disks.mount(n.data_dir)
            n.start(self.prefix)
        if not self.cluster.wait_converged(self.cluster.ids(), START_TIMEOUT):
            raise DrillError("the nodes did not become ready with a leader "
                             "within %ds: %s" % (START_TIMEOUT,
                                                 self.cluster.statuses()))

    def admin_token(self):
        if self.mode == "local":
            return "drill-admin-" + self.run_id
        return self.args.admin_token or os.environ.get("ONCEGATE_ADMIN_TOKEN")

    def generated_nodes(self, ids):
        self.clustered = len(ids) > 1
        token = self.admin_token()
        if self.netlab:
            hosts = {i: self.netlab.service_ip(i) for i in ids}
            ports = {i: (NetLab.HTTP_PORT, NetLab.RAFT_PORT, NetLab.CAF_PORT)
                     for i in ids}
            peer_hosts = {i: self.netlab.cluster_ip(i) for i in ids}
        else:
            free = free_ports(3 * len(ids))
            hosts = {i: "127.0.0.1" for i in ids}
            peer_hosts = hosts
            ports = {i: tuple(free[3 * k:3 * k + 3])
                     for k, i in enumerate(ids)}
        peers = [peer_entry(i, peer_hosts[i], ports[i][1])
                 for i in ids]
        tls_dir = None
        if self.clustered and not self.args.insecure:
            tls_dir = make_certs(os.path.join(self.work_dir, "tls"), ids)
        nodes = []
        for i in ids:
            node_dir = os.path.join(self.work_dir, "node%d" % i)
            data_dir = os.path.join(node_dir, "data")
            os.makedirs(node_dir, exist_ok=True)
            ini = os.path.join(node_dir, "node.ini")
            text = generated_ini(self.sc.name, hosts[i], ports[i][0],
                                 data_dir, token)
            text += self.route_sections()
            if self.clustered:
                text += cluster_section(
                    i, peers, tls_dir=tls_dir,
                    partitions=self.sc.partitions
                    if self.sc.partitions > 1 else None,
                    election_timeout=self.sc.get("drill", "election-timeout"))
            with open(ini, "w") as f:
                f.write(text)
            argv = [self.args.bin, "--config-file=" + ini] + self.node_args()
            wrap = (lambda a, i=i: self.netlab.wrap(i, a)) \
                if self.netlab else None
            nodes.append(LocalNode(i, hosts[i], ports[i][0], data_dir, ini,
                                   node_dir, argv, wrap, self.clock_env(i)))
        return nodes

    def config_dir_files(self):
        return config_dir_files(self.args.config_dir)

    def config_dir_nodes(self):
        files = self.config_dir_files()
        self.clustered = any(i > 0 for i, _ in files)
        busy = [p for _, path in files for p in config_ports(path)
                if not port_free(*p)]
        if busy:
            raise DrillError(
                "%s: %s already in use: is this cluster running? Stop it, "
                "or drive it with --targets" % (
                    self.args.config_dir,
                    ", ".join("%s:%d" % p for p in busy)))
        nodes = []
        for i, path in files:
            i = i or 1
            node_dir = os.path.join(self.work_dir, "node%d" % i)
            data_dir = os.path.join(node_dir, "data")
            os.makedirs(node_dir, exist_ok=True)
            ini = os.path.join(node_dir, "node.ini")
            with open(path) as f:
                text = f.read()
            with open(ini, "w") as f:
                f.write(text + "\n" + self.route_sections())
            host = ini_value(path, "global", "http-host") or "127.0.0.1"
            port = int(ini_value(path, "global", "http-port") or 8080)
            argv = [self.args.bin, "--config-file=" + ini,
                    "--data-dir=" + data_dir] + self.node_args()
            nodes.append(LocalNode(i, host, port, data_dir, ini, node_dir,
                                   argv, env=self.clock_env(i)))
        return nodes

    def clock_env(self, node_id):
        return self.clock.env(node_id) if self.clock else None

    def setup_targets(self):
        urls = [u.strip() for u in self.args.targets.split(",") if u.strip()]
        dirs = [d.strip() for d in (self.args.data_dirs or "").split(",")
                if d.strip()]
        if dirs and len(dirs) != len(urls):
            raise UsageError("--data-dirs: one per target (%d targets)"
                             % len(urls))
        nodes = []
        for k, url in enumerate(urls):
            m = re.match(r"^http://([^/:]+)(?::(\d+))?/?$", url)
            if not m:
                raise UsageError("--targets: not http://HOST[:PORT]: %r" % url)
            nodes.append(Endpoint(k + 1, m.group(1), int(m.group(2) or 80),
                                  dirs[k] if dirs else None))
        self.cluster = Cluster(nodes, self.admin_token())
        modes = {self.cluster.get(i, "/v1/cluster")[1] and
                 self.cluster.get(i, "/v1/cluster")[1].get("mode")
                 for i in self.cluster.ids()}
        self.cluster.single = modes == {"single"}
        self.clustered = not self.cluster.single
        if self.args.upstream_url:
            self.upstream_url = self.args.upstream_url
        else:
            host, _, port = self.args.upstream_listen.rpartition(":")
            self.start_upstream(host, int(port))
        log("drill: the counting upstream is %s; routes %s and %s on the "
            "targets must forward to it" % (
                self.upstream_url,
                self.sc.get("traffic", "tradingview-route"),
                self.sc.get("traffic", "standard-webhooks-route")))
        if not self.cluster.wait_converged(self.cluster.ids(), START_TIMEOUT):
            raise DrillError("the targets are not all ready (with a leader) "
                             "within %ds: %s"
                             % (START_TIMEOUT, self.cluster.statuses()))


    # -- after the traffic ---------------------------------------------------

    def restore(self):
        """Heals, frees, resumes and starts every node, then waits until all
        are ready and caught up; returns the seconds it took (None: they
        did not within [expect] recovery)."""
        t0 = time.monotonic()
        if self.mode != "targets":
            self.cluster.reap_crashes()
            if self.netlab:
                for i in list(self.netlab.partitioned):
                    self.netlab.heal(i)
            if self.disks:
                for n in self.cluster.nodes.values():
                    self.disks.free(n.data_dir)
            if self.clock:
                # Before any start: a node trusts the clock it starts with.
                moved = self.clock.reset()
                if moved:
                    self.timeline["clocks_reset"] = moved
            if self.upstream_down:
                try:
                    self.upstream_outage(False)
                except FaultFailed as e:
                    self.findings.violation("not-recovered", detail=str(e))
                    return None
            for n in self.cluster.nodes.values():
                if n.state == "hung":
                    n.resume()
            for n in self.cluster.nodes.values():
                if n.state == "down":
                    try:
                        n.start(self.prefix)
                    except DrillError as e:
                        self.findings.violation("not-recovered", node=n.id,
                                                detail=str(e))
                        return None
        bound = self.sc.duration("expect", "recovery")
        if not self.cluster.wait_converged(self.cluster.ids(), bound):
            self.findings.violation("not-recovered", detail=(
                "not every node ready and caught up within %s after the "
                "faults were undone: %s" % (self.sc.get("expect", "recovery"),
                                            self.cluster.statuses())))
            return None
        return time.monotonic() - t0


    def settled_databases(self, routes):
        """Reads the nodes' records once they converged. A read can catch a
        replica a few entries behind (something committed since the last
        look), so differing replicas are read again after another
        convergence, three times at most; what still differs is returned
        with the records and the applied index of every node."""
        dbs, applied, differ = {}, {}, {}
        for _ in range(3):
            self.cluster.wait_converged(self.cluster.ids(), 10.0)
            dbs, applied, differ = {}, {}, {}
            for i, n in sorted(self.cluster.nodes.items()):
                if not n.data_dir:
                    continue
                try:
                    dbs[i], applied[i] = read_node_records(n.data_dir, routes)
                except sqlite3.Error as e:
                    self.findings.violation("database-unreadable", node=i,
                                            detail="%s: %s" % (n.data_dir,
                                                               e))
                    return {}, {}, {}
            for key in set().union(*dbs.values()) if dbs else ():
                states = {i: db.get(key, (None,))[0]
                          for i, db in dbs.items()}
                if len(set(states.values())) > 1:
                    differ[key] = states
            if not differ:
                break
        return dbs, applied, differ

    # -- the run -------------------------------------------------------------

    def run(self):
        started = time.time()
        self.check_feasible()
        self.setup()
        senders = []
        for name, weight in self.sc.senders:
            cls = TradingViewSender if name == "tradingview" \
                else StandardWebhooksSender
            senders.append((cls(self.sc, self.run_id), weight))
        self.traffic = Traffic(self.cluster, self.sc, senders,
                               random.Random(self.rng.random())).start()
        faults_done = self.run_faults()
        end = max(faults_done + self.sc.duration("traffic", "settle"),
                  self.sc.duration("traffic", "min-duration"))
        self.sleep_until(end)
        self.timeline["traffic_end"] = round(end, 3)
        if len(self.traffic.signals) >= self.sc.keys:
            self.timeline["keys_cap_reached"] = round(
                self.traffic.signals[-1].created, 3)
            self.findings.warn("keys-cap", detail=(
                "all %d keys were sent by +%.1fs, before the traffic was "
                "meant to end (+%.1fs): raise [traffic] keys"
                % (self.sc.keys, self.traffic.signals[-1].created, end)))
        self.traffic.finish(end, self.sc.duration("traffic", "drain"))
        self.timeline["drained"] = round(self.traffic.now(), 3)
        recovery = self.restore()
        self.timeline["recovered"] = round(self.traffic.now(), 3)
        verdict = Verdict(self.sc, self.traffic, self.findings)
        report = self.judge(verdict, end, recovery)
        self.stop_nodes()
        report["late_executions"] = verdict.check_late(
            self.final_counts, self.upstream_counts())
        report["summary"] = verdict.summary()
        report["violating_keys"], report["unsettled_keys"] = \
            verdict.evidence()
        report["verdict"] = "FAIL" if self.findings.violations else "PASS"
        report["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                             time.gmtime(started))
        report["duration_s"] = round(time.time() - started, 2)
        return report

    def judge(self, verdict, traffic_end, recovery):
        """Reads the ground truth (after the resend pass when the nodes
        recovered) and runs the verdict's checks; returns the report."""
        routes = [s.route for s, _ in self.traffic.senders]
        counts = self.upstream_counts()
        decided_sigs = [s for s in self.traffic.signals
                        if s.acked or counts.get(s.key, 0) > 0]
        resent, dbs, applied, differ, before = {}, {}, {}, {}, {}
        executed = counts
        if recovery is not None:
            # The records as the traffic and the faults left them: what an
            # early purge took is missing here (the resend may re-create
            # it).
            before = self.settled_databases(routes)[0]
            resent = resend(self.cluster, decided_sigs, self.seed)
            # A node that crashed may leave records in flight; the nodes'
            # in-flight deadline sweep doubts them within a few seconds.
            waited, stuck = self.wait_in_flight(routes)
            self.timeline["in_flight_wait_s"] = round(waited, 3)
            if stuck:
                self.timeline["in_flight_after_wait"] = len(stuck)
            counts = self.upstream_counts()
            dbs, applied, differ = self.settled_databases(routes)
        self.final_counts = counts
        self.timeline["supervisor_restarts"] = [
            i for i, _ in self.cluster.restarts]
        for i, code in self.cluster.crashes:
            self.findings.violation("node-exited", node=i, detail=(
                "the node exited by itself with code %s; log %s"
                % (code, getattr(self.node(i), "log_path", "?"))))
        verified = {s.key for s in decided_sigs} if recovery is not None \
            else set()
        verdict.check_keys(counts, resent, dbs, verified)
        verdict.check_time(executed, before, dbs, resent, time.time())
        verdict.check_foreign(counts, strict=self.mode != "targets")
        verdict.check_replicas(differ, applied)
        # With --targets the nodes run their own in-flight deadline and
        # alarm (up to minutes): a warning unless the scenario says fail.
        strict = self.sc.get("expect", "stuck-in-flight") == "fail" and (
            self.mode != "targets" or
            ("expect", "stuck-in-flight") in self.sc.explicit)
        verdict.check_unsettled(dbs, strict)
        statuses, by_node = verdict.answers()
        return {
            "drill": self.sc.name,
            "description": self.sc.description,
            "scenario": os.path.abspath(self.sc.path),
            "verdict": None,
            "mode": self.mode,
            "network": self.sc.network if self.mode == "local" else None,
            "binary": self.args.bin if self.mode != "targets" else None,
            "nodes": len(self.cluster.nodes),
            "clustered": self.clustered,
            "seed": self.seed,
            "run_id": self.run_id,
            "work_dir": self.work_dir,
            "upstream": self.upstream_url,
            "violations": self.findings.violations,
            "warnings": self.findings.warnings,
            "skipped": self.skipped,
            "faults": self.fault_log,
            "timeline": self.timeline,
            "availability": verdict.availability(traffic_end, recovery),
            "partitions": verdict.partition_availability(traffic_end,
                                                         self.fault_log),
            "latency_ms": verdict.latency(),
            "statuses": statuses,
            "statuses_by_node": by_node,
            "databases_checked": sorted(dbs),
            "ttl": self.sc.get("traffic", "ttl"),
            "stamp_tolerance": self.sc.get("expect", "stamp-tolerance"),
            "applied_index": applied,
            "logs": {str(i): n.log_path for i, n in self.cluster.nodes.items()
                     if n.controllable},
        }

    def stop_nodes(self):
        """SIGTERM every node the drill runs, all at once: each must exit 0
        (it answers what it accepted first). Then the logs are scanned for
        what a clean exit code can hide."""
        if self.mode == "targets":
            return
        self.cluster.reap_crashes()
        up = [n for n in self.cluster.nodes.values() if n.state != "down"]
        for n in up:
            n.send_term()
        deadline = time.monotonic() + STOP_TIMEOUT
        for n in up:
            code = n.wait_exit(deadline - time.monotonic())
            if code != 0:
                self.findings.violation("unclean-stop", node=n.id, detail=(
                    "SIGTERM at the end: exit code %s (None: still running "
                    "after %ds, killed)" % (code, STOP_TIMEOUT)))
        for n in self.cluster.nodes.values():
            for line in n.log_lines(" critical ")[:5]:
                self.findings.warn("critical-log", node=n.id, detail=line)

    # -- clean-up ------------------------------------------------------------

    def cleanup(self):
        """Stops every node and the upstream, removes namespaces and mounts.
        Runs whatever happened before (also after SIGINT)."""
        if self.cluster:
            running = [n for n in self.cluster.nodes.values()
                       if n.controllable and n.state != "down"]
            for n in running:
                n.send_term()
            deadline = time.monotonic() + STOP_TIMEOUT
            for n in running:
                n.wait_exit(deadline - time.monotonic())
        if self.upstream is not None and self.upstream.poll() is None:
            self.upstream.terminate()
            try:
                self.upstream.wait(10)
            except subprocess.TimeoutExpired:
                self.upstream.kill()
                self.upstream.wait()
        if self.registry is not None:
            Registry.remove(self.registry.items)
            self.registry.close()
