#!/usr/bin/env bash
# Install everything (if needed) and open the course in JupyterLab on lessons/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
extra=()
[ "$(id -u)" = 0 ] && extra+=(--ServerApp.allow_root=True)   # containers often run as root
echo "lab: starting JupyterLab on lessons/ — open the http://127.0.0.1:... URL printed below"
exec .venv/bin/jupyter lab --notebook-dir=lessons --ServerApp.ip=127.0.0.1 \
  --ServerApp.port="${PORT:-8888}" --no-browser "${extra[@]}" "$@"
