#!/usr/bin/env bash
# Redis CPU per decision of the 3-layer chain script: single calls versus batches of 64.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --logfile /dev/null &
rpid=$!
trap 'kill $rpid 2>/dev/null' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
build/bench/chain_bench --port "$port" --decisions "${DECISIONS:-64000}"
