"""The engine loop: requests in, one scheduled step at a time, outputs out.

    add_request  → make_sequence: check and tokenize once → the Sequence waits for its
                   arrival time, then joins the scheduler's queue
    step()       → scheduler.schedule(now)      which sequences run, how many tokens each
                 → runner.execute(plan)          one forward (or the simulator's cost model)
                 → update                        append sampled tokens, check stop
                                                 conditions, finish sequences (their
                                                 blocks are freed), write one Trace row
                 → RequestOutputs for every request that got a token (streaming)

The engine does not know whether a real model or the simulator runs the step, nor
which scheduling policy decided it: that is what lets the lessons swap either one. It
talks to the scheduler only; the scheduler owns the KV cache manager.

**Failures stay where they happen.** Bad input is rejected in `add_request` with a
ValueError/TypeError naming the parameter, *before* anything is queued. A failure that
belongs to one request inside a step (its sampling, its detokenisation, its draft
tokens) finishes that request with `finish_reason="error"` and frees its blocks; the
others go on. `abort_request` is safe at any moment: called while a step runs (from a
callback, or another thread), it takes effect when the step ends.
"""

from __future__ import annotations

import bisect
import contextlib

from minillm.engine.checks import InvariantError, check_int, check_number
from minillm.engine.prompts import check_in_vocab, prompt_token_ids
from minillm.engine.runner import Runner
from minillm.engine.sequence import Sequence, SequenceStatus
from minillm.engine.speculative import propose_drafts, verify_drafts
from minillm.engine.trace import Trace, record_request, record_step
from minillm.outputs import EngineStats, RequestOutput, request_output
from minillm.sampling_params import SamplingParams, request_seed
from minillm.scheduler import Scheduler, SchedulerOutput

MAX_ARRIVAL_DELAY = 24 * 3600.0   # seconds: an arrival further ahead is surely a mistake


class LLMEngine:
    def __init__(self, runner: Runner, scheduler: Scheduler, config, *, vocab_size: int,
                 tokenizer=None, eos_token_ids: tuple[int, ...] = (), proposer=None,
                 extra: dict | None = None):
        """`config`: the complete `EngineConfig` (`minillm/config.py: build_engine` makes
        one); `extra`: what the Trace records beside its knobs (model name, device, ...)."""
        self.runner = runner
        self.scheduler = scheduler
        self.engine_config = config
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_model_len = config.max_model_len
        self.eos_token_ids = tuple(eos_token_ids)
        self.seed = config.seed
        self.config = {**config.to_dict(), **(extra or {})}    # the Trace's record of the run
        self.proposer = proposer                  # speculative decoding (speculative.py) or None
        self.trace = self._new_trace()
        self._pending: list[Sequence] = []        # added, arrival time still in the future
        self._live: dict[str, Sequence] = {}      # every unfinished request
        self._in_step = False
        self._deferred_aborts: list[str] = []     # abort_request calls made during a step

    def add_request(self, request_id: str, prompt, params: SamplingParams | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> None:
        """Queue a request. `prompt`: a string, {"prompt": text} or {"prompt_token_ids": [...]}."""
        self.add_sequence(self.make_sequence(request_id, prompt, params, arrival_time, priority))

    def make_sequence(self, request_id, prompt, params=None, arrival_time=None,
                      priority=0) -> Sequence:
        """Check one request and build its Sequence (nothing is queued here).

        Every check of a request happens here, once: its id, params, priority, arrival
        time, prompt tokens, stop tokens, and whether it can ever fit
        (`Scheduler.check_fits`).
        """
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id must be a non-empty str, got {request_id!r}")
        if request_id in self._live:
            raise ValueError(f"request_id {request_id!r} is already in use: pick a new id")
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        params = params.clone()                # checked again; later edits to yours are ignored
        priority = check_int("priority", priority, hint="lower values are served first")
        now = self.runner.now()
        if arrival_time is None:
            arrival_time = now
        arrival_time = check_number("arrival_time", arrival_time, 0.0,
                                    hint="seconds on the engine clock; None means now")
        if arrival_time > now + MAX_ARRIVAL_DELAY:
            raise ValueError(f"arrival_time {arrival_time} is more than a day after now "
                             f"({now:.3f} s on the engine clock, which starts at 0 with each "
                             "trace): give seconds on that clock, or None for now")
        text, token_ids = self.tokenize(prompt)
        check_in_vocab(params.stop_token_ids or [], self.vocab_size, "stop_token_ids")
        seq = Sequence(request_id=request_id, prompt_token_ids=token_ids, params=params,
                       arrival_time=arrival_time, priority=priority, prompt=text,
                       eos_token_ids=self.eos_token_ids)
        seq.sampling_seed = request_seed(params, self.seed, request_id)
        self.scheduler.check_fits(seq)
        return seq

    def add_sequence(self, seq: Sequence) -> None:
        """Queue a Sequence built by `make_sequence`."""
        if seq.request_id in self._live:
            raise ValueError(f"request_id {seq.request_id!r} is already in use: pick a new id")
        self._live[seq.request_id] = seq
        self.trace.add_request(record_request(seq))
        bisect.insort(self._pending, seq, key=lambda s: s.arrival_time)

    def tokenize(self, prompt) -> tuple[str | None, list[int]]:
        """A prompt → (text or None, token ids), every check included (`prompts.py`)."""
        return prompt_token_ids(prompt, self.tokenizer, self.vocab_size)

    def abort_request(self, request_id: str) -> bool:
        """Stop a request and free its KV blocks. False if it is unknown or done.

        During a step (a callback, another thread) the abort is applied when the step
        ends, so the step never sees a sequence vanish under it.
        """
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a str, got {type(request_id).__name__}")
        if request_id not in self._live:
            return False
        if self._in_step:
            self._deferred_aborts.append(request_id)
            return True
        seq = self._live.pop(request_id)
        if seq in self._pending:
            self._pending.remove(seq)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "abort"
        else:
            self.scheduler.abort(request_id)
        seq.finish_time = self.runner.now()
        self.trace.add_request(record_request(seq))
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self._live)

    def num_unfinished_requests(self) -> int:
        return len(self._live)

    def kv_usage(self):
        """Blocks in use, free, and token slots that hold a computed token (`KVUsage`)."""
        return self.scheduler.kv_usage()

    def stats(self) -> EngineStats:
        """Queue lengths and KV blocks right now (what a server's /metrics reports)."""
        usage = self.scheduler.kv_usage()
        return EngineStats(num_running=len(self.scheduler.running),
                           num_waiting=len(self.scheduler.waiting) + len(self._pending),
                           num_free_blocks=usage.blocks_free,
                           num_blocks=usage.blocks_used + usage.blocks_free)

    def start_new_trace(self) -> Trace:
        """Begin a fresh Trace on a clock restarted at 0.

        Requests still in the engine keep their place: their timestamps are moved to the
        new clock (a request due in 2 s is still due in 2 s), and the new trace lists them.
        """
        offset = self.runner.reset_clock()
        self.trace = self._new_trace()
        for seq in self._live.values():
            seq.shift_times(-offset)
            self.trace.add_request(record_request(seq))
        return self.trace

    def _new_trace(self) -> Trace:
        return Trace(config=self.config, max_steps=self.engine_config.max_trace_steps,
                     record_block_tables=self.engine_config.record_block_tables)

    def step(self) -> list[RequestOutput]:
        """Run one iteration; return outputs of requests that got a token or finished."""
        with self._stepping():
            now = self.runner.now()
            self._admit_arrivals(now)
            if not self.scheduler.has_unfinished():
                if not self._pending:
                    return []
                # idle until the next arrival — in slices, so an abort is not kept waiting
                due = self._pending[0].arrival_time
                self.runner.wait_until(min(due, now + self.runner.max_idle_wait))
                self._apply_deferred_aborts()          # an abort during the wait wins
                now = self.runner.now()
                self._admit_arrivals(now)
                if not self.scheduler.has_unfinished():
                    return []
            outputs = self._propose_drafts(now)
            plan = self.scheduler.schedule(now)
            if plan.is_empty:
                self._check_progress(plan)
                self._record_step(plan, now, now)
                return outputs
            tokens = self.runner.execute(plan)
            end = self.runner.now()
            outputs += self._update(plan, tokens, end)
            self._record_step(plan, now, end)
            return outputs

    @contextlib.contextmanager
    def _stepping(self):
        """While a step runs, `abort_request` only takes note; the aborts apply at the end."""
        self._in_step = True
        try:
            yield
        finally:
            self._apply_deferred_aborts()
            self._in_step = False

    def _apply_deferred_aborts(self) -> None:
        in_step, self._in_step = self._in_step, False
        aborts, self._deferred_aborts = self._deferred_aborts, []
        for request_id in aborts:
            self.abort_request(request_id)
        self._in_step = in_step

    def _check_progress(self, plan: SchedulerOutput) -> None:
        """An empty plan is legal only right after a preemption (nobody joins in that step);
        an engine that schedules nobody while work waits would loop forever: say so."""
        if not plan.preempted and (self.scheduler.running or self.scheduler.waiting):
            raise RuntimeError(
                f"{type(self.scheduler).__name__}.schedule() returned an empty plan with "
                f"{len(self.scheduler.running)} running and {len(self.scheduler.waiting)} "
                "waiting requests and no preemption: it must schedule at least one "
                "sequence, or the engine would spin forever")

    def _propose_drafts(self, now: float) -> list[RequestOutput]:
        """Speculative decoding: guess a few tokens for each greedy decoding sequence."""
        failed = []
        if self.proposer is None:
            return failed
        for seq in list(self.scheduler.running):
            try:
                seq.draft_token_ids = propose_drafts(self.proposer, seq, self.max_model_len)
            except InvariantError:
                raise
            except Exception as err:                 # this request fails, not the step
                failed.append(self._fail(seq, err, now))
        return failed

    def _admit_arrivals(self, now: float) -> None:
        while self._pending and self._pending[0].arrival_time <= now:
            self.scheduler.add(self._pending.pop(0))

    def _update(self, plan: SchedulerOutput, tokens: list, now: float) -> list[RequestOutput]:
        outputs = []
        for item, produced in zip(plan.scheduled, tokens):
            seq = item.seq
            if seq.is_finished:                  # aborted or failed earlier in this step
                continue
            try:
                if isinstance(produced, BaseException):
                    raise produced
                if self._advance(item, produced, now):
                    outputs.append(self.make_output(seq))
            except InvariantError:                # a part of the engine is wrong: stop the run
                raise
            except Exception as err:             # this request fails, not the step
                outputs.append(self._fail(seq, err, now))
        return outputs

    def _advance(self, item, produced: list[int], now: float) -> bool:
        """Apply one row's result; True if the request got a token."""
        seq = item.seq
        new_tokens = verify_drafts(item, produced)   # `produced` itself when nothing was guessed
        self.scheduler.tokens_computed(seq)
        for token in new_tokens:
            seq.append_token(token, now)
            reason = seq.check_stop(self.max_model_len)
            if reason is not None:
                self._finish(seq, reason, now)
                break
        return bool(new_tokens)

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        seq.status, seq.finish_reason, seq.finish_time = SequenceStatus.FINISHED, reason, now
        self.scheduler.finish(seq)
        self._live.pop(seq.request_id, None)
        self.trace.add_request(record_request(seq))

    def _fail(self, seq: Sequence, err: BaseException, now: float) -> RequestOutput:
        """End `seq` with finish_reason "error"; its blocks are freed, the others go on."""
        seq.error = f"{type(err).__name__}: {err}"
        seq.draft_token_ids = []
        if seq.status is SequenceStatus.RUNNING:
            self._finish(seq, "error", now)
        else:                                    # still queued: take it out of the queue
            self.scheduler.abort(seq.request_id)
            seq.finish_reason, seq.finish_time = "error", now
            self._live.pop(seq.request_id, None)
            self.trace.add_request(record_request(seq))
        return self.make_output(seq)

    def _record_step(self, plan: SchedulerOutput, start: float, end: float) -> None:
        holders = self.scheduler.kv_holders() if self.trace.record_block_tables else None
        self.trace.add_step(record_step(plan, start, end, num_waiting=len(self.scheduler.waiting),
                                        kv=self.scheduler.kv_usage(), holders=holders))

    def make_output(self, seq: Sequence) -> RequestOutput:
        return request_output(seq, self.tokenizer)
