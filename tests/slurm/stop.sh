#!/usr/bin/env bash
# Stops the daemons tests/slurm/start.sh started for DIR (by their pid files) and removes DIR.
set -uo pipefail
DIR="${1:-${MEMSCOPE_SLURM_DIR:-/tmp/memscope-slurm}}"
for f in "$DIR"/slurmd*.pid "$DIR"/slurmctld.pid "$DIR"/munged.pid; do
  if [ -s "$f" ]; then
    pid="$(cat "$f")"
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
done
rm -rf "$DIR"
