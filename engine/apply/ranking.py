"""Ranking readings with the model: the likelihood of each under the apply prompt.

    ranking = rank(engine, readings, original, snippet, language, path)
    ranking.chosen      # the best reading when its margin over the next is clear, else None

Readings (`readings.py`) differ only where the snippet is ambiguous. The model sees the apply
prompt for a window of the file around that stretch (`window`: CONTEXT lines of shared text on
each side, and the snippet's segments that touch it, written as the snippet wrote them) and each
reading's text of the window as its answer, teacher-forced: the summed log-probability of the
answer's first SCORED_TOKENS tokens after the prompt and the answers' shared head, where the
readings part (`score`: one prefill of the shared part, then one batch of score requests reading
it from the prefix cache). The best is taken when it leads the next by MARGIN nats or more;
otherwise the apply is refused with the readings, for the user to choose.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from engine.apply.readings import Reading
from engine.apply.snippet import Snippet
from engine.apply.text import join_lines, line_matcher, split_lines
from engine.types import Request, SamplingParams
from prompts.apply import build_apply_prompt

# A reading is taken when its log-probability leads the next one's by this many nats (e^9, about
# 8,000 to 1); nearer readings are a refusal with them all. Set above the largest lead a wrong
# reading had over the right one with either preset on the train sets (8.5 nats, the 0.5B;
# dev_hard_train and dev_hard_train2) and on the dev sets (7.8), readings of moved code aside
# (never ranked): bench/RESULTS.md, "Readings ranked by the model", the table by margin band.
MARGIN = 9.0
CONTEXT = 3  # lines of the readings' shared text shown on each side of the stretch they differ in
AFTER = 2  # lines of their shared text after that stretch that are scored
# Tokens of each answer scored after the answers' shared head: where the readings part. Past them
# the model copies (the kept lines of a keep-or-delete choice are the original's), and summed
# over hundreds of copied tokens that small cost made the shorter reading win (a 70-line
# deletion by 10.4 nats with the 0.5B; bench/RESULTS.md, "Readings ranked by the model").
SCORED_TOKENS = 24


@dataclass(frozen=True)
class Scored:
    reading: Reading
    logprob: float


@dataclass(frozen=True)
class Ranking:
    """The readings by log-probability, best first, and what scoring them cost."""

    scored: tuple[Scored, ...]
    prompt_tokens: int  # the shared part: prompt and the answers' common head
    scored_tokens: int  # the answers' tokens after it, all readings together
    seconds: float
    window: tuple[int, int]  # original lines [start, end) the prompt showed

    @property
    def margin(self) -> float:
        return self.scored[0].logprob - self.scored[1].logprob if len(self.scored) > 1 else float("inf")

    @property
    def chosen(self) -> Reading | None:
        return self.scored[0].reading if self.margin >= MARGIN else None


@dataclass(frozen=True)
class RankPrompt:
    """The token ids to score: `shared` (prompt + the answers' common head), then one
    continuation per reading, in the readings' order."""

    shared: list[int]
    continuations: list[list[int]]
    window: tuple[int, int]


def rank(engine, readings: tuple[Reading, ...], original: str, snippet: Snippet, language: str | None,
         path: str | None = None) -> Ranking:
    """Score `readings` (at least two) with `engine` (the `service.Engine` protocol)."""
    started = time.perf_counter()
    prompt = rank_prompt(engine.tokenizer, readings, original, snippet, language, path)
    scores = score(engine, prompt.shared, prompt.continuations)
    order = sorted(range(len(readings)), key=lambda n: -scores[n])
    return Ranking(tuple(Scored(readings[n], scores[n]) for n in order), len(prompt.shared),
                   sum(map(len, prompt.continuations)), time.perf_counter() - started, prompt.window)


def rank_prompt(tokenizer, readings: tuple[Reading, ...], original: str, snippet: Snippet, language: str | None,
                path: str | None = None) -> RankPrompt:
    """The apply prompt for the window the readings differ in, and each reading's answer."""
    orig = split_lines(original.replace("\r\n", "\n"))
    texts = [split_lines(r.text.replace("\r\n", "\n")) for r in readings]
    (start, end), cuts, tail = window(orig.lines, [t.lines for t in texts])
    shown = _shown_segments(readings, snippet, start, end)
    part = None if (start, end) == (0, len(orig)) else \
        f"lines {start + 1}-{end} of {os.path.basename(path) if path else 'the file'}"
    prompt = build_apply_prompt(join_lines(orig.lines[start:end], orig.eols[start:end]),
                                snippet.render(shown), None, language, form="rewrite", part=part)
    answers = []
    for t, (a, b) in zip(texts, cuts):
        # Scored up to AFTER lines past where the readings agree again: what follows is the same
        # text in every reading, and costs tokens without telling them apart.
        cut = len(t) - (tail - AFTER)
        text = join_lines(t.lines[a:cut], t.eols[a:cut]) if cut < b else prompt.predicted_answer(
            join_lines(t.lines[a:b], t.eols[a:b]))
        answers.append(tokenizer.encode(text))
    common = 0
    while all(len(a) > common + 1 and a[common] == answers[0][common] for a in answers):
        common += 1
    return RankPrompt(prompt.prompt_ids(tokenizer) + answers[0][:common],
                      [a[common : common + SCORED_TOKENS] for a in answers], (start, end))


def window(original: list[str], texts: list[list[str]]) -> tuple[tuple[int, int], list[tuple[int, int]], int]:
    """The original's lines [start, end) around the stretch where `texts` differ, CONTEXT lines
    of their shared head and tail wider, each text's lines for that window, and how many lines
    all texts end with alike. The window's edges are original lines every text keeps unchanged
    at the same distance from its own start (or end), so each text's window is that text's
    version of the original's window."""
    head = 0
    while all(len(t) > head for t in texts) and len({t[head] for t in texts}) == 1:
        head += 1
    tail = 0
    while all(len(t) - tail > head for t in texts) and len({t[-1 - tail] for t in texts}) == 1:
        tail += 1
    first = texts[0]
    # Where each line of the first text's shared head and tail is in the original, if it is one.
    where = {}
    for a, b, size in line_matcher(original, first).get_matching_blocks():
        where.update((b + d, a + d) for d in range(size))
    top = max(0, head - CONTEXT)
    while top > 0 and top not in where:
        top -= 1
    bottom = len(first) - max(0, tail - CONTEXT)  # exclusive
    while bottom < len(first) and bottom not in where:
        bottom += 1
    start = where.get(top, 0) if top > 0 else 0
    end = where[bottom] if bottom < len(first) else len(original)
    back = len(first) - bottom
    return (start, end), [(top, len(t) - back) for t in texts], tail


def _shown_segments(readings: tuple[Reading, ...], snippet: Snippet, start: int, end: int) -> list[int]:
    """The snippet's segments that touch original lines [start, end) in some reading, or that
    no reading placed: each reading's merge says where its segments went."""
    shown = {report.segment for r in readings for report in r.merge.segments
             if report.start is None or (report.start < end and report.end > start) or start <= report.start <= end}
    return sorted(shown) or list(range(len(snippet.segments)))


def score(engine, shared: list[int], continuations: list[list[int]]) -> list[float]:
    """The summed log-probability of each continuation after `shared`: one prefill of `shared`
    (its blocks then sit in the prefix cache), then all continuations at once, each a score
    request reading `shared` from the cache. An empty continuation scores 0."""
    params = SamplingParams(max_tokens=1)
    _final(engine, engine.submit(Request(list(shared), params, score_from=len(shared))))
    handles = [engine.submit(Request(list(shared) + c, params, score_from=len(shared))) if c else None
               for c in continuations]
    return [_final(engine, h) if h is not None else 0.0 for h in handles]


def _final(engine, handle) -> float:
    last = None
    for event in engine.stream(handle):
        last = event
    if last is None or last.error or last.finish_reason == "error":
        raise RuntimeError(f"the engine failed: {(last and last.error) or 'unknown error'}")
    if last.finish_reason == "cancelled":
        from engine.apply.errors import ApplyCancelled

        raise ApplyCancelled("the ranking was cancelled")
    return last.logprob or 0.0
