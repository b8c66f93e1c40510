#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, integration, format).
#   ./test.sh              release build in build/, then a 5 s pass of each fuzz harness
#   ./test.sh --sanitize   AddressSanitizer + UBSan build in build-sanitize/
#   ./test.sh -R unit      extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")"
source .ci/setup.sh
install_deps

dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--sanitize" ]; then
    shift
    dir=build-sanitize
    args=(-DCMAKE_BUILD_TYPE=Debug -DRATEGATE_SANITIZE=ON -DCMAKE_CXX_FLAGS=-O1)
    export RATEGATE_SANITIZE=1
fi
build "$dir" "${args[@]}"
ctest --test-dir "$dir" --output-on-failure "$@"
# A short libFuzzer pass (clang build in build-fuzz/) after a full release run; .ci/run fuzzes
# longer on its own. RATEGATE_FUZZ_SECONDS=0 skips it.
fuzz_seconds=${RATEGATE_FUZZ_SECONDS:-5}
if [ "$dir" = build ] && [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
    tests/fuzz/run.sh "$fuzz_seconds"
fi
