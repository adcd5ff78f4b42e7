"""docs/performance.md, change 7: the peak memory of a lesson's kernel. Runs notebooks top
to bottom and prints each one's VmHWM.
    .venv/bin/python scripts/experiments/lesson_peak_rss.py lessons/05_paged_kv_cache.ipynb [...]

Each notebook runs in a fresh kernel (nbclient, from `lessons/`, as the notebook tests
run them) with one cell appended that reads the kernel's own peak resident memory
(`VmHWM` in /proc/self/status). Processes the notebook starts (lesson 12's server) are
not counted."""
import sys
import time

import nbformat
from nbclient import NotebookClient

PEAK_CELL = ("print([line for line in open('/proc/self/status')"
             " if line.startswith('VmHWM')][0].split()[1])")


def peak_rss_gb(path: str) -> tuple[float, float]:
    """(peak kernel RSS in GB, seconds) of running the notebook at `path`."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
    start = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": "lessons"}}).execute()
    return int(nb.cells[-1].outputs[0]["text"]) / 1e6, time.perf_counter() - start


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    for notebook in sys.argv[1:]:
        gb, seconds = peak_rss_gb(notebook)
        print(f"{notebook}: peak kernel RSS {gb:.2f} GB ({seconds:.0f} s)", flush=True)
