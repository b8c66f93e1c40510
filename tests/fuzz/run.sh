#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang in build-fuzz/ and runs each for SECONDS (default 30).
# Each run starts from a temporary copy of tests/fuzz/corpus/NAME (or NAME without its fuzz_
# prefix), so the committed corpus is never modified. Prints executions/s and coverage per
# harness; exits 1 if any harness crashed, leaked, hit a sanitizer report, ran out of memory or
# timed out, after printing the reproducer.
#   tests/fuzz/run.sh 30
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
dir=build-fuzz

mkdir -p "$dir"
if ! { CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRATEGATE_FUZZ=ON && cmake --build "$dir" -j "$(nproc)"; } >"$dir/build.log" 2>&1; then
    tail -n 60 "$dir/build.log"
    echo "fuzz: FAILED: the harnesses did not build (log: $dir/build.log)"
    exit 1
fi

work=$(mktemp -d)  # under $TMPDIR (default /tmp)
failed=()
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# stat NAME LOG: the value of libFuzzer's final "stat::NAME: value" line.
stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }

for harness in "$dir"/tests/fuzz/fuzz_*; do
    [ -x "$harness" ] && [ -f "$harness" ] || continue
    name=$(basename "$harness")
    corpus=$work/$name/corpus
    artifacts=$work/$name/artifacts
    log=$work/$name/log
    mkdir -p "$corpus" "$artifacts"
    # Seeds: tests/fuzz/corpus/NAME (or NAME without its fuzz_ prefix).
    for seeds in "tests/fuzz/corpus/$name" "tests/fuzz/corpus/${name#fuzz_}"; do
        if [ -d "$seeds" ]; then cp -R "$seeds/." "$corpus/"; fi
    done
    dict=()
    if [ -f "tests/fuzz/$name.dict" ]; then dict=("-dict=tests/fuzz/$name.dict"); fi
    rc=0
    "$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus" >"$log" 2>&1 || rc=$?
    # The last status line ("#N DONE cov: C ft: F corp: ...") carries the coverage reached.
    cov=$(grep -E '^#[0-9]+' "$log" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -n 1 || true)
    echo "fuzz: $name: $(stat number_of_executed_units "$log") runs," \
        "$(stat average_exec_per_sec "$log") exec/s, ${cov:-cov: ? ft: ?}," \
        "$(ls "$corpus" | wc -l) corpus units, exit $rc"
    if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
        failed+=("$name")
        echo "---- $name failed; libFuzzer's report:"
        grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse|INITED|DONE)|^\s+NEW_FUNC' "$log" | tail -n 60 || true
        for f in "$artifacts"/*; do
            [ -f "$f" ] || continue
            echo "---- reproducer $f ($(wc -c <"$f") bytes); rerun: $harness $f"
            od -A x -t x1z -v "$f" | head -n 64
        done
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (logs and reproducers kept in $work)"
    exit 1
fi
rm -rf "$work"
echo "fuzz: every harness ran ${seconds}s clean"
