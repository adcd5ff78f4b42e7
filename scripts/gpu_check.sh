#!/usr/bin/env bash
# The course on a GPU, checked end to end; on a CPU-only machine, a labelled CPU mode.
#
#   bash scripts/gpu_check.sh OUT_DIR                      every part this machine can run
#   bash scripts/gpu_check.sh OUT_DIR --only kernel_tests,kernel_bench
#   bash scripts/gpu_check.sh OUT_DIR --skip lessons
#   bash scripts/gpu_check.sh OUT_DIR --cpu                the CPU mode even on a GPU machine
#   bash scripts/gpu_check.sh OUT_DIR --carry DIR          an offline machine: wheels and the
#                                                          model brought along (scripts/gpu_carry.sh)
#
# Results: OUT_DIR/summary.json (every check: passed / failed / skipped, and why),
# results.json, junit.xml, log.txt, plots.zip, lessons.zip. See scripts/gpu_check/__init__.py.
#
# Which Python: $PYTHON if set; else .venv/bin/python (the README's set-up, done); else,
# when a package registry answers, the README's set-up is run first (scripts/setup.sh: on
# a CUDA machine pip brings the CUDA build of the pinned torch); else (an offline machine,
# such as a lent GPU) the python3 on PATH with the torch and Triton it already has.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

registry_answers() {
  timeout 8 python3 -c "import socket; socket.create_connection(('pypi.org', 443), timeout=5)" \
    >/dev/null 2>&1
}

if [ -n "${PYTHON:-}" ]; then
  :
elif [ -x .venv/bin/python ]; then
  PYTHON=.venv/bin/python
elif [ "${GPU_CHECK_OFFLINE:-0}" != 1 ] && registry_answers; then
  echo "gpu_check: no .venv yet and a package registry answers: the README's set-up first"
  bash scripts/setup.sh
  PYTHON=.venv/bin/python
else
  PYTHON=$(command -v python3)
  echo "gpu_check: no .venv and no package registry: using $PYTHON and what it has installed"
fi
export PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m gpu_check "$@"
