#!/usr/bin/env python3
"""Runs wrk against the upstream directly, nginx as a proxy and rategate as a proxy, interleaved,
and prints medians of req/s, p50, p99, CPU µs per request and the ratios."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

from benchlib import (Procs, free_port, parse_wrk, redis_evalsha_calls, tree_cpu_seconds, tree_cpu_split, wait_port,
                      wrk_command)

parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", default="build")
parser.add_argument("-r", "--rounds", type=int, default=3)
parser.add_argument("-d", "--duration", type=int, default=5)
parser.add_argument("-c", "--connections", type=int, default=64)
parser.add_argument("-w", "--warmup", type=int, default=2)
parser.add_argument("--path", default="/api/items")
parser.add_argument("--access-log", action="store_true",
                    help="also run rategate with the access log on (text, to a file)")
parser.add_argument("--tls", action="store_true",
                    help="also HTTPS: nginx and rategate terminating TLS with the same certificate, "
                         "keep-alive and one handshake per request (Connection: close)")
parser.add_argument("--limits", action="store_true",
                    help="also run rategate with a 4-layer chain on Redis and nginx with limit_req zones")
parser.add_argument("--leases", type=int, default=0, metavar="N",
                    help="with --limits, also the 4-layer chain with global and route leased N at a time "
                         "(SPEC 2 sync)")
parser.add_argument("--baseline-build", metavar="DIR",
                    help="also rategate (plain, and with --limits the 4-layer chain) from another build "
                         "directory, as rategate-baseline, in the same interleaved rounds: a change against "
                         "its parent in one run")
args = parser.parse_args()

work = tempfile.mkdtemp(prefix="rategate-bench-")
running = Procs(work)
procs = running.procs
start = running.start
nginx = running.nginx


up_port, nginx_port, gw_port = free_port(), free_port(), free_port()
targets = {}
up = nginx("upstream", 'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }' % up_port)
targets["direct"] = (up_port, up)
px = nginx("nginx-proxy", """upstream backend { server 127.0.0.1:%d; keepalive 64; }
  server { listen 127.0.0.1:%d; location / { proxy_pass http://backend; proxy_http_version 1.1;
           proxy_set_header Connection ""; } }""" % (up_port, nginx_port))
targets["nginx-proxy"] = (nginx_port, px)


def rategate(name, port, base=None, access_log=False, build_dir=None):
    cfg = {"routes": [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench"}]}
    if base:
        with open(base) as f:
            cfg = json.loads(re.sub(r"^\s*//.*$", "", f.read(), flags=re.M))
    cfg["listen"] = "127.0.0.1:%d" % port
    cfg["threads"] = 1
    cfg.setdefault("upstreams", {})
    for u in cfg["upstreams"].values():
        u["targets"] = ["127.0.0.1:%d" % up_port]
    cfg["upstreams"].setdefault("bench", {"targets": ["127.0.0.1:%d" % up_port]})
    cfg["log"] = {"access_log": access_log, "format": "text"}
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    binary = os.path.join(build_dir or args.build_dir, "gateway", "rategate")
    return start([binary, "--config", path, "--log-level", "info"], name)


targets["rategate"] = (gw_port, rategate("rategate", gw_port))
if args.baseline_build:
    port = free_port()
    targets["rategate-baseline"] = (port, rategate("rategate-baseline", port, build_dir=args.baseline_build))
if args.access_log:
    port = free_port()
    targets["rategate-access-log"] = (port, rategate("rategate-access-log", port, access_log=True))
redis_proc = None
if args.limits:
    redis_port = free_port()
    redis_proc = running.redis(redis_port)
    # Limits far above the load: this measures the cost of deciding, not of rejecting.
    chain = {
        "redis": {"url": "redis://127.0.0.1:%d/0" % redis_port, "command_timeout": "500ms"},
        "identity": {"user": {"header": "X-User-Id"}, "client_ip": {"trusted_proxies": ["127.0.0.1/32"]}},
        "limiters": {
            "global": {"scope": "global", "algorithm": "token_bucket",
                       "rules": [{"rate": 10000000, "period": "1s", "burst": 10000000}]},
            "route": {"scope": "route", "algorithm": "token_bucket",
                      "rules": [{"rate": 10000000, "period": "1s", "burst": 10000000}]},
            "user": {"scope": "user", "algorithm": "token_bucket",
                     "rules": [{"rate": 100000, "period": "1s", "burst": 100000}]},
            "ip": {"scope": "ip", "algorithm": "token_bucket",
                   "rules": [{"rate": 100000, "period": "1s", "burst": 100000}]},
        },
        "routes": [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench",
                    "limiters": ["global", "route", "user", "ip"]}],
    }
    path = os.path.join(work, "chain.json")
    with open(path, "w") as f:
        json.dump(chain, f)
    port = free_port()
    targets["rategate-4-layer"] = (port, rategate("rategate-4-layer", port, path))
    if args.baseline_build:
        port = free_port()
        targets["rategate-4-layer-baseline"] = (port, rategate("rategate-4-layer-baseline", port, path,
                                                               build_dir=args.baseline_build))
    if args.leases:
        for name in ("global", "route"):
            chain["limiters"][name]["sync"] = {"lease": args.leases}
        leased_path = os.path.join(work, "chain-leased.json")
        with open(leased_path, "w") as f:
            json.dump(chain, f)
        port = free_port()
        targets["rategate-4-layer-leased"] = (port, rategate("rategate-4-layer-leased", port, leased_path))
    lport = free_port()
    targets["nginx-limit-req"] = (lport, nginx("nginx-limit-req", """upstream backend { server 127.0.0.1:%d; keepalive 64; }
  limit_req_zone $server_name zone=global:1m rate=10000000r/s;
  limit_req_zone $uri zone=route:1m rate=10000000r/s;
  limit_req_zone $http_x_user_id zone=user:10m rate=100000r/s;
  limit_req_zone $http_x_forwarded_for zone=ip:10m rate=100000r/s;
  server { listen 127.0.0.1:%d; location / {
           limit_req zone=global burst=10000000 nodelay; limit_req zone=route burst=10000000 nodelay;
           limit_req zone=user burst=100000 nodelay; limit_req zone=ip burst=100000 nodelay;
           proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; } }"""
                                                % (up_port, lport)))

# name -> scheme and extra wrk arguments; plain HTTP keep-alive unless listed.
variants = {}
if args.tls:
    cert, key = os.path.join(work, "bench.pem"), os.path.join(work, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    nport, rport = free_port(), free_port()
    targets["nginx-https"] = (nport, nginx("nginx-https", """upstream backend { server 127.0.0.1:%d; keepalive 64; }
  server { listen 127.0.0.1:%d ssl; ssl_certificate %s; ssl_certificate_key %s;
           ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache off; ssl_session_tickets off;
           location / { proxy_pass http://backend; proxy_http_version 1.1;
           proxy_set_header Connection ""; } }""" % (up_port, nport, cert, key)))
    tls_cfg = os.path.join(work, "tls.json")
    with open(tls_cfg, "w") as f:
        json.dump({"tls": {"cert": cert, "key": key},
                   "routes": [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench"}]}, f)
    targets["rategate-https"] = (rport, rategate("rategate-https", rport, tls_cfg))
    # The same two servers again with a full handshake per request: the TLS handshake cost.
    targets["nginx-https-handshake"] = targets["nginx-https"]
    targets["rategate-https-handshake"] = targets["rategate-https"]
    for n in ("nginx-https", "rategate-https"):
        variants[n] = ("https", [])
        variants[n + "-handshake"] = ("https", ["close"])

for port, _ in targets.values():
    wait_port(port)


def evalsha_calls():
    return redis_evalsha_calls(redis_port) if redis_proc else 0


def wrk(port, duration, name=""):
    scheme, extra = variants.get(name, ("http", []))
    env = dict(os.environ, CONNECTION_CLOSE="1" if "close" in extra else "0")
    out = subprocess.run(wrk_command("%s://127.0.0.1:%d%s" % (scheme, port, args.path), duration,
                                     args.connections, "wrk-users.lua"),
                         env=env, capture_output=True, text=True).stdout
    return parse_wrk(out, "port %d" % port)


try:
    for name, (port, _) in targets.items():
        wrk(port, args.warmup, name)
    samples = {n: [] for n in targets}
    for r in range(args.rounds):
        order = list(targets)
        order = order[r % len(order):] + order[:r % len(order)]
        for name in order:
            port, proc = targets[name]
            user0, sys0 = tree_cpu_split(proc.pid)
            rcpu0 = tree_cpu_seconds(redis_proc.pid) if redis_proc else 0
            calls0 = evalsha_calls()
            rps, p50, p99, total, non2xx = wrk(port, args.duration, name)
            user1, sys1 = tree_cpu_split(proc.pid)
            user, cpu = user1 - user0, (user1 + sys1) - (user0 + sys0)
            rcpu = (tree_cpu_seconds(redis_proc.pid) - rcpu0) if redis_proc else 0
            calls = evalsha_calls() - calls0
            samples[name].append({"rps": rps, "p50": p50, "p99": p99, "cpu_us": cpu * 1e6 / max(total, 1),
                                  "user_us": user * 1e6 / max(total, 1),
                                  "non2xx": non2xx, "redis_us": rcpu * 1e6 / max(total, 1),
                                  "calls": calls / max(total, 1)})
            print("round %d %-14s %9.0f req/s  p50 %.2f ms  p99 %.2f ms  %.1f us CPU/req  non-2xx %d"
                  % (r + 1, name, rps, p50, p99, cpu * 1e6 / max(total, 1), non2xx), flush=True)
    med = {n: {k: statistics.median(s[k] for s in v)
               for k in ("rps", "p50", "p99", "cpu_us", "user_us", "redis_us", "calls")}
           for n, v in samples.items()}
    print()
    print("| target | req/s (median) | p50 ms | p99 ms | CPU us/req | of it user space | Redis CPU us/req "
          "| Redis calls/req | vs direct | vs nginx-proxy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, m in med.items():
        print("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f | %.3f | %.2f | %.2f |" % (
            n, m["rps"], m["p50"], m["p99"], m["cpu_us"], m["user_us"], m["redis_us"], m["calls"],
            m["rps"] / med["direct"]["rps"], m["rps"] / med["nginx-proxy"]["rps"]))
    if "rategate-4-layer" in med:
        m = med["rategate-4-layer"]
        print()
        print("rategate-4-layer: %.1f requests per EVALSHA; rategate-4-layer/nginx-limit-req = %.2f, "
              "rategate-4-layer/nginx-proxy = %.2f" % (1 / max(m["calls"], 1e-9),
                                                      m["rps"] / med["nginx-limit-req"]["rps"],
                                                      m["rps"] / med["nginx-proxy"]["rps"]))
    if "rategate-https" in med:
        print()
        for kind in ("https", "https-handshake"):
            r, n = med["rategate-" + kind], med["nginx-" + kind]
            print("rategate-%s/nginx-%s = %.2f (%.0f vs %.0f req/s; CPU %.1f vs %.1f us/req)" % (
                kind, kind, r["rps"] / n["rps"], r["rps"], n["rps"], r["cpu_us"], n["cpu_us"]))
    print()
    print("rategate/nginx-proxy = %.2f, rategate/direct = %.2f (medians of %d rounds, wrk -t1 -c%d -d%ds)" % (
        med["rategate"]["rps"] / med["nginx-proxy"]["rps"], med["rategate"]["rps"] / med["direct"]["rps"],
        args.rounds, args.connections, args.duration))
finally:
    running.stop()
    if args.limits:
        with open(os.path.join(work, "rategate-4-layer.log")) as f:
            for line in f:
                if "EVALSHA" in line:
                    print("rategate-4-layer " + line.split("] ", 2)[-1].strip())
    shutil.rmtree(work, ignore_errors=True)
