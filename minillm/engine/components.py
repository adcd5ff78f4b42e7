"""Your engine (lesson 13): the exercises' parts assembled into one engine that serves.

`LLM(components="exercises")` (and `python -m minillm serve --components exercises`)
builds the engine from the learner's code instead of the answer key's, part by part:

    part               exercise                   where it runs in the engine
    scheduler          ex06 (or ex03)             every step's plan
    block allocator    ex05 BlockAllocator        every KV block handed out or freed
    block table        ex05 BlockTable            how many blocks a sequence's next tokens need
    flat batch         ex04 build_flat_batch      the step's tokens, positions and slots
    attention          ex04 attend_per_sequence   every layer's attention
    decode kernel      ex07 paged_decode_kernel   decode-only steps, on CUDA
    ordering policy    ex09 priority_key          who waits least (policy="priority")
    prefix hashing     ex10 block_hashes          prefix-cache lookups (enable_prefix_caching)
    stream bridge      ex12 text_delta            the server's streamed pieces
    latency metrics    ex08 latency_report        the run's TTFT/TPOT/ITL/E2E report

Which package is "the learner" follows the grading (`MINILLM_EXERCISES_FROM`: "exercises",
or "solutions" to stand in for a learner who solved everything). A part whose stub still
raises `NotImplementedError` — or whose module does not import — falls back to the answer
key's, and `learner_parts()` says so, part by part (`format_report` as text; the
engine logs it when it is built).

The adapters between an exercise's contract and the engine's live in `adapters.py`. Each
one also runs the answer key's version beside the learner's and raises `ComponentError`
— naming the part, the engine step, the request and the token, with the step's batch —
at the first place they disagree, so a wrong part is found where it goes wrong, not as
garbage text later. It is an `InvariantError`: the engine stops the run instead of
failing one request.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass

import torch

from minillm.engine.checks import InvariantError

logger = logging.getLogger("minillm.components")

CHOICES = ("answer-key", "exercises")


@dataclass(frozen=True)
class Part:
    """One part of the engine and the exercise that can provide it."""

    key: str              # "scheduler"
    title: str            # "scheduler"
    exercise: str         # "ex06_chunked_scheduler"
    names: tuple          # what the learner writes: "Class.method" or "function"
    role: str             # where it runs in the engine


PARTS = (
    Part("scheduler", "scheduler", "ex06_chunked_scheduler",
         ("ChunkedPrefillScheduler.schedule_decodes",
          "ChunkedPrefillScheduler.schedule_prefill_chunks",
          "ChunkedPrefillScheduler.admit_waiting"), "every step's plan"),
    Part("allocator", "block allocator", "ex05_block_allocator",
         ("BlockAllocator.__init__", "BlockAllocator.num_free", "BlockAllocator.allocate",
          "BlockAllocator.share", "BlockAllocator.free", "BlockAllocator.ref_count"),
         "every KV block handed out or freed"),
    Part("block_table", "block table", "ex05_block_allocator", ("BlockTable.blocks_needed",),
         "how many blocks a sequence's next tokens need"),
    Part("flat_batch", "flat batch", "ex04_flat_batch", ("build_flat_batch",),
         "the step's tokens, positions, slots and logits rows"),
    Part("attention", "attention", "ex04_flat_batch", ("attend_per_sequence",),
         "every layer's attention"),
    Part("decode_kernel", "decode kernel", "ex07_paged_decode_kernel",
         ("paged_decode_kernel",), "decode-only steps' attention, on CUDA"),
    Part("policy", "ordering policy", "ex09_priority_aging",
         ("effective_priority", "priority_key"), "the order of the queue (policy='priority')"),
    Part("prefix_hashing", "prefix hashing", "ex10_prefix_hashing",
         ("hash_block", "block_hashes"), "prefix-cache lookups (enable_prefix_caching=True)"),
    Part("stream_bridge", "stream bridge", "ex12_stream_bridge", ("text_delta",),
         "the server's streamed text pieces"),
    Part("metrics", "latency metrics", "ex08_metrics_and_tuning",
         ("request_latencies", "percentile", "latency_report"), "the run's latency report"),
)
EX03 = Part("scheduler", "scheduler", "ex03_iteration_scheduler",
            ("IterationScheduler.worst_case_blocks", "IterationScheduler.can_admit",
             "IterationScheduler.schedule"), "every step's plan")


@dataclass
class PartStatus:
    """Whose code runs for one part, and why."""

    part: Part
    yours: bool
    reason: str           # why the answer key's runs, or what of yours runs
    target: str = "exercises"
    used: bool = True     # False: this configuration does not run the part at all

    @property
    def exercise_number(self) -> str:
        return self.part.exercise[2:4]

    @property
    def whose(self) -> str:
        """'yours', 'answer key' (yours is not done) or 'not used' (not in this run)."""
        return "yours" if self.yours else "answer key" if self.used else "not used"


class ComponentError(InvariantError):
    """A learner's part disagreed with the answer key inside the running engine.

    `step` is the engine step being run (the index the step would have had in
    `llm.trace.steps`; it is not recorded, since it did not finish), `request_id` the
    request concerned (None for a whole step's plan), `batch` that step's batch as
    (request id, first position, tokens) rows once it was planned, `where` what ran
    outside the steps (the server's stream, the latency report)."""

    def __init__(self, part: str, step: int | None, detail: str, request_id: str | None = None,
                 batch: list | None = None, where: str | None = None):
        self.part, self.step, self.request_id, self.detail = part, step, request_id, detail
        self.batch = batch or []
        at = (f"at engine step {step}" if step is not None
              else f"in {where}" if where else "before the first step")
        who = f", request {request_id!r}" if request_id is not None else ""
        super().__init__(f"the answer key and your {part} disagree {at}{who}: {detail}")


# ---------------------------------------------------------------------- which parts are yours

def _resolve(module, dotted: str):
    obj = module
    for name in dotted.split("."):
        obj = inspect.getattr_static(obj, name) if isinstance(obj, type) else getattr(obj, name)
    if isinstance(obj, property):
        obj = obj.fget
    return getattr(obj, "fn", obj)          # a @triton.jit kernel keeps its function in .fn


def unfinished(module, names) -> list[str]:
    """The names whose code still raises the stub's NotImplementedError (or are missing)."""
    left = []
    for dotted in names:
        try:
            source = inspect.getsource(_resolve(module, dotted))
        except (AttributeError, TypeError, OSError):
            left.append(dotted)
            continue
        if "raise NotImplementedError" in source:
            left.append(dotted)
    return left


def part_status(part: Part, target: str, *, device: torch.device | None = None,
                config=None) -> PartStatus:
    """Is `part` the learner's in package `target`? (imports the exercise module)"""
    try:
        module = importlib.import_module(f"{target}.{part.exercise}")
    except Exception as error:                     # a syntax error, a bad import, ...
        return PartStatus(part, False, f"{target}/{part.exercise}.py does not import "
                          f"({type(error).__name__}: {error})", target)
    left = unfinished(module, part.names)
    not_done = (f"not done yet in {target}/{part.exercise}.py: {', '.join(left)} still "
                "raise NotImplementedError") if left else ""
    why_not = _not_used_here(part, device, config)
    if why_not:
        return PartStatus(part, False, "; ".join(filter(None, [why_not, not_done])), target,
                          used=False)
    if left:
        return PartStatus(part, False, not_done, target)
    return PartStatus(part, True, f"{target}/{part.exercise}.py runs {part.role}", target)


def _not_used_here(part: Part, device, config) -> str | None:
    """Why a finished part still does not run in this engine (None: it does)."""
    if part.key == "decode_kernel" and (device is None or device.type != "cuda"):
        return ("needs CUDA: on a CPU the Triton interpreter would run it for every layer of "
                "every decode step, far too slowly for the whole model (lesson 07's check "
                "runs it in the interpreter)")
    if config is None:
        return None
    if part.key == "decode_kernel" and config.block_size & (config.block_size - 1):
        return f"the kernel needs a power-of-two block_size, and this engine has {config.block_size}"
    if part.key == "policy" and config.policy != "priority":
        return f"policy={config.policy!r} was asked for; policy='priority' runs yours"
    if part.key == "prefix_hashing" and not config.enable_prefix_caching:
        return "prefix caching is off; enable_prefix_caching=True runs yours"
    return None


def learner_parts(target: str | None = None, *, device=None, config=None) -> list[PartStatus]:
    """One PartStatus per part of the engine (the scheduler from ex06, else ex03)."""
    from minillm.grading import exercise_target
    target = target or exercise_target()
    statuses = [part_status(p, target, device=device, config=config) for p in PARTS]
    scheduler = statuses[0]
    if not scheduler.yours:
        ex03 = part_status(EX03, target, device=device, config=config)
        if ex03.yours and config is not None and config.enable_chunked_prefill:
            ex03 = PartStatus(EX03, False, "ex06 is not done and ex03's scheduler does not "
                              "chunk prompts (enable_chunked_prefill=True): " + scheduler.reason,
                              target)
        if ex03.yours:
            statuses[0] = ex03
        else:
            statuses[0] = PartStatus(scheduler.part, False,
                                     f"{scheduler.reason}; and ex03: {ex03.reason}", target)
    allocator = next(s for s in statuses if s.part.key == "allocator")
    if allocator.yours and config is not None and config.enable_prefix_caching:
        module = importlib.import_module(f"{target}.{allocator.part.exercise}")
        if not _can_revive(module.BlockAllocator):
            allocator.yours = False
            allocator.reason = ("prefix caching revives a freed cached block by its id: your "
                                "BlockAllocator needs the stub's `free_list` deque and "
                                "`ref_counts` list (or a take(block_id) of its own)")
    return statuses


def _can_revive(allocator_class) -> bool:
    try:
        probe = allocator_class(2)
    except Exception:                  # the engine's own checks will name what is wrong
        return True
    return hasattr(probe, "take") or (hasattr(probe, "free_list") and hasattr(probe, "ref_counts"))


def format_report(statuses: list[PartStatus]) -> str:
    """The parts table as text: one line per part."""
    width = max(len(s.part.title) for s in statuses)
    lines = [f"{s.part.title:<{width}}  {s.part.exercise[:4]}  {s.whose:<10}  {s.reason}"
             for s in statuses]
    mine, used = sum(s.yours for s in statuses), sum(s.used for s in statuses)
    return (f"your engine: {mine} of the {used} parts it uses are yours\n" + "\n".join(lines))


# ---------------------------------------------------------------------- building the engine

def check_config(config) -> None:
    """Refuse, before loading anything, the knobs the learner's parts cannot serve."""
    if config.components == "answer-key":
        return
    problems = []
    if config.scheduling != "continuous":
        problems.append(f"scheduling={config.scheduling_name!r} (your scheduler replaces it: "
                        "leave scheduling='continuous')")
    if config.speculative_config:
        problems.append("speculative_config (the exercises' schedulers do not plan guesses: "
                        "drop it)")
    if config.preemption_mode != "recompute":
        problems.append(f"preemption_mode={config.preemption_mode!r} (the exercises preempt by "
                        "recompute: use 'recompute')")
    if config.executor not in ("auto", "eager"):
        problems.append(f"executor={config.executor!r} (your attention runs in the readable "
                        "model: use 'auto' or 'eager')")
    if config.attention_backend != "auto":
        problems.append(f"attention_backend={config.attention_backend!r} (your attention is the "
                        "backend: use 'auto')")
    if problems:
        raise ValueError("components='exercises' cannot run with " + "; ".join(problems))


def build_learner_engine(config, model, device, *, vocab_size: int, tokenizer=None,
                         eos_token_ids=(), extra=None, target: str | None = None):
    """The engine made of the learner's parts (and the answer key's where a part is not
    done). `config` is complete (`for_model` done); `model` is the readable LlamaModel."""
    from dataclasses import replace

    from minillm.engine import adapters
    from minillm.engine.engine import LLMEngine
    from minillm.model.model_runner import ModelRunner

    statuses = learner_parts(target, device=device, config=config)
    mine = {s.part.key: s for s in statuses}
    modules = {s.part.key: importlib.import_module(f"{s.target}.{s.part.exercise}")
               for s in statuses if s.yours}
    monitor = adapters.Monitor()
    if "policy" in modules:
        config = replace(config, policy=adapters.checked_policy(modules["policy"], monitor))
    kv = adapters.kv_manager_class(modules, monitor)(
        config.num_kv_blocks, config.block_size,
        enable_prefix_caching=config.enable_prefix_caching)
    scheduler_module = modules.get("scheduler")
    scheduler_cls = adapters.checked_scheduler(
        _learner_scheduler_class(scheduler_module, mine["scheduler"].part), monitor)
    scheduler = scheduler_cls(config, kv)
    backend = adapters.LearnerAttention(modules.get("attention"), modules.get("decode_kernel"),
                                        monitor)
    runner = adapters.learner_runner_class(ModelRunner, modules.get("flat_batch"), monitor) \
        .allocate(model, config, backend, device)
    report = {s.part.key: s.whose for s in statuses}
    engine = LLMEngine(runner, scheduler, config, vocab_size=vocab_size, tokenizer=tokenizer,
                       eos_token_ids=eos_token_ids,
                       extra={**(extra or {}), "components": report})
    monitor.engine = engine
    engine.components = statuses
    engine.text_delta = adapters.checked_text_delta(modules.get("stream_bridge"))
    engine.latency_report = adapters.checked_latency_report(modules.get("metrics"))
    logger.warning("%s", format_report(statuses))
    return engine


def _learner_scheduler_class(module, part: Part):
    """The learner's scheduler class, or the answer key's ContinuousScheduler."""
    if module is None:
        from minillm.scheduler.continuous import ContinuousScheduler
        return ContinuousScheduler
    return getattr(module, part.names[0].split(".")[0])


def latency_report(engine, trace=None) -> dict:
    """P50/P90/P99 of TTFT, TPOT, ITL and E2E of a run: the learner's ex08 when it is done."""
    trace = trace if trace is not None else engine.trace
    report = getattr(engine, "latency_report", None)
    if report is None:
        from minillm.engine.adapters import checked_latency_report
        report = checked_latency_report(None)
    return report(trace)


def first_divergence(ours: list, theirs: list) -> dict | None:
    """Where two runs' outputs (RequestOutputs, same prompts, same order) first differ:
    {"request": index, "request_id": ours', "token": index, "ours": id, "theirs": id}, or
    None when every request got the same tokens. A run that stopped early differs where
    the other one still has a token (its own there is None)."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        mine, key = a.outputs[0].token_ids, b.outputs[0].token_ids
        for t in range(max(len(mine), len(key))):
            x = mine[t] if t < len(mine) else None
            y = key[t] if t < len(key) else None
            if x != y:
                return {"request": i, "request_id": a.request_id, "token": t, "ours": x,
                        "theirs": y}
    return None
