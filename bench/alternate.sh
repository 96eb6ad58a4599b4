#!/usr/bin/env bash
# Before/after, side by side: run one benchmark alternately from a worktree of REV ("before") and from
# this checkout ("after"), ROUNDS times, on the same machine in one script.
#
#   bench/alternate.sh REV ROUNDS bench.dual_write_bench --rows 1000000 --runs 3
#   SAME_BENCH=1 bench/alternate.sh ...   (the "before" side runs this checkout's bench/ too)
#
# Each run imports the package of its own tree (the benchmark runs from that tree's root); both use this
# checkout's .venv and LOGSTORE_CACHE (default: .cache here).
set -euo pipefail
rev=$1 rounds=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
before=$(mktemp -d /tmp/logstore-before.XXXXXX)
trap 'git -C "$here" worktree remove --force "$before" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach --force "$before" "$rev" >/dev/null
# SAME_BENCH=1: both sides run this checkout's benchmark code (bench/), each with its own package
if [ "${SAME_BENCH:-0}" = 1 ]; then cp -r "$here/bench/." "$before/bench/"; fi
export LOGSTORE_CACHE=${LOGSTORE_CACHE:-$here/.cache}
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    tree=$here
    [ "$side" = before ] && tree=$before
    echo "=== $side ($(git -C "$tree" rev-parse --short HEAD)), round $round"
    (cd "$tree" && "$here/.venv/bin/python" -m "$@")
  done
done
