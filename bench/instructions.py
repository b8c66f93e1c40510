#!/usr/bin/env python3
"""User-space instructions per proxied request, counted by valgrind's callgrind: nginx as a
proxy against rategate (plain, and with --limits the 4-layer chain on Redis), each alone under
callgrind while ab sends N keep-alive requests through it to an nginx upstream.

Instruction counts do not drift with whatever else the machine runs (two shared cores), so
this compares builds and peers where wall-clock CPU per request cannot. It counts user space
only (the kernel's TCP work is the same for both, see README "Benchmarks"). Prints instructions
per request and, per target, the components that spend them (Beast, Asio, allocation, libc,
rategate's own code).

Usage: bench/instructions.py [--build-dir build] [-n 20000] [--limits] [--top 15]"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

from benchlib import Procs, free_port, wait_port

parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", default="build")
parser.add_argument("-n", "--requests", type=int, default=20000)
parser.add_argument("-c", "--connections", type=int, default=8)
parser.add_argument("--limits", action="store_true", help="also rategate with the 4-layer chain")
parser.add_argument("--top", type=int, default=12, help="functions listed per target")
args = parser.parse_args()

work = tempfile.mkdtemp(prefix="rategate-instr-")
running = Procs(work)
up_port = free_port()
running.nginx("upstream", 'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }' % up_port)
wait_port(up_port)
redis_port = None


def nginx_proxy(port):
    d = os.path.join(work, "nginx-proxy-%d" % port)
    os.makedirs(d)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 1; pid %s/nginx.pid; error_log %s/error.log warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path %s; proxy_temp_path %s; keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:%d; keepalive 64; }
  server { listen 127.0.0.1:%d; location / { proxy_pass http://backend; proxy_http_version 1.1;
           proxy_set_header Connection ""; } } }
""" % (d, d, d, d, up_port, port))
    return ["nginx", "-p", d, "-c", conf, "-g", "daemon off; master_process off;"]


def rategate(port, limits=False):
    cfg = {"listen": "127.0.0.1:%d" % port, "threads": 1, "log": {"access_log": False},
           "upstreams": {"bench": {"targets": ["127.0.0.1:%d" % up_port]}},
           "routes": [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench"}]}
    if limits:
        big = {"rate": 10000000, "period": "1s", "burst": 10000000}
        cfg["redis"] = {"url": "redis://127.0.0.1:%d/0" % redis_port, "command_timeout": "5s"}
        cfg["identity"] = {"user": {"header": "X-User-Id"}}
        cfg["limiters"] = {n: {"scope": n, "algorithm": "token_bucket", "rules": [big]}
                           for n in ("global", "route", "user", "ip")}
        cfg["routes"][0]["limiters"] = ["global", "route", "user", "ip"]
    path = os.path.join(work, "rategate-%d.json" % port)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return [os.path.join(args.build_dir, "gateway", "rategate"), "--config", path, "--log-level", "warn"]


def ab(port, n, user=False):
    cmd = ["ab", "-q", "-k", "-n", str(n), "-c", str(args.connections)]
    if user:
        cmd += ["-H", "X-User-Id: u1"]
    out = subprocess.run(cmd + ["http://127.0.0.1:%d/api/items" % port], capture_output=True, text=True).stdout
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    if failed or non2xx:
        raise SystemExit("ab saw failures against port %d:\n%s" % (port, out))


def measure(name, port, command, user=False):
    out_file = os.path.join(work, name + ".callgrind")
    p = running.start(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out_file]
                      + command, name)
    wait_port(port)
    ab(port, 2000, user)  # warm: pools filled, caches grown, lazy setup done
    subprocess.run(["callgrind_control", "--instr=on", str(p.pid)], check=True, capture_output=True)
    ab(port, args.requests, user)
    subprocess.run(["callgrind_control", "--instr=off", str(p.pid)], check=True, capture_output=True)
    p.terminate()
    p.wait(60)
    files = [f for f in os.listdir(work) if f.startswith(name + ".callgrind")]
    text = "".join(subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100",
                                   os.path.join(work, f)], capture_output=True, text=True).stdout for f in files)
    total = sum(int(m.replace(",", "")) for m in re.findall(r"^([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", text, re.M))
    rows = []
    for m in re.finditer(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", text, re.M):
        if "PROGRAM TOTALS" in m.group(2):
            continue
        rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return total / args.requests, rows


def component(fn):
    if "boost::beast" in fn or "beast::" in fn:
        return "Beast (parser, fields, serializer)"
    if "boost::asio" in fn or "asio::" in fn:
        return "Asio (handlers, reactor, coroutines)"
    if "tcmalloc" in fn or "operator new" in fn or "operator delete" in fn or "malloc" in fn or "free" in fn:
        return "allocation"
    if "rategate::" in fn:
        return "rategate's own code"
    if "libc" in fn or "mem" in fn.split(":")[-1] or "str" in fn.split(":")[-1]:
        return "libc"
    if fn.startswith("ngx_") or "nginx" in fn:
        return "nginx"
    return "other"


try:
    ports = [free_port() for _ in range(3)]
    targets = [("nginx-proxy", ports[0], nginx_proxy(ports[0]), False),
               ("rategate", ports[1], rategate(ports[1]), False)]
    if args.limits:
        redis_port = free_port()
        running.redis(redis_port)
        targets.append(("rategate-4-layer", ports[2], rategate(ports[2], True), True))
    results = {}
    for name, port, command, user in targets:
        results[name] = measure(name, port, command, user)
        time.sleep(0.5)
    print("instructions per request (user space, callgrind; %d keep-alive requests over %d connections)"
          % (args.requests, args.connections))
    base = results["nginx-proxy"][0]
    for name, (per, rows) in results.items():
        print("%-18s %8.0f  (%.2f x nginx-proxy)" % (name, per, per / base))
    for name, (per, rows) in results.items():
        by = {}
        for n, fn in rows:
            by[component(fn)] = by.get(component(fn), 0) + n
        print("\n%s: %.0f instructions per request" % (name, per))
        for comp, n in sorted(by.items(), key=lambda kv: -kv[1]):
            print("  %-38s %7.0f" % (comp, n / args.requests))
        print("  top functions (self):")
        for n, fn in sorted(rows, reverse=True)[:args.top]:
            print("    %7.0f  %s" % (n / args.requests, fn[:150]))
finally:
    running.stop()
