#!/usr/bin/env bash
# Redis µs per decision of the chain script, medians of 3 interleaved rounds, in one run:
#   (a) 4-layer chain of token buckets (global, route, user over 1,000 users, ip over 100
#       addresses), 64 decisions per EVALSHA, clock "redis";
#   (b) sliding_window_log at limit 10 and at limit 10,000, steady state with the log full.
# "evalsha" is the time inside EVALSHA (INFO commandstats), "server" the whole redis-server's
# CPU (INFO cpu). BUILD_DIR (default build) and DECISIONS / LOG_DECISIONS override the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
dir=${BUILD_DIR:-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j "$(nproc)" --target chain_bench
start_redis
out=$(mktemp)
for round in 1 2 3; do
    "$dir/bench/chain_bench" --port "$REDIS_PORT" --scenario chain4 --decisions "${DECISIONS:-64000}"
    for limit in 10 10000; do
        "$dir/bench/chain_bench" --port "$REDIS_PORT" --scenario log --limit "$limit" \
            --decisions "${LOG_DECISIONS:-12800}"
    done
done | tee "$out"
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for m in re.finditer(r"scenario=(\S+) .*?evalsha_us=([\d.]+) cpu_us=([\d.]+)", open(sys.argv[1]).read()):
    rows.setdefault(m[1], []).append((float(m[2]), float(m[3])))
names = {"chain4": "4-layer token-bucket chain, batches of 64",
         "log10": "sliding_window_log, limit 10", "log10000": "sliding_window_log, limit 10,000"}
print("\n| scenario | evalsha µs/decision | server CPU µs/decision |")
print("|---|---:|---:|")
for key, label in names.items():
    if key in rows:
        print("| %s | %.2f | %.2f |" % (label, statistics.median(r[0] for r in rows[key]),
                                       statistics.median(r[1] for r in rows[key])))
if "log10" in rows and "log10000" in rows:
    ratio = statistics.median(r[0] for r in rows["log10000"]) / statistics.median(r[0] for r in rows["log10"])
    print("\nsliding_window_log evalsha µs/decision, limit 10,000 / limit 10: %.2f" % ratio)
PY
rm -f "$out"
