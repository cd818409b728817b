"""The oncegate-drill command line: options, --list, exit codes (0 passed,
1 violation, 2 usage, 3 could not run, 77 skipped), the JSON report file
and the work dir's clean-up. tools/oncegate-drill calls `main`;
`python3 -m oncegate_drill` (from tools/) does the same.

Lives here: argv in, exit code out. Must not: run any part of a drill
itself (drill.Drill does).
"""

import argparse
import json
import os
import shutil
import signal
import sys

from .base import EXIT_ERROR, EXIT_PASS, EXIT_SKIPPED, EXIT_USAGE, \
    EXIT_VIOLATION, Aborted, DrillError, Skip, UsageError, log
from .drill import Drill
from .report import text_report
from .scenario import Scenario, find_scenario, list_scenarios

# tools/ in the repository: where tools/oncegate-drill and test_upstream.py
# are (an installed entry point passes its own directory).
TOOLS = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def default_bin(here, repo):
    for path in (os.environ.get("ONCEGATE_BIN"),
                 os.path.join(here, "oncegate"),
                 os.path.join(repo, "build", "tools", "oncegate")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return os.path.join(repo, "build", "tools", "oncegate")


def default_scenario_dir(repo):
    """The repository's scenarios, or the installed ones (the tool in
    PREFIX/bin, the scenarios in PREFIX/share/oncegate/cluster-config)."""
    for path in (os.path.join(repo, "cluster-config", "drills"),
                 os.path.join(repo, "share", "oncegate", "cluster-config",
                              "drills")):
        if os.path.isdir(path):
            return path
    return os.path.join(repo, "cluster-config", "drills")


def parse_args(argv, here):
    repo = os.path.dirname(here)
    p = argparse.ArgumentParser(
        prog="oncegate-drill",
        description="Failover drills for oncegate, judged from ground truth.",
        epilog="Exit codes: 0 passed, 1 violation, 2 usage, 3 could not "
        "run, 77 skipped. See docs/drills.md.")
    p.add_argument("scenario", nargs="?",
                   help="a scenario file, or a name in --scenario-dir")
    p.add_argument("--list", action="store_true",
                   help="list the scenarios in --scenario-dir and exit")
    p.add_argument("--scenario-dir", default=default_scenario_dir(repo))
    p.add_argument("--bin", default=default_bin(here, repo),
                   help="the node binary (default: $ONCEGATE_BIN, oncegate "
                   "next to this tool, or build/tools/oncegate)")
    p.add_argument("--upstream-script",
                   default=os.path.join(here, "test_upstream.py"),
                   help="the counting test upstream")
    p.add_argument("--config-dir",
                   help="start a shipped cluster's node*.ini files (their "
                   "ports) instead of generated ones")
    p.add_argument("--targets",
                   help="drive running nodes: http://HOST:PORT,... (traffic "
                   "and verdict only)")
    p.add_argument("--data-dirs",
                   help="with --targets: their data dirs, same order, for "
                   "the database check")
    p.add_argument("--admin-token",
                   help="with --targets: bearer token for /v1/cluster "
                   "(default: $ONCEGATE_ADMIN_TOKEN)")
    p.add_argument("--upstream-listen", default="127.0.0.1:9000",
                   help="with --targets: where the drill's counting "
                   "upstream listens (the targets' routes forward there)")
    p.add_argument("--upstream-url",
                   help="with --targets: an already running counting "
                   "upstream (tools/test_upstream.py)")
    p.add_argument("--set", action="append", default=[],
                   metavar="SECTION.OPTION=VALUE",
                   help="override a scenario value (repeatable)")
    p.add_argument("--seed", type=int, help="random seed (default: random)")
    p.add_argument("--json", help="write the JSON report here (default: "
                   "report.json in the work dir)")
    p.add_argument("--work-dir", help="node data and logs (default: a temp "
                   "dir, removed when the drill passes)")
    p.add_argument("--insecure", action="store_true",
                   help="generated clusters talk in plain text "
                        "(cluster.insecure) instead of mutual TLS")
    p.add_argument("--keep", action="store_true",
                   help="keep the work dir when the drill passes")
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines on stderr")
    args = p.parse_args(argv)
    if not args.list and not args.scenario:
        p.error("a scenario is required (or --list)")
    if args.targets and args.config_dir:
        p.error("--targets and --config-dir exclude each other")
    return args


def _abort(signum, frame):
    raise Aborted("signal %d" % signum)


def main(argv, here=TOOLS):
    """The command line (docs/drills.md); `here`: the directory of the
    tools/oncegate-drill entry point (its defaults are relative to it)."""
    args = parse_args(argv, here)
    if args.list:
        try:
            list_scenarios(args.scenario_dir)
        except BrokenPipeError:  # `--list | head`
            pass
        return EXIT_PASS
    try:
        sc = Scenario(find_scenario(args.scenario, args.scenario_dir),
                      args.set)
    except UsageError as e:
        log("oncegate-drill: %s" % e)
        return EXIT_USAGE
    if not args.targets and not os.access(args.bin, os.X_OK):
        log("oncegate-drill: no node binary at %s (--bin)" % args.bin)
        return EXIT_USAGE
    # Explicitly: a shell starts background jobs with SIGINT ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _abort)
    drill = Drill(args, sc)
    report, code = None, EXIT_ERROR
    try:
        report = drill.run()
        code = EXIT_PASS if report["verdict"] == "PASS" else EXIT_VIOLATION
    except Skip as e:
        report = {"drill": sc.name, "description": sc.description,
                  "verdict": "SKIPPED", "reason": str(e)}
        code = EXIT_SKIPPED
    except UsageError as e:
        report = {"drill": sc.name, "verdict": "ERROR", "reason": str(e)}
        code = EXIT_USAGE
    except (DrillError, Aborted) as e:
        report = {"drill": sc.name, "description": sc.description,
                  "verdict": "ERROR", "reason": str(e) or type(e).__name__,
                  "seed": drill.seed,
                  "work_dir": drill.work_dir, "faults": drill.fault_log}
        code = EXIT_ERROR
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        drill.cleanup()
    json_path = args.json
    if json_path is None and drill.work_dir:
        json_path = os.path.join(drill.work_dir, "report.json")
    if code == EXIT_PASS and drill.work_dir and not args.keep:
        # Only the report stays: node data and logs prove nothing new. A
        # temp dir of ours whose report goes elsewhere goes entirely.
        for name in os.listdir(drill.work_dir):
            path = os.path.join(drill.work_dir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.abspath(path) != os.path.abspath(json_path):
                os.remove(path)
        if args.work_dir is None and args.json is not None \
                and not os.listdir(drill.work_dir):
            os.rmdir(drill.work_dir)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=2, default=str)
            f.write("\n")
    print(text_report(report, json_path), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
