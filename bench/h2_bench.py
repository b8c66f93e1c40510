#!/usr/bin/env python3
"""HTTP/2 and gRPC against nginx, interleaved, medians.

1. h2load against rategate and nginx (`http2` on), both proxying over HTTP/1.1 keep-alive to the
   same nginx `return 200` upstream: over TLS with ALPN h2 (the same throwaway self-signed
   certificate, made at run time) and cleartext h2c with prior knowledge. req/s, mean request
   time, CPU µs per request of the proxy (utime+stime from /proc of its processes) and the
   rategate/nginx ratios, for each `-m` (streams per connection) given.
2. gRPC unary added latency: tests/integration/grpc_service.py called directly and through
   rategate (h2c in, h2c upstream), sequential calls on one channel each, in interleaved blocks;
   p50/p99 and what the gateway adds.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import Procs, free_port, tree_cpu_seconds, wait_port

parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", default="build")
parser.add_argument("-r", "--rounds", type=int, default=3)
parser.add_argument("-n", "--requests", type=int, default=20000, help="h2load -n")
parser.add_argument("-c", "--clients", type=int, default=16, help="h2load -c")
parser.add_argument("-m", "--streams", default="8,1", help="h2load -m values, comma-separated")
parser.add_argument("--path", default="/api/items")
parser.add_argument("--grpc-calls", type=int, default=2000, help="unary calls each way (0: no gRPC part)")
parser.add_argument("--grpc-block", type=int, default=100, help="calls per block; blocks alternate direct/gateway")
parser.add_argument("--grpc-size", type=int, default=100, help="request bytes")
parser.add_argument("--no-h2load", action="store_true")
args = parser.parse_args()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = tempfile.mkdtemp(prefix="rategate-h2-bench-")
running = Procs(work)
rategate_bin = os.path.join(args.build_dir, "gateway", "rategate")


def rategate(name, cfg):
    cfg = dict(cfg, threads=1, log={"access_log": False})
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return running.start([rategate_bin, "--config", path, "--log-level", "info"], name)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def h2load(url, n, m):
    """req/s, mean request time ms, succeeded, failed+errored+timeout, non-2xx, raw output."""
    cmd = ["h2load", "-n", str(n), "-c", str(args.clients), "-m", str(m), "-t", "1", url]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    fin = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    rt = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if not (fin and req and codes and rt):
        raise SystemExit("h2load failed: %s\n%s" % (" ".join(cmd), out))
    mean = rt.group(1)
    unit = re.match(r"([\d.]+)(us|ms|s)$", mean)
    mean_ms = float(unit.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit.group(2)]
    bad = int(req.group(5)) + int(req.group(6)) + int(req.group(7))
    non2xx = sum(int(codes.group(i)) for i in (2, 3, 4))
    return float(fin.group(1)), mean_ms, int(req.group(4)), bad, non2xx, out


def h2_part():
    cert, key = os.path.join(work, "bench.pem"), os.path.join(work, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    up_port = free_port()
    running.nginx("upstream", 'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }' % up_port)
    proxy = """proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";"""
    targets = {}  # name -> (url, proc)
    p = free_port()
    targets["nginx-h2-tls"] = ("https://127.0.0.1:%d%s" % (p, args.path), running.nginx("nginx-h2-tls", """
  upstream backend { server 127.0.0.1:%d; keepalive 64; }
  server { listen 127.0.0.1:%d ssl http2; ssl_certificate %s; ssl_certificate_key %s;
           ssl_protocols TLSv1.2 TLSv1.3; location / { %s } }""" % (up_port, p, cert, key, proxy)))
    routes = [{"name": "bench", "match": {"path_prefix": "/"}, "upstream": "bench"}]
    upstreams = {"bench": {"targets": ["127.0.0.1:%d" % up_port]}}
    p = free_port()
    targets["rategate-h2-tls"] = ("https://127.0.0.1:%d%s" % (p, args.path), rategate("rategate-h2-tls", {
        "listen": "127.0.0.1:%d" % p, "tls": {"cert": cert, "key": key}, "upstreams": upstreams, "routes": routes}))
    p = free_port()
    targets["nginx-h2c"] = ("http://127.0.0.1:%d%s" % (p, args.path), running.nginx("nginx-h2c", """
  upstream backend { server 127.0.0.1:%d; keepalive 64; }
  server { listen 127.0.0.1:%d http2; location / { %s } }""" % (up_port, p, proxy)))
    p = free_port()
    targets["rategate-h2c"] = ("http://127.0.0.1:%d%s" % (p, args.path), rategate("rategate-h2c", {
        "listen": "127.0.0.1:%d" % p, "http2": {"h2c": True}, "upstreams": upstreams, "routes": routes}))
    for url, _ in targets.values():
        wait_port(int(url.split(":")[2].split("/")[0]))
    wait_port(up_port)

    ms_values = [int(x) for x in args.streams.split(",")]
    runs = [(name, m) for m in ms_values for name in targets]
    for name, m in runs:  # warm-up, and a check that every target answers 2xx over h2
        rps, mean, ok, bad, non2xx, out = h2load(targets[name][0], 2000, m)
        if bad or non2xx or "h2" not in re.search(r"Application protocol: (\S+)", out).group(1):
            print("warm-up %s -m%d: %d failed, %d non-2xx\n%s" % (name, m, bad, non2xx, out), flush=True)
    samples = {run: [] for run in runs}
    problems = []
    for r in range(args.rounds):
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        for name, m in order:
            url, proc = targets[name]
            cpu0 = tree_cpu_seconds(proc.pid)
            rps, mean, ok, bad, non2xx, out = h2load(url, args.requests, m)
            cpu = tree_cpu_seconds(proc.pid) - cpu0
            samples[(name, m)].append({"rps": rps, "mean": mean, "cpu_us": cpu * 1e6 / max(ok, 1)})
            if bad or non2xx or ok != args.requests:
                problems.append("round %d %s -m%d: %d succeeded, %d failed/errored/timeout, %d non-2xx"
                                % (r + 1, name, m, ok, bad, non2xx))
            print("round %d %-16s -m%-2d %9.0f req/s  mean %.2f ms  %.1f us CPU/req  failed %d  non-2xx %d"
                  % (r + 1, name, m, rps, mean, cpu * 1e6 / max(ok, 1), bad, non2xx), flush=True)
    med = {run: {k: median([s[k] for s in v]) for k in ("rps", "mean", "cpu_us")} for run, v in samples.items()}
    print()
    print("h2load -n %d -c %d -m M -t 1, medians of %d rounds" % (args.requests, args.clients, args.rounds))
    print()
    print("| target | -m | req/s | mean request ms | proxy CPU us/req | req/s vs nginx | CPU vs nginx |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, m in runs:
        x = med[(name, m)]
        peer = med[(name.replace("rategate", "nginx"), m)]
        print("| %s | %d | %.0f | %.2f | %.1f | %.2f | %.2f |" % (
            name, m, x["rps"], x["mean"], x["cpu_us"], x["rps"] / peer["rps"], x["cpu_us"] / peer["cpu_us"]))
    for p in problems:
        print("PROBLEM: " + p)


def grpc_part():
    try:
        import grpc
    except ImportError:  # a Python other than Debian's: use Debian's python3-grpcio
        sys.path.append("/usr/lib/python3/dist-packages")
        import grpc
    svc_port, gw_port = free_port(), free_port()
    running.start([sys.executable, os.path.join(ROOT, "tests", "integration", "grpc_service.py"),
                   "--port", str(svc_port)], "grpc-service")
    gw = rategate("rategate-grpc", {
        "listen": "127.0.0.1:%d" % gw_port, "http2": {"h2c": True},
        "upstreams": {"svc": {"targets": ["127.0.0.1:%d" % svc_port], "protocol": "h2c"}},
        "routes": [{"name": "echo", "match": {"path_prefix": "/test.Echo/"}, "upstream": "svc"}]})
    wait_port(svc_port)
    wait_port(gw_port)
    payload = os.urandom(args.grpc_size)
    paths = {}
    for name, port in (("direct", svc_port), ("rategate", gw_port)):
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        paths[name] = (ch, ch.unary_unary("/test.Echo/Unary", request_serializer=None,
                                          response_deserializer=None))
    lat = {n: [] for n in paths}  # ms, this round's calls
    gw_cpu = [0.0]

    def block(name, count, keep):
        call = paths[name][1]
        cpu0 = tree_cpu_seconds(gw.pid) if name == "rategate" else 0
        for _ in range(count):
            t0 = time.perf_counter()
            resp = call(payload, timeout=10)
            dt = time.perf_counter() - t0
            if resp != payload:
                raise SystemExit("gRPC %s: echo mismatch (%d bytes back)" % (name, len(resp)))
            if keep:
                lat[name].append(dt * 1e3)
        if name == "rategate" and keep:
            gw_cpu[0] += tree_cpu_seconds(gw.pid) - cpu0

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]

    for name in paths:  # warm-up: connections, the gateway's upstream connection, caches
        block(name, 200, False)
    rounds = []
    for r in range(args.rounds):
        for name in paths:
            lat[name] = []
        gw_cpu[0] = 0.0
        done, i = 0, r
        while done < args.grpc_calls:
            count = min(args.grpc_block, args.grpc_calls - done)
            order = ["direct", "rategate"] if i % 2 == 0 else ["rategate", "direct"]
            for name in order:
                block(name, count, True)
            done += count
            i += 1
        x = {n: (pct(lat[n], 50), pct(lat[n], 99), statistics.mean(lat[n])) for n in paths}
        x["cpu_us"] = gw_cpu[0] * 1e6 / len(lat["rategate"])
        rounds.append(x)
        print("gRPC round %d: direct p50 %.3f p99 %.3f ms; rategate p50 %.3f p99 %.3f ms; added p50 %+.3f "
              "p99 %+.3f ms; rategate CPU %.1f us/call" % (
                  r + 1, x["direct"][0], x["direct"][1], x["rategate"][0], x["rategate"][1],
                  x["rategate"][0] - x["direct"][0], x["rategate"][1] - x["direct"][1], x["cpu_us"]), flush=True)
    for ch, _ in paths.values():
        ch.close()

    print()
    print("gRPC unary /test.Echo/Unary, %d-byte messages, %d sequential calls each way per round on one channel "
          "each, blocks of %d alternating; medians of %d rounds" % (args.grpc_size, args.grpc_calls,
                                                                   args.grpc_block, args.rounds))
    print()
    print("| path | p50 ms | p99 ms | mean ms |")
    print("|---|---:|---:|---:|")
    for name in paths:
        print("| %s | %.3f | %.3f | %.3f |" % ((name,) + tuple(median([x[name][k] for x in rounds])
                                                          for k in range(3))))
    print("| added by rategate | %+.3f | %+.3f | %+.3f |" % tuple(
        median([x["rategate"][k] - x["direct"][k] for x in rounds]) for k in range(3)))
    print()
    print("rategate CPU %.1f us per gRPC call (median of rounds)" % median([x["cpu_us"] for x in rounds]))


try:
    if not args.no_h2load:
        h2_part()
    if args.grpc_calls:
        grpc_part()
finally:
    running.stop()
    for name in os.listdir(work):
        if name.startswith("rategate") and name.endswith(".log"):
            with open(os.path.join(work, name)) as f:
                errors = [line.strip() for line in f if re.search(r"\] \[(warning|error|critical)\]", line)]
            for line in errors[:5]:
                print("%s: %s" % (name, line))
    shutil.rmtree(work, ignore_errors=True)
