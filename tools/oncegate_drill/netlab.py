"""Root-only resources of a drill: each node in a network namespace of its
own (NetLab: bridges, veth pairs, partitions by taking links down), small
tmpfs data dirs a `disk-full` fault fills (Disks), and the registry in
/run/oncegate-drill that lets a later drill remove what a killed one left.

Lives here: everything that runs `ip` or `mount`. Must not: start nodes
(cluster.py wraps their command line with `NetLab.wrap`) or decide when a
fault happens (faults.py).
"""

import json
import os
import random
import shutil

from .base import DrillError, log, pid_alive, run_cmd


# -- root-only resources ------------------------------------------------------

REGISTRY_DIR = "/run/oncegate-drill"


class Registry:
    """What a root drill creates outside its work dir (network namespaces,
    bridges, tmpfs mounts), listed in /run/oncegate-drill/RUN.json before it
    is created, so that a later drill removes what a killed one left behind
    (`sweep`). Names carry the run id."""

    def __init__(self, run_id):
        self.path = os.path.join(REGISTRY_DIR, run_id + ".json")
        self.items = {"netns": [], "bridges": [], "mounts": []}

    def add(self, kind, name):
        self.items[kind].append(name)
        os.makedirs(REGISTRY_DIR, exist_ok=True)
        with open(self.path, "w") as f:
            json.dump(dict(self.items, pid=os.getpid()), f)

    def close(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @staticmethod
    def remove(items):
        for mnt in items.get("mounts", []):
            run_cmd(["umount", "-l", mnt], check=False)
        for ns in items.get("netns", []):
            run_cmd(["ip", "netns", "del", ns], check=False)
        for link in items.get("bridges", []):
            run_cmd(["ip", "link", "del", link], check=False)

    @classmethod
    def sweep(cls):
        try:
            entries = os.listdir(REGISTRY_DIR)
        except OSError:
            return
        for name in entries:
            path = os.path.join(REGISTRY_DIR, name)
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue
            if pid_alive(doc.get("pid", 0)):
                continue
            log("drill: removing what a dead drill (pid %s) left: %s"
                % (doc.get("pid"), path))
            cls.remove(doc)
            os.unlink(path)


def root_unavailable():
    """None when namespaces and mounts can be used, else why not."""
    if os.geteuid() != 0:
        return "running as uid %d, not root" % os.geteuid()
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


class NetLab:
    """Each node in its own network namespace with two veth pairs: one to a
    cluster bridge (Raft and CAF traffic between nodes) and one to a service
    bridge (the drill's HTTP client and the upstream, in the root
    namespace). A partition takes a node's root-side cluster link down
    (`mode=peers`: it still serves clients and reaches the upstream, the
    dangerous case for a deposed leader) or both links (`mode=full`).
    Packets to a downed link are dropped silently, as on a real network."""

    HTTP_PORT, RAFT_PORT, CAF_PORT = 8080, 7100, 7200

    def __init__(self, run_id, node_ids, registry):
        self.run_id = run_id
        self.node_ids = node_ids
        self.registry = registry
        self.netns = {}
        self.links = {}  # node id -> {"cluster": name, "service": name}
        self.partitioned = {}  # node id -> mode
        self.cluster_net = None
        self.service_net = None

    def _pick_subnets(self):
        used = run_cmd(["ip", "-o", "addr"]).stdout + \
            run_cmd(["ip", "-o", "route"]).stdout
        rng = random.Random(self.run_id)
        for _ in range(200):
            a, b = rng.randrange(64, 250), rng.randrange(0, 254, 2)
            nets = ("10.%d.%d." % (a, b), "10.%d.%d." % (a, b + 1))
            if not any(n in used for n in nets):
                return nets
        raise DrillError("no free 10.x.y.0/24 subnet pair for the drill")

    def setup(self):
        self.cluster_net, self.service_net = self._pick_subnets()
        tag = "og" + self.run_id
        br_c, br_s = tag + "c", tag + "s"
        for br in (br_c, br_s):
            self.registry.add("bridges", br)
            run_cmd(["ip", "link", "add", br, "type", "bridge"])
        run_cmd(["ip", "addr", "add", self.service_ip(0) + "/24", "dev",
                 br_s])
        for br in (br_c, br_s):
            run_cmd(["ip", "link", "set", br, "up"])
        for i in self.node_ids:
            ns = "oncegate-drill-%s-n%d" % (self.run_id, i)
            self.registry.add("netns", ns)
            self.netns[i] = ns
            run_cmd(["ip", "netns", "add", ns])
            run_cmd(["ip", "-n", ns, "link", "set", "lo", "up"])
            self.links[i] = {}
            for net, br, ip in (("cluster", br_c, self.cluster_ip(i)),
                                ("service", br_s, self.service_ip(i))):
                outer = "%s%s%d" % (tag, net[0], i)
                run_cmd(["ip", "link", "add", outer, "type", "veth", "peer",
                         "name", net, "netns", ns])
                run_cmd(["ip", "link", "set", outer, "master", br, "up"])
                run_cmd(["ip", "-n", ns, "addr", "add", ip + "/24", "dev",
                         net])
                run_cmd(["ip", "-n", ns, "link", "set", net, "up"])
                self.links[i][net] = outer
        return self

    def cluster_ip(self, i):
        return self.cluster_net + str(10 + i)

    def service_ip(self, i):
        """Node i's HTTP address; 0: the root namespace (drill, upstream)."""
        return self.service_net + (str(10 + i) if i else "1")

    def wrap(self, node_id, argv):
        return ["ip", "netns", "exec", self.netns[node_id]] + argv

    def partition(self, node_id, mode):
        nets = ("cluster",) if mode == "peers" else ("cluster", "service")
        for net in nets:
            run_cmd(["ip", "link", "set", self.links[node_id][net], "down"])
        self.partitioned[node_id] = mode

    def heal(self, node_id):
        for link in self.links[node_id].values():
            run_cmd(["ip", "link", "set", link, "up"])
        self.partitioned.pop(node_id, None)


class Disks:
    """Small tmpfs data dirs (root only) that a `disk-full` fault fills with
    a filler file, so the node meets a real ENOSPC; `disk-free` deletes it."""

    FILLER = "drill-disk-filler"

    def __init__(self, size, registry):
        self.size = size
        self.registry = registry
        self.full = set()

    def mount(self, path):
        os.makedirs(path, exist_ok=True)
        self.registry.add("mounts", path)
        run_cmd(["mount", "-t", "tmpfs", "-o", "size=%d" % self.size,
                 "oncegate-drill", path])

    def fill(self, path):
        """Fills the file system; returns the bytes taken."""
        filler = os.path.join(path, self.FILLER)
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            st = os.statvfs(path)
            try:
                os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
            except OSError:
                pass  # the loop below takes what fits
            chunk = b"\0" * (1 << 16)
            for _ in range(self.size // len(chunk) + 1):
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
        finally:
            os.close(fd)
        self.full.add(path)
        return os.path.getsize(filler)

    def free(self, path):
        try:
            os.unlink(os.path.join(path, self.FILLER))
        except FileNotFoundError:
            pass
        self.full.discard(path)
