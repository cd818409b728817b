#!/usr/bin/env python3
"""What N machines would decide, from CPU per decision measured per role
on one machine (docs/benchmarks.md, "Partitions: a projection").

    bench/projection.py SINGLE VIA_LEADER LEADER FRONT FOLLOWER [N ...]

All in microseconds of CPU per decision, from one run of
`bench/cluster_ab.sh` and `bench/partitions.sh` (3 nodes, 1 partition):
  SINGLE      one node alone (no Raft)
  VIA_LEADER  the leader when the requests come to it (HTTP + deciding +
              replicating)
  LEADER      the leader when the requests come through a follower
              (deciding + replicating, no HTTP)
  FRONT       the receiving follower minus a follower's own Raft work
              (HTTP + forwarding over the node link)
  FOLLOWER    a follower that only replicates (receive, append + fsync,
              apply)

The model: P partitions spread evenly over N nodes, every node a voter of
every partition (today's design), senders spread evenly over the nodes.
A decision costs A = VIA_LEADER at the node that receives it when that
node leads the key's partition (1 in N), else FRONT there and LEADER at
the partition's leader; and FOLLOWER at each of the N - 1 followers:

    T(N) = A / N + (N - 1) / N * (FRONT + LEADER) + (N - 1) * FOLLOWER

Each node spends T(N) / N per cluster decision. N machines of C cores,
CPU-bound, decide N * C / T(N) a second; one node C / SINGLE: the ratio is
N * SINGLE / T(N). The same with replication to 3 of the N nodes (not
built: every node votes in every partition today) replaces (N - 1) by 2
in the last term. Assumes the nodes' threads use the C cores as fully as
the measurement's, and that the network is not the limit.
"""

import sys


def total(n, via_leader, leader, front, follower, replicas):
    return (via_leader / n + (n - 1) / n * (front + leader)
            + (replicas - 1) * follower)


def main(argv):
    if len(argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    single, via_leader, leader, front, follower = map(float, argv[1:6])
    ns = [int(x) for x in argv[6:]] or [1, 3, 5, 7]
    print("| N | CPU us per decision, all nodes | per node | N machines "
          "/ one node | same, 3 replicas per partition |")
    print("|---|---|---|---|---|")
    for n in ns:
        if n == 1:
            print("| 1 | %.0f | %.0f | 1.00x | - |" % (single, single))
            continue
        t = total(n, via_leader, leader, front, follower, n)
        t3 = total(n, via_leader, leader, front, follower, min(3, n))
        print("| %d | %.0f | %.0f | %.2fx | %.2fx |"
              % (n, t, t / n, n * single / t, n * single / t3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
