#!/usr/bin/env bash
# Redis CPU per decision of the 3-layer chain script: single calls versus batches of 64.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
start_redis
port=$REDIS_PORT
build/bench/chain_bench --port "$port" --decisions "${DECISIONS:-64000}"
