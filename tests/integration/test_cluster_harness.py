"""The Redis Cluster test harness itself (harness.ClusterSet), before any gateway uses it: a real
cluster of three masters and three replicas on loopback comes up with every slot served, a
write lands on the slot's master (another master answers MOVED), and when that master is
SIGKILLed its replica takes over with the data and the cluster is ok again.

Bounded: the cluster is up in about 4 s, the failover takes node timeout (2 s) plus the
election, about 4 s more.
"""
import time

from harness import ClusterSet, GatewayTest


class ClusterHarnessTest(GatewayTest):
    wall_clock_cap = 60

    def test_cluster_serves_every_slot_and_survives_a_master_kill(self):
        started = time.time()
        cluster = ClusterSet(self.track)
        self.addCleanup(cluster.stop)  # after tearDown: removes its temp dir

        # Three masters, one replica each, the 16384 slots served once each.
        topology = cluster.topology()
        self.assertEqual(len(topology), 3, cluster.describe())
        self.assertEqual(sorted(len(t["replicas"]) for t in topology.values()), [1, 1, 1])
        ranges = sorted(r for t in topology.values() for r in t["slots"])
        covered = [s for a, b in ranges for s in range(a, b + 1)]
        self.assertEqual(covered, list(range(ClusterSet.SLOTS)))
        self.assertEqual(len(cluster.nodes()), 6)

        # A layer key goes to its slot's master; another master redirects.
        key = "rategate:per-user~0a1b2c3d|{u=alice}"
        slot = cluster.keyslot(key)
        master = cluster.master_of_slot(slot)
        other = next(p for p in topology if p != master)
        self.assertEqual(cluster.cli(other, "SET", key, "7"), "MOVED %d 127.0.0.1:%d" % (slot, master))
        # The replica has it before the master dies: WAIT numreplicas timeout-ms, on the
        # connection that wrote (on another one it would wait for nothing).
        self.assertEqual(cluster.cli_session(master, ["SET", key, "7"], ["WAIT", "1", "5000"]), ["OK", "1"])

        # SIGKILL the master: its replica is elected, serves the slot, and has the value.
        replica = topology[master]["replicas"][0]
        killed_at = time.time()
        cluster.kill(master)
        promoted = cluster.wait_failover(master, timeout=20)
        failover_s = time.time() - killed_at
        self.assertEqual(promoted, replica)
        self.assertEqual(cluster.master_of_slot(slot), promoted)
        self.assertEqual(cluster.cli(promoted, "GET", key), "7")
        self.assertEqual(cluster.cli(other, "GET", key), "MOVED %d 127.0.0.1:%d" % (slot, promoted))
        for port in cluster.alive():
            self.assertEqual(cluster.info(port).get("cluster_state"), "ok")
        self.assertEqual(len(cluster.masters()), 3)
        self.assertNotIn(master, cluster.masters())
        print("cluster: up, written and failed over in %.1f s (failover %.1f s)" % (time.time() - started, failover_s))
