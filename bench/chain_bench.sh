#!/usr/bin/env bash
# Redis CPU per decision of the 4-layer chain script: single calls versus batches of 64.
# (bench/script_bench.sh adds the sliding_window_log runs and takes medians.)
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
dir=${BUILD_DIR:-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j "$(nproc)" --target chain_bench
start_redis
for batch in 1 64; do
    "$dir/bench/chain_bench" --port "$REDIS_PORT" --scenario chain4 --batch "$batch" \
        --decisions "${DECISIONS:-64000}"
done
