#!/usr/bin/env bash
# Installs what is missing, builds, and starts the demo: two demo upstreams (:9001, :9002)
# and rategate on :8080 with config/example.json, then sends a little traffic through it.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")"
source .ci/setup.sh
install_deps
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo

config=${RATEGATE_CONFIG:-config/example.json}
mkdir -p run
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listening on :$1 (see run/*.log)" >&2
    exit 1
}

build/tests/demo_upstream --listen 127.0.0.1:9001 --name demo-9001 >run/upstream-9001.log 2>&1 &
pids+=($!)
build/tests/demo_upstream --listen 127.0.0.1:9002 --name demo-9002 >run/upstream-9002.log 2>&1 &
pids+=($!)
build/gateway/rategate check --config "$config"
build/gateway/rategate --config "$config" 2>&1 | tee run/rategate.log &
pids+=($!)
wait_port 9001
wait_port 9002
wait_port 8080

echo
echo "==> sample traffic through the gateway"
for path in /api/orders/42 /api/orders/43 /public/hello /missing; do
    printf 'GET %-18s -> ' "$path"
    curl -s -o /dev/null -w '%{http_code} (%{size_download} bytes)\n' "http://localhost:8080$path"
done
echo
echo "rategate is serving on http://localhost:8080 (upstreams :9001 and :9002). Try:"
echo "  curl -i localhost:8080/api/orders/1"
echo "  curl -i -X POST --data 'hello' localhost:8080/api/orders"
echo "Ctrl-C stops the demo."
wait
