#!/usr/bin/env bash
# Installs what is missing, builds, and starts the demo: a local Redis (:6379), two demo
# upstreams (:9001, :9002) and rategate on :8080 with config/example.json (the SPEC's example),
# then sends a little traffic through it: a burst from one user gets 429s, another user passes.
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

if ! redis-cli -p 6379 ping >/dev/null 2>&1; then
    redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --logfile "$PWD/run/redis.log" &
    pids+=($!)
fi
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
echo "==> a burst of 7 requests from alice (client 203.0.113.10 behind the trusted local proxy)"
for i in $(seq 7); do
    curl -s -o /dev/null -w '%{http_code} ' -H 'X-User-Id: alice' -H 'X-Forwarded-For: 203.0.113.10' \
        http://localhost:8080/api/orders/42
done
echo
echo "==> alice's next request, in full"
curl -s -i -H 'X-User-Id: alice' -H 'X-Forwarded-For: 203.0.113.10' http://localhost:8080/api/orders/42
echo
echo "==> bob (another user and client) still passes"
curl -s -i -H 'X-User-Id: bob' -H 'X-Forwarded-For: 203.0.113.20' http://localhost:8080/api/orders/7 |
    grep -E '^(HTTP|RateLimit)'
echo "==> no user id: per-user has on_missing_key deny"
curl -s -w ' (%{http_code})\n' http://localhost:8080/api/orders/1
echo
echo "rategate is serving on http://localhost:8080 (upstreams :9001 and :9002)."
echo "Dashboard: http://localhost:9901/ (live charts; keys limited most at /top, metrics at /metrics)"
echo "Try:"
echo "  curl -i -H 'X-User-Id: carol' localhost:8080/api/orders/1"
echo "  curl -i -X POST -H 'X-User-Id: carol' --data 'hello' localhost:8080/api/orders"
echo "  curl -i localhost:8080/public/anything"
echo "Ctrl-C stops the demo."
wait
