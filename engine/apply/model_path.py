"""The model half of the apply pipeline: prompt, lookup sources, context check, answer -> file.

`build_job` turns a `Plan` (pipeline.py) into an engine `Request`:

* the prompt (`prompts/apply.py`): `rewrite` or `draft` form for a snippet, the `instruction`
  form without one; every text is LF-only in the prompt (CRLF originals are restored after);
* lookup sources in priority order: `prediction` (the answer the model writes if the best
  deterministic merge -- possibly partial -- is right), `original`, `snippet`;
* greedy decoding with `max_tokens` sized from the expected answer plus a margin, and a stop at
  the closing fence. A prompt plus answer over the engine's context raises `ContextTooLongError`
  here, before anything is generated.

When the merge placed part of the snippet, the model writes only a window around what it could
not place, or around the segments (`uncertain_window`), with the segments inside it; the rest of
the file is the merge's text, copied. `finish` parses the answer, splices a rewritten region back into
the file, and gives every line the original's ending (`restore_endings`). `validate` then holds the model's file to what the
merge knows (untouched lines kept, snippet lines present).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.apply.errors import ContextTooLongError
from engine.apply.languages import language_spec
from engine.apply.text import CRLF, join_lines, line_matcher, split_lines
from engine.types import Request, SamplingParams
from prompts.apply import ApplyPrompt, build_apply_prompt, build_instruction_prompt

CLOSE_SLACK = 8  # tokens past the expected answer: closing fence and end of turn
WINDOW_MARGIN = 3  # original lines kept around an uncertain stretch when the model rewrites only it


def lf(text: str | None) -> str:
    return (text or "").replace("\r\n", "\n")


def restore_endings(original: str, text: str) -> str:
    """`text` (LF endings) with the line endings of `original`: unchanged lines keep their own
    ending (mixed files stay mixed), new lines take the original's dominant one."""
    orig = split_lines(original)
    if CRLF not in orig.eols:
        return text
    new = split_lines(text)
    eols = [orig.eol if e else "" for e in new.eols]
    for a, b, size in line_matcher(orig.lines, new.lines).get_matching_blocks():
        for i in range(size):
            if new.eols[b + i]:
                eols[b + i] = orig.eols[a + i] or orig.eol
    return join_lines(new.lines, eols)


@dataclass
class ModelJob:
    """An engine request and what is needed to turn its answer back into the file."""

    prompt: ApplyPrompt
    request: Request
    prompt_tokens: int
    max_tokens: int
    head: str  # LF text of the file before the rewritten part ('' unless a region is rewritten)
    body: str  # LF text the model rewrites (the file, or a region of it)
    tail: str  # LF text after it


def _margin(expected: int, instruction_only: bool) -> int:
    # An instruction may add much (docstrings everywhere); a snippet's additions are in the prediction.
    return 64 + expected // 4 if instruction_only else 32 + expected // 8


def build_job(plan, tokenizer, max_model_len: int, default_cap: int | None = None) -> ModelJob | None:
    """The engine request for `plan`, in its request's prompt form, `max_tokens` and prediction
    choice; raises ContextTooLongError when it cannot fit. Without `max_tokens`, the expected size
    plus a margin, at most `default_cap` (a server's limit). None for a plan whose readings the
    model ranks: it writes nothing (`ranking.py`)."""
    if plan.path == "rank":
        return None
    req = plan.request
    form, max_tokens, use_prediction = req.form, req.max_tokens, req.use_prediction
    original = lf(req.initial_code)
    head = tail = ""
    body = original
    snippet = lf(req.edit_snippet)
    if plan.kind == "instruction":
        part = None
        if plan.region is not None:
            r = plan.region
            lines = split_lines(original)
            head = join_lines(lines.lines[: r.start], lines.eols[: r.start])
            body = join_lines(lines.lines[r.start : r.end], lines.eols[r.start : r.end])
            tail = join_lines(lines.lines[r.end :], lines.eols[r.end :])
            where = os.path.basename(req.path) if req.path else "the file"
            part = f"only {', '.join(r.names)} (lines {r.start + 1}-{r.end} of {where})"
        prompt = build_instruction_prompt(body, req.instruction, plan.language, part)
        predicted = body
    else:
        usable = plan.candidate is not None and plan.merge_status != "unmatched"
        predicted = lf(plan.candidate) if plan.candidate is not None else original
        # A merge that placed every segment and failed validation: the model writes around all of
        # them (in mode model, which asks the model whatever the merge says, the whole file: a
        # window cut inside a construct throws a small model off, bench/HISTORY.md "Model mode
        # held to the merge (issue 30)").
        everything = req.mode != "model" and plan.merge is not None and not unplaced(plan.merge)
        window = uncertain_window(plan.merge, len(split_lines(original)), everything) if usable and plan.merge else None
        part = None
        if window is not None:
            head, body, predicted, tail, shown = _split_window(original, predicted, plan.merge, window)
            snippet = plan.merge.snippet.render(shown)
            where = os.path.basename(req.path) if req.path else "the file"
            part = f"lines {window[0] + 1}-{window[1]} of {where}"
        elif plan.merge is not None and plan.merge.snippet is not None:
            # The snippet as parsed (no chat prose, no fences), not as the answer wrote it.
            snippet = plan.merge.snippet.render(range(len(plan.merge.snippet.segments)))
        prompt = build_apply_prompt(body, snippet, req.instruction, plan.language,
                                    draft=predicted if usable else None, form=form, part=part)
    prompt_ids = prompt.prompt_ids(tokenizer)
    prediction = prompt.prediction_ids(tokenizer, predicted)
    snippet_ids = tokenizer.encode(snippet) if snippet.strip() else []
    expected = len(prediction) + CLOSE_SLACK
    if plan.kind != "instruction" and plan.merge_status not in ("exact", "fuzzy", "diff", "search_replace"):
        expected += len(snippet_ids)  # segments the merge could not place
    room = max_model_len - len(prompt_ids)
    if max_tokens is None:
        if room < expected:
            raise ContextTooLongError(len(prompt_ids), expected, max_model_len)
        max_tokens = min(expected + _margin(expected, plan.kind == "instruction"), room, default_cap or room)
    elif max_tokens > room:
        raise ContextTooLongError(len(prompt_ids), max_tokens, max_model_len)
    sources = {"prediction": prediction} if use_prediction else {}
    sources["original"] = tokenizer.encode_document(original)
    if snippet_ids:
        sources["snippet"] = snippet_ids
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=("\n" + prompt.fence_close,))
    return ModelJob(prompt, Request(prompt_ids, params, sources=sources), len(prompt_ids), max_tokens, head, body, tail)


def uncertain_window(merge, n: int, everything: bool = False) -> tuple[int, int] | None:
    """The stretch of the original, [start, end), that the model writes: around every segment
    the merge could not place (the gap between its placed neighbours) -- or, `everything`, every
    segment (a merge that failed validation) -- WINDOW_MARGIN lines wider, and
    never cutting a placed segment. None when the merge placed nothing: the model writes it all.

    The rest of the file is the merge's text, copied, never generated: the lines no one doubts
    cannot change, and small models drift on long files.
    """
    reports = merge.segments
    placed = [r for r in reports if r.start is not None]
    if not placed:
        return None
    spans = []
    for r in reports:
        if r.start is not None and not everything:
            continue
        lo = max((q.end for q in placed if q.segment < r.segment), default=0)
        hi = min((q.start for q in placed if q.segment > r.segment), default=n)
        spans.append((r.start, r.end) if r.start is not None else (lo, hi))
    if not spans:
        return None
    start, end = max(0, min(a for a, _ in spans) - WINDOW_MARGIN), min(n, max(b for _, b in spans) + WINDOW_MARGIN)
    for r in placed:  # an edge never cuts a placed segment: it is in the window whole
        start = r.start if r.start < start < r.end else start
        end = r.end if r.start < end < r.end else end
    return start, end


def _split_window(original: str, merged: str, merge, window: tuple[int, int]) -> tuple[str, str, str, str, list[int]]:
    """(head, original window, merged window, tail, segments inside it): the merged text cut at
    the lines that the window's edges are in the original (edges lie outside every placed span,
    so each maps to one merged line; lines inserted at an edge are inside the window)."""
    orig, new = split_lines(original), split_lines(merged)
    start, end = window
    a, b = merge.merged_line(start, after_inserts=False), merge.merged_line(end)
    shown = [r.segment for r in merge.segments if r.start is None or (start <= r.start and start < r.end <= end)
             or r.start == r.end == end]
    return (join_lines(new.lines[:a], new.eols[:a]), join_lines(orig.lines[start:end], orig.eols[start:end]),
            join_lines(new.lines[a:b], new.eols[a:b]), join_lines(new.lines[b:], new.eols[b:]), shown)


def unplaced(merge) -> bool:
    """Whether the merge left a segment unplaced."""
    return any(r.start is None for r in merge.segments)


def closed(job: ModelJob, answer: str) -> bool:
    """Whether the answer reached its closing fence (else max_tokens cut it off)."""
    return any(line.strip() == job.prompt.fence_close for line in lf(answer).split("\n"))


def finish(job: ModelJob, answer: str, original: str) -> str:
    """The new file: the answer parsed, spliced between head and tail, with original endings."""
    text = job.prompt.parse(answer, job.body)
    return restore_endings(original, job.head + text + job.tail)
