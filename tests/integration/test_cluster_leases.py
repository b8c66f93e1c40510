"""Leased shared layers on a Redis Cluster (SPEC §2 `sync`, "Redis Cluster"): three masters, two
gateway instances of two event loops each. The lease of the global layer is taken by a call to
the master that owns its key's slot; per-user layers stay exact on their own masters.
Admissions (counted at the upstream) stay within burst + rate x elapsed + N x loops, each
user's limit stays exact, and the master holding the global key runs far fewer script calls per
request than when the same layer is exact; once the load stops, idle leases are given back.
"""
import json
import re
import threading
import time

from harness import ClusterSet, Conn, get
from test_cluster import ClusterBase, exact, key_slot, limiter, master_in

LOOPS = 2 * 2  # two instances, two event loops each


class ClusterLeases(ClusterBase):
    @classmethod
    def setUpClass(cls):
        cls.shared = ClusterSet(replicas_per_master=0)

    @classmethod
    def tearDownClass(cls):
        cls.shared.stop()

    def setUp(self):
        super().setUp()
        self.cluster = self.shared
        self.assertEqual(len(self.cluster.masters()), 3, self.cluster.describe())

    # --- helpers -----------------------------------------------------------------------

    def forwarded(self):
        return json.loads(get(self.up.port, "/count").body)["requests"]

    def script_calls(self):
        """{master port: EVALSHA calls so far} (INFO commandstats)."""
        out = {}
        for port in self.cluster.masters():
            m = re.search(r"cmdstat_evalsha:calls=(\d+)", self.cluster.cli(port, "INFO", "commandstats") or "")
            out[port] = int(m.group(1)) if m else 0
        return out

    def global_master(self, prefix):
        found = self.cluster.keys("%s{global~*" % prefix)
        self.assertEqual(len(found), 1, found)
        key, port = next(iter(found.items()))
        self.assertEqual(port, self.cluster.master_of_slot(key_slot(key)))
        return port

    def users_off(self, prefix, avoid, count):
        """`count` users whose per-user key is on a master other than `avoid` (None: any)."""
        template = next(iter(self.cluster.keys("%sper-user~*" % prefix)))
        probe = re.search(r"\|\{u=([^}]*)\}", template).group(1)
        ranges, users, i = self.cluster.masters(), [], 0
        while len(users) < count:
            user = "u%s-%d" % (prefix.strip(":"), i)
            key = template.replace("|{u=%s}" % probe, "|{u=%s}" % user)
            if avoid is None or master_in(ranges, key_slot(key)) != avoid:
                users.append(user)
            i += 1
        return users

    def drive(self, gws, users, seconds, per_port=3):
        """Keep-alive connections to each gateway, cycling through `users` on /api; returns
        per-user statuses and the elapsed time."""
        results, lock = {}, threading.Lock()
        start = time.monotonic()
        stop_at = start + seconds

        def run(port, k):
            c = Conn(port)
            mine, i = [], k
            while time.monotonic() < stop_at:
                user = users[i % len(users)]
                i += 1
                mine.append((user, c.request("GET", "/api/x", {"X-User-Id": user}).status))
            c.close()
            with lock:
                for user, status in mine:
                    results.setdefault(user, []).append(status)

        threads = [threading.Thread(target=run, args=(gw.port, k)) for gw in gws for k in range(per_port)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, time.monotonic() - start

    def start(self, prefix, global_limiter, user_limit):
        gws = self.make(self.redis(prefix), {"global": global_limiter, "per-user": exact(user_limit, "1h")},
                        [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["global", "per-user"]}],
                        threads=2, instances=2)
        # One probe request places both keys.
        r = get(gws[0].port, "/api/x", {"X-User-Id": "probe"})
        self.assertEqual(r.status, 200, self.diagnosis())
        return gws

    # --- tests -------------------------------------------------------------------------

    def test_leased_global_within_bound_users_exact(self):
        rate, burst, lease, user_limit = 40, 120, 10, 6
        glob = limiter("global", "token_bucket", [{"rate": rate, "period": "1s", "burst": burst}],
                       sync={"lease": lease})
        gws = self.start("cl1:", glob, user_limit)
        users = self.users_off("cl1:", None, 90)
        up0 = self.forwarded()
        statuses, elapsed = self.drive(gws, users, 2.0)
        admitted = self.forwarded() - up0
        flat = [s for v in statuses.values() for s in v]
        print("cluster, leased global: %d admitted of %d requests in %.2f s" % (admitted, len(flat), elapsed))
        self.assertEqual(set(flat) - {200, 429}, set(), self.diagnosis())
        self.assertEqual(admitted, flat.count(200))  # what the upstream saw is what was admitted
        # The probe took one permit before the run.
        self.assertLessEqual(admitted + 1, burst + rate * elapsed + lease * LOOPS + 1, (admitted, elapsed))
        self.assertGreaterEqual(admitted, burst + rate * (elapsed - 0.5) - lease * LOOPS - 1, (admitted, elapsed))
        for user, s in statuses.items():
            self.assertLessEqual(s.count(200), user_limit, user)  # exact on its own master
        # Leases were taken, and the users' keys spread over all three masters.
        self.assertGreater(self.metric("rategate_lease_grants_total"), 0)
        placed = set(self.cluster.keys("cl1:per-user~*").values())
        self.assertEqual(placed, set(self.cluster.masters()))
        self.assert_alive()

    def run_roomy(self, prefix, lease):
        """A global bucket the load does not exhaust (leased `lease` at a time, or exact),
        users whose keys are on the other masters: (script calls on the global key's master,
        requests, admitted)."""
        glob = limiter("global", "token_bucket", [{"rate": 100000, "period": "1s", "burst": 100000}])
        if lease:
            glob["sync"] = {"lease": lease}
        gws = self.start(prefix, glob, 100000)
        hot = self.global_master(prefix)
        users = self.users_off(prefix, hot, 40)
        up0, calls0 = self.forwarded(), self.script_calls()
        statuses, _ = self.drive(gws, users, 1.5)
        calls = self.script_calls()[hot] - calls0[hot]
        flat = [s for v in statuses.values() for s in v]
        admitted = self.forwarded() - up0
        self.assertEqual(admitted, flat.count(200))
        self.assertEqual(admitted, len(flat), self.diagnosis())
        if lease:
            # Idle give-back on the cluster: every loop's unspent permits go back to the master
            # of the global key's slot within about 1.5 s.
            held = self.metric("rategate_lease_permits_held")
            self.assertGreater(held, 0)
            given = self.metric("rategate_lease_permits_given_back_total", at_least=held)
            self.assertGreaterEqual(given, held)
            self.assertEqual(self.metric("rategate_lease_permits_held"), 0)
        for gw in list(self.gws):
            gw[0].stop()
        self.gws = []
        return calls, len(flat), admitted

    def test_leased_global_takes_load_off_its_master(self):
        leased, n_leased, _ = self.run_roomy("cl2:", 50)
        exact_calls, n_exact, _ = self.run_roomy("cl3:", None)
        print("cluster, the global key's master: %d script calls for %d requests leased, "
              "%d for %d exact" % (leased, n_leased, exact_calls, n_exact))
        # Leased: one top-up per ~3N/4 requests of a loop, far fewer than one call per batch.
        self.assertLess(leased / n_leased, 0.1)
        self.assertLess(leased / n_leased, 0.5 * exact_calls / n_exact)
