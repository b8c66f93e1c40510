"""Redis Cluster (SPEC §2 "Redis deployments"): the gateway learns the slot map from any seed
node, sends each slot's part of a chain to that slot's master, keeps all or nothing across
slots by refunding the parts that consumed when another part rejects, follows a failover and a
resharding without a restart (MOVED, ASK), and applies the route's on_redis_error while a
slot's master is down. /readyz is 200 when every slot's master answers.

Real processes (harness.ClusterSet): three masters and three replicas on loopback,
cluster-node-timeout 2 s. The key of each scoped layer is `<prefix><limiter>~<shape>|{u=<user>}` (the
tests learn a limiter's key from one probe request (the shape tag is the gateway's), then pick
users whose keys hash to the masters they need (CRC16 of the hash tag, as Redis computes it).

ClusterLimits shares one cluster (each test has its own key prefix); ClusterChanges starts one
per test, since it kills a master or moves a slot. The module takes about 30 s.
"""
import json
import math
import os
import subprocess
import tempfile
import threading
import time
import unittest

from harness import SANITIZED, ClusterSet, Conn, GatewayTest, Load, binary, free_port, get

SLOW = 3 if SANITIZED else 1


def limiter(scope, algorithm, rules, **extra):
    d = {"scope": scope, "algorithm": algorithm, "rules": rules}
    d.update(extra)
    return d


def exact(limit, window="1m"):
    return limiter("user", "sliding_window_log", [{"limit": limit, "window": window}])


# --- hash slots (Redis Cluster spec: CRC16/XMODEM of the hash tag, mod 16384) --------------

def _crc_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return table


_CRC16 = _crc_table()


def key_slot(key):
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc % ClusterSet.SLOTS


def user_key(template, probe_user, user):
    """`template` (the key a probe user's request made) for another user."""
    return template.replace("|{u=%s}" % probe_user, "|{u=%s}" % user)


def master_in(ranges_by_master, slot):
    for port, ranges in ranges_by_master.items():
        if any(a <= slot <= b for a, b in ranges):
            return port
    return None


class Sampler:
    """Polls a gateway's /readyz every 50 ms until stopped; records (time, status or None)."""

    def __init__(self, admin_port):
        self.admin_port = admin_port
        self.samples = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped.is_set():
            try:
                status = get(self.admin_port, "/readyz").status
            except (OSError, EOFError):
                status = None
            self.samples.append((time.time(), status))
            time.sleep(0.05)

    def stop(self):
        self.stopped.set()
        self.thread.join(5)


class ClusterBase(GatewayTest):
    wall_clock_cap = 60
    cluster = None

    def setUp(self):
        super().setUp()
        self.gws = []  # (Gateway, admin port)

    def own_cluster(self):
        cluster = ClusterSet(self.track)
        self.addCleanup(cluster.stop)  # after tearDown: removes its temp dir
        self.cluster = cluster
        return cluster

    def redis(self, prefix, seeds=None, **extra):
        cfg = {"cluster": {"nodes": seeds or self.cluster.addresses()}, "command_timeout": "200ms",
               "key_prefix": prefix, "clock": "redis"}
        cfg.update(extra)
        return cfg

    def make(self, redis, limiters, routes, on_redis_error="deny", threads=1, instances=1):
        """`instances` gateways on one config (each its own port and admin port), ready."""
        self.up = self.upstream()
        self.started = time.time()
        for _ in range(instances):
            admin = free_port()
            cfg = {
                "threads": threads,
                "admin": {"listen": "127.0.0.1:%d" % admin},
                "redis": redis,
                "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
                "identity": {"user": {"header": "X-User-Id"}},
                "limiters": limiters,
                "routes": [dict({"upstream": "demo", "on_redis_error": on_redis_error}, **r) for r in routes],
            }
            self.gws.append((self.gateway(cfg), admin))
        for i in range(instances):
            self.wait_readyz(200, 5 * SLOW, i)
        return [gw for gw, _ in self.gws]

    # --- gateway state -------------------------------------------------------------------

    def readyz(self, i=0):
        try:
            return get(self.gws[i][1], "/readyz").status
        except (OSError, EOFError):
            return None

    def wait_readyz(self, status, timeout, i=0):
        deadline = time.time() + timeout
        while self.readyz(i) != status and time.time() < deadline:
            time.sleep(0.05)
        if self.readyz(i) != status:
            self.fail("gateway %d: readyz is %s, not %s, %.1fs after start\n%s"
                      % (i, self.readyz(i), status, time.time() - self.started, self.diagnosis()))

    def gw_log(self, gw):
        """The gateway's log without the access log lines."""
        lines = [l for l in gw.output().splitlines() if not l[:4].isdigit()]
        return "\n".join(lines[-30:])

    def diagnosis(self):
        """What each gateway logged and counts of Redis, and what the cluster says, for a failure."""
        out = []
        for gw, admin in self.gws:
            try:
                metrics = [l for l in get(admin, "/metrics").body.decode().splitlines()
                           if l.startswith("rategate_redis") and not l.startswith("rategate_redis_call_duration")]
            except (OSError, EOFError) as e:
                metrics = ["/metrics: %s" % e]
            out.append("--- gateway on port %d (%s) log:\n%s\nmetrics:\n%s"
                       % (gw.port, "running" if gw.proc.poll() is None else "exited %s" % gw.proc.returncode,
                          self.gw_log(gw), "\n".join(metrics)))
        if self.cluster is not None:
            try:
                out.append("cluster masters: %s" % self.cluster.masters())
                for port in self.cluster.alive():
                    role = self.cluster.cli(port, "ROLE")
                    out.append("node %d: %s, cluster_state:%s" % (port, role.split()[0] if role else role,
                                                                 self.cluster.info(port).get("cluster_state")))
                out.append(self.cluster.describe())
            except Exception as e:  # the diagnosis must not hide the failure
                out.append("cluster: %r" % e)
        return "\n".join(out)

    def metric(self, name, at_least=None):
        """The value of an unlabelled metric, summed over the gateways. The Redis counters are
        published 4 times a second: with `at_least`, waits (up to 2 s) until the value gets
        there; otherwise reads it after 0.3 s."""
        deadline = time.time() + 2 * SLOW
        if at_least is None:
            time.sleep(0.3)
        while True:
            total = 0.0
            for gw, admin in self.gws:
                lines = [l.split() for l in get(admin, "/metrics").body.decode().splitlines()
                         if l.startswith(name + " ")]
                self.assertEqual(len(lines), 1, "metric %s on gateway %d" % (name, gw.port))
                total += float(lines[0][1])
            if at_least is None or total >= at_least or time.time() > deadline:
                return total
            time.sleep(0.05)

    def assert_alive(self):
        for gw, _ in self.gws:
            self.assertIsNone(gw.proc.poll(), "gateway died:\n" + gw.output()[-4000:])

    # --- requests ------------------------------------------------------------------------

    def statuses(self, gw, path, n, headers=None):
        c = Conn(gw.port)
        out = [c.request("GET", path, headers).status for _ in range(n)]
        c.close()
        return out

    def probe_key(self, gw, path, user, prefix, name):
        """Sends one request of `user` and returns (key, master port) of the key of limiter
        `name` that holds the user (the layer's key on the cluster)."""
        r = get(gw.port, path, {"X-User-Id": user})
        self.assertEqual(r.status, 200, "probe request of %s: %s %s\n%s" % (user, r.status, r.body, self.diagnosis()))
        found = self.cluster.keys("%s%s~*|{u=%s}" % (prefix, name, user))
        self.assertEqual(len(found), 1, "keys of probe user %s on the masters: %s\n%s"
                         % (user, found, self.diagnosis()))
        key, port = next(iter(found.items()))
        self.assertEqual(key_slot(key), self.cluster.keyslot(key))  # our CRC16 is the server's
        self.assertEqual(port, self.cluster.master_of_slot(key_slot(key)))
        return key, port

    def pick_users(self, template, probe_user, stem, want):
        """Users (stem-0, stem-1, ...) whose keys land on masters: `want` maps a master port to
        how many users it needs; returns {port: [user, ...]}."""
        ranges = self.cluster.masters()
        chosen = {port: [] for port in want}
        i = 0
        while any(len(chosen[p]) < n for p, n in want.items()):
            user = "%s-%d" % (stem, i)
            port = master_in(ranges, key_slot(user_key(template, probe_user, user)))
            if port in chosen and len(chosen[port]) < want[port]:
                chosen[port].append(user)
            i += 1
            self.assertLess(i, 100000, "no users found for %s" % want)
        return chosen

    def user_on_slot(self, template, probe_user, stem, slot):
        for i in range(400000):
            user = "%s-%d" % (stem, i)
            if key_slot(user_key(template, probe_user, user)) == slot:
                return user
        self.fail("no user of slot %d" % slot)


class ClusterLimits(ClusterBase):
    """Limits through a cluster that does not change: one cluster for the class."""

    @classmethod
    def setUpClass(cls):
        cls.shared = ClusterSet()

    @classmethod
    def tearDownClass(cls):
        cls.shared.stop()

    def setUp(self):
        super().setUp()
        self.cluster = self.shared
        self.assertEqual(len(self.cluster.alive()), 6, self.cluster.describe())

    def test_per_user_exact_limits_on_every_master_through_two_instances(self):
        limit = 5
        gws = self.make(self.redis("t1:"), {"per-user": exact(limit)},
                        [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}],
                        threads=2, instances=2)
        template, _ = self.probe_key(gws[0], "/api/x", "probe-t1", "t1:", "per-user")
        masters = self.cluster.masters()
        self.assertEqual(len(masters), 3)
        chosen = self.pick_users(template, "probe-t1", "user-t1", {port: 2 for port in masters})
        conns = [Conn(gw.port) for gw in gws]
        try:
            for port, users in chosen.items():
                for user in users:
                    got = [conns[i % 2].request("GET", "/api/x", {"X-User-Id": user}).status
                           for i in range(limit + 2)]
                    self.assertEqual(got, [200] * limit + [429] * 2,
                                     "user %s (slot %d, master %d), alternating the two gateways\n%s"
                                     % (user, key_slot(user_key(template, "probe-t1", user)), port, self.diagnosis()))
        finally:
            for c in conns:
                c.close()
        # Every user's key is on the master its slot names: the counters are spread over all three.
        found = self.cluster.keys("t1:*|{u=user-t1-*")
        for port, users in chosen.items():
            for user in users:
                self.assertEqual(found.get(user_key(template, "probe-t1", user)), port, "keys: %s" % found)
        self.assertEqual(set(found.values()), set(masters))
        for i in range(2):
            self.assertEqual(self.readyz(i), 200)
        self.assert_alive()

    def test_global_token_bucket_shared_by_two_instances(self):
        """Seeds: a port where nothing listens, then one replica: the map comes from any node
        that answers."""
        rate, burst, run_s = 20.0, 10, 1.5
        replica = next(r for t in self.cluster.topology().values() for r in t["replicas"])
        seeds = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % replica]
        gws = self.make(self.redis("t2:", seeds=seeds),
                        {"global": limiter("global", "token_bucket",
                                           [{"rate": rate, "period": "1s", "burst": burst}])},
                        [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["global"]}], instances=2)
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(len(gws))

        def hammer(gw):
            c = Conn(gw.port)
            mine = []
            try:
                barrier.wait()
                deadline = time.time() + run_s
                while time.time() < deadline:
                    start = time.time()
                    status = c.request("GET", "/api/x").status
                    mine.append((start, time.time(), status, gw.port))
            finally:
                c.close()
                with lock:
                    results.extend(mine)

        threads = [threading.Thread(target=hammer, args=(gw,)) for gw in gws]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        statuses = [s for _, _, s, _ in results]
        self.assertLessEqual(set(statuses), {200, 429}, "%s\n%s" % (sorted(set(statuses)), self.diagnosis()))
        admitted = statuses.count(200)
        # The bucket is created full at the first decision; every decision lies inside its
        # request's round trip.
        first_start, first_end = min(s for s, _, _, _ in results), min(e for _, e, _, _ in results)
        last_start, last_end = max(s for s, _, _, _ in results), max(e for _, e, _, _ in results)
        low = burst + rate * (last_start - first_end)
        high = burst + rate * (last_end - first_start)
        detail = "admitted %d of %d requests, expected %.1f..%.1f (±1); per gateway: %s\n%s" % (
            admitted, len(statuses), low, high,
            {gw.port: sum(1 for _, _, s, p in results if p == gw.port and s == 200) for gw in gws}, self.diagnosis())
        self.assertLessEqual(admitted, math.floor(high) + 1, detail)
        self.assertGreaterEqual(admitted, math.floor(low) - 1, detail)
        for gw in gws:  # both instances met the shared limit
            self.assertIn(429, [s for _, _, s, p in results if p == gw.port], detail)
        print("global token bucket: admitted %d of %d (expected %.2f..%.2f)" % (admitted, len(statuses), low, high))
        self.assert_alive()

    def test_chain_across_slots_refunds_the_layers_that_consumed(self):
        """A global layer (20 per hour) and a per-user layer (2 per hour) on different masters:
        the user's 8 rejected requests consumed the global layer's part and must give it back,
        so fresh users still find 18 of the global 20."""
        # Fixed windows are epoch-aligned: stay clear of an hour boundary.
        left = 3600 - time.time() % 3600
        if left < 15:
            time.sleep(left + 0.1)
        gws = self.make(self.redis("t3:"),
                        {"global": limiter("global", "fixed_window", [{"limit": 20, "window": "1h"}]),
                         "per-user": limiter("user", "fixed_window", [{"limit": 2, "window": "1h"}])},
                        [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["global", "per-user"]}])
        gw = gws[0]
        user_template, _ = self.probe_key(gw, "/api/x", "probe-t3", "t3:", "per-user")
        global_keys = [k for k in self.cluster.keys("t3:*") if "|{u=" not in k]
        self.assertEqual(len(global_keys), 1, global_keys)
        global_master = self.cluster.master_of_slot(key_slot(global_keys[0]))
        self.cluster.flushall()  # the probe's consumption gone: the global layer has 20 again
        others = [p for p in self.cluster.masters() if p != global_master]
        user = self.pick_users(user_template, "probe-t3", "alice-t3", {others[0]: 1})[others[0]][0]

        c = Conn(gw.port)
        try:
            got = []
            for _ in range(10):
                r = c.request("GET", "/api/x", {"X-User-Id": user})
                got.append((r.status, r.json().get("limiter") if r.status == 429 else None))
            self.assertEqual(got, [(200, None)] * 2 + [(429, "per-user")] * 8,
                             "user %s on master %d, global layer on master %d\n%s"
                             % (user, others[0], global_master, self.diagnosis()))
            got = []
            for i in range(22):
                r = c.request("GET", "/api/x", {"X-User-Id": "fresh-t3-%d" % i})
                got.append((r.status, r.json().get("limiter") if r.status == 429 else None))
        finally:
            c.close()
        admitted = sum(1 for s, _ in got if s == 200)
        self.assertEqual(got, [(200, None)] * 18 + [(429, "global")] * 4,
                         "after %s's 8 rejections fresh users got %d of the global layer's remaining 18 "
                         "(a refund that did not land leaves fewer, a double refund more)\n%s"
                         % (user, admitted, self.diagnosis()))
        # The parts are decided in parallel: each of the user's rejections had the global part to
        # undo, and each of the global layer's the fresh user's part (unless, by chance, in the
        # global key's slot: then one call decides both).
        global_slot = key_slot(global_keys[0])
        refunds = 8 + sum(1 for i in range(18, 22)
                          if key_slot(user_key(user_template, "probe-t3", "fresh-t3-%d" % i)) != global_slot)
        self.assertGreaterEqual(self.metric("rategate_redis_cluster_refunds_total", refunds), refunds,
                                self.diagnosis())
        self.assertEqual(self.metric("rategate_redis_cluster_refund_failures_total"), 0, self.diagnosis())
        self.assert_alive()


    def test_one_users_layers_share_a_slot_and_are_decided_in_one_part(self):
        """Two per-user limiters (a burst and a longer limit) of one user hash to the user's slot:
        the chain is not split, so the burst's rejections consume nothing of the other layer and
        need no refund."""
        gws = self.make(self.redis("t6:"),
                        {"burst": limiter("user", "fixed_window", [{"limit": 2, "window": "1h"}]),
                         "hourly": limiter("user", "fixed_window", [{"limit": 5, "window": "1h"}])},
                        [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["hourly", "burst"]}])
        left = 3600 - time.time() % 3600
        if left < 15:
            time.sleep(left + 0.1)
        split = self.metric("rategate_redis_cluster_split_chains_total")
        refunds = self.metric("rategate_redis_cluster_refunds_total")
        c = Conn(gws[0].port)
        try:
            got = [c.request("GET", "/api/x", {"X-User-Id": "dana-t6"}).status for _ in range(6)]
        finally:
            c.close()
        self.assertEqual(got, [200] * 2 + [429] * 4, self.diagnosis())
        keys = self.cluster.keys("t6:*|{u=dana-t6}")
        self.assertEqual(len(keys), 2, keys)
        self.assertEqual(len({key_slot(k) for k in keys}), 1, keys)
        time.sleep(0.4)  # the gateway publishes its counters 4 times a second
        self.assertEqual(self.metric("rategate_redis_cluster_split_chains_total"), split, self.diagnosis())
        self.assertEqual(self.metric("rategate_redis_cluster_refunds_total"), refunds, self.diagnosis())
        self.assert_alive()

class ClusterChanges(ClusterBase):
    """Failover and resharding under load: one cluster per test."""

    def test_master_killed_under_load_failover_without_restart(self):
        cluster = self.own_cluster()
        gws = self.make(self.redis("t4:"), {"bulk": exact(1000000), "exact": exact(3)},
                        [{"name": "bulk", "match": {"path_prefix": "/bulk"}, "limiters": ["bulk"]},
                         {"name": "exact", "match": {"path_prefix": "/exact"}, "limiters": ["exact"]}], threads=2)
        gw = gws[0]
        bulk_template, _ = self.probe_key(gw, "/bulk/x", "probe-t4", "t4:", "bulk")
        exact_template, _ = self.probe_key(gw, "/exact/x", "probe-t4", "t4:", "exact")
        masters = cluster.masters()
        victim, survivor = list(masters)[:2]
        doomed = self.pick_users(bulk_template, "probe-t4", "load-t4", {victim: 1, survivor: 1})
        fresh = self.pick_users(exact_template, "probe-t4", "fresh-t4", {victim: 1})[victim][0]

        load = Load(gw.port, "/bulk/x", {"X-User-Id": doomed[victim][0]})
        other = Load(gw.port, "/bulk/x", {"X-User-Id": doomed[survivor][0]})
        self.addCleanup(load.stop)
        self.addCleanup(other.stop)
        deadline = time.time() + 5 * SLOW
        while (load.count(200) < 20 or other.count(200) < 20) and time.time() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(load.count(200), 20, "no load got through: %s\n%s" % (load.summary(), self.diagnosis()))
        ready = Sampler(self.gws[0][1])
        self.addCleanup(ready.stop)

        killed = time.time()
        cluster.kill(victim)
        promoted = cluster.wait_failover(victim, timeout=20)
        failed_over = time.time()
        # The gateway finds the promoted replica without a restart.
        recovered = None
        while time.time() < failed_over + 10 * SLOW:
            if get(gw.port, "/bulk/x", {"X-User-Id": doomed[victim][0]}).status == 200:
                recovered = time.time()
                break
            time.sleep(0.05)
        self.assertIsNotNone(recovered, "still no 200 %.0fs after the failover of %d to %d\n%s"
                             % (10 * SLOW, victim, promoted, self.diagnosis()))
        self.wait_readyz(200, 5 * SLOW)
        self.assertEqual(self.statuses(gw, "/exact/x", 4, {"X-User-Id": fresh}), [200, 200, 200, 429],
                         "fresh user %s on a slot of the killed master\n%s" % (fresh, self.diagnosis()))
        self.assertEqual(cluster.keys("t4:*|{u=%s}" % fresh), {user_key(exact_template, "probe-t4", fresh): promoted})
        time.sleep(1.0)
        load.stop()
        other.stop()
        ready.stop()

        detail = "killed %d at +0, promoted %d at +%.1fs, first 200 at +%.1fs; load %s, other master %s\n%s" % (
            victim, promoted, failed_over - killed, recovered - killed, load.summary(), other.summary(),
            self.diagnosis())
        for l in (load, other):
            self.assertLessEqual(set(l.outcomes()), {200, 503}, detail)
        # With the master gone and none promoted yet, on_redis_error "deny" applies...
        self.assertIn(503, load.outcomes(killed), detail)
        # ... to its slots only: until the node timeout (2 s) the other masters serve as usual
        # (later every node answers CLUSTERDOWN until the replica takes over).
        early = other.outcomes(killed + 0.3, killed + 1.5)
        self.assertTrue(early, detail)
        self.assertEqual(set(early), {200}, "the other master's slots were refused before the cluster noticed; "
                         + detail)
        for l in (load, other):
            after = l.outcomes(recovered + 1.0)
            self.assertTrue(after, detail)
            self.assertEqual(set(after), {200}, "not only 200s a second after the gateway recovered; " + detail)
        slowest = max(d for l in (load, other) for _, d, _ in l.results)
        self.assertLess(slowest, 2.0 * SLOW, "a request took %.1fs; %s" % (slowest, detail))
        # /readyz said 503 while the master was down, and is 200 again.
        while_down = [s for t, s in ready.samples if killed + 0.2 < t < failed_over - 0.5]
        self.assertIn(503, while_down, "readyz while the master was down: %s; %s" % (while_down, detail))
        self.wait_readyz(200, 1 * SLOW)  # published 4 times a second: may trail by one
        def took(l):
            d = sorted(d for _, d, o in l.results if o == 503) or [0.0]
            return "%.3f..%.3fs, median %.3fs" % (d[0], d[-1], d[len(d) // 2])

        print("master killed: promoted after %.1fs, first 200 after %.1fs; load %s (503s took %s), other master %s "
              "(503s took %s)" % (failed_over - killed, recovered - killed, load.summary(), took(load),
                                  other.summary(), took(other)))
        self.assert_alive()

    def test_slot_resharded_under_load_no_over_admission(self):
        cluster = self.own_cluster()
        limit = 300
        gws = self.make(self.redis("t5:"), {"busy": exact(limit), "exact": exact(3)},
                        [{"name": "busy", "match": {"path_prefix": "/busy"}, "limiters": ["busy"]},
                         {"name": "exact", "match": {"path_prefix": "/exact"}, "limiters": ["exact"]}],
                        threads=2, instances=2)
        busy_template, _ = self.probe_key(gws[0], "/busy/x", "probe-t5", "t5:", "busy")
        exact_template, _ = self.probe_key(gws[0], "/exact/x", "probe-t5", "t5:", "exact")
        user = "busy-t5"
        key = user_key(busy_template, "probe-t5", user)
        slot = key_slot(key)
        source = cluster.master_of_slot(slot)
        target = next(p for p in cluster.masters() if p != source)
        fresh = self.user_on_slot(exact_template, "probe-t5", "fresh-t5", slot)

        loads = [Load(gw.port, "/busy/x", {"X-User-Id": user}) for gw in gws]
        for l in loads:
            self.addCleanup(l.stop)
        deadline = time.time() + 5 * SLOW
        while sum(l.count(200) for l in loads) < limit // 3 and time.time() < deadline:
            time.sleep(0.02)
        begun = time.time()
        self.assertEqual(cluster.keys("t5:*|{u=%s}" % user), {key: source})
        moved_from, moved = cluster.migrate_slot(slot, target, pause=0.3)
        done = time.time()
        self.assertEqual((moved_from, moved), (source, 1))
        # Until the limit is spent and refused on the new owner (a 429 after the move).
        deadline = done + 5 * SLOW
        while not any(o == 429 for l in loads for o in l.outcomes(done)) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        for l in loads:
            l.stop()

        results = sorted((r for l in loads for r in l.results), key=lambda r: r[0])
        outcomes = [o for _, _, o in results]
        admitted = outcomes.count(200)
        during = [o for start, _, o in results if begun <= start < done]
        refused = [start + took for start, took, o in results if o == 429]
        first_refusal = min(refused) if refused else float("inf")
        detail = ("slot %d moved from %d to %d in %.2fs; admitted %d (limit %d); outcomes %s; during the move %s\n%s"
                  % (slot, source, target, done - begun, admitted, limit, [l.summary() for l in loads],
                     {str(o): during.count(o) for o in set(during)}, self.diagnosis()))
        self.assertLessEqual(set(outcomes), {200, 429, 503}, detail)
        self.assertLessEqual(admitted, limit, "over-admission: " + detail)
        # Requests were admitted while the slot moved (MIGRATING, then ASK, then MOVED).
        self.assertIn(200, during, detail)
        # Once the limit refused, no state was lost: nothing admitted afterwards.
        self.assertNotIn(200, [o for start, _, o in results if start > first_refusal], "admitted after a refusal: "
                         + detail)
        # The key (state and all) is the target's, and the gateway goes there: the spent limit
        # still refuses.
        after = [o for start, _, o in results if start > max(done, first_refusal) + 0.2]
        self.assertTrue(after, detail)
        self.assertEqual(set(after), {429}, "after the move: " + detail)
        self.assertEqual(cluster.keys("t5:*|{u=%s}" % user), {key: target})
        self.assertGreater(self.metric("rategate_redis_cluster_redirects_total", 1), 0, detail)
        # A fresh counter of the moved slot is created on its new master, with exact limits.
        self.assertEqual(self.statuses(gws[1], "/exact/x", 4, {"X-User-Id": fresh}), [200, 200, 200, 429],
                         "fresh user %s of slot %d\n%s" % (fresh, slot, self.diagnosis()))
        self.assertEqual(cluster.keys("t5:*|{u=%s}" % fresh), {user_key(exact_template, "probe-t5", fresh): target})
        slowest = max(d for _, d, _ in results)
        self.assertLess(slowest, 2.0 * SLOW, "a request took %.1fs; %s" % (slowest, detail))
        for i in range(2):
            self.assertEqual(self.readyz(i), 200)
        print("slot moved in %.2fs: admitted %d (limit %d), during the move %s, all %s"
              % (done - begun, admitted, limit, {str(o): during.count(o) for o in set(during)},
                 {str(o): outcomes.count(o) for o in set(outcomes)}))
        self.assert_alive()


class ClusterConfig(unittest.TestCase):
    """`rategate check` on cluster configs (no cluster needed: the seeds are not contacted)."""

    def check(self, redis):
        cfg = {"listen": "127.0.0.1:8080", "redis": redis,
               "upstreams": {"demo": {"targets": ["127.0.0.1:9001"]}},
               "identity": {"user": {"header": "X-User-Id"}},
               "limiters": {"per-user": exact(5)},
               "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo",
                           "limiters": ["per-user"]}]}
        with tempfile.NamedTemporaryFile("w", prefix="rategate-cluster-", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        self.addCleanup(os.unlink, f.name)
        p = subprocess.run([binary("rategate"), "check", "--config", f.name], capture_output=True, text=True,
                           timeout=30)
        return p.returncode, p.stdout + p.stderr

    def test_valid_cluster_config_passes_check(self):
        code, out = self.check({"cluster": {"nodes": ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]},
                                "password": "pw", "username": "gw", "command_timeout": "200ms", "clock": "redis",
                                "over_limit_cache": 0})
        self.assertEqual(code, 0, out)
        self.assertIn("OK", out)
        self.assertIn("redis cluster", out)

    def test_over_limit_cache_refused_with_cluster(self):
        code, out = self.check({"cluster": {"nodes": ["127.0.0.1:7000"]}, "over_limit_cache": 100})
        self.assertNotEqual(code, 0, out)
        self.assertIn("redis.over_limit_cache", out)

    def test_cluster_beside_url_refused(self):
        code, out = self.check({"cluster": {"nodes": ["127.0.0.1:7000"]}, "url": "redis://127.0.0.1:6379"})
        self.assertNotEqual(code, 0, out)
        self.assertIn("exactly one", out)


if __name__ == "__main__":
    unittest.main()
