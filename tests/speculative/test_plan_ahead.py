"""Planning a verify step while the one before runs (Scheduler.plan_ahead): the engine's output
is the same with it and without it, it engages on copied text, and a request cancelled while a
step planned ahead is in flight leaves nothing behind. On the real CI model, fp32 on the CPU (the
GPU only changes what the overlap is worth; bench.spec_decode measures that on the H200)."""

from __future__ import annotations

import json

import pytest

from engine import scheduler
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.types import Request, SamplingParams
from prompts.apply import build_apply_prompt

DEV = "bench/data/dev.jsonl"


@pytest.fixture(scope="module")
def engines(ci_model_dir):
    # Blocks of 16: the tests' short outputs then take enough steps to plan ahead in.
    common = {"model": str(ci_model_dir), "max_model_len": 4096, "max_num_seqs": 4, "verify_tokens": 16}
    return LLMEngine(EngineConfig(**common)), LLMEngine(EngineConfig(plan_ahead=False, **common))


@pytest.fixture(scope="module")
def cases(engines) -> list[tuple[list[int], list[int], list[int]]]:
    """The three smallest dev cases' apply prompts, their originals' tokens and their plain greedy
    outputs (96 tokens), decoded once: a shorter output is a prefix of the longer (greedy)."""
    plain = engines[1]
    tok = plain.tokenizer
    with open(DEV) as f:
        rows = sorted((json.loads(line) for line in f), key=lambda r: len(r["original"]))[:3]
    out = []
    for r in rows:
        ids = build_apply_prompt(r["original"], r["update_snippet"], r["instruction"], r["language"]).prompt_ids(tok)
        want = run_together(plain, [Request(ids, SamplingParams(max_tokens=96), drafter="none", verify_tokens=1)])[0]
        out.append((ids, tok.encode(r["original"]), want))
    return out


def apply_requests(cases, n: int, max_tokens: int = 96) -> tuple[list[Request], list[list[int]]]:
    """Requests of the first `n` cases and their plain outputs. The prediction source is that
    output (the CI model does not write the expected file), so lookup drafts whole blocks and the
    bets hold but where the output ends or repeats itself."""
    requests, outputs = [], []
    for ids, original, full in cases[:n]:
        want = full[:max_tokens]
        requests.append(Request(ids, SamplingParams(max_tokens=max_tokens),
                                sources={"prediction": want, "original": original}))
        outputs.append(want)
    return requests, outputs


def run_together(engine: LLMEngine, requests: list[Request]) -> list[list[int]]:
    seqs = [engine.add_request(r) for r in requests]
    while engine.has_work():
        engine.step()
    return [s.output_ids for s in seqs]


def test_plan_ahead_engages_and_changes_no_token(engines, cases):
    ahead, plain = engines
    requests, outputs = apply_requests(cases, 2)
    ahead.step_times.ahead = ahead.step_times.steps = 0
    for r, want in zip(requests, outputs):
        assert run_together(ahead, [r]) == [want]
        assert run_together(plain, [r]) == [want]
    assert ahead.step_times.ahead > 0.3 * ahead.step_times.steps
    assert plain.step_times.ahead == 0


@pytest.mark.parametrize("max_seqs", [1, 8])
def test_plan_ahead_with_a_batch_of_requests(engines, cases, max_seqs, monkeypatch):
    """Three requests in one batch finishing at different steps, planned ahead once one sequence
    is left (PLAN_AHEAD_MAX_SEQS = 1) or for the whole batch (8; the default has no limit). Either
    way the outputs equal one-at-a-time plain decoding and every block comes back."""
    monkeypatch.setattr(scheduler, "PLAN_AHEAD_MAX_SEQS", max_seqs)
    ahead, plain = engines
    requests, want = apply_requests(cases, 3, max_tokens=96)
    for i, n in ((1, 24), (2, 48)):  # the first runs alone for its last steps
        requests[i] = Request(requests[i].prompt_ids, SamplingParams(max_tokens=n), sources=requests[i].sources)
        want[i] = want[i][:n]
    free = ahead.kv.allocator.num_free
    steps = ahead.step_times.ahead
    assert run_together(ahead, requests) == want
    assert ahead.step_times.ahead > steps
    assert ahead.kv.allocator.num_free == free


def test_cancel_while_a_step_planned_ahead_is_in_flight(engines, cases, monkeypatch):
    monkeypatch.setattr(scheduler, "PLAN_AHEAD_MAX_SEQS", 8)
    ahead, plain = engines
    (first, second), (_, want) = apply_requests(cases, 2, max_tokens=64)
    free = ahead.kv.allocator.num_free
    a, b = ahead.add_request(first), ahead.add_request(second)
    while ahead._ahead is None and not a.is_finished:
        ahead.step()
    assert ahead._ahead is not None
    ahead.cancel(a)  # its rows of the step in flight are dropped; its blocks are free again
    while ahead.has_work():
        ahead.step()
    assert a.finish_reason == "cancelled" and b.output_ids == want
    # The last one, alone, cancelled in flight: the next step drops the step and starts afresh.
    c = ahead.add_request(first)
    while ahead._ahead is None and not c.is_finished:
        ahead.step()
    assert ahead._ahead is not None
    ahead.cancel(c)
    assert not ahead.has_work() and ahead.kv.allocator.num_free == free
    d = ahead.add_request(second)
    while ahead.has_work():
        ahead.step()
    assert d.output_ids == want and ahead.kv.allocator.num_free == free


def test_a_request_arriving_while_a_step_planned_ahead_is_in_flight(engines, cases):
    """The newcomer waits, so the bet after the step in flight fails and it is admitted then."""
    ahead, plain = engines
    (first, second), want = apply_requests(cases, 2, max_tokens=64)
    a = ahead.add_request(first)
    while ahead._ahead is None and not a.is_finished:
        ahead.step()
    assert ahead._ahead is not None
    b = ahead.add_request(second)
    while ahead.has_work():
        ahead.step()
    assert [a.output_ids, b.output_ids] == want


def test_bets_that_hold_are_kept_and_the_others_drafted_again(engines, cases, monkeypatch):
    """A batch where one sequence's bets hold (its prediction is its output) and another's fail
    (its prediction is a third request's output) or never exist (no drafter): the next step is
    launched from the bets that held, the other sequences drafted again after the step
    (Scheduler.next_from_ahead), and every output is still plain decoding's."""
    ahead, plain = engines
    requests, want = apply_requests(cases, 3, max_tokens=64)
    wrong = Request(requests[1].prompt_ids, requests[1].params, sources={"prediction": want[2]})
    bare = Request(requests[2].prompt_ids, requests[2].params, drafter="none")
    partial = []
    take = ahead.scheduler.next_from_ahead

    def counted(plan):
        nxt = take(plan)
        if nxt is not None and nxt is not plan:
            partial.append(len(plan.batch))
        return nxt

    monkeypatch.setattr(ahead.scheduler, "next_from_ahead", counted)
    free = ahead.kv.allocator.num_free
    assert run_together(ahead, [requests[0], wrong, bare]) == want
    assert partial, "no step was launched from a plan whose bets held in part"
    assert ahead.kv.allocator.num_free == free


def test_under_a_verify_budget_a_plan_held_in_part_is_drafted_again_whole(engines, cases, monkeypatch):
    """With a verify budget (a cap on a step's tokens, shared by the batch) a plan ahead whose bets
    held only in part is not launched: the budget was split over drafts that changed, so the whole
    batch is drafted again after the step (Scheduler.next_from_ahead). The outputs are still plain
    decoding's and every block comes back."""
    ahead, plain = engines
    requests, want = apply_requests(cases, 3, max_tokens=64)
    bare = Request(requests[2].prompt_ids, requests[2].params, drafter="none")  # never bets
    monkeypatch.setattr(ahead.scheduler, "verify_budget", 24)
    taken = []
    take = ahead.scheduler.next_from_ahead

    def counted(plan):
        nxt = take(plan)
        taken.append("none" if nxt is None else "whole" if nxt is plan else "partial")
        return nxt

    monkeypatch.setattr(ahead.scheduler, "next_from_ahead", counted)
    free = ahead.kv.allocator.num_free
    assert run_together(ahead, [requests[0], requests[1], bare]) == want
    assert "none" in taken and "partial" not in taken
    assert ahead.kv.allocator.num_free == free
