#!/usr/bin/env bash
# Prepare what an OFFLINE GPU machine needs for scripts/gpu_check.sh, into .gpu-carry/
# (git-ignored). Run it here, on a machine with the course's .venv and a package registry.
#
#   bash scripts/gpu_carry.sh            # for a machine whose python3 is 3.12 (the lent H200)
#   GPU_PYTHON=3.11 bash scripts/gpu_carry.sh
#
# What it writes:
#   .gpu-carry/call1/wheels/*.whl        the course's packages that such a machine lacks
#                                         (its image has torch, triton, numpy, pytest, ...)
#   .gpu-carry/call1/model/…gguf.part1   the model's GGUF file cut in two, because one call
#   .gpu-carry/call2/model/…gguf.part2   may carry 64 MiB in all and the file is 94 MiB
#   .gpu-carry/call*/model/MANIFEST.json name, size, sha256 and parts of the file
#
# The versions are those of this .venv (requirements.txt's pins and what they pulled in).
# Left out on purpose: torch and triton (gigabytes; the machine's own CUDA builds are
# used and their versions recorded), debugpy and jedi (ipykernel and IPython run without
# them), widgetsnbextension and jupyterlab-widgets (browser-side only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
GPU_PYTHON=${GPU_PYTHON:-3.12}
LIMIT=$((64 << 20))          # bytes one call may carry, the working tree included
MARGIN=$((3 << 20))          # room for the working tree to grow between now and the call
NAMES="transformers regex gguf platformdirs nbformat fastjsonschema jsonschema
  jsonschema-specifications referencing rpds-py nbclient jupyter-client jupyter-core
  traitlets pyzmq tornado ipykernel comm ipython ipython-pygments-lexers matplotlib-inline
  nest-asyncio2 pexpect ptyprocess prompt-toolkit wcwidth stack-data asttokens executing
  pure-eval ipywidgets"

[ -x "$PY" ] || { echo "gpu_carry: no .venv here; run 'make setup' first" >&2; exit 1; }
rm -rf .gpu-carry
mkdir -p .gpu-carry/call1/wheels .gpu-carry/call1/model .gpu-carry/call2/model

pins=$("$PY" - $NAMES <<'EOF'
import importlib.metadata as md, sys
print(" ".join(f"{n}=={md.version(n)}" for n in sys.argv[1:]))
EOF
)
echo "gpu_carry: downloading wheels for Python $GPU_PYTHON (manylinux x86-64): $pins"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$GPU_PYTHON" \
  --implementation cp "${platforms[@]}" -d .gpu-carry/call1/wheels $pins 2>&1 \
  | { grep -v 'is ignored: it is neither a file nor a directory' || true; }

gguf=$("$PY" -c "from minillm.model.weights_cache import find_smollm2_gguf; print(find_smollm2_gguf())")
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null \
       | awk '{s += $1} END {print s + 0}')
wheels=$(du -sb .gpu-carry/call1/wheels | cut -f1)
total=$(stat -c %s "$gguf")
first=$((LIMIT - MARGIN - tree - wheels))
second=$((total - first))
if [ "$first" -le 0 ] || [ $((second + tree + MARGIN)) -gt "$LIMIT" ]; then
  echo "gpu_carry: wheels ($wheels B) + model ($total B) + tree ($tree B) do not fit in two" \
       "calls of $LIMIT B each" >&2
  exit 1
fi
name=$(basename "$gguf")
head -c "$first" "$gguf" > ".gpu-carry/call1/model/$name.part1"
tail -c "$second" "$gguf" > ".gpu-carry/call2/model/$name.part2"
sha=$(sha256sum "$gguf" | cut -d' ' -f1)
printf '{"file": "%s", "bytes": %d, "sha256": "%s", "parts": ["%s.part1", "%s.part2"]}\n' \
  "$name" "$total" "$sha" "$name" "$name" \
  | tee .gpu-carry/call1/model/MANIFEST.json > .gpu-carry/call2/model/MANIFEST.json

for call in call1 call2; do
  echo "gpu_carry: .gpu-carry/$call: $(du -sh .gpu-carry/$call | cut -f1) (+ the working tree, $((tree >> 10)) KiB)"
done
cat <<'EOF'
gpu_carry: done. With the device tool, two calls back to back (the second within the
machine's warm window, so that what the first left in /tmp is still there):
  run(carry=[".gpu-carry/call1"], timeout_s=420, command=
      "mkdir -p /tmp/carry && cp -r .gpu-carry/call1/. /tmp/carry/ &&
       bash scripts/gpu_check.sh $OUT --carry /tmp/carry --only kernel_tests,kernel_bench")
  run(carry=[".gpu-carry/call2"], timeout_s=560, command=
      "mkdir -p /tmp/carry && cp -r .gpu-carry/call2/. /tmp/carry/ &&
       bash scripts/gpu_check.sh $OUT --carry /tmp/carry --skip kernel_tests,kernel_bench")
EOF
