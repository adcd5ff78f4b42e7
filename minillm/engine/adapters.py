"""Adapters between the exercises' contracts and the engine's (lesson 13's engine).

Each exercise has the smallest contract that teaches its idea — `build_flat_batch` takes
plain lists, `attend_per_sequence` dense K/V, `BlockAllocator` has no `take`. The engine
needs more. The code that bridges the two is here, in the answer key, not in the
learner's files. Every adapter also **checks**: it runs the answer key's version of the
same part on the same input and raises `ComponentError` at the first disagreement,
naming the part, the engine step, the request and the token, with the step's batch.

    Monitor               where the engine is: the step being run, its requests
    checked_scheduler     the learner's scheduler, its plan checked against the engine's rules
    LearnerAllocator      the learner's BlockAllocator behind the engine's allocator interface
    kv_manager_class      a KVCacheManager with the learner's allocator, block table, hashing
    learner_runner_class  a ModelRunner whose flat batch is the learner's
    LearnerAttention      an attention backend running the learner's attention (and kernel)
    checked_policy, checked_text_delta, checked_latency_report   the small ones
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from minillm.attention.base import AttentionBackend
from minillm.attention.reference import attend_per_sequence as reference_attention
from minillm.attention.reference import write_kv
from minillm.engine.components import ComponentError
from minillm.engine.sequence import SequenceStatus
from minillm.kv_cache.manager import KVCacheManager
from minillm.kv_cache.prefix_cache import PrefixCache

# How far the learner's attention may stray from the answer key's, per dtype (absolute,
# relative). Both sum the same products in another order; see docs/performance.md.
ATTENTION_TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-2),
                       torch.float16: (5e-3, 5e-3)}


class Monitor:
    """The engine's position, shared by the adapters so an error can say where it is."""

    def __init__(self):
        self.engine = None            # set once the engine is built
        self.request_id = None        # the request the KV manager is serving right now
        self.rows: list[tuple[str, int, int]] = []   # this step's batch, once planned:
        #                                        (request id, first position, tokens) per row
        self.layer = 0
        self.failed: ComponentError | None = None    # the first divergence of this run
        self._failed_run = None

    @property
    def step(self) -> int | None:
        """The step being run (the index it would get in `llm.trace.steps`)."""
        if self.engine is None:
            return None
        trace = self.engine.trace
        return trace.num_dropped_steps + len(trace.steps)

    @property
    def broken(self) -> bool:
        """This run already diverged (a new `generate` starts a new run, checked again)."""
        run = None if self.engine is None else self.engine.trace
        return self.failed is not None and self._failed_run is run

    def fail(self, part: str, detail: str, request_id: str | None = None):
        """Raise the ComponentError — once a run: the clean-up after it (aborting the other
        requests, freeing their blocks) must not hide the first divergence under another."""
        if not self.broken:
            self.failed = ComponentError(part, self.step, detail, request_id, list(self.rows))
            self._failed_run = None if self.engine is None else self.engine.trace
            raise self.failed


KV = object()      # `_call`'s default: the request the KV manager is serving


def _call(monitor: Monitor, part: str, what: str, fn, *args, request_id=KV):
    """Run a learner's function; an exception of theirs becomes a ComponentError naming
    `request_id` (None: a whole step's work; by default the KV manager's request)."""
    try:
        return fn(*args)
    except ComponentError:
        raise
    except Exception as error:
        if monitor.broken:                      # cleaning up after the first divergence
            return None
        who = monitor.request_id if request_id is KV else request_id
        monitor.fail(part, f"{what} raised {type(error).__name__}: {error}", who)


# ---------------------------------------------------------------------- scheduler (ex03/ex06)

def checked_scheduler(base: type, monitor: Monitor) -> type:
    """`base` (the learner's Scheduler subclass, or the answer key's) whose every plan is
    checked. With prefix caching, a waiting request gets its cached prefix when the
    learner's admission loop reaches it in the queue — as the answer key's own
    `admit_waiting` does — and gives it back if it is not admitted (the exercises'
    schedulers leave the prefix cache to the engine)."""
    from minillm.scheduler.continuous import ContinuousScheduler
    handles_prefixes = issubclass(base, ContinuousScheduler)

    class Checked(base):
        def schedule(self, now: float):
            monitor.rows, self._held = [], []           # no batch yet this step
            plan = _call(monitor, "scheduler", f"{base.__name__}.schedule()",
                         super().schedule, now, request_id=None)
            if plan is None:                            # this run already diverged
                raise monitor.failed
            self._settle_prefixes()
            check_plan(self, plan, monitor)
            return plan

        def ordered_waiting(self, now: float):
            queue = super().ordered_waiting(now)
            if handles_prefixes or self.kv.prefix_cache is None:
                return queue
            return PrefixAcquiringQueue(queue, self)

        def _acquire_prefix(self, seq) -> None:
            if seq.status is SequenceStatus.WAITING and not seq.block_table \
                    and not seq.num_computed_tokens:
                first = seq.first_scheduled_time is None
                self._held.append((seq, self.kv.acquire_cached_prefix(seq), first))

        def _settle_prefixes(self) -> None:
            for seq, cached, first in getattr(self, "_held", []):
                if seq.status is SequenceStatus.WAITING and cached:
                    self.kv.free(seq)                 # not admitted: give the prefix back
                    seq.num_computed_tokens = 0
                elif seq.status is SequenceStatus.RUNNING and first:
                    seq.num_cached_tokens = cached
            self._held = []

    Checked.__name__ = Checked.__qualname__ = base.__name__
    Checked.name = getattr(base, "name", base.__name__)
    return Checked


class PrefixAcquiringQueue(list):
    """The waiting queue, in order, that hands each request its cached prefix just before
    the admission loop looks at it — so only the request being considered holds one."""

    def __init__(self, queue, scheduler):
        super().__init__(queue)
        self.scheduler = scheduler

    def __iter__(self):
        for seq in list.__iter__(self):
            self.scheduler._acquire_prefix(seq)
            yield seq


def check_plan(scheduler, plan, monitor: Monitor) -> None:
    """The rules every plan keeps, whoever wrote the scheduler."""
    config, block_size = scheduler.config, scheduler.kv.block_size
    total = sum(row.num_new_tokens for row in plan.scheduled)
    if total > config.max_num_batched_tokens:
        monitor.fail("scheduler", f"the plan runs {total} tokens, over the token budget "
                     f"max_num_batched_tokens={config.max_num_batched_tokens}")
    if len(scheduler.running) > config.max_num_seqs:
        monitor.fail("scheduler", f"{len(scheduler.running)} sequences are running, more than "
                     f"the max_num_seqs={config.max_num_seqs} batch slots")
    seen = set()
    for row in plan.scheduled:
        seq, n = row.seq, row.num_new_tokens
        if id(seq) in seen:
            monitor.fail("scheduler", "the plan has two rows for one sequence", seq.request_id)
        seen.add(id(seq))
        if seq.status is not SequenceStatus.RUNNING or seq not in scheduler.running:
            monitor.fail("scheduler", "the plan runs a sequence that is not running (call "
                         "start_running before planning it)", seq.request_id)
        if not 1 <= n <= seq.num_uncomputed_tokens:
            monitor.fail("scheduler", f"the plan runs {n} tokens of a sequence with "
                         f"{seq.num_uncomputed_tokens} uncomputed", seq.request_id)
        if len(seq.block_table) * block_size < seq.num_computed_tokens + n:
            monitor.fail("scheduler", f"the plan runs tokens {seq.num_computed_tokens}…"
                         f"{seq.num_computed_tokens + n - 1} but the sequence's "
                         f"{len(seq.block_table)} blocks hold {len(seq.block_table) * block_size}"
                         " (allocate before planning)", seq.request_id)


# ---------------------------------------------------------------------- allocator (ex05)

class LearnerAllocator:
    """The learner's BlockAllocator behind the engine's interface (`kv_cache/allocator.py`),
    each answer checked against a reference count the adapter keeps itself."""

    part = "block allocator"

    def __init__(self, learner, num_blocks: int, monitor: Monitor):
        self.learner, self.num_blocks, self.monitor = learner, num_blocks, monitor
        self.users = [0] * num_blocks           # the adapter's own count, to check with
        self.free_count = num_blocks
        self.on_reuse = None                    # the prefix cache's eviction hook
        self._agree(None, "BlockAllocator(num_blocks)")

    @property
    def num_free(self) -> int:
        return self.free_count

    def ref_count(self, block_id: int) -> int:
        return self.users[block_id]

    def is_free(self, block_id: int) -> bool:
        return self.users[block_id] == 0

    def allocate(self) -> int:
        block = _call(self.monitor, self.part, "allocate()", self.learner.allocate)
        if isinstance(block, bool) or not isinstance(block, int) \
                or not 0 <= block < self.num_blocks:
            self._fail(f"allocate() returned {block!r}, not a block id 0…{self.num_blocks - 1}")
        if self.users[block]:
            self._fail(f"allocate() handed out block {block}, which {self.users[block]} "
                       "sequence(s) still use: one block given out twice")
        self.users[block], self.free_count = 1, self.free_count - 1
        self._agree(block, "allocate()")
        if self.on_reuse is not None:
            self.on_reuse(block)
        return block

    def share(self, block_id: int) -> None:
        _call(self.monitor, self.part, f"share({block_id})", self.learner.share, block_id)
        self.users[block_id] += 1
        self._agree(block_id, f"share({block_id})")

    def free(self, block_id: int) -> None:
        _call(self.monitor, self.part, f"free({block_id})", self.learner.free, block_id)
        self.users[block_id] -= 1
        self.free_count += self.users[block_id] == 0
        self._agree(block_id, f"free({block_id})")

    def take(self, block_id: int) -> None:
        """Revive one free cached block (prefix caching): the exercise has no such method,
        so the adapter moves it out of the learner's free list itself."""
        if hasattr(self.learner, "take"):
            _call(self.monitor, self.part, f"take({block_id})", self.learner.take, block_id)
        else:
            _call(self.monitor, self.part, f"reviving block {block_id} from free_list",
                  self._revive_by_hand, block_id)
        self.users[block_id], self.free_count = 1, self.free_count - 1
        self._agree(block_id, f"take({block_id})")

    def _revive_by_hand(self, block_id: int) -> None:
        self.learner.free_list.remove(block_id)
        self.learner.ref_counts[block_id] = 1

    def allocate_contiguous(self, count: int):
        raise RuntimeError("contiguous reservations (static batching) are the answer key's "
                           "alone: components='exercises' refuses scheduling='static'")

    def _agree(self, block_id: int | None, what: str) -> None:
        free = _call(self.monitor, self.part, "num_free", lambda: self.learner.num_free)
        if free != self.free_count:
            self._fail(f"after {what}, num_free says {free} but {self.free_count} blocks are free")
        if block_id is not None:
            count = _call(self.monitor, self.part, f"ref_count({block_id})",
                          self.learner.ref_count, block_id)
            if count != self.users[block_id]:
                self._fail(f"after {what}, ref_count({block_id}) says {count} but the block "
                           f"has {self.users[block_id]} user(s)")

    def _fail(self, detail: str):
        self.monitor.fail(self.part, detail, self.monitor.request_id)


# ---------------------------------------------------------------------- the KV manager (ex05, ex10)

def kv_manager_class(modules: dict, monitor: Monitor) -> type:
    """A KVCacheManager with whichever of the learner's KV parts are done."""
    allocator = modules.get("allocator")
    table = modules.get("block_table")
    hashing = modules.get("prefix_hashing")

    class LearnerPrefixCache(PrefixCache):
        def hash_blocks(self, token_ids):
            want = super().hash_blocks(token_ids)
            got = _call(monitor, "prefix hashing", "block_hashes()",
                        hashing.block_hashes, list(token_ids), self.block_size)
            if list(got) != want:
                first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                             min(len(got), len(want)))
                monitor.fail("prefix hashing", f"block_hashes gives {len(got)} hashes for "
                             f"{len(token_ids)} tokens (block_size {self.block_size}) where the "
                             f"answer key gives {len(want)}; the first to differ is block "
                             f"{first} (tokens {first * self.block_size}…"
                             f"{(first + 1) * self.block_size - 1})", monitor.request_id)
            return want

    class LearnerKVCacheManager(KVCacheManager):
        if allocator is not None:
            allocator_class = staticmethod(
                lambda n: LearnerAllocator(allocator.BlockAllocator(n), n, monitor))
        if hashing is not None:
            prefix_cache_class = LearnerPrefixCache

        def blocks_needed(self, seq, num_new_tokens: int) -> int:
            monitor.request_id = seq.request_id
            want = super().blocks_needed(seq, num_new_tokens)
            if table is None:
                return want
            view = table.BlockTable(self.allocator, self.block_size)
            view.blocks, view.num_tokens = list(seq.block_table), seq.num_computed_tokens
            got = _call(monitor, "block table", f"blocks_needed({num_new_tokens})",
                        view.blocks_needed, num_new_tokens)
            if got != want:
                monitor.fail("block table", f"blocks_needed({num_new_tokens}) with "
                             f"{seq.num_computed_tokens} tokens in {len(seq.block_table)} blocks "
                             f"of {self.block_size} says {got}, the answer is {want}",
                             seq.request_id)
            return got

        def allocate(self, seq, num_new_tokens: int) -> None:
            monitor.request_id = seq.request_id
            super().allocate(seq, num_new_tokens)

        def free(self, seq) -> None:
            monitor.request_id = seq.request_id
            super().free(seq)

        def acquire_cached_prefix(self, seq) -> int:
            monitor.request_id = seq.request_id
            return super().acquire_cached_prefix(seq)

        def on_tokens_computed(self, seq) -> None:
            monitor.request_id = seq.request_id
            super().on_tokens_computed(seq)

    return LearnerKVCacheManager


# ---------------------------------------------------------------------- flat batch (ex04)

FLAT_FIELDS = ("input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens")


def learner_runner_class(base: type, flat: object | None, monitor: Monitor) -> type:
    """A ModelRunner that notes each step's requests and, when ex04's `build_flat_batch`
    is done, runs the step on the learner's flat batch (checked field by field)."""

    class LearnerModelRunner(base):
        def flat_batch(self, plan):
            want = super().flat_batch(plan)
            monitor.rows = [(row.seq.request_id, row.seq.num_computed_tokens, row.num_new_tokens)
                            for row in plan.scheduled]
            monitor.layer = 0
            if flat is None:
                return want
            requests = []
            for row in plan.scheduled:
                seq = row.seq
                end = seq.num_computed_tokens + row.num_new_tokens
                requests.append((seq.token_ids_between(0, end), seq.num_computed_tokens,
                                 list(seq.block_table)))
            got = _call(monitor, "flat batch", "build_flat_batch()", flat.build_flat_batch,
                        requests, self.block_size, request_id=None)
            return self._checked(got, want)

        def _checked(self, got: dict, want):
            expected = {"input_ids": want.input_ids, "positions": want.positions,
                        "slot_mapping": want.meta.slot_mapping,
                        "query_start_loc": want.meta.query_start_loc,
                        "seq_lens": want.meta.seq_lens}
            for name in FLAT_FIELDS:
                mine = got.get(name) if isinstance(got, dict) else None
                if mine is None:
                    monitor.fail("flat batch", f"build_flat_batch returned no {name!r}")
                _first_difference(monitor, name, torch.as_tensor(mine).tolist(),
                                  expected[name].tolist(), want.meta.query_lens)
            last_rows = torch.as_tensor(got.get("logits_indices", [])).tolist()
            wanted_last = [want.meta.query_start_loc[r + 1].item() - 1 for r in want.sampling_rows]
            mine_last = [last_rows[r] if r < len(last_rows) else None for r in want.sampling_rows]
            if mine_last != wanted_last:
                i = next(i for i, (a, b) in enumerate(zip(mine_last, wanted_last)) if a != b)
                request = monitor.rows[want.sampling_rows[i]][0]
                monitor.fail("flat batch", f"logits_indices gives row {mine_last[i]} as the "
                             f"request's last row; it is row {wanted_last[i]}", request)
            device = want.input_ids.device
            as_key = lambda name: torch.as_tensor(got[name]).to(device, expected[name].dtype)  # noqa: E731
            meta = replace(want.meta, slot_mapping=as_key("slot_mapping"),
                           query_start_loc=as_key("query_start_loc"), seq_lens=as_key("seq_lens"))
            return replace(want, input_ids=as_key("input_ids"), positions=as_key("positions"),
                           meta=meta)

    return LearnerModelRunner


def _first_difference(monitor: Monitor, name: str, got: list, want: list,
                      query_lens: list[int]) -> None:
    """Fail at the first entry of a flat-batch field that differs: which request, which token."""
    if got == want:
        return
    if len(got) != len(want):
        monitor.fail("flat batch", f"{name} has {len(got)} entries, it should have {len(want)}")
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    per_token = name in ("input_ids", "positions", "slot_mapping")
    if not per_token:                          # per sequence (seq_lens) or boundaries
        b = min(i, len(monitor.rows) - 1) if name == "seq_lens" else max(i - 1, 0)
        monitor.fail("flat batch", f"{name}[{i}] is {got[i]}, it should be {want[i]}",
                     monitor.rows[b][0])
    b, start = 0, 0
    while start + query_lens[b] <= i:          # the sequence that owns flat row i
        start += query_lens[b]
        b += 1
    request, first_position, _ = monitor.rows[b]
    monitor.fail("flat batch", f"{name}[{i}] is {got[i]}, it should be {want[i]} (token at "
                 f"position {first_position + i - start})", request)


# ---------------------------------------------------------------------- attention (ex04, ex07)

class LearnerAttention(AttentionBackend):
    """The learner's attention as the engine's backend: ex07's kernel for decode-only
    steps (when it runs here), ex04's per-sequence attention for the rest, the answer key's
    reference when neither is done. Every layer's output is checked against the reference."""

    name = "exercises"

    def __init__(self, flat: object | None, kernel: object | None, monitor: Monitor):
        self.flat, self.kernel, self.monitor = flat, kernel, monitor

    def attend(self, q, k, v, k_cache, v_cache, meta, plan, scale):
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        want = reference_attention(q, k_cache, v_cache, meta, scale)   # [T, Hq, D]
        layer, self.monitor.layer = self.monitor.layer, self.monitor.layer + 1
        if self.kernel is not None and meta.all_decode:
            part, fn = "decode kernel", self.kernel.paged_decode_attention
            args = (q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)
        elif self.flat is not None:
            part, fn = "attention", self.flat.attend_per_sequence
            keys, values = dense_kv(k_cache, v_cache, meta)
            args = (q, keys, values, meta.query_start_loc, meta.seq_lens, scale)
        else:
            return want
        got = _call(self.monitor, part, f"layer {layer}: {fn.__name__}()", fn, *args,
                    request_id=None)
        self._check(part, got, want, meta, layer)
        return got.to(want.dtype)

    def _check(self, part: str, got, want, meta, layer: int) -> None:
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            self.monitor.fail(part, f"returned {getattr(got, 'shape', type(got).__name__)}, "
                              f"not a tensor of shape {tuple(want.shape)}")
        atol, rtol = ATTENTION_TOLERANCE.get(want.dtype, (1e-4, 1e-4))
        error = (got.float() - want.float()).abs() - rtol * want.float().abs()   # [T, Hq, D]
        bad = (error > atol) | got.isnan()
        if not bad.any():
            return
        row = int(bad.flatten(1).any(dim=1).nonzero()[0])
        b = int(torch.searchsorted(meta.query_start_loc[1:].cpu(), row, right=True))
        request, first_position, _ = self.monitor.rows[b]
        position = first_position + row - int(meta.query_start_loc[b])
        worst = (got[row].float() - want[row].float()).abs().max().item()
        self.monitor.fail(part, f"layer {layer}: the attention output of the token at position "
                          f"{position} is off by up to {worst:.3g} (allowed: {atol:g} + "
                          f"{rtol:g}·|value|)", request)


def dense_kv(k_cache, v_cache, meta) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's keys and values gathered from the paged cache into dense
    [B, L, Hkv, D] tensors (L: the longest seq_len; shorter ones padded with zeros)."""
    block_size, longest = meta.block_size, max(meta.seq_lens_list)
    shape = (meta.num_seqs, longest, *k_cache.shape[2:])
    keys, values = k_cache.new_zeros(shape), v_cache.new_zeros(shape)
    for b, seq_len in enumerate(meta.seq_lens_list):
        positions = torch.arange(seq_len, device=k_cache.device)
        blocks = meta.block_tables[b, positions // block_size].long()
        keys[b, :seq_len] = k_cache[blocks, positions % block_size]
        values[b, :seq_len] = v_cache[blocks, positions % block_size]
    return keys, values


# ---------------------------------------------------------------------- policy, stream, metrics

STREAMING, REPORT = "a streamed answer", "the latency report"

def checked_policy(module, monitor: Monitor):
    """The learner's priority_key (ex09) as the engine's policy, each key checked."""
    from minillm.scheduler.policies import priority_key

    def learner_priority_key(seq, now: float, aging_rate: float) -> tuple:
        got = _call(monitor, "ordering policy", "priority_key()", module.priority_key,
                    seq, now, aging_rate, request_id=seq.request_id)
        want = priority_key(seq, now, aging_rate)
        if not _same(got, want):
            monitor.fail("ordering policy", f"priority_key gives {got!r} where the answer key "
                         f"gives {want!r} (priority {seq.priority}, waited "
                         f"{max(0.0, now - seq.arrival_time):.3f} s, aging_rate {aging_rate})",
                         seq.request_id)
        return got

    return learner_priority_key


def checked_text_delta(module):
    """The server's `text_delta`: the learner's ex12 one when it is done, checked."""
    from minillm.serving.responses import text_delta
    if module is None:
        return text_delta

    def learner_text_delta(sent: str, text: str, finished: bool) -> str:
        want = text_delta(sent, text, finished)
        call = f"text_delta(sent=…{sent[-20:]!r}, text=…{text[-20:]!r}, finished={finished})"
        try:
            got = module.text_delta(sent, text, finished)
        except Exception as error:
            raise ComponentError("stream bridge", None, f"{call} raised "
                                 f"{type(error).__name__}: {error}", where=STREAMING) from None
        if got != want:
            raise ComponentError("stream bridge", None, f"{call} gives {got!r}; the piece to "
                                 f"send is {want!r}", where=STREAMING)
        return got

    return learner_text_delta


def answer_key_latency_report(trace) -> dict:
    from minillm.sim.metrics import percentiles, request_metrics
    return {name: percentiles(values) for name, values in request_metrics(trace).items()}


def checked_latency_report(module):
    """The run's latency report: the learner's ex08 `latency_report` when done, checked."""
    if module is None:
        return answer_key_latency_report

    def learner_latency_report(trace) -> dict:
        want = answer_key_latency_report(trace)
        try:
            got = module.latency_report(trace)
        except Exception as error:
            raise ComponentError("latency metrics", None, f"latency_report raised "
                                 f"{type(error).__name__}: {error}", where=REPORT) from None
        for name, by_q in want.items():
            for q, value in by_q.items():
                mine = got.get(name, {}).get(q) if isinstance(got, dict) else None
                if mine is None or not _same(mine, value):
                    raise ComponentError("latency metrics", None, f"latency_report gives "
                                         f"{name} P{q} = {mine!r}; from the trace it is {value!r}",
                                         where=REPORT)
        return got

    return learner_latency_report


def _same(a, b) -> bool:
    """Equal, floats within rounding (NaN equals NaN), tuples entry by entry."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b
