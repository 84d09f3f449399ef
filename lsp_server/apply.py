"""The apply commands (`workspace/executeCommand`), each taking one object argument:

* `editapply.apply {uri, snippet?, instruction?, mode?}`: merge against the document as the
  editor holds it (documents.py), then send `workspace/applyEdit` with minimal text edits (only
  the changed lines, textedits.py) against the version the request started from. A result that
  fails validation is offered with `window/showMessageRequest` ("Apply anyway" / "Cancel") and
  applied only on "Apply anyway". A snippet that can be read several ways, none chosen (by the
  model, or in deterministic mode), is refused with its `readings`; the server asks which one
  (`window/showMessageRequest`), or returns them for the client to show (`pickReadings`) and
  apply with `applyMerged`. Likewise a model's file that failed validation where the merge
  validated (`candidate`, mode model): a `pickReadings` client gets it back unapplied, to offer
  the merge and the model's text for review; others are asked "Apply anyway" on the model's
  text. Returns `{applied, edits, uri, version, path, merged, diff, validation, stats, usage,
  readings, candidate}` (`path`: which path served it: deterministic, ranked or model; `merged`:
  the result's text, applied or not; `edits`: text edits sent; `readings`: `{label, diff,
  merged, logprob}` each; `candidate`: `{label, diff, merged}` or null).
* `editapply.preview {uri, snippet?, instruction?, mode?}`: the same run, nothing applied; returns
  `{uri, version, merged, diff, validation, stats, usage, readings, candidate}`.
* `editapply.applyMerged {uri, version, merged, hunks?}`: take a previewed text as is (no merge,
  no validation), still version checked; the document must be open. With `hunks` (indexes into
  the preview's `hunks`), only those changes are applied: per-hunk review.
* `editapply.hunks {uri, merged, drop?}`: the review of `merged` against the open document as it
  is now: `{uri, version, merged, diff, hunks}`, after the hunks numbered in `drop` are put back
  as the document has them (a rejected hunk). A preview and this list `hunks` as `{start, end,
  newStart, newEnd, diffRows}`: 0-based rows of the document and of `merged`, end exclusive, and
  the first and last row of `diff` that show it (engine/apply/hunks.py).

The pipeline is engine/apply/pipeline.py: `prepare` decides the path without a model; the
deterministic path runs here in a worker thread and never touches the engine; the model path goes
to the engine client (engine.py) with work-done progress (progress.py). One apply at a time per
document: a second one while one runs is refused (`busy`). The edit is checked against the
document's version just before it is sent (`stale_version`), and sent versioned, so an editor
also refuses it if the user typed in between.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from engine.apply.diff import unified_diff
from engine.apply.hunks import described, hunks, take
from engine.choices import MODES
from engine.apply.pipeline import ApplyRequest, Plan, prepare
from engine.apply.run import apply_edit
from engine.apply.result import ApplyResult
from engine.apply.text import BOM
from engine.types import EngineUnavailable
from lsp_server import documents, errors
from lsp_server.arguments import parse_args
from lsp_server.documents import ApplyRun, Snapshot
from lsp_server.progress import ModelProgress, figures
from lsp_server.textedits import line_edits

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

APPLY, PREVIEW, APPLY_MERGED = "editapply.apply", "editapply.preview", "editapply.applyMerged"
HUNKS = "editapply.hunks"
APPLY_ANYWAY, CANCEL = "Apply anyway", "Cancel"
READING_TITLE = 100  # characters of a reading's label on a button


@dataclass(frozen=True)
class ApplyArgs:
    uri: str
    snippet: str | None = None
    instruction: str | None = None
    mode: str | None = None


def apply_args(command: str, args: dict) -> ApplyArgs:
    a = parse_args(command, args, {"uri": (str,), "snippet": (str,), "instruction": (str,), "mode": (str,)}, ("uri",))
    if a.get("mode") is not None and a["mode"] not in MODES:
        raise JsonRpcInvalidParams(f"{command}: mode must be one of {', '.join(MODES)}, got {a['mode']!r}")
    if not (a.get("snippet") or "").strip() and not (a.get("instruction") or "").strip():
        raise JsonRpcInvalidParams(f"{command}: give a snippet, an instruction, or both")
    snippet = a["snippet"].removeprefix(BOM) if a.get("snippet") else a.get("snippet")
    return ApplyArgs(a["uri"], snippet, a.get("instruction"), a.get("mode"))


async def run_pipeline(ls: EditApplyServer, snap: Snapshot, a: ApplyArgs, verb: str) -> ApplyResult:
    """The apply pipeline on the snapshot: deterministic here, or the model through the engine."""
    s = ls.settings
    req = ApplyRequest(initial_code=snap.text, edit_snippet=a.snippet, instruction=a.instruction,
                       language=snap.language, path=snap.path, mode=a.mode or s.mode, prompt_form=s.prompt_form,
                       max_tokens=s.max_tokens)
    plan, result = await asyncio.to_thread(_plan, req)
    if result is not None:
        return result
    async with ModelProgress(ls, f"editapply: {verb} {snap.path or snap.uri}") as progress:
        try:
            result = await ls.engine().apply(req, plan, progress.report, progress.status)
        except EngineUnavailable:
            if plan.path != "rank":
                raise
            # No model to rank an ambiguous snippet's readings: they are still the user's to pick.
            result = await asyncio.to_thread(apply_edit, None, req, plan=plan)
        progress.done(summary(result))
    return result


def _plan(req: ApplyRequest) -> tuple[Plan, ApplyResult | None]:
    """The plan, and the result too when the deterministic path serves it (one worker-thread hop)."""
    plan = prepare(req)
    return plan, (None if plan.needs_model else apply_edit(None, req, plan=plan))


def summary(result: ApplyResult) -> str:
    verdict = "validation ok" if result.ok else "validation failed"
    if result.path == "ranked":
        return f"the model chose among {len(result.readings)} readings · {verdict}"
    if result.readings and not (result.path == "model" and result.ok):  # else the model wrote the ranked reading
        return f"{len(result.readings)} readings to choose from"
    if result.path != "model":
        return f"deterministic merge · {verdict}"
    s = result.stats
    offer = " · the merge validates: for review" if result.candidate is not None else ""
    return f"{figures(result.usage.completion_tokens, s.tokens_per_second, s.accepted_per_step)} · {verdict}{offer}"


async def confirm(ls: EditApplyServer, snap: Snapshot, result: ApplyResult) -> bool:
    """Ask whether to apply a result that failed validation; only "Apply anyway" says yes."""
    reasons = "; ".join(str(p) for p in result.validation.problems if p.severity == "error")
    if result.candidate is not None:  # not applied from a button: it needs a look (editapply.preview shows it)
        label = result.candidate.label
        reasons += f". {label[0].upper()}{label[1:]}: {PREVIEW} with mode deterministic shows it"
    answer = await asyncio.shield(ls.window_show_message_request_async(types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=f"editapply: the edit of {snap.path or snap.uri} failed validation: {reasons}",
        actions=[types.MessageActionItem(APPLY_ANYWAY), types.MessageActionItem(CANCEL)])))
    return answer is not None and answer.title == APPLY_ANYWAY


async def pick_reading(ls: EditApplyServer, snap: Snapshot, result: ApplyResult) -> str | None:
    """Ask which reading of an ambiguous snippet to apply (`window/showMessageRequest`, for
    clients that do not show a result's readings themselves: `pickReadings`); its merged text,
    or None."""
    titles = [f"{n}: {r.label}" if len(r.label) <= READING_TITLE else f"{n}: {r.label[:READING_TITLE - 3]}..."
              for n, r in enumerate(result.readings, 1)]
    answer = await asyncio.shield(ls.window_show_message_request_async(types.ShowMessageRequestParams(
        type=types.MessageType.Warning,
        message=f"editapply: the snippet can be read {len(titles)} ways in {snap.path or snap.uri}; which is meant?",
        actions=[types.MessageActionItem(t) for t in titles] + [types.MessageActionItem(CANCEL)])))
    chosen = titles.index(answer.title) if answer is not None and answer.title in titles else None
    return None if chosen is None else result.readings[chosen].merged_code


async def send_edit(ls: EditApplyServer, run: ApplyRun, snap: Snapshot, new_text: str, label: str) -> int:
    """Send `new_text` as minimal text edits against `snap`'s version; the number of edits sent.
    Raises CommandFailed when the document changed or the editor refuses the edit."""
    workspace = ls.client_capabilities.workspace
    if not (workspace and workspace.apply_edit):
        raise errors.CommandFailed(errors.NOT_APPLIED, "this editor does not accept workspace/applyEdit; use "
                                   f"{PREVIEW} and apply its merged text yourself")
    documents.check_unchanged(ls, snap)
    run.sending = True
    encoding = str(getattr(ls.workspace.position_encoding, "value", ls.workspace.position_encoding) or "utf-16")
    edits = [types.TextEdit(range=types.Range(start=types.Position(*e.start), end=types.Position(*e.end)),
                            new_text=e.text) for e in line_edits(snap.text, new_text, encoding)]
    if not edits:
        return 0
    if workspace.workspace_edit and workspace.workspace_edit.document_changes:
        target = types.OptionalVersionedTextDocumentIdentifier(uri=snap.uri, version=snap.version)
        edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=target, edits=edits)])
    else:  # the version was checked above; this client cannot check it again
        edit = types.WorkspaceEdit(changes={snap.uri: edits})
    # Shielded, like every request to the client: a cancel must not drop pygls' future for the
    # answer (the answer would then fail to land and be reported as a server error).
    response = await asyncio.shield(ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=label)))
    if not response.applied:
        why = f": {response.failure_reason}" if response.failure_reason else ""
        raise errors.CommandFailed(errors.NOT_APPLIED, f"the editor did not apply the edit to {snap.path or snap.uri}{why}")
    return len(edits)


def _result(snap: Snapshot, result: ApplyResult) -> dict:
    """The result as both commands return it: the HTTP answer's fields, a text named `merged`."""
    d = result.as_dict()

    def choice(r: dict) -> dict:
        return {"label": r["label"], "diff": r["diff"], "merged": r["merged_code"], "logprob": r["logprob"]}
    return {"uri": snap.uri, "version": snap.version, "merged": d["merged_code"], "diff": d["diff"], "hunks": d["hunks"],
            "validation": d["validation"], "stats": d["stats"], "usage": d["usage"],
            "readings": [choice(r) for r in d["readings"]], "candidate": d["candidate"] and choice(d["candidate"])}


def _review(snap: Snapshot, merged: str) -> dict:
    """`merged` against the document as review shows it: its diff and hunks."""
    diff = unified_diff(snap.text, merged, snap.path or "file")
    return {"merged": merged, "diff": diff, "hunks": described(diff, hunks(snap.text, merged))}


def _hunk_indexes(command: str, name: str, value: list, count: int) -> set[int]:
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < count for k in value):
        raise JsonRpcInvalidParams(f"{command}: {name} must list hunk indexes from 0 to {count - 1}, got {value!r} "
                                   "(the document or the text changed since the hunks were listed?)")
    return set(value)


def _merged_arg(command: str, merged: str) -> None:
    if len(merged.encode("utf-8", "surrogatepass")) > documents.MAX_DOCUMENT_BYTES:
        raise JsonRpcInvalidParams(f"{command}: merged is over {documents.MAX_DOCUMENT_BYTES:,} bytes")


def register(server: EditApplyServer) -> None:
    @server.command(APPLY)
    async def apply(ls: EditApplyServer, args: dict) -> dict:
        a = apply_args(APPLY, args)
        run = documents.claim(ls, a.uri)
        snap = None
        try:
            snap = documents.snapshot(ls, a.uri)
            result = await run_pipeline(ls, snap, a, "apply")
            out = {"applied": False, "path": result.path, **_result(snap, result)}
            label = f"editapply: apply to {snap.path or snap.uri}"
            if result.ok:
                text = result.merged_code
            elif result.readings:  # ambiguous: the client picks (pickReadings), or the server asks
                text = None if ls.settings.pick_readings else await pick_reading(ls, snap, result)
            elif result.candidate is not None and ls.settings.pick_readings:
                text = None  # the client offers the merge and the model's text for review
            else:
                text = result.merged_code if await confirm(ls, snap, result) else None
            if text is not None:
                out["edits"] = await send_edit(ls, run, snap, text, label)
                out["applied"] = True
            return out
        except asyncio.CancelledError:
            if snap is not None and (stale := run.interruption(snap.path or snap.uri, snap.version)):
                raise stale from None
            raise
        finally:
            documents.release(ls, a.uri, run)

    @server.command(PREVIEW)
    async def preview(ls: EditApplyServer, args: dict) -> dict:
        a = apply_args(PREVIEW, args)
        snap = documents.snapshot(ls, a.uri)
        return _result(snap, await run_pipeline(ls, snap, a, "preview"))

    @server.command(HUNKS)
    async def review(ls: EditApplyServer, args: dict) -> dict:
        a = parse_args(HUNKS, args, {"uri": (str,), "merged": (str,), "drop": (list,)}, ("uri", "merged"))
        _merged_arg(HUNKS, a["merged"])
        snap = documents.snapshot(ls, a["uri"])
        merged = a["merged"]
        if a.get("drop"):
            every = range(len(hunks(snap.text, merged)))
            merged = take(snap.text, merged, set(every) - _hunk_indexes(HUNKS, "drop", a["drop"], len(every)))
        return {"uri": snap.uri, "version": snap.version, **_review(snap, merged)}

    @server.command(APPLY_MERGED)
    async def apply_merged(ls: EditApplyServer, args: dict) -> dict:
        a = parse_args(APPLY_MERGED, args, {"uri": (str,), "version": (int,), "merged": (str,), "hunks": (list,)},
                       ("uri", "version", "merged"))
        _merged_arg(APPLY_MERGED, a["merged"])
        run = documents.claim(ls, a["uri"])
        try:
            snap = documents.snapshot(ls, a["uri"])
            if snap.version is None:
                raise JsonRpcInvalidParams(f"{APPLY_MERGED}: {a['uri']} is not open; its version is what is checked "
                                           f"(use {APPLY} for files that are not open)")
            if snap.version != a["version"]:
                raise errors.CommandFailed(errors.STALE, f"{snap.path or snap.uri} is at version {snap.version}, not "
                                           f"{a['version']}: it changed since the preview; nothing was applied")
            text = a["merged"]
            if a.get("hunks") is not None:
                count = len(hunks(snap.text, text))
                text = take(snap.text, text, _hunk_indexes(APPLY_MERGED, "hunks", a["hunks"], count))
            edits = await send_edit(ls, run, snap, text, f"editapply: apply to {snap.path or snap.uri}")
            return {"applied": True, "uri": snap.uri, "version": snap.version, "edits": edits}
        finally:
            documents.release(ls, a["uri"], run)
