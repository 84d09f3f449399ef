"""The scheduler's step plan, no model: what `schedule()` decides and what `postprocess()` records.

Blocks of 4 tokens, K = 4 (a verify block is `[last token]` + up to 3 draft tokens), and a drafter
that always proposes the same three tokens.
"""

from types import SimpleNamespace

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.scheduler import Scheduler
from engine.sequence import Sequence, Status
from engine.types import Request, SamplingParams

DRAFT = [7, 8, 9]


class FixedDrafter:
    def propose(self, tokens: list[int], room: int) -> list[int]:
        return DRAFT[:room]


def make_scheduler(num_blocks: int, **cfg) -> Scheduler:
    kv = SimpleNamespace(blocks=BlockManager(num_blocks, block_size=4))
    return Scheduler(kv, EngineConfig(verify_tokens=4, max_batch_tokens=64, max_model_len=64, **cfg))


def add(scheduler: Scheduler, prompt: list[int], max_tokens: int = 100) -> Sequence:
    seq = Sequence(Request(prompt, SamplingParams(max_tokens=max_tokens)), FixedDrafter(), 4, None)
    scheduler.add(seq)
    return seq


def test_prefill_plan_then_verify_plan_feeds_last_token_and_draft():
    scheduler = make_scheduler(num_blocks=16)
    seq = add(scheduler, [1, 2, 3, 4, 5])
    plan = scheduler.schedule()
    assert plan.prefill and plan.batch == [(seq, [1, 2, 3, 4])]  # the last token waits for the verify step
    scheduler.postprocess(plan)
    assert seq.num_cached == 4
    plan = scheduler.schedule()
    assert not plan.prefill and plan.batch == [(seq, [5] + DRAFT)]
    assert plan.num_tokens == 4 and plan.proposals == {}


def test_postprocess_rolls_back_the_rejected_tail_and_records_the_step():
    scheduler = make_scheduler(num_blocks=16)
    seq = add(scheduler, [1, 2, 3, 4, 5])
    scheduler.postprocess(scheduler.schedule())
    plan = scheduler.schedule()
    scheduler.postprocess(plan, [[7, 42]])  # draft token 7 accepted, 8 rejected, 42 recovered
    assert seq.tokens == [1, 2, 3, 4, 5, 7, 42]
    assert seq.num_cached == 6  # [5, 7] were cached; 42 is fed by the next step
    assert (seq.stats.steps, seq.stats.drafted, seq.stats.accepted, seq.stats.rejections) == (1, 3, 1, 1)
    assert seq.stats.committed_hist == {2: 1}


def test_draft_is_cut_to_max_tokens_and_to_the_verify_budget():
    scheduler = make_scheduler(num_blocks=16)
    short = add(scheduler, [1, 2, 3, 4, 5], max_tokens=2)  # room for 1 draft token and its bonus
    scheduler.postprocess(scheduler.schedule())
    assert scheduler.schedule().batch == [(short, [5, 7])]

    capped = make_scheduler(num_blocks=16, verify_budget=6)
    a, b = add(capped, [1, 2, 3, 4, 5]), add(capped, [11, 12, 13, 14, 15])
    capped.postprocess(capped.schedule())
    plan = capped.schedule()
    assert plan.num_tokens == 6 and [feed[0] for _, feed in plan.batch] == [5, 15]
    assert [s for s, _ in plan.batch] == [a, b]


def test_a_crowded_step_verifies_shorter_blocks(monkeypatch):
    """Each sequence verifies its whole K while the running sequences' blocks add up to
    FULL_BLOCK_ROWS at most, and at most CROWDED_BLOCK positions past that (here scaled to K = 4:
    8 rows, blocks of 2)."""
    from engine import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "FULL_BLOCK_ROWS", 8)
    monkeypatch.setattr(scheduler_module, "CROWDED_BLOCK", 2)
    scheduler = make_scheduler(num_blocks=32, max_num_seqs=4)
    seqs = [add(scheduler, [i, i + 1, i + 2, i + 3, i + 4]) for i in (10, 20)]
    scheduler.postprocess(scheduler.schedule())
    assert [feed for _, feed in scheduler.schedule().batch] == [[14] + DRAFT, [24] + DRAFT]
    seqs.append(add(scheduler, [30, 31, 32, 33, 34]))  # three blocks of 4: 12 rows
    scheduler.postprocess(scheduler.schedule())  # its prefill
    assert [feed for _, feed in scheduler.schedule().batch] == [[14, 7], [24, 7], [34, 7]]


def test_a_preempted_sequence_is_not_in_the_plan():
    # Each sequence is admitted with 3 blocks (5 prompt tokens + K); 6 blocks hold exactly two.
    scheduler = make_scheduler(num_blocks=6)
    a, b = add(scheduler, [1, 2, 3, 4, 5]), add(scheduler, [11, 12, 13, 14, 15])
    scheduler.postprocess(scheduler.schedule())
    for _ in range(2):  # every draft accepted: 4 tokens a step, 13 tokens after two steps
        plan = scheduler.schedule()
        assert [s for s, _ in plan.batch] == [a, b]
        scheduler.postprocess(plan, [feed[1:] + [0] for _, feed in plan.batch])
    plan = scheduler.schedule()  # a needs a 4th block for positions 12..15: b, the newest, yields
    assert plan.batch == [(a, [0] + DRAFT)]
    assert b.status == Status.WAITING and list(scheduler.waiting) == [b] and len(b.block_table) == 0
    assert scheduler.preemptions == 1


def test_a_sequence_that_outgrows_the_whole_cache_ends_at_its_length():
    """Alone, with nothing left to preempt, a sequence whose next verify block does not fit in the
    whole cache ends ("length", as at the context limit) and frees its blocks; preempted instead,
    it could never be admitted again and the engine would step forever."""
    scheduler = make_scheduler(num_blocks=4)  # 16 tokens, under max_model_len (64)
    seq = add(scheduler, [1, 2, 3, 4, 5])
    scheduler.postprocess(scheduler.schedule())
    for _ in range(3):  # 4 tokens a step: 17 tokens, the last step's block (12..15) in the 4th block
        plan = scheduler.schedule()
        assert plan.batch
        scheduler.postprocess(plan, [feed[1:] + [0] for _, feed in plan.batch])
    plan = scheduler.schedule()  # positions 16..19 need a 5th block
    assert plan.batch == [] and seq.is_finished and seq.finish_reason == "length"
    assert not scheduler.has_work() and scheduler.blocks.num_free == 4 and scheduler.preemptions == 0


def test_commit_stops_where_a_token_by_token_commit_stops():
    """`StopChecker.commit` takes a verify step's tokens at once; it must stop where appending them
    one at a time and checking each stops: an end-of-sequence token first (unless ignored), then
    max_tokens or the context."""
    import random

    from engine.scheduler import StopChecker

    def one_at_a_time(seq, new, eos, max_len):
        for n, t in enumerate(new, 1):
            seq.tokens.append(t)
            if t in eos and not seq.params.ignore_eos:
                return n, "stop"
            if seq.num_generated >= seq.params.max_tokens or len(seq) >= max_len:
                return n, "length"
        return len(new), None

    rng, eos = random.Random(0), frozenset({2, 3})
    for _ in range(2000):
        prompt, max_tokens, max_len = rng.randint(1, 8), rng.randint(1, 12), rng.randint(6, 24)
        ignore = rng.random() < 0.3
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore)
        done = rng.randint(0, 6)
        new = [rng.choice([2, 3, 5, 6, 7, 8, 9]) for _ in range(rng.randint(0, 16))]
        seqs = [Sequence(Request([1] * prompt, params), None, 16, None) for _ in range(2)]
        for seq in seqs:
            seq.tokens.extend([9] * done)
        want = one_at_a_time(seqs[0], new, eos, max_len)
        got = StopChecker(max_len, eos).commit(seqs[1], new)
        assert got == want and seqs[1].tokens == seqs[0].tokens and seqs[1].stats.generated == got[0]
