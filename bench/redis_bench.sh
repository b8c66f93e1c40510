#!/usr/bin/env bash
# EVALSHA throughput of rategate's Redis client (1, 16, 256 coroutines on one event loop)
# beside redis-benchmark -P 16 on the same script, against one redis-server, in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
start_redis
port=$REDIS_PORT
script="return redis.call('INCR', KEYS[1])"
sha=$(redis-cli -p "$port" SCRIPT LOAD "$script")
# Interleaved rounds; medians (two shared cores drift by ~10% between runs).
for round in 1 2 3; do
    redis-benchmark -p "$port" -n 300000 -c 50 -P 16 -r 1000 -q EVALSHA "$sha" 1 "bench:__rand_int__" |
        tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | awk '{print "redis-benchmark " $1}'
    build/bench/redis_client_bench --port "$port" --seconds 2 --script "$script"
done | tee /tmp/rategate-redis-bench.txt
python3 - <<'PY'
import re, statistics
text = open("/tmp/rategate-redis-bench.txt").read()
ceiling = statistics.median(float(x) for x in re.findall(r"redis-benchmark ([\d.]+)", text))
print("\n| load | calls/s (median of 3) | vs redis-benchmark -P 16 | commands per write |")
print("|---|---:|---:|---:|")
print("| redis-benchmark -P 16, 50 connections | %.0f | 1.00 | 16 |" % ceiling)
for c in (1, 16, 256):
    rows = re.findall(r"concurrency=%d calls/s=([\d.]+) failed=\d+ commands/write=([\d.]+)" % c, text)
    rate = statistics.median(float(r[0]) for r in rows)
    per_write = statistics.median(float(r[1]) for r in rows)
    print("| rategate client, %d coroutines, 1 connection | %.0f | %.2f | %.1f |" % (c, rate, rate / ceiling, per_write))
PY
