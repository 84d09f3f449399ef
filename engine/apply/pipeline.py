"""The apply pipeline: what to do with a request, and the result every front end returns.

    result = apply_edit(engine, ApplyRequest(initial_code=text, edit_snippet=snippet, path="app.py"))  # run.py
    result.as_dict()  # {merged_code, diff, validation, usage, stats, readings, hunks, candidate}: `POST /v1/apply`'s answer

Modes (`ApplyRequest.mode`), and which path serves the request (`stats.path`):

* `auto` (default): the deterministic merge when the snippet has one reading that validates
  (readings.py: every decision point's options merged and checked; validation includes that every
  deleted line is explained); the reading the model ranks first when it has several; otherwise
  the model, with the best (partial) merge as the predicted output the lookup drafter reads
  first. A model result that fails validation is a refusal with its reasons: an untrusted merge
  is never returned as an answer (nor without an engine);
* `model`: always the model (the merge still predicts its output), its file held to what the
  merge knows (`_held_to_merge`). Where the model's file is refused and the merge validated, the
  refusal carries the merge as `candidate`, for review;
* `deterministic`: never the model; a snippet that matches nowhere is bad input (`NoMatchError`).

A unified diff or search/replace blocks as the snippet are applied as written (one that applies
is exact). An instruction without a snippet goes to the model, which rewrites the top-level
definitions the instruction names (`targets.py`), spliced back, or else the whole file.

The steps are public so a caller can fail fast and load a model only when needed (the CLI does):
`prepare(req) -> Plan` checks the input and decides the path without a model; `build_job` (in
model_path.py) checks the context with only a tokenizer; `settle` answers what the model does not
write; run.py streams the model's answer into `model_result`. Bad input raises an `ApplyError`
(errors.py); a result that fails its checks is returned with `validation.ok` false, for the
caller to decide.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from engine.apply import limits
from engine.apply.diff import apply_unified_diff, unified_diff
from engine.apply.errors import (
    ApplyError, BinaryFileError, DiffError, NeedsModelError,
    NoMatchError, Problem,
)
from engine.apply.languages import detect_language
from engine.apply.merge import MergeResult
from engine.apply.model_path import ModelJob, build_job, closed, finish
from engine.apply.fences import excerpts
from engine.apply.hunks import hunks
from engine.apply.ranking import MARGIN, Ranking, rank
from engine.apply.readings import Reading, explore
from engine.apply.result import ApplyResult, ApplyStats, Progress, RankingStats, ReadingChoice, Usage
from engine.apply.search_replace import apply_blocks, blocks, looks_like_search_replace
from engine.apply.targets import Region, find_region
from engine.apply.validate import Validation, validate
from engine.types import GenerationStats
from engine.choices import FORMS, MODES

# Measured on the dev set with the model path forced (bench/RESULTS.md, "Apply quality").
DEFAULT_PROMPT_FORM = "draft"
_DIFF_START = re.compile(r"^(--- |\+\+\+ |diff --git |Index: |@@)")
_HUNK = re.compile(r"^@@.*@@")


@dataclass
class ApplyRequest:
    """One apply request; checked on construction (bad values raise `ApplyError`)."""

    initial_code: str
    edit_snippet: str | None = None  # None or "" with an instruction = instruction-only
    instruction: str | None = None  # the task without a snippet; with one, shown by the rewrite form only
    language: str | None = None  # None = from `path`
    path: str | None = None
    mode: str = "auto"
    prompt_form: str | None = None  # rewrite | draft; None = DEFAULT_PROMPT_FORM
    max_tokens: int | None = None  # None = the expected answer's size plus a margin
    use_prediction: bool = True  # False drafts from original/snippet only (to measure what the merge buys)
    reading: int | None = None  # for an ambiguous snippet: take its reading number N (1-based, as a refusal lists them)

    def __post_init__(self):
        if not isinstance(self.initial_code, str):
            raise ApplyError("initial_code must be a string")
        for name in ("edit_snippet", "instruction", "language", "path", "prompt_form"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ApplyError(f"{name} must be a string or null")
        if "\0" in self.initial_code:
            raise BinaryFileError("the file")
        if self.edit_snippet and "\0" in self.edit_snippet:
            raise BinaryFileError("the snippet")
        if self.mode not in MODES:
            raise ApplyError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.prompt_form is not None and self.prompt_form not in FORMS:
            raise ApplyError(f"prompt_form must be one of {', '.join(FORMS)}, got {self.prompt_form!r}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise ApplyError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.reading is not None and (isinstance(self.reading, bool) or not isinstance(self.reading, int)
                                         or self.reading < 1):
            raise ApplyError(f"reading must be a positive integer (a reading's number), got {self.reading!r}")

    @property
    def form(self) -> str:
        """The prompt form the model path uses: the one asked for, else DEFAULT_PROMPT_FORM."""
        return self.prompt_form or DEFAULT_PROMPT_FORM

    @classmethod
    def from_dict(cls, body: dict) -> "ApplyRequest":
        """From a `POST /v1/apply` body; keys other than the fields (e.g. `stream`) are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        if not isinstance(body, dict) or "initial_code" not in body:
            raise ApplyError("the request needs initial_code")
        return cls(**{k: v for k, v in body.items() if k in known})

    def as_dict(self) -> dict:
        """The request body for `POST /v1/apply`: fields left at their defaults are omitted."""
        defaults = ApplyRequest("")
        return {k: v for k, v in self.__dict__.items() if k == "initial_code" or v != getattr(defaults, k)}


@dataclass
class Plan:
    """What `prepare` decided, before any model runs."""

    request: ApplyRequest
    language: str
    kind: str  # snippet | diff | search_replace | instruction
    path: str  # deterministic | rank (the model ranks the readings) | model (the model writes)
    reason: str
    candidate: str | None = None  # the deterministic result (maybe partial): the predicted output
    merge_status: str = "none"  # a merge status, or diff | diff_failed | none (instruction-only)
    confidence: float | None = None
    merge: MergeResult | None = None
    problems: tuple[Problem, ...] = ()  # the merge's or the diff's own findings
    validation: Validation | None = None  # of `candidate`
    region: Region | None = None
    readings: tuple[Reading, ...] = ()  # several when the snippet is ambiguous (readings.py)
    rankable: bool = False  # the readings may be ranked (not those of moved code: readings.py)
    started: float = field(default_factory=time.perf_counter)  # when `prepare` began

    @property
    def needs_model(self) -> bool:
        return self.path in ("model", "rank")


def looks_like_diff(snippet: str, path: str | None = None) -> bool:
    """Whether the snippet is a unified diff (maybe fenced) rather than a lazy edit snippet."""
    code, _ = excerpts(snippet, "diff", path)
    lines = [line for excerpt in code for line in excerpt if line.strip()]
    return bool(lines) and bool(_DIFF_START.match(lines[0])) and any(_HUNK.match(l) for l in lines)


def prepare(req: ApplyRequest) -> Plan:
    """Check the request and decide its path; no model needed. Raises ApplyError for bad input."""
    started = time.perf_counter()
    plan = _decide(req)
    plan.started = started  # the merge's time counts in the result's `seconds`
    return plan


def _decide(req: ApplyRequest) -> Plan:
    limits.check(req)  # size bounds and an empty request: milliseconds, before any work
    try:
        language = detect_language(req.path, req.language)
    except ValueError as exc:
        raise ApplyError(str(exc)) from None
    original, snippet = req.initial_code, req.edit_snippet or ""
    if not snippet.strip():  # an instruction-only edit (limits.check refused a request with neither)
        if req.mode == "deterministic":
            raise NeedsModelError("an instruction without a snippet needs the model; mode 'deterministic' cannot serve it")
        region = find_region(original, req.instruction, language)
        what = f"rewrite {', '.join(region.names)}" if region else "rewrite the whole file"
        return Plan(req, language, "instruction", "model", f"instruction only: {what}", region=region)
    if looks_like_search_replace(snippet):
        return _plan_search_replace(req, language)
    if looks_like_diff(snippet, req.path):
        return _plan_diff(req, language)
    found = explore(original, snippet, language, req.path)  # raises EmptySnippetError / MarkerOnlySnippetError
    result, check = found.result, found.validation
    if req.reading is not None:
        if req.reading > max(1, len(found.readings)):
            raise ApplyError(f"reading {req.reading} was asked for, but the snippet has "
                             f"{len(found.readings) or 'no'} reading(s) that validate")
        if found.ambiguous:
            chosen = found.readings[req.reading - 1]
            return Plan(req, language, "snippet", "deterministic", f"reading {req.reading} of {len(found.readings)}, "
                        f"as asked: {chosen.label}", chosen.text, chosen.merge.status, chosen.merge.confidence,
                        chosen.merge, chosen.merge.problems, chosen.validation)
    if req.mode == "deterministic" and _matches_nowhere(result):
        raise NoMatchError("; ".join(p.reason for p in result.problems if p.severity == "error"))
    why = f"merge {result.status}, confidence {result.confidence:.2f}" + (
        f", {len(found.readings)} readings" if found.ambiguous else
        "" if check.ok else f", validation failed: {', '.join(check.names)}")
    path, reason = _choose(req.mode, check.ok, why)
    problems = result.problems
    if found.ambiguous and req.mode == "auto":
        path = "rank" if found.rankable else "deterministic"
        if not found.rankable:
            problems = (*problems, Problem("moved_code", "the snippet may move code; its readings are offered, not "
                                           "ranked: the model would see the old copy, not the new one", "warning"))
    return Plan(req, language, "snippet", path, reason, result.text, result.status, result.confidence,
                result, problems, check, readings=found.readings, rankable=found.rankable)


def _matches_nowhere(result) -> bool:
    """No line of the snippet occurs in the file: every segment unmatched, or placed only as an
    insert at an open file edge that nothing anchors (one segment or several: the same answer)."""
    names = [p.name for p in result.problems]
    return result.status == "unmatched" or (
        result.status == "partial" and names.count("unmatched") + names.count("unanchored_insert") == len(result.segments))


def _plan_diff(req: ApplyRequest, language: str) -> Plan:
    try:
        text = apply_unified_diff(req.initial_code, req.edit_snippet)
    except DiffError as exc:
        if req.mode == "deterministic":
            raise
        return Plan(req, language, "diff", "model", f"the diff does not apply ({exc})", merge_status="diff_failed",
                    problems=(Problem("diff_failed", str(exc), "warning"),))
    # A diff says exactly what it deletes: no mass-deletion doubt.
    check = validate(req.initial_code, text, language=language, allow_deletion=True)
    path, reason = _choose(req.mode, check.ok, "unified diff applied" + ("" if check.ok else ", validation failed"))
    return Plan(req, language, "diff", path, reason, text, "diff", 1.0, validation=check)


def _plan_search_replace(req: ApplyRequest, language: str) -> Plan:
    """Search/replace blocks (search_replace.py): each placed at its one match, else refused with
    the block, in every mode; like a diff, they say exactly what they delete."""
    found = blocks(req.edit_snippet, req.path)
    text = apply_blocks(req.initial_code, found)
    check = validate(req.initial_code, text, language=language, allow_deletion=True)
    why = f"{len(found)} search/replace block{'s' if len(found) > 1 else ''} applied" + (
        "" if check.ok else ", validation failed")
    path, reason = _choose(req.mode, check.ok, why)
    return Plan(req, language, "search_replace", path, reason, text, "search_replace", 1.0, validation=check)


def _choose(mode: str, trusted: bool, why: str) -> tuple[str, str]:
    if mode == "deterministic":
        return "deterministic", f"mode deterministic; {why}"
    if mode == "model":
        return "model", f"mode model; {why}"
    return ("deterministic" if trusted else "model"), f"auto: {why}"


def model_writes(plan: Plan, engine) -> bool:
    """Whether the model writes the file (run.py streams it); else `settle` answers."""
    return plan.path == "model" and engine is not None


def settle(plan: Plan, engine) -> ApplyResult | None:
    """The result of a request the model does not write: the merge's own, the reading the model
    ranks first (a short scoring pass on `engine`), or a refusal where no engine can serve it;
    None when the model must write the file (run.py streams that). Raises NeedsModelError for a
    request only the model can serve and no engine."""
    if not plan.needs_model:
        return _deterministic_result(plan)
    if plan.path == "rank":
        return _ranked_result(plan, engine)
    if engine is not None:
        return None
    if plan.request.mode == "auto" and plan.candidate is not None:
        # The merge was not trusted, so it is not an answer: shown, with its doubts, refused.
        return _deterministic_result(plan, Problem("model_unavailable", f"the merge was not trusted ({plan.reason}) "
                                                   "and no model is available to write the file"))
    raise NeedsModelError("this request needs the model, and no engine is available")


def _deterministic_result(plan: Plan, note: Problem | None = None, ranking: Ranking | None = None) -> ApplyResult:
    """The merge as it is: its own result, or a refusal that offers the readings of an
    ambiguous snippet (with the model's scores when `ranking` ran but found no clear winner)."""
    original = plan.request.initial_code
    text = plan.candidate
    problems = list(plan.validation.problems) + [p for p in plan.problems if p not in plan.validation.problems]
    if note is not None:
        problems.append(note)
    validation = Validation.of(problems)
    usage = Usage(prompt_tokens=ranking.prompt_tokens + ranking.scored_tokens) if ranking is not None else Usage()
    stats = _stats(plan, "deterministic", GenerationStats(), None, None, plan.started,
                   ranking=_ranking_stats(ranking) if ranking is not None else None)
    return _result(original, text, plan.request.path, validation, usage, stats, _choices(plan, ranking))


def _ranked_result(plan: Plan, engine) -> ApplyResult:
    """The reading the model prefers by a clear margin (`ranking.py`), else a refusal that
    offers every reading with its score. Without an engine, a refusal that offers them."""
    if engine is None:
        return _deterministic_result(plan, Problem("model_unavailable", f"the snippet can be read {len(plan.readings)} "
                                                   "ways and no model is available to rank them"))
    merge = plan.merge
    ranking = rank(engine, plan.readings, plan.request.initial_code, merge.snippet, plan.language, plan.request.path)
    chosen = ranking.chosen
    if chosen is None:
        return _deterministic_result(plan, Problem(
            "ranking_unsure", f"the model does not prefer one reading clearly (margin {ranking.margin:.2f} nats, "
            f"below {MARGIN:g})"), ranking)
    original = plan.request.initial_code
    note = Problem("ranked", f"the snippet can be read {len(plan.readings)} ways; the model prefers this one by "
                   f"{ranking.margin:.1f} nats: {chosen.label}", "warning")
    validation = Validation.of([*chosen.validation.problems, note])
    stats = _stats(plan, "ranked", GenerationStats(prompt_tokens=ranking.prompt_tokens), None, "rewrite", plan.started,
                   merge_status=chosen.merge.status, merge_confidence=chosen.merge.confidence,
                   ranking=_ranking_stats(ranking))
    usage = Usage(prompt_tokens=ranking.prompt_tokens + ranking.scored_tokens)
    return _result(original, chosen.text, plan.request.path, validation, usage, stats, _choices(plan, ranking))


def _choices(plan: Plan, ranking: Ranking | None) -> tuple[ReadingChoice, ...]:
    """The readings a result offers, best first when ranked."""
    if len(plan.readings) < 2:
        return ()
    scored = [(s.reading, s.logprob) for s in ranking.scored] if ranking else [(r, None) for r in plan.readings]
    label = _label(plan.request.path)
    return tuple(ReadingChoice(r.label, r.text, unified_diff(plan.request.initial_code, r.text, label),
                               None if lp is None else round(lp, 3)) for r, lp in scored)


def _ranking_stats(ranking: Ranking) -> RankingStats:
    return RankingStats(len(ranking.scored), round(ranking.margin, 3), MARGIN, ranking.prompt_tokens,
                        ranking.scored_tokens, round(ranking.seconds, 4), tuple(ranking.window))


def model_result(plan: Plan, job: ModelJob, answer: str, stats: GenerationStats, finish_reason: str | None,
                 started: float, engine=None) -> ApplyResult:
    """The model's file (`answer` spliced where it wrote a region), validated and held to what
    the merge knows (`_held_to_merge`, which may rank the readings on `engine`); in `auto` a
    refusal says too that the merge was not trusted."""
    req = plan.request
    original = req.initial_code
    text = finish(job, answer, original)
    snippet = plan.merge.snippet if plan.merge is not None else None
    check = validate(original, text, snippet=snippet, language=plan.language, allow_deletion=plan.kind in ("diff", "search_replace"),
                     merge=plan.merge)
    problems = list(check.problems)
    if not closed(job, answer):
        problems.insert(0, Problem("truncated", f"the model stopped ({finish_reason}) after {stats.generated_tokens} "
                                   f"tokens (max_tokens {job.max_tokens}) before the end of the file"))
    ranking = None
    if Validation.of(problems).ok:
        held, ranking = _held_to_merge(plan, text, engine)
        problems += held
    validation = Validation.of(problems)
    if req.mode == "auto" and not validation.ok and plan.merge is not None:
        # Neither path is trusted: a refusal with the model's reasons and the merge's doubts.
        validation = Validation.of([*validation.problems, Problem(
            "merge_not_trusted", f"the deterministic merge was not used either: {plan.reason}", "warning")])
    out = _stats(plan, "model", stats, finish_reason, job.prompt.form, started, max_tokens=job.max_tokens,
                 ranking=_ranking_stats(ranking) if ranking is not None else None)
    return _result(original, text, req.path, validation, Usage.of(stats), out, _choices(plan, ranking),
                   candidate=None if validation.ok else _candidate(plan))


def _held_to_merge(plan: Plan, text: str, engine) -> tuple[list[Problem], Ranking | None]:
    """The model's file against what the merge knows; its problems, and the ranking if one ran.

    The model's writing is no evidence between readings: it copies what it sees, so it keeps a
    line the snippet may have deleted. Where the snippet has several readings, the file must be
    the one that ranking takes by MARGIN (the `rank` path's rule); where the merge has one reading
    that validates (what `auto` returns without a model), the file must be the merge's. A model
    that disagrees with such a merge is refused, the merge offered as `candidate`. Dev-set cases
    that showed both shapes: bench/HISTORY.md, "Model mode held to the merge (issue 30)".
    """
    n = len(plan.readings)
    if n > 1:
        which = next((k for k, r in enumerate(plan.readings) if r.text == text), None)
        if which is None:
            return [Problem("ambiguous_reading", f"the snippet can be read {n} ways and the model's file is none of "
                            "them")], None
        if engine is None or not plan.rankable:
            return [Problem("ambiguous_reading", f"the snippet can be read {n} ways; the model wrote reading "
                            f"{which + 1}, and no ranking can confirm it"
                            + ("" if plan.rankable else " (the readings move code: offered, not ranked)"))], None
        ranking = rank(engine, plan.readings, plan.request.initial_code, plan.merge.snippet, plan.language,
                       plan.request.path)
        if ranking.chosen is None or ranking.chosen.text != text:
            return [Problem("ranking_unsure", f"the snippet can be read {n} ways; the model wrote reading {which + 1}, "
                            f"but its scores do not prefer it by a clear margin ({ranking.margin:.2f} nats, "
                            f"{MARGIN:g} needed)")], ranking
        return [Problem("ranked", f"the snippet can be read {n} ways; the model wrote reading {which + 1}, which its "
                        f"scores prefer by {ranking.margin:.1f} nats", "warning")], ranking
    if plan.candidate is not None and plan.validation is not None and plan.validation.ok and text != plan.candidate:
        at = hunks(plan.candidate, text)[0].start + 1
        what = "the merge has one reading, which" if plan.kind == "snippet" else "the edit applied as written"
        return [Problem("merge_contradicted", f"{what} validates, and the model's file differs from it (first at "
                        f"line {at})", line=at)], None
    return [], None


def _candidate(plan: Plan) -> ReadingChoice | None:
    """The merge a refused model file leaves for review: the deterministic result, where it
    validated and is the one reading (mode model asked the model anyway). Not a result: the
    model did not confirm it, so it is shown, never applied on its own."""
    if plan.candidate is None or plan.validation is None or not plan.validation.ok or len(plan.readings) > 1:
        return None
    why = (f"the deterministic merge ({plan.merge_status}, confidence {plan.confidence:.2f})" if plan.kind == "snippet"
           else "the unified diff applied as written" if plan.kind == "diff" else "the search/replace blocks applied as written")
    return ReadingChoice(f"{why} validates, but the model did not confirm it",
                         plan.candidate, unified_diff(plan.request.initial_code, plan.candidate, _label(plan.request.path)))


def _result(original: str, text: str, path: str | None, validation: Validation, usage: Usage, stats: ApplyStats,
            readings: tuple[ReadingChoice, ...] = (), candidate: ReadingChoice | None = None) -> ApplyResult:
    """The result for `text`, with its diff and hunks from `original`."""
    return ApplyResult(text, unified_diff(original, text, _label(path)), validation, usage, stats, readings,
                       tuple(hunks(original, text)), candidate)


def _label(path: str | None) -> str:
    """The file's name in the diff headers (`a/<label>`): relative, '/'-separated."""
    return os.path.normpath(path).replace(os.sep, "/").lstrip("/") if path else "file"


def _stats(plan: Plan, path: str, engine_stats: GenerationStats, finish_reason: str | None, form: str | None,
           started: float, **given) -> ApplyStats:
    """The result's stats: which path served it and why, the engine's figures, and `seconds`
    (the merge for the deterministic path; submission to the last token for the model path).
    `given` sets the rest (the ranking, the chosen reading's merge verdict, max_tokens)."""
    e = engine_stats
    verdict = {"merge_status": plan.merge_status, "merge_confidence": plan.confidence, **given}
    return ApplyStats(path, plan.reason, plan.request.mode, plan.language, plan.kind, prompt_form=form,
                      finish_reason=finish_reason, steps=e.steps, accepted_per_step=e.accepted_per_step,
                      accepted_per_step_hist=e.accepted_per_step_hist, tokens_per_second=e.tokens_per_second,
                      ttft_ms=e.ttft_ms, drafted=e.drafted, accepted=e.accepted,
                      seconds=round(time.perf_counter() - started, 4), **verdict)
