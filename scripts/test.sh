#!/usr/bin/env bash
# Install everything (if needed) and run the whole test suite: unit, model, kernels,
# exercises, notebooks, browser. Extra arguments go to pytest (e.g. -m unit, -x, -k name).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
