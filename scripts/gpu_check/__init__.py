"""`bash scripts/gpu_check.sh OUT_DIR`: the course's GPU path, checked end to end in one go.

On a machine with a CUDA GPU (the **GPU mode**) it runs, each part under its own time
guard, within one overall budget (8 minutes after set-up):

    environment    versions against requirements.txt's pins, the device and dtype the
                   engine picks (bf16, or fp16 on a GPU without bf16), imports
    kernel_tests   tests/test_kernels.py, test_triton_engine.py, test_device.py compiled
                   for the GPU (bf16 cases included) against the PyTorch references
    kernel_bench   each kernel's achieved bandwidth against the measured copy bandwidth
                   (kernels/bench.py, plus the KV store)
    oracle         tests/test_engine_oracle.py on CUDA with the Triton backend: greedy
                   tokens = transformers for static, continuous, chunked, preempting,
                   swapping, prefix-cached and speculative runs
    lessons        lessons 06 and 07 top to bottom (nbclient, as tests/test_notebooks.py)
    decode_curve   the engine's decode tokens/s at batch 1, 2, 4, ..., 64, beside the
                   roofline ceiling measured on this GPU
    throughput     continuous vs static batching on the bench's skewed workload, and the
                   step-count ideal (static steps / continuous steps)
    chunked        P99 inter-token latency and TTFT with and without chunked prefill

Without a GPU (the **CPU mode**, printed as such and `"mode": "cpu"` in the JSON) the
same parts run at toy sizes where that is cheap, so the plumbing cannot rot: a smoke
subset of the kernel tests in Triton's interpreter, the measurements with the bench's
quick workloads; and the rest is listed as skipped, with the reason.

Everything lands in OUT_DIR as few files (a lent GPU machine sends back at most 8):
`summary.json` (every check: passed / failed / skipped and why; targets; headline
numbers), `results.json` (every number), `junit.xml` (the pytest runs), `log.txt`,
`plots.zip` (the bench's PNGs), `lessons.zip` (the executed notebooks, GPU mode).

Modules: `plan` (the parts and their time guards), `carry` (an offline machine's set-up:
carried wheels and model), `checks` (tests and lessons), `measure` (the numbers),
`section` (runs one part in a child process), `bundle` (the output files), and
`__main__` (the driver).
"""
