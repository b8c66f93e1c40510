#!/usr/bin/env python3
"""The 4-layer chain (global, route, user over 1,000 users, ip over 100 addresses; token
buckets) against one Redis and against a 3-master Redis Cluster (no replicas) on this machine,
one gateway (1 event loop) each, wrk 1 thread and 64 connections, interleaved rounds, medians.
Variants:
  single         "url": one redis-server
  cluster        "cluster": three masters; the global and route layers each live in one slot,
                 users and addresses spread over all three
  cluster-tight  the cluster with a per-user limit the load exceeds (1 per second, burst 5):
                 most requests are rejected by the user layer after the global and route parts
                 consumed, so each rejection costs a refund
Reports requests/s, script calls (EVALSHA) per request, decisions per second (layer parts
decided per second: one per call and request part), Redis CPU µs per request and per
decision on each master, and the refund rate (refund calls per request). On two shared cores the
cluster cannot be faster than one Redis; what it shows is that the work spreads: each master's
CPU per decision stays flat while their sum carries the load.

--masters: the three-master figure instead. The same chain through a 1-master and a 3-master
cluster, each with every layer exact and with `global` and `route` leased (`--lease N`, 50 by
default): Redis CPU per decision (INFO CPU used_cpu_sys + used_cpu_user deltas) on each master,
the hottest master's share of the Redis CPU, and the capacity a deployment has before its
hottest master fills one core, relative to one master (1-master µs per decision over the
hottest master's). A decision is one request's chain decided (admitted or limited)."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchlib import Procs, free_port, parse_wrk, tree_cpu_seconds, wait_port, wrk_command

parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", default="build")
parser.add_argument("-r", "--rounds", type=int, default=3)
parser.add_argument("-d", "--duration", type=int, default=5)
parser.add_argument("-c", "--connections", type=int, default=64)
parser.add_argument("--masters", action="store_true", help="the 1- vs 3-master figure, exact and leased")
parser.add_argument("--lease", type=int, default=50, help="N for the leased variants of --masters")
args = parser.parse_args()

work = tempfile.mkdtemp(prefix="rategate-cluster-bench-")
running = Procs(work)
up_port = free_port()
running.nginx("upstream", 'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }' % up_port)

single_port = free_port()
single = running.redis(single_port)



cluster_procs = running.cluster(3)
cluster_ports = list(cluster_procs)


def chain_config(port, redis, user_rule, lease=0):
    big = {"rate": 10000000, "period": "1s", "burst": 10000000}
    cfg = {
        "listen": "127.0.0.1:%d" % port, "threads": 1,
        "admin": {"listen": "127.0.0.1:%d" % free_port()},
        "log": {"access_log": False},
        "upstreams": {"bench": {"targets": ["127.0.0.1:%d" % up_port]}},
        "redis": dict(redis, command_timeout="500ms"),
        "identity": {"user": {"header": "X-User-Id"}, "client_ip": {"trusted_proxies": ["127.0.0.1/32"]}},
        "limiters": {
            "global": {"scope": "global", "algorithm": "token_bucket", "rules": [big]},
            "route": {"scope": "route", "algorithm": "token_bucket", "rules": [big]},
            "user": {"scope": "user", "algorithm": "token_bucket", "rules": [user_rule]},
            "ip": {"scope": "ip", "algorithm": "token_bucket",
                   "rules": [{"rate": 100000, "period": "1s", "burst": 100000}]},
        },
        "routes": [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench",
                    "limiters": ["global", "route", "user", "ip"]}],
    }
    if lease:
        for name in ("global", "route"):
            cfg["limiters"][name]["sync"] = {"lease": lease}
    return cfg


cluster_redis = {"cluster": {"nodes": ["127.0.0.1:%d" % p for p in cluster_ports]}}
roomy = {"rate": 100000, "period": "1s", "burst": 100000}
# name: (redis section, user rule, the Redis processes {port: process}, lease N of global and route)
if args.masters:
    one_procs = running.cluster(1)
    one_redis = {"cluster": {"nodes": ["127.0.0.1:%d" % p for p in one_procs]}}
    variants = {
        "1 master": (one_redis, roomy, one_procs, 0),
        "1 master lease": (one_redis, roomy, one_procs, args.lease),
        "3 masters": (cluster_redis, roomy, cluster_procs, 0),
        "3 masters lease": (cluster_redis, roomy, cluster_procs, args.lease),
    }
else:
    variants = {
        "single": ({"url": "redis://127.0.0.1:%d/0" % single_port}, roomy, {single_port: single}, 0),
        "cluster": (cluster_redis, roomy, cluster_procs, 0),
        "cluster-tight": (cluster_redis, {"rate": 1, "period": "1s", "burst": 5}, cluster_procs, 0),
    }
gateways = {}
for name, (redis, rule, _, lease) in variants.items():
    port = free_port()
    cfg = chain_config(port, redis, rule, lease)
    path = os.path.join(work, name.replace(" ", "-") + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = running.start([os.path.join(args.build_dir, "gateway", "rategate"), "--config", path, "--log-level", "warn"],
                      name.replace(" ", "-"))
    gateways[name] = (port, p, int(cfg["admin"]["listen"].rsplit(":", 1)[1]))
for port, _, admin in gateways.values():
    wait_port(port)
    for _ in range(100):
        try:
            if urllib.request.urlopen("http://127.0.0.1:%d/readyz" % admin, timeout=1).status == 200:
                break
        except OSError:
            time.sleep(0.05)


def evalsha_calls(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True, text=True).stdout
    m = re.search(r"cmdstat_evalsha:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


def redis_cpu_seconds(port):
    """used_cpu_sys + used_cpu_user of the server on `port` (INFO CPU, µs resolution)."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "CPU"], capture_output=True, text=True).stdout
    return sum(float(re.search(r"^%s:([\d.]+)" % f, out, re.M).group(1)) for f in ("used_cpu_sys", "used_cpu_user"))


def metric(admin, name):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=2).read().decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), body, re.M)
    return float(m.group(1)) if m else 0.0


def one_run(name):
    port, proc, admin = gateways[name]
    nodes = variants[name][2]
    env = dict(os.environ, USERS="1000")
    before_cpu = {p: redis_cpu_seconds(p) for p in nodes}
    before_calls = {p: evalsha_calls(p) for p in nodes}
    before_gw = tree_cpu_seconds(proc.pid)
    before_refunds = metric(admin, "rategate_redis_cluster_refunds_total")
    before_decisions = metric(admin, "rategate_redis_decisions_total")
    out = subprocess.run(wrk_command("http://127.0.0.1:%d/" % port, args.duration, args.connections,
                                     "wrk-users.lua"), capture_output=True, text=True, env=env).stdout
    time.sleep(0.3)  # the gateway publishes its counters 4 times a second
    rps, p50, p99, total, non2xx = parse_wrk(out, name)
    calls = {p: evalsha_calls(p) - before_calls[p] for p in nodes}
    cpu = {p: redis_cpu_seconds(p) - before_cpu[p] for p in nodes}
    decisions = metric(admin, "rategate_redis_decisions_total") - before_decisions
    refunds = metric(admin, "rategate_redis_cluster_refunds_total") - before_refunds
    # The refund script is an EVALSHA too: calls above count chain and refund calls.
    return {
        "rps": rps, "p99": p99, "total": total, "rejected": non2xx,
        "gateway_us": (tree_cpu_seconds(proc.pid) - before_gw) * 1e6 / max(total, 1),
        "calls_per_request": sum(calls.values()) / max(total, 1),
        "parts_per_s": decisions / args.duration,
        "redis_us_per_request": sum(cpu.values()) * 1e6 / max(total, 1),
        "per_master": {p: (cpu[p] * 1e6 / max(calls[p], 1), cpu[p] / args.duration) for p in nodes},
        # Redis CPU µs per decision on each master, hottest first.
        "per_decision": sorted((cpu[p] * 1e6 / max(total, 1) for p in nodes), reverse=True),
        "parts_per_call": decisions / max(sum(calls.values()) - refunds, 1),
        "refund_rate": refunds / max(total, 1),
        "redis_us_per_part": sum(cpu.values()) * 1e6 / max(decisions, 1),
    }


results = {name: [] for name in variants}
for r in range(args.rounds):
    for name in variants:
        results[name].append(one_run(name))
        print("round %d %-14s %8.0f req/s" % (r + 1, name, results[name][-1]["rps"]), flush=True)

print("\nmedians of %d rounds, %d s each, %d connections, 1 gateway event loop:" % (args.rounds, args.duration,
                                                                                   args.connections))
print("%-14s %9s %8s %9s %10s %11s %10s %9s %8s" % ("target", "req/s", "rej/s", "calls/req", "parts/s",
                                                     "parts/call", "Redis µs/req", "µs/part", "refunds"))
med = {}
for name, rs in results.items():
    m = {k: statistics.median(x[k] for x in rs) for k in rs[0] if k not in ("per_master", "per_decision")}
    med[name] = m
    print("%-14s %9.0f %8.0f %9.3f %10.0f %11.1f %10.1f %9.2f %8.3f" % (
        name, m["rps"], m["rejected"] / max(m["total"], 1) * m["rps"], m["calls_per_request"], m["parts_per_s"],
        m["parts_per_call"], m["redis_us_per_request"], m["redis_us_per_part"], m["refund_rate"]))
print("\nper master: Redis CPU µs per script call, and share of one core:")
for name, rs in results.items():
    for port in variants[name][2]:
        us = statistics.median(x["per_master"][port][0] for x in rs)
        core = statistics.median(x["per_master"][port][1] for x in rs)
        print("  %-14s %5d: %6.1f µs/call, %4.0f%% of a core" % (name, port, us, core * 100))
if args.masters:
    # Per round, masters ranked by their CPU per decision (hottest first); medians per rank.
    print("\nRedis CPU per decision, per master (hottest first), and the hottest master's share:")
    print("%-16s %-26s %8s %9s %9s %10s" % ("target", "µs/decision per master", "sum", "hottest", "share",
                                           "capacity"))
    hottest = {}
    for name, rs in results.items():
        ranks = [statistics.median(x["per_decision"][i] for x in rs) for i in range(len(rs[0]["per_decision"]))]
        total = statistics.median(sum(x["per_decision"]) for x in rs)
        share = statistics.median(x["per_decision"][0] / max(sum(x["per_decision"]), 1e-9) for x in rs)
        hottest[name] = ranks[0]
        # The 1-master variant with the same leases: its one master is the hottest.
        one = hottest.get(name.replace("3 masters", "1 master"), ranks[0])
        print("%-16s %-26s %8.2f %9.2f %8.0f%% %9.2fx" % (
            name, " ".join("%.2f" % r for r in ranks), total, ranks[0], share * 100, one / ranks[0]))
    print("capacity: decisions/s a deployment carries before its hottest master fills one core, over the\n"
          "1-master deployment's with the same leases (1-master µs/decision / hottest master's)")
else:
    print("\ncluster/single requests/s = %.2f; Redis µs per request cluster/single = %.2f" % (
        med["cluster"]["rps"] / med["single"]["rps"],
        med["cluster"]["redis_us_per_request"] / med["single"]["redis_us_per_request"]))
running.stop()
shutil.rmtree(work, ignore_errors=True)
