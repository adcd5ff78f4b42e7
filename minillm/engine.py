"""The engine loop: requests in, one scheduled step at a time, outputs out.

    add_request  → a Sequence waits for its arrival time, then joins the scheduler's queue
    step()       → scheduler.schedule(now)      which sequences run, how many tokens each
                 → runner.execute(plan)          one forward (or the simulator's cost model)
                 → update                        append sampled tokens, check stop
                                                 conditions, free finished sequences' blocks,
                                                 write one Trace row
                 → RequestOutputs for every request that got a token (streaming)

The engine does not know whether a real model or the simulator runs the step, nor
which scheduling policy decided it: that is what lets the lessons swap either one.

Bad input is rejected in `add_request` with a ValueError/TypeError *before* anything
is queued, so a mistake never leaves half a request in the engine.
"""

from __future__ import annotations

from minillm.outputs import CompletionOutput, RequestMetrics, RequestOutput
from minillm.sampler import request_seed
from minillm.speculative import accept_drafts
from minillm.sampling_params import SamplingParams
from minillm.scheduler import Scheduler, SchedulerOutput
from minillm.sequence import Sequence, SequenceStatus
from minillm.trace import RequestRecord, ScheduledEntry, StepRecord, Trace


class LLMEngine:
    def __init__(self, runner, scheduler: Scheduler, *, vocab_size: int, max_model_len: int,
                 tokenizer=None, eos_token_id: int | None = None, seed: int = 0,
                 config: dict | None = None, proposer=None):
        self.runner = runner
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.eos_token_id = eos_token_id
        self.seed = seed
        self.config = dict(config or {})
        self.proposer = proposer                  # speculative decoding (speculative.py) or None
        self.trace = Trace(config=self.config)
        self._pending: list[Sequence] = []        # added, arrival time still in the future
        self._live: dict[str, Sequence] = {}      # every unfinished request

    # ------------------------------------------------------------------ requests
    def add_request(self, request_id: str, prompt, params: SamplingParams | None = None,
                    arrival_time: float | None = None, priority: int = 0) -> None:
        """Queue a request. `prompt`: a string or {"prompt_token_ids": [...]}."""
        seq = self.make_sequence(request_id, prompt, params, arrival_time, priority)
        self.scheduler.check_fits(seq)
        self._live[seq.request_id] = seq
        self.trace.requests[seq.request_id] = _request_record(seq)
        self._pending.append(seq)
        self._pending.sort(key=lambda s: s.arrival_time)

    def make_sequence(self, request_id, prompt, params, arrival_time, priority) -> Sequence:
        """Validate one request and build its Sequence (nothing is queued here)."""
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id must be a non-empty str, got {request_id!r}")
        if request_id in self._live:
            raise ValueError(f"request_id {request_id!r} is already in use")
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int, got {type(priority).__name__}")
        text, token_ids = self.tokenize(prompt)
        now = self.runner.now()
        seq = Sequence(request_id=request_id, prompt_token_ids=token_ids, params=params,
                       arrival_time=now if arrival_time is None else float(arrival_time),
                       priority=priority, prompt=text, eos_token_id=self.eos_token_id)
        seq.sampling_seed = request_seed(params, self.seed, request_id)
        return seq

    def tokenize(self, prompt) -> tuple[str | None, list[int]]:
        """A prompt → (text or None, token ids), with every check in one place."""
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt is empty: give at least one character")
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer: pass "
                                 "{'prompt_token_ids': [...]} instead of text")
            token_ids = list(self.tokenizer(prompt).input_ids)
            text = prompt
        elif isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            token_ids, text = prompt["prompt_token_ids"], prompt.get("prompt")
            if not isinstance(token_ids, (list, tuple)):
                raise TypeError("prompt_token_ids must be a list of ints")
            token_ids = list(token_ids)
        else:
            raise TypeError("a prompt is a str or a dict {'prompt_token_ids': [...]}, "
                            f"got {type(prompt).__name__}")
        if not token_ids:
            raise ValueError("prompt has no tokens: give at least one token id")
        for t in token_ids:
            if isinstance(t, bool) or not isinstance(t, int):
                raise TypeError(f"token ids must be ints, got {type(t).__name__}")
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"token id {t} is outside the vocabulary (0..{self.vocab_size - 1})")
        return text, token_ids

    def abort_request(self, request_id: str) -> bool:
        """Stop a request now and free its KV blocks. False if it is unknown or done."""
        seq = self._live.pop(request_id, None)
        if seq is None:
            return False
        if seq in self._pending:
            self._pending.remove(seq)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "abort"
        else:
            self.scheduler.abort(request_id)
        seq.finish_time = self.runner.now()
        self.trace.requests[request_id] = _request_record(seq)
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self._live)

    def start_new_trace(self) -> Trace:
        """Begin a fresh Trace (and a fresh clock when the engine is idle)."""
        if not self._live and hasattr(self.runner, "reset_clock"):
            self.runner.reset_clock()
        self.trace = Trace(config=self.config)
        return self.trace

    # ------------------------------------------------------------------ the loop
    def step(self) -> list[RequestOutput]:
        """Run one iteration; return outputs of requests that got a token or finished."""
        now = self.runner.now()
        self._admit_arrivals(now)
        if not self.scheduler.has_unfinished():
            if not self._pending:
                return []
            self.runner.wait_until(self._pending[0].arrival_time)   # idle until the next arrival
            now = self.runner.now()
            self._admit_arrivals(now)
        self._propose_drafts()
        plan = self.scheduler.schedule(now)
        if plan.is_empty:
            # legal only right after a preemption (nobody joins in that step); an idle
            # engine that admits nobody would loop forever, so say so instead
            if not plan.preempted and (self.scheduler.running or self.scheduler.waiting):
                raise RuntimeError(
                    f"{type(self.scheduler).__name__}.schedule() returned an empty plan with "
                    f"{len(self.scheduler.running)} running and {len(self.scheduler.waiting)} "
                    "waiting requests and no preemption: it must schedule at least one "
                    "sequence, or the engine would spin forever")
            self._record_step(plan, now, now)
            return []
        tokens = self.runner.execute(plan)
        end = self.runner.now()
        outputs = self._update(plan, tokens, end)
        self._record_step(plan, now, end)
        return outputs

    def _propose_drafts(self) -> None:
        """Speculative decoding: guess a few tokens for each greedy decoding sequence."""
        if self.proposer is None:
            return
        for seq in self.scheduler.running:
            seq.draft_token_ids = []
            if seq.params.greedy and seq.num_uncomputed_tokens == 1 and seq.num_output_tokens:
                room = min(seq.params.max_tokens - seq.num_output_tokens,
                           self.max_model_len - seq.num_tokens) - 1
                seq.draft_token_ids = self.proposer.propose(seq.all_token_ids, room)

    def _admit_arrivals(self, now: float) -> None:
        while self._pending and self._pending[0].arrival_time <= now:
            self.scheduler.add(self._pending.pop(0))

    def _update(self, plan: SchedulerOutput, tokens: list[list[int]], now: float):
        outputs = []
        for item, produced in zip(plan.scheduled, tokens):
            seq = item.seq
            drafts, seq.draft_token_ids = seq.draft_token_ids, []
            if drafts:
                new_tokens = accept_drafts(drafts, produced)
                accepted = len(new_tokens) - 1
                # K/V are valid for the real token and the guesses that were right
                seq.num_computed_tokens += item.num_new_tokens - len(drafts) + accepted
                seq.num_draft_proposed += len(drafts)
                seq.num_draft_accepted += accepted
            else:
                new_tokens = produced
                seq.num_computed_tokens += item.num_new_tokens
            self.scheduler.kv.on_tokens_computed(seq)
            if not new_tokens:
                continue
            for token in new_tokens:
                seq.append_token(token, now)
                reason = seq.check_stop(self.max_model_len)
                if reason is not None:
                    self._finish(seq, reason, now)
                    break
            outputs.append(self.make_output(seq))
        return outputs

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        seq.status, seq.finish_reason, seq.finish_time = SequenceStatus.FINISHED, reason, now
        self.scheduler.finish(seq)
        self._live.pop(seq.request_id, None)
        self.trace.requests[seq.request_id] = _request_record(seq)

    def _record_step(self, plan: SchedulerOutput, start: float, end: float) -> None:
        kv = self.scheduler.kv
        holders = self.scheduler.kv_holders()
        entries = []
        for item in plan.scheduled:
            decode = item.num_new_tokens if item.is_decode else 0
            entries.append(ScheduledEntry(item.seq.request_id, item.num_new_tokens - decode,
                                          decode, item.seq.num_computed_tokens))
        self.trace.steps.append(StepRecord(
            index=len(self.trace.steps), start_time=start, end_time=end, scheduled=entries,
            preempted=[s.request_id for s in plan.preempted],
            idle=[s.request_id for s in plan.idle], num_slots=plan.num_slots,
            num_waiting=len(self.scheduler.waiting),     # arrived and queued
            kv_blocks_used=kv.num_blocks - kv.num_free_blocks, kv_blocks_free=kv.num_free_blocks,
            kv_tokens_held=kv.tokens_held(holders),
            num_swapped_out_blocks=len(plan.swap_out), num_swapped_in_blocks=len(plan.swap_in)))

    # ------------------------------------------------------------------ outputs
    def make_output(self, seq: Sequence) -> RequestOutput:
        text = ""
        if self.tokenizer is not None:
            text = self.tokenizer.decode(seq.output_token_ids, skip_special_tokens=True)
        completion = CompletionOutput(0, text, list(seq.output_token_ids), seq.finish_reason)
        metrics = RequestMetrics(seq.arrival_time, seq.first_scheduled_time, seq.first_token_time,
                                 seq.finish_time, seq.num_output_tokens, seq.num_preemptions)
        return RequestOutput(seq.request_id, seq.prompt, seq.prompt_token_ids,
                             [completion], seq.is_finished, metrics)


def _request_record(seq: Sequence) -> RequestRecord:
    return RequestRecord(
        request_id=seq.request_id, arrival_time=seq.arrival_time,
        prompt_len=seq.num_prompt_tokens, max_tokens=seq.params.max_tokens,
        priority=seq.priority, output_len=seq.num_output_tokens,
        first_scheduled_time=seq.first_scheduled_time, first_token_time=seq.first_token_time,
        finish_time=seq.finish_time, token_times=list(seq.token_times),
        num_preemptions=seq.num_preemptions, finish_reason=seq.finish_reason,
        num_cached_tokens=seq.num_cached_tokens, num_draft_proposed=seq.num_draft_proposed,
        num_draft_accepted=seq.num_draft_accepted)
