"""The monitoring files the package ships (packaging/prometheus,
packaging/grafana; docs/packaging.md): promtool accepts and unit-tests the
alert rules, the dashboard has Grafana's import form, and every metric that
a rule or a panel names is one the node really exports, read from /metrics
of a single node and of a one-member Raft cluster node (the raft_* and
background_* metrics exist only there)."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "process"))

from harness import Node, TempDir, free_port  # noqa: E402

RULES = os.path.join(ROOT, "packaging", "prometheus", "oncegate.rules.yml")
RULES_TEST = os.path.join(HERE, "oncegate.rules.test.yml")
DASHBOARD = os.path.join(ROOT, "packaging", "grafana",
                         "oncegate-dashboard.json")
# Prometheus' own series that a rule or panel may name.
PROMETHEUS_SERIES = {"up"}

# PromQL words that are not metric names.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}


def metric_names(expr):
    """The metric names a PromQL expression selects: what is left after
    strings, label matchers, ranges, Grafana variables, grouping label
    lists and function calls are taken out."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*"
               r"\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = m.group(0)
        if s[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def scrape(node):
    status, _, body = node.request("GET", "/metrics")
    if status != 200:
        raise AssertionError("GET /metrics: %d" % status)
    names = set()
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


_exported = None


def exported_metrics():
    """Every sample name (histogram _bucket/_sum/_count included) that a
    single node and a one-member cluster node export. Started once per
    process."""
    global _exported
    if _exported is not None:
        return _exported
    tmp = TempDir()
    try:
        single = Node(os.path.join(tmp.path, "single")).start()
        try:
            names = scrape(single)
        finally:
            single.stop()
        ini = os.path.join(tmp.path, "cluster.ini")
        with open(ini, "w") as f:
            f.write('[cluster]\nid=1\npeers=["1=127.0.0.1:%d,127.0.0.1:%d"]\n'
                    "insecure=true\n" % (free_port(), free_port()))
        member = Node(os.path.join(tmp.path, "member"),
                      "--config-file=" + ini).start()
        try:
            names |= scrape(member)
        finally:
            member.stop()
    finally:
        tmp.cleanup()
    if not any(n.startswith("oncegate_raft_") for n in names):
        raise AssertionError("the cluster node exported no raft metrics")
    _exported = names
    return names


def promtool():
    path = shutil.which("promtool")
    if path is None:
        raise AssertionError("promtool missing (Debian package prometheus): "
                             "run scripts/setup.sh --test")
    return path


def rule_exprs():
    """(alert name, expr) of every rule in the rules file, read with
    promtool's own parser's view: the YAML is simple enough for a line
    reader (checked against the rule count promtool reports)."""
    out, name = [], None
    with open(RULES) as f:
        for line in f:
            m = re.match(r"\s*- (alert|record): (\S+)", line)
            if m:
                name = m.group(2)
            m = re.match(r"\s*expr: (.+)$", line)
            if m:
                out.append((name, m.group(1).strip()))
    return out


class RulesTest(unittest.TestCase):
    def test_promtool_accepts_the_rules(self):
        res = subprocess.run([promtool(), "check", "rules", RULES],
                             capture_output=True, timeout=60)
        out = (res.stdout + res.stderr).decode()
        self.assertEqual(res.returncode, 0, out)
        m = re.search(r"SUCCESS: (\d+) rules found", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(1)), len(rule_exprs()),
                         "a rule the line reader missed")

    def test_the_alerts_fire_when_and_as_they_should(self):
        res = subprocess.run([promtool(), "test", "rules", RULES_TEST],
                             capture_output=True, timeout=60, cwd=HERE)
        self.assertEqual(res.returncode, 0,
                         (res.stdout + res.stderr).decode())

    def test_the_recommended_alerts_are_there(self):
        names = {n for n, _ in rule_exprs()}
        for alert in ("OncegateInDoubtKeys", "OncegateFailedDeliveries",
                      "OncegateStoreCommitErrors", "OncegateStoreCommitSlow",
                      "OncegateNoRaftLeader", "OncegateNodeDown",
                      "OncegateDecisionsUnavailable",
                      "OncegateInternalErrors",
                      "OncegateDeliveryQueueBacklog",
                      "OncegateRoutePausedLong"):
            self.assertIn(alert, names)

    def test_every_metric_a_rule_names_is_exported(self):
        exported = exported_metrics() | PROMETHEUS_SERIES
        for name, expr in rule_exprs():
            used = metric_names(expr)
            self.assertTrue(used, "%s names no metric: %s" % (name, expr))
            self.assertEqual(used - exported, set(),
                             "%s: metrics no node exports: %s"
                             % (name, expr))


def panels(dash):
    for p in dash["panels"]:
        yield p
        for q in p.get("panels", []):
            yield q


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dash = json.load(f)

    def targets(self):
        for p in panels(self.dash):
            for t in p.get("targets", []):
                yield p, t

    def test_it_has_grafanas_import_form(self):
        d = self.dash
        self.assertGreaterEqual(d["schemaVersion"], 36)
        self.assertIsNone(d.get("id"))
        self.assertTrue(d.get("uid"))
        inputs = {i["name"]: i for i in d["__inputs"]}
        self.assertEqual(inputs["DS_PROMETHEUS"]["type"], "datasource")
        self.assertEqual(inputs["DS_PROMETHEUS"]["pluginId"], "prometheus")
        ids = [p["id"] for p in panels(d)]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for p in panels(d):
            for key in ("x", "y", "w", "h"):
                self.assertIn(key, p["gridPos"], p["title"])
            self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24)
            if p["type"] == "row":
                continue
            self.assertTrue(p.get("targets"), p["title"])
            self.assertEqual(p["datasource"]["uid"], "${DS_PROMETHEUS}",
                             p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${DS_PROMETHEUS}")
        for v in d["templating"]["list"]:
            self.assertEqual(v["datasource"]["uid"], "${DS_PROMETHEUS}")

    def test_the_asked_for_panels_are_there(self):
        exprs = " ".join(t["expr"] for _, t in self.targets())
        for metric in ('oncegate_decisions_total',
                       'oncegate_request_duration_seconds_bucket',
                       'state="in_doubt"', 'state="failed"',
                       'oncegate_store_commits_total',
                       'oncegate_store_commit_duration_seconds_bucket',
                       'oncegate_raft_leader_ready', 'oncegate_raft_term'):
            self.assertIn(metric, exprs)

    def test_every_panel_query_parses(self):
        # As a rule file: promtool parses each expression, with Grafana's
        # variables replaced by what they stand for.
        tmp = TempDir()
        self.addCleanup(tmp.cleanup)
        path = os.path.join(tmp.path, "panels.rules.yml")
        exprs = [t["expr"] for _, t in self.targets()]
        exprs += [re.sub(r"^label_values\((.*), \w+\)$", r"\1",
                         v["definition"])
                  for v in self.dash["templating"]["list"]]
        with open(path, "w") as f:
            f.write("groups:\n  - name: panels\n    rules:\n")
            for i, expr in enumerate(exprs):
                expr = (expr.replace("$__rate_interval", "5m")
                        .replace("$job", ".*").replace("$instance", ".*"))
                f.write("      - record: panel:%d\n        expr: %s\n"
                        % (i, json.dumps(expr)))
        res = subprocess.run([promtool(), "check", "rules", path],
                             capture_output=True, timeout=60)
        self.assertEqual(res.returncode, 0,
                         (res.stdout + res.stderr).decode())

    def test_every_metric_a_panel_names_is_exported(self):
        exported = exported_metrics() | PROMETHEUS_SERIES
        for p, t in self.targets():
            used = metric_names(t["expr"])
            self.assertTrue(used, "%s names no metric" % p["title"])
            self.assertEqual(used - exported, set(),
                             "panel %r: metrics no node exports: %s"
                             % (p["title"], t["expr"]))


if __name__ == "__main__":
    unittest.main()
