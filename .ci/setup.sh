# Sourced by ./run.sh, ./test.sh and bench/run.sh: installs the Debian 12 packages that are
# missing and builds with CMake + Ninja (+ ccache).
PACKAGES=(build-essential cmake ninja-build ccache pkg-config clang-format python3 python3-yaml curl
          libboost1.81-all-dev nlohmann-json3-dev libspdlog-dev doctest-dev libhiredis-dev
          redis-server redis-tools redis-sentinel libssl-dev libjwt-dev libgoogle-perftools-dev
          libnghttp2-dev
          # tests: real clients and proxies, the dashboard in a headless browser, fuzzing
          haproxy apache2-utils openssl chromium python3-websocket python3-websockets clang
          libfuzzer-14-dev nghttp2-client python3-h2 python3-grpcio)

install_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "==> installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_deps() { install_packages "${PACKAGES[@]}"; }

# build DIR [extra cmake args...]
build() {
    local dir=$1
    shift
    cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
    cmake --build "$dir" -j "$(nproc)"
}

# start_redis: a throwaway redis-server on a free loopback port; sets REDIS_PORT and REDIS_PID
# and stops it when the calling script exits.
start_redis() {
    REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --logfile /dev/null &
    REDIS_PID=$!
    trap 'kill $REDIS_PID 2>/dev/null' EXIT
    for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "redis-server did not start" >&2
    return 1
}
