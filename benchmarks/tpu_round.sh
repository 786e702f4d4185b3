#!/usr/bin/env bash
# One round of xlakit's accelerator measurements, in ONE command on the accelerator machine (a start costs minutes
# of its budget), from the project's root, outputs under $OUT (default ./tpu-round):
#   1. the five teaching notebooks top to bottom on the device (benchmarks/notebooks_on_device.py);
#   2. issue 33's bars side by side (benchmarks/accelerator.py --repeats 1);
#   3. peak()'s cost next to the compile (benchmarks/memory_attribution.py);
#   4. (stage "capture", not in the default set) whether an executable compiled with the cache's dump capture loads
#      as fast, compiling nothing and writing nothing (benchmarks/capture_reload.py), and what the dump adds to a
#      compile, plain and dump compiles taking turns (benchmarks/dump_cost.py).
# Prepare on the development machine first (wheels the TPU image lacks; see ../shared/tpu/README.md):
#   EXTRA_WHEELS="anywidget psygnal" bash ../shared/tpu/prepare.sh
# then, with the device tool:  OUT=$OUT/round bash benchmarks/tpu_round.sh  (the archive lands beside the folder,
# so inside the tool's $OUT only when the folder is one level below it)
# STAGES picks the stages (default all three); each has its own time limit (seconds: NB_S, ACC_S, MEM_S) so that a
# slow stage leaves time for the rest. One device call runs at most 600 s: the defaults fit two calls, e.g.
#   STAGES="notebooks memory" bash benchmarks/tpu_round.sh ;  STAGES=accelerator bash benchmarks/tpu_round.sh
set -uo pipefail
OUT=${OUT:-$PWD/tpu-round}
mkdir -p "$OUT"
if [[ -f .tpu-kit/setup.sh ]]; then
  EXTRA_INDEX_PKGS="nbclient ipykernel nbformat ipywidgets ${EXTRA_INDEX_PKGS:-}" . .tpu-kit/setup.sh
fi
export PYTHONPATH=${PYTHONPATH:-}:$PWD
STAGES=${STAGES:-notebooks accelerator memory}
{
  for stage in $STAGES; do
    echo "== $(date -u +%FT%TZ) $stage"
    case $stage in
      notebooks) timeout "${NB_S:-300}" python3 benchmarks/notebooks_on_device.py "$OUT/notebooks" ;;
      accelerator) timeout "${ACC_S:-540}" python3 benchmarks/accelerator.py --repeats 1 --budget-s $(( ${ACC_S:-540} - 120 )) \
                     --out "$OUT/accelerator.json" ;;
      memory) timeout "${MEM_S:-240}" python3 benchmarks/memory_attribution.py --layers 150,500 ;;
      capture) timeout "${CAP_S:-200}" python3 benchmarks/capture_reload.py --out "$OUT/capture_reload.json"
               timeout "${DUMP_S:-240}" python3 benchmarks/dump_cost.py --layers 150 --repeats 3 ;;
      *) echo "unknown stage $stage (notebooks, accelerator, memory, capture)" ;;
    esac
  done
  echo "== $(date -u +%FT%TZ) done"
} 2>&1 | tee -a "$OUT/round.log"
# The device tool brings back a few files: one archive of everything.
tar -czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && echo "archive: $OUT.tgz"
