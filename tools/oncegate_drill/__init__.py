"""oncegate-drill as a package: failover drills for oncegate judged from
ground truth, and the Python tooling's one way to run local nodes.

    base.py      exit codes, errors, durations, polling, one HTTP call
    keys.py      key derivation and signatures, as the gateway computes them
    scenario.py  the scenario INI format and fault schedule lines
    config.py    node INI text (generated nodes, [cluster], config dirs)
    cluster.py   node processes and the cluster's status (leader, converged)
    netlab.py    network namespaces, tmpfs disks, their registry (root)
    clock.py     per-node wall clocks under libfaketime
    senders.py   TradingView and Standard Webhooks senders, answer classes
    traffic.py   open-loop traffic with retries; the resend pass
    faults.py    the fault schedule applied to the nodes
    verdict.py   the checks against ground truth, findings, summary
    drill.py     one run from set-up to verdict
    report.py    the text report
    __main__.py  the command line (tools/oncegate-drill)

cluster.py (with config.py) is the canonical Python code for starting
local nodes: the drill, tests/process/test_cluster.py (and the tests that
import its helpers) and bench/lib use it; scripts/cluster.sh stays the
operator's shell tool for a shipped config dir. Importing the package
imports nothing else: import the modules you need.
"""
