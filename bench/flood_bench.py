#!/usr/bin/env python3
"""The flood: one user at full speed against a small per-user limit (token bucket, RATE per
second, burst BURST, behind a global bucket far above the load) through two gateway instances
on one Redis, wrk with 2 keep-alive connections per instance. Variants, interleaved rounds,
medians:
  rategate-cache     the exact over-limit cache on (the default)
  rategate-no-cache  "over_limit_cache": 0 — one script call per refusal
  rategate-local     no Redis: each instance limits in-process (not shared: twice the admits)
  nginx-limit-req    one nginx with the same limit as a limit_req zone (burst, nodelay), 4 conns
Reports refusals/s, gateway CPU µs per refusal (both instances), Redis CPU µs and script calls
per refusal, and the admitted count against burst + rate x elapsed (per shared limit)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import Procs, free_port, parse_wrk, redis_evalsha_calls, tree_cpu_seconds, wait_port, wrk_command

parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", default="build")
parser.add_argument("-r", "--rounds", type=int, default=3)
parser.add_argument("-d", "--duration", type=int, default=5)
parser.add_argument("--rate", type=int, default=5)
parser.add_argument("--burst", type=int, default=10)
parser.add_argument("--algorithm", default="token_bucket",
                    choices=["token_bucket", "sliding_window_log", "fixed_window"],
                    help="the per-user layer's algorithm (windows: limit BURST per BURST/RATE s)")
parser.add_argument("--quota", action="store_true",
                    help="the global layer as a quota of 100k per hour (rate 1 per hour, burst "
                         "100000: a retry bound of one hour) instead of a bucket far above the load")
args = parser.parse_args()
if args.algorithm == "token_bucket":
    user_rule = {"rate": args.rate, "period": "1s", "burst": args.burst}
else:  # the same long-run rate: BURST per window of BURST / RATE seconds
    user_rule = {"limit": args.burst, "window": "%dms" % (1000 * args.burst // args.rate)}
global_rule = ({"rate": 1, "period": "1h", "burst": 100000} if args.quota
               else {"rate": 10000000, "period": "1s", "burst": 10000000})

work = tempfile.mkdtemp(prefix="rategate-flood-")
running = Procs(work)
up_port, redis_port = free_port(), free_port()
running.nginx("upstream", 'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }' % up_port)
redis_proc = running.redis(redis_port)


def gateway(name, cache, redis=True):
    port = free_port()
    cfg = {
        "listen": "127.0.0.1:%d" % port, "threads": 1,
        "admin": {"listen": "127.0.0.1:%d" % free_port()},
        "log": {"access_log": False},
        "upstreams": {"bench": {"targets": ["127.0.0.1:%d" % up_port]}},
        "identity": {"user": {"header": "X-User-Id"}},
        "limiters": {
            "global": {"scope": "global", "algorithm": "token_bucket", "rules": [global_rule]},
            "per-user": {"scope": "user", "algorithm": args.algorithm, "rules": [user_rule]},
        },
        "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "bench",
                    "limiters": ["global", "per-user"]}],
    }
    if redis:
        cfg["redis"] = {"url": "redis://127.0.0.1:%d/0" % redis_port, "command_timeout": "500ms",
                        "over_limit_cache": cache}
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = running.start([os.path.join(args.build_dir, "gateway", "rategate"), "--config", path, "--log-level", "warn"],
                      name)
    return port, p


targets = {}  # name -> list of (port, process); the flood is split over them
for name, cache, redis in (("rategate-cache", 10000, True), ("rategate-no-cache", 0, True),
                           ("rategate-local", 0, False)):
    targets[name] = [gateway(name + "-a", cache, redis), gateway(name + "-b", cache, redis)]
nport = free_port()
targets["nginx-limit-req"] = [(nport, running.nginx("nginx-limit-req", """upstream backend { server 127.0.0.1:%d; keepalive 64; }
  limit_req_zone $http_x_user_id zone=user:10m rate=%dr/s;
  limit_req_status 429;
  server { listen 127.0.0.1:%d; location / { limit_req zone=user burst=%d nodelay;
           proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } }"""
                                                        % (up_port, args.rate, nport, args.burst)))]
for ports in targets.values():
    for port, _ in ports:
        wait_port(port)


def flood(name, user, duration):
    """Both halves at once; returns requests, refusals, wall seconds, gateway CPU s, Redis CPU s, calls."""
    ports = targets[name]
    conns = 4 // len(ports)
    cpu0 = sum(tree_cpu_seconds(p.pid) for _, p in ports)
    rcpu0, calls0 = tree_cpu_seconds(redis_proc.pid), redis_evalsha_calls(redis_port)
    env = dict(os.environ, FLOOD_USER=user)
    t0 = time.monotonic()
    runs = [subprocess.Popen(wrk_command("http://127.0.0.1:%d/x" % port, duration, conns, "wrk-flood.lua"),
                             env=env, stdout=subprocess.PIPE, text=True) for port, _ in ports]
    outs = [r.communicate()[0] for r in runs]
    wall = time.monotonic() - t0
    total = refused = 0
    for out in outs:
        _, _, _, n, non2xx = parse_wrk(out, name)
        total += n
        refused += non2xx
    return (total, refused, wall, sum(tree_cpu_seconds(p.pid) for _, p in ports) - cpu0,
            tree_cpu_seconds(redis_proc.pid) - rcpu0, redis_evalsha_calls(redis_port) - calls0)


try:
    for name in targets:
        flood(name, "warmup-" + name, 1)
    samples = {n: [] for n in targets}
    for r in range(args.rounds):
        order = list(targets)[r % len(targets):] + list(targets)[:r % len(targets)]
        for name in order:
            total, refused, wall, cpu, rcpu, calls = flood(name, "flooder-%d-%s" % (r, name), args.duration)
            admitted = total - refused
            s = {"refusals_s": refused / wall, "cpu_us": cpu * 1e6 / max(refused, 1),
                 "redis_us": rcpu * 1e6 / max(refused, 1), "calls": calls / max(refused, 1),
                 "admitted": admitted, "wall": wall}
            samples[name].append(s)
            print("round %d %-18s %8.0f refusals/s  %6.1f us CPU/refusal  Redis %5.2f us/refusal  "
                  "%.4f calls/refusal  admitted %d in %.2f s" % (r + 1, name, s["refusals_s"], s["cpu_us"],
                                                                  s["redis_us"], s["calls"], admitted, wall),
                  flush=True)
    med = {n: {k: statistics.median(x[k] for x in v) for k in v[0]} for n, v in samples.items()}
    print()
    print("| target | refusals/s | gateway CPU us/refusal | Redis CPU us/refusal | script calls/refusal "
          "| admitted (expected) | CPU vs nginx limit_req |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n, m in med.items():
        shared = 1 if n != "rategate-local" else 2  # in-process: each instance its own bucket
        expected = shared * (args.burst + args.rate * args.duration)
        print("| %s | %.0f | %.1f | %.2f | %.4f | %d (%d) | %.2f |" % (
            n, m["refusals_s"], m["cpu_us"], m["redis_us"], m["calls"], m["admitted"], expected,
            m["cpu_us"] / med["nginx-limit-req"]["cpu_us"]))
    print()
    print("medians of %d rounds, %d s each; per-user %s %s; global %s; 4 keep-alive connections, one user"
          % (args.rounds, args.duration, args.algorithm, json.dumps(user_rule), json.dumps(global_rule)))
    if args.algorithm != "token_bucket":
        print("(admitted, expected: the bucket's figure; a window admits up to BURST more at its edges)")
finally:
    running.stop()
    shutil.rmtree(work, ignore_errors=True)
