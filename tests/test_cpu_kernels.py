"""The C++ CPU kernels (`minillm_cpu/csrc/`) against the PyTorch lines they replace.

Each element-wise kernel must give what `model.py`'s PyTorch code gives — in float32 up
to the order of a sum, in bf16 up to one bf16 unit (the PyTorch code rounds after every
op, the kernels where it does). The attention kernel is checked against the
per-sequence reference in `test_attention.py`. Here also: the build is cached, only one
OpenMP runtime ends up in the process, and what the kernels cannot do is a clear error
or, for `attention_backend="auto"`, a quiet fallback to the sparse PyTorch backend.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.model.executor import resolve_executor
from minillm.model.llama import RMSNorm, RotaryEmbedding
from minillm_cpu import build
from minillm_cpu.cpp_attention import CppAttention
import minillm_cpu.kernels as cpu_kernels

pytestmark = pytest.mark.unit

DTYPES = [torch.float32, torch.bfloat16]
# float32: a few units in the last place of values near 1-10; bf16: one bf16 unit
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=1e-2, rtol=2 ** -7)}


@pytest.fixture(scope="module")
def kernels():
    return cpu_kernels.load()


def random(gen, *shape, dtype, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), hidden=st.sampled_from([8, 64, 576, 1000]),
       first_layer=st.booleans(), seed=st.integers(0, 1000))
def test_add_rms_norm_is_the_residual_add_then_rmsnorm(kernels, dtype, rows, hidden,
                                                       first_layer, seed):
    gen = torch.Generator().manual_seed(seed)
    x = None if first_layer else random(gen, rows, hidden, dtype=dtype)
    residual = random(gen, rows, hidden, dtype=dtype, scale=3.0)
    norm = RMSNorm(hidden, 1e-5)
    norm.weight.data = random(gen, hidden, dtype=dtype)
    want_residual = residual if x is None else residual + x                # the PyTorch lines
    want = norm(want_residual)
    given_residual = residual.clone()
    got, got_residual = kernels.add_rms_norm(x, given_residual, norm.weight, norm.eps)
    assert got_residual is given_residual                                  # updated in place
    assert torch.equal(got_residual, want_residual)                        # one add: exact
    torch.testing.assert_close(got, want, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), heads=st.integers(1, 12), head_dim=st.sampled_from([8, 64, 128]),
       seed=st.integers(0, 1000))
def test_rope_is_the_rotation_in_place(kernels, dtype, rows, heads, head_dim, seed):
    gen = torch.Generator().manual_seed(seed)
    rope = RotaryEmbedding(head_dim, 10000.0, 4096)(
        torch.randint(0, 4096, (rows,), generator=gen), dtype)
    cos, sin_signed = rope.cos, rope.sin_signed
    qkv = random(gen, rows, heads + 2, head_dim, dtype=dtype)   # rotate a view, like llama.py
    want = rope(qkv[:, :heads])
    untouched = qkv[:, heads:].clone()
    got = kernels.rope_(qkv[:, :heads], cos, sin_signed)
    assert got.data_ptr() == qkv.data_ptr()
    torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    assert torch.equal(qkv[:, heads:], untouched)                # the V heads are not rotated


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), width=st.sampled_from([4, 96, 1536]), seed=st.integers(0, 1000))
def test_silu_and_mul_is_silu_of_gate_times_up(kernels, dtype, rows, width, seed):
    gen = torch.Generator().manual_seed(seed)
    gate_up = random(gen, rows, 2 * width, dtype=dtype, scale=4.0)
    gate, up = gate_up.split(width, dim=-1)
    torch.testing.assert_close(kernels.silu_and_mul(gate_up), F.silu(gate) * up,
                               **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_and_mul_where_exp_saturates(kernels, dtype):
    """Gates past exp_approx's clamp (|x| > 87), at it and near 0, in a row whose width
    is not a multiple of the kernel's tile of 64: finite, and F.silu's values."""
    ends = torch.tensor([-1e4, -200.0, -100.0, -88.5, -87.0, -20.0, -1e-3, 0.0, 1e-3, 20.0,
                         86.5, 87.5, 100.0, 1e4])
    gate = ends.repeat(10)[:133].reshape(1, 133).to(dtype)             # 133 = 2 tiles + 5
    up = torch.linspace(-3, 3, 133).reshape(1, 133).to(dtype)
    got = kernels.silu_and_mul(torch.cat([gate, up], dim=1))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, F.silu(gate) * up, **TOLERANCE[dtype])


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 16), out_features=st.sampled_from([1, 16, 100, 960]),
       in_features=st.sampled_from([1, 7, 576, 1536]), with_bias=st.booleans(),
       seed=st.integers(0, 1000))
def test_matmul_few_rows_is_x_times_w_transposed(kernels, rows, out_features, in_features,
                                                 with_bias, seed):
    """Any 1-16 rows, any width (not only multiples of the 16-column panel), with and
    without bias. The bound is the worst case of summing `in_features` products in some
    order in float32, K·2⁻²⁴·Σ|x·w| (Higham's γ_K), against a float64 reference: any
    wrong weight, column or row is far outside it, no reordering of the sum can reach it."""
    gen = torch.Generator().manual_seed(seed)
    x = random(gen, rows, in_features, dtype=torch.float32)
    weight = random(gen, out_features, in_features, dtype=torch.float32, scale=0.05)
    bias = random(gen, out_features, dtype=torch.float32) if with_bias else None
    got = kernels.matmul_few_rows(x, kernels.pack_panels(weight), out_features, bias)
    want = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    bound = (in_features + 1) * 2.0 ** -24 * (x.double().abs() @ weight.double().abs().T
                                              + (0 if bias is None else bias.double().abs()))
    assert got.shape == (rows, out_features) and got.dtype == torch.float32
    assert ((got.double() - want).abs() <= bound + 1e-30).all()


def test_matmul_few_rows_gives_a_row_the_same_bits_alone_or_in_a_batch(kernels):
    """Each output is one sum over k in order, whatever the row count: batch-invariant."""
    gen = torch.Generator().manual_seed(0)
    x = random(gen, 16, 576, dtype=torch.float32)
    panels = kernels.pack_panels(random(gen, 200, 576, dtype=torch.float32))
    together = kernels.matmul_few_rows(x, panels, 200)
    for rows in (1, 5, 16):
        assert torch.equal(kernels.matmul_few_rows(x[:rows], panels, 200), together[:rows])
    assert torch.equal(kernels.matmul_few_rows(x[7:8], panels, 200), together[7:8])


def test_matmul_few_rows_rejects_what_it_cannot_multiply(kernels):
    panels = kernels.pack_panels(torch.ones(20, 8))
    assert panels.shape == (2, 8, 16) and panels[1, :, 4:].eq(0).all()    # zeros past N
    for x in (torch.ones(17, 8), torch.ones(0, 8), torch.ones(2, 9),   # rows, rows, K,
              torch.ones(2, 8).bfloat16()):                              # dtype
        with pytest.raises(ValueError, match="matmul_few_rows multiplies"):
            kernels.matmul_few_rows(x, panels, 20)
    with pytest.raises(TypeError, match="float32 weight"):
        kernels.pack_panels(torch.ones(4, 4, dtype=torch.bfloat16))
    assert torch.equal(kernels.matmul_few_rows(torch.ones(2, 8), panels, 20),  # still works
                       torch.full((2, 20), 8.0))


def test_the_library_is_built_once_and_then_found_in_the_cache(kernels):
    path, seconds = build.build_library()
    assert path == kernels.path and path.exists() and seconds == 0.0
    assert path.parent == build.library_dir()
    assert build.cache_key(build.find_compiler()) in path.name
    command = build.compile_command("g++", path)
    assert "-fopenmp" in command and "-march=native" in command and "-ffast-math" not in command


def test_one_openmp_runtime_serves_torch_and_the_kernels(kernels):
    """The library links libgomp.so.1, which must resolve to the copy PyTorch loaded:
    two runtimes would each start a thread per core and fight over them."""
    torch.randn(256, 256) @ torch.randn(256, 256)
    runtimes = cpu_kernels.openmp_runtimes()
    assert len(runtimes) == 1, runtimes


def executor(name, dtype=torch.float32, config=None) -> str:
    return resolve_executor(name, torch.device("cpu"), dtype, config or _Config(9, 3, 576)).name


def test_without_a_compiler_auto_falls_back_and_cpu_says_what_to_do(monkeypatch, tmp_path,
                                                                  cpu_executor):
    cpu_kernels.load.cache_clear()
    try:
        with monkeypatch.context() as patched:
            patched.setenv("CXX", str(tmp_path / "no-such-compiler"))
            patched.setenv("MINILLM_CACHE_DIR", str(tmp_path))
            reason = cpu_kernels.unavailable_reason()
            assert reason and "no-such-compiler" in reason
            assert executor("auto") == "eager"
            with pytest.raises(ValueError, match="executor='eager'"):
                executor("cpu")
            with pytest.raises(ValueError, match="attention_backend='sparse'"):
                CppAttention()
    finally:
        cpu_kernels.load.cache_clear()
    assert cpu_kernels.unavailable_reason() is None          # and back, once CXX is restored


class _Config:
    def __init__(self, heads, kv_heads, hidden):
        self.num_attention_heads, self.num_key_value_heads, self.hidden_size = heads, kv_heads, hidden


@pytest.mark.parametrize("heads, kv_heads, hidden, dtype, why", [
    (9, 3, 9 * 64, torch.float16, "float16"),                 # a dtype without kernels
    (4, 2, 4 * 24, torch.float32, "head sizes"),              # head_dim 24 is not built
    (9, 2, 9 * 64, torch.float32, "multiple"),                # heads do not group
])
def test_a_model_the_kernels_cannot_run(kernels, heads, kv_heads, hidden, dtype, why,
                                        cpu_executor):
    config = _Config(heads, kv_heads, hidden)
    assert executor("auto", dtype, config) == "eager"
    with pytest.raises(ValueError, match=why):
        executor("cpu", dtype, config)
    assert executor("cpu") == "cpu" and executor("auto") == "cpu"


def test_bad_calls_are_errors_not_crashes(kernels):
    from minillm.model.batch import build_attention_metadata
    meta = build_attention_metadata([1], [3], [[0]], [2], 4, torch.device("cpu"))
    q, k, cache = torch.randn(1, 4, 24), torch.randn(1, 2, 24), torch.zeros(1, 4, 2, 24)
    with pytest.raises(ValueError, match="head sizes"):        # head_dim 24: no instance
        kernels.paged_attention(q, k, k, cache, cache.clone(), meta, 0.2, 4096)
    q, k, cache = torch.randn(1, 9, 8), torch.randn(1, 2, 8), torch.zeros(1, 4, 2, 8)
    with pytest.raises(ValueError, match="multiple"):          # 9 query heads, 2 K/V heads
        kernels.paged_attention(q, k, k, cache, cache.clone(), meta, 0.2, 4096)
    with pytest.raises(TypeError, match="one dtype"):
        kernels.paged_attention(q[:, :4], k, k, cache.bfloat16(), cache.bfloat16(), meta, 0.2, 0)
    with pytest.raises(TypeError, match="float32"):
        kernels.silu_and_mul(torch.ones(2, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="contiguous"):
        kernels.add_rms_norm(None, torch.ones(4, 6).t(), torch.ones(4), 1e-5)
