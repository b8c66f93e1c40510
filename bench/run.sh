#!/usr/bin/env bash
# Proxy overhead benchmark (one run, interleaved rounds, medians and ratios):
#   direct      wrk -> nginx upstream (return 200 "ok")
#   nginx-proxy wrk -> nginx (1 worker, keep-alive upstream pool) -> upstream
#   rategate    wrk -> rategate (1 thread, no limiters) -> upstream
# With --limits also: rategate-4-layer (global, route, user over 1,000 users, ip on Redis) and
# nginx-limit-req (the same four keys as local limit_req zones), limits far above the load.
# With --tls also: nginx-https and rategate-https (same certificate), keep-alive and with one
# TLS handshake per request (Connection: close).
# With --limits --leases N also rategate-4-layer-leased: global and route leased N at a time.
# Usage: bench/run.sh [-r ROUNDS] [-d SECONDS] [-c CONNECTIONS] [--limits [--leases N]] [--tls]
#        bench/run.sh --flood [-r ROUNDS] [-d SECONDS]   (one user flooding two instances:
#        bench/flood_bench.py, the over-limit cache on and off beside nginx limit_req)
#        bench/run.sh --cluster [-r ROUNDS] [-d SECONDS]  (the 4-layer chain on one Redis and on
#        a 3-master Redis Cluster: bench/cluster_bench.py)
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh
install_deps
install_packages wrk nginx-light openssl
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [[ "${1:-}" == "--flood" ]]; then
    shift
    exec python3 bench/flood_bench.py --build-dir build "$@"
fi
if [[ "${1:-}" == "--cluster" ]]; then
    shift
    exec python3 bench/cluster_bench.py --build-dir build "$@"
fi
exec python3 bench/proxy_bench.py --build-dir build "$@"
