"""minillm_cpu — a faster way to run minillm's model on a CPU, kept out of the answer key.

minillm (`minillm/`) is the readable engine: pure PyTorch, as a learner reads it. This
package plugs into it from outside and changes nothing in it. Installed beside minillm,
it declares an entry point (`pyproject.toml`, group "minillm.plugins") that minillm
calls once (`minillm/model/executor.py: load_plugins`); `register` then adds

    minillm.model.executor.EXECUTORS["cpu"]   the "cpu" executor (`executor.py`)
    minillm.attention.BACKENDS["cpp"]         paged attention in C++ (`cpp_attention.py`)

and `LLM(executor="auto")` uses the executor on a CPU where its kernels compile.
`MINILLM_EXECUTOR=eager` keeps it out; `LLM(executor="eager")` skips it for one engine.

    executor.py        what it swaps when a model is loaded
    modules.py         C++ stand-ins for RMSNorm, SiLU·up and RoPE
    packed_linear.py   nn.Linear with its weight packed for faster matmul kernels
    fused_stack.py     all of a small step's layers in one C++ call
    cpp_attention.py   the "cpp" attention backend
    kernels.py         the kernels' Python side (ctypes), `build.py` compiles `csrc/`
    malloc.py          glibc's allocator, tuned for engine steps

What each piece buys, and how it was measured: `docs/performance.md`.
"""


def _cpp_attention():
    from minillm_cpu.cpp_attention import CppAttention    # compiles the kernels: on demand
    return CppAttention()


def register() -> None:
    """Add the "cpu" executor and the "cpp" attention backend to minillm's registries."""
    from minillm.attention import BACKENDS
    from minillm.model.executor import EXECUTORS
    from minillm_cpu.executor import CpuExecutor
    EXECUTORS["cpu"] = CpuExecutor
    BACKENDS["cpp"] = _cpp_attention
