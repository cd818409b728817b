"""Scenarios: the INI format of cluster-config/drills/*.ini (every option
and its default), a fault schedule line, `--set` overrides, finding a
scenario by name and listing them.

Lives here: parsing and validation only (a bad file is a UsageError, exit
2). Must not: start anything, or know how a fault is applied (faults.py)
or judged (verdict.py).
"""

import base64
import configparser
import os

from .base import UsageError, parse_duration, parse_span


# Every option a scenario may set, with its default (a string, parsed like
# the file's values). Unknown sections and options are errors: a typo must
# not silently turn a drill into a weaker one.
SCENARIO_DEFAULTS = {
    "drill": {
        "name": "",
        "description": "",
        "nodes": "3",
        # cluster.partitions of a generated cluster (Raft groups the keys
        # spread over; docs/cluster.md, Partitions).
        "partitions": "1",
        # cluster.election-timeout of a generated cluster.
        "election-timeout": "500ms",
        # loopback, or netns (each node in its own network namespace; root
        # only). Partition faults need netns and select it by themselves.
        "network": "loopback",
        # Size of each node's tmpfs data dir when the schedule fills a disk.
        "disk-size": "128m",
        # Extra command-line options for every node.
        "node-args": "",
    },
    "traffic": {
        "rate": "40",  # new signals per second
        "keys": "5000",  # distinct signals (keys) at most
        "senders": "tradingview:60, standard-webhooks:40",
        "targeting": "round-robin",  # or random
        "duplicates": "0.1",  # fraction of signals delivered twice at once
        "fanout": "2",  # copies of such a signal, each to another node
        "settle": "5s",  # traffic after the last fault completed
        "min-duration": "0s",
        "drain": "15s",  # retries still running after new signals stop
        "concurrency": "96",  # requests in flight at most
        "tradingview-route": "drill-tv",
        "tradingview-token": "drill-tv-token",
        "tradingview-timeout": "3s",
        "tradingview-retries": "3",
        "tradingview-interval": "1s..2s",
        "standard-webhooks-route": "drill-sw",
        "standard-webhooks-secret":
            "whsec_" + base64.b64encode(b"oncegate-drill-standard-webhooks")
            .decode(),
        "standard-webhooks-timeout": "5s",
        # The Standard Webhooks retry schedule (after the first attempt),
        # divided by `standard-webhooks-compress` for the drill.
        "standard-webhooks-schedule": "5s, 5m, 30m, 2h, 5h, 10h, 10h",
        "standard-webhooks-compress": "200",
        # The route's `tolerance` for webhook-timestamp (empty: the node's
        # default, 300s). A node started with its clock hours off refuses
        # every signed delivery (401) within the default.
        "standard-webhooks-tolerance": "",
        # The drill routes' TTL (`ttl=` in their sections; 24h is the
        # nodes' default `keys.ttl`). The verdict checks every record
        # against it: with --targets, set it to the routes' TTL.
        "ttl": "24h",
        # The drill routes' delivery: sync (the sender waits for the
        # upstream's answer) or async (202 at once; the node owns the
        # signal until the upstream has it: docs/operations.md, Delivery).
        "delivery": "sync",
        # With async: the routes' retry options and, when set, a reconcile
        # URL on the counting upstream (/by-key/{key}) settling in-doubt
        # keys; e.g. "delivery-first-retry=200ms, reconcile-after=1s".
        "delivery-options": "",
        "reconcile": "false",
    },
    "faults": {
        "schedule": "",
        "repeat": "1",
    },
    "expect": {
        # The longest time without a successful decision (0: no bound).
        "max-unavailable": "0s",
        # Gaps without a decision shorter than this are not windows.
        "gap": "500ms",
        # After the traffic: every node back, ready and caught up within.
        "recovery": "30s",
        # Signals that got a successful decision, as a fraction (a drill
        # that decides nothing proves nothing).
        "min-decided": "0.5",
        # Records still in flight once every node is back and caught up
        # and the drill waited for the in-flight deadline sweep: nobody
        # will forward, release or doubt them (fail or warn).
        "stuck-in-flight": "fail",
        # How far a record's first_seen may be from the drill host's clock
        # at its signal's attempts (a clock-jumped node must not stamp it).
        "stamp-tolerance": "30s",
        # async delivery: once every node is back, every accepted signal
        # delivered (no record queued, in flight or, with reconcile, in
        # doubt) within this; a record `failed` is a violation.
        "delivered-within": "60s",
    },
}

ACTIONS = {
    # action: (default target, needs process control, needs root)
    "kill": ("leader", True, False),
    "term": ("leader", True, False),
    "start": ("all", True, False),
    "restart": ("leader", True, False),
    "hang": ("leader", True, False),
    "resume": ("all", True, False),
    "partition": ("leader", True, True),
    "heal": ("all", True, True),
    "disk-full": ("leader", True, True),
    "disk-free": ("all", True, True),
    "clock-jump": ("leader", True, False),
    "upstream-down": ("upstream", True, False),
    "upstream-up": ("upstream", True, False),
    "wait-ready": ("all", False, False),
    # The kill switch on the TradingView route, asked of one node.
    "pause-route": ("random", False, False),
    "resume-route": ("random", False, False),
}


class Fault:
    """One schedule line: `WHEN ACTION [TARGET] [as=NAME] [mode=...]
    [by=...]` (`by`: the step of a clock-jump, e.g. +2h or -30m)."""

    def __init__(self, line, lineno):
        self.text = line.strip()
        words = self.text.split()
        if len(words) < 2:
            raise UsageError("fault line %d: expected 'WHEN ACTION [TARGET]':"
                             " %r" % (lineno, self.text))
        when = words[0]
        self.relative = when.startswith("+")
        self.span = parse_span(when[1:] if self.relative else when)
        self.action = words[1]
        if self.action not in ACTIONS:
            raise UsageError("fault line %d: unknown action %r (one of %s)"
                             % (lineno, self.action, ", ".join(ACTIONS)))
        self.target = ACTIONS[self.action][0]
        self.options = {}
        for w in words[2:]:
            if "=" in w:
                k, v = w.split("=", 1)
                if k not in ("as", "mode", "by"):
                    raise UsageError("fault line %d: unknown option %r"
                                     % (lineno, k))
                self.options[k] = v
            else:
                self.target = w
        mode = self.options.get("mode", "peers")
        if mode not in ("peers", "full"):
            raise UsageError("fault line %d: mode is peers or full" % lineno)
        self.step = None
        if self.action == "clock-jump":
            by = self.options.get("by", "")
            if not by or by[0] not in "+-":
                raise UsageError("fault line %d: clock-jump needs by=+D or "
                                 "by=-D (e.g. by=+2h)" % lineno)
            self.step = parse_duration(by[1:]) * (-1 if by[0] == "-" else 1)
        elif "by" in self.options:
            raise UsageError("fault line %d: by= is for clock-jump" % lineno)

    @property
    def needs_process_control(self):
        return ACTIONS[self.action][1]

    @property
    def needs_root(self):
        return ACTIONS[self.action][2]


class Scenario:
    """A scenario file (INI) with `--set` overrides applied, validated
    against SCENARIO_DEFAULTS."""

    def __init__(self, path, overrides):
        self.path = path
        parser = configparser.ConfigParser(
            inline_comment_prefixes=(";", "#"), interpolation=None)
        try:
            with open(path) as f:
                parser.read_file(f)
        except (OSError, configparser.Error) as e:
            raise UsageError("cannot read scenario %s: %s" % (path, e))
        for item in overrides:
            name, eq, value = item.partition("=")
            section, _, option = name.partition(".")
            if not (section and option and eq):
                raise UsageError("--set wants SECTION.OPTION=VALUE: %r" % item)
            if not parser.has_section(section):
                parser.add_section(section)
            parser.set(section, option, value)
        self.values = {}
        self.explicit = set()  # (section, option) the file or --set gave
        for section in parser.sections():
            if section not in SCENARIO_DEFAULTS:
                raise UsageError("%s: unknown section [%s]" % (path, section))
            for option in parser.options(section):
                if option not in SCENARIO_DEFAULTS[section]:
                    raise UsageError("%s: unknown option %s in [%s]"
                                     % (path, option, section))
                self.explicit.add((section, option))
        for section, options in SCENARIO_DEFAULTS.items():
            for option, default in options.items():
                self.values[(section, option)] = parser.get(
                    section, option, fallback=default)
        base = os.path.splitext(os.path.basename(path))[0]
        self.name = self.get("drill", "name") or base
        self.description = self.get("drill", "description")
        self.nodes = self.int("drill", "nodes", 1, 9)
        self.partitions = self.int("drill", "partitions", 1, 256)
        self.duration("drill", "election-timeout")  # checked here
        self.network = self.get("drill", "network")
        if self.network not in ("loopback", "netns"):
            raise UsageError("[drill] network is loopback or netns")
        self.faults = []
        for n, line in enumerate(self.get("faults", "schedule").splitlines()):
            if line.strip():
                self.faults.append(Fault(line, n + 1))
        self.repeat = self.int("faults", "repeat", 1, 10000)
        if any(f.action == "partition" for f in self.faults):
            self.network = "netns"
        self.senders = self.parse_senders(self.get("traffic", "senders"))
        self.targeting = self.get("traffic", "targeting")
        if self.targeting not in ("round-robin", "random"):
            raise UsageError("[traffic] targeting is round-robin or random")
        self.rate = self.float("traffic", "rate", 0.1, 5000)
        self.keys = self.int("traffic", "keys", 1, 10 ** 7)
        self.duplicates = self.float("traffic", "duplicates", 0, 1)
        self.fanout = self.int("traffic", "fanout", 2, 9)
        self.concurrency = self.int("traffic", "concurrency", 1, 1024)
        if self.get("expect", "stuck-in-flight") not in ("warn", "fail"):
            raise UsageError("[expect] stuck-in-flight is warn or fail")
        self.delivery = self.get("traffic", "delivery")
        if self.delivery not in ("sync", "async"):
            raise UsageError("[traffic] delivery is sync or async")
        self.reconcile = self.get("traffic", "reconcile")
        if self.reconcile not in ("true", "false"):
            raise UsageError("[traffic] reconcile is true or false")
        self.delivery_options = []
        for item in self.get("traffic", "delivery-options").split(","):
            k, eq, v = item.strip().partition("=")
            if not item.strip():
                continue
            if not eq or not k.strip().startswith(("delivery-",
                                                   "reconcile-")):
                raise UsageError("[traffic] delivery-options: %r is not "
                                 "delivery-*=VALUE or reconcile-*=VALUE"
                                 % item.strip())
            self.delivery_options.append((k.strip(), v.strip()))
        if self.delivery == "sync" and (self.delivery_options or
                                        self.reconcile == "true"):
            raise UsageError("[traffic] delivery-options and reconcile need "
                             "delivery = async")

    def get(self, section, option):
        return self.values[(section, option)].strip()

    def duration(self, section, option):
        return parse_duration(self.get(section, option))

    def int(self, section, option, lo, hi):
        return self._number(section, option, lo, hi, int, "an integer", "%d")

    def float(self, section, option, lo, hi):
        return self._number(section, option, lo, hi, float, "a number", "%g")

    def _number(self, section, option, lo, hi, kind, what, fmt):
        try:
            v = kind(self.get(section, option))
        except ValueError:
            raise UsageError("[%s] %s: not %s" % (section, option, what))
        if not lo <= v <= hi:
            raise UsageError(("[%s] %s: " + fmt + " not in " + fmt + ".."
                              + fmt) % (section, option, v, lo, hi))
        return v

    @staticmethod
    def parse_senders(text):
        mix = []
        for part in text.split(","):
            name, _, weight = part.strip().partition(":")
            if name not in ("tradingview", "standard-webhooks"):
                raise UsageError("[traffic] senders: unknown sender %r" % name)
            try:
                mix.append((name, float(weight or 1)))
            except ValueError:
                raise UsageError("[traffic] senders: bad weight %r" % weight)
        if not mix or sum(w for _, w in mix) <= 0:
            raise UsageError("[traffic] senders: no sender")
        return mix

    @property
    def needs_root(self):
        return self.network == "netns" or any(
            f.needs_root for f in self.faults)

    @property
    def fills_disk(self):
        return any(f.action == "disk-full" for f in self.faults)

    @property
    def jumps_clocks(self):
        return any(f.action == "clock-jump" for f in self.faults)


def find_scenario(name, scenario_dir):
    if os.path.exists(name):
        return name
    path = os.path.join(scenario_dir, name + ".ini")
    if os.path.exists(path):
        return path
    raise UsageError("no scenario %r (not a file, not in %s)"
                     % (name, scenario_dir))


def list_scenarios(directory):
    for name in sorted(os.listdir(directory)):
        if name.endswith(".ini"):
            try:
                sc = Scenario(os.path.join(directory, name), [])
                print("%-26s %s" % (sc.name, sc.description))
            except UsageError as e:
                print("%-26s (invalid: %s)" % (name[:-4], e))
