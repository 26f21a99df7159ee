#!/bin/sh
# Runs one fuzz target for SECS seconds (default 180) at low priority: a scratch corpus in
# work/TARGET grows, the committed seeds in corpus/TARGET are read only, crashes land in
# artifacts/TARGET. Usage: fuzz/run.sh TARGET [SECS] [extra libFuzzer flags...]
set -eu
cd "$(dirname "$0")"
target=$1
secs=${2:-180}
shift; [ $# -gt 0 ] && shift
mkdir -p "work/$target"
dict=
[ -f "dicts/$target.dict" ] && dict="-dict=dicts/$target.dict"
exec nice -n 15 cargo +nightly fuzz run --debug-assertions ${FUZZ_TARGET_DIR:+--target-dir "$FUZZ_TARGET_DIR"} \
    "$target" "work/$target" "corpus/$target" -- \
    -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 $dict "$@"
