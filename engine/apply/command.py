"""`editapply apply FILE [SNIPPET|-]`: the diff-preview tool over the apply pipeline.

Reads the file and the snippet (refusing binary, invalid UTF-8, empty input), runs `apply_edit`
here -- loading the model only when the request needs it, after the context check -- or on a
server (`--engine URL`), shows the diff (coloured on a terminal, exact text when piped) with a
live progress line while the model writes, then a summary on stderr. `--write` writes the file as
careful editors do (files.py: atomic rename keeping owner, group and mode; in place for hard
links), refusing when validation failed (unless `--force`), when the file is read-only (checked
before any work; `--force` does not override permissions), or when it changed on disk meanwhile.
`--json` prints the `POST /v1/apply` response object instead of the diff. In model mode the file
must fit the model's context, checked from the tokenizer before the merge or the model runs.

Exit codes: 0 applied or previewed; 1 validation failed, or the write was refused or failed (a
one-line reason; also when the diff cannot be printed: stdout on a full disk or a closed pipe);
2 bad input; 3 the file changed on disk while the apply ran -- another writer (a second `--write`,
an editor) got there first, and its edit is kept: run the apply again. On every failure the file
is left as it was.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

from rich.console import Console
from rich.live import Live
from rich.text import Text

from engine.apply import limits
from engine.apply.errors import ApplyCancelled, ApplyError, EmptySnippetError
from engine.apply.files import (FileChangedError, WriteError, check_writable, decode_source, read_bounded, read_source,
                                read_stream, write_source)
from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit
from engine.apply.result import ApplyResult, Progress
from engine.apply.text import BOM

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CHANGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"), ("\\", "dim"))


class CtrlC:
    """Remembers a Ctrl-C (SIGINT, then Python's own KeyboardInterrupt) while the apply runs. A
    C extension that sees the interrupt inside a call may report it as an error of its own
    (safetensors, loading the model: "could not determine the shape of object type
    'torch.storage.UntypedStorage'"): an error raised after Ctrl-C is the interrupt, not bad input."""

    def __init__(self):
        self.seen = False
        self._previous = None

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an ignored SIGINT stays ignored
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.seen = True
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def run_apply(args, err: Console) -> int:
    with CtrlC() as ctrl_c:
        return _run_apply(args, err, ctrl_c)


def _run_apply(args, err: Console, ctrl_c: CtrlC) -> int:
    try:
        source = read_source(args.file, max_bytes=limits.LIMITS.max_bytes)
        snippet = _read_snippet(args.snippet)
        req = ApplyRequest(source.text, snippet, args.instruction, args.language, args.file, _mode(args),
                           args.prompt_form, args.max_tokens, reading=args.reading)
        if snippet is None and not (args.instruction or "").strip():
            raise ApplyError("nothing to apply: give a SNIPPET file (or - for stdin), or --instruction")
        if args.engine and (args.backend or args.vllm_url):
            raise ApplyError("--engine (an editapply server) and --backend/--vllm-url (who generates here) do not go together")
        if args.write:
            check_writable(args.file)  # before any work: a read-only file is not written, forced or not
        result = _remote(args, req) if args.engine else _local(args, req, err)
    except (ApplyCancelled, KeyboardInterrupt):
        return _interrupted(err)
    except ValueError as exc:  # ApplyError, engine RequestError, bad configuration: bad input
        return _interrupted(err) if ctrl_c.seen else _fail(err, exc, EXIT_BAD_INPUT)
    except (RuntimeError, WriteError) as exc:  # the engine or the server failed; the file is read-only
        return _interrupted(err) if ctrl_c.seen else _fail(err, exc, EXIT_FAILED)
    try:
        if args.json:
            sys.stdout.write(json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        else:
            _print_diff(result.diff)
    except OSError as exc:  # stdout on a full disk (/dev/full), a closed pipe
        _silence_stdout()
        nothing = f"; {args.file} not written" if args.write else ""
        return _fail(err, OSError(f"cannot print the result to stdout ({exc.strerror or exc}){nothing}"), EXIT_FAILED)
    if not args.json:
        _print_summary(err, result)
    return _finish(args, err, source, result)


def _interrupted(err: Console) -> int:
    err.print("editapply: interrupted; nothing written", markup=False, highlight=False)
    return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not be
    written does not fail again on the way out (a traceback-like 'Exception ignored')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _fail(err: Console, exc: Exception, code: int) -> int:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    err.print(f"editapply: {reason}", markup=False, highlight=False, soft_wrap=True)
    return code


def _mode(args) -> str:
    if args.no_model and args.mode not in (None, "deterministic"):
        raise ApplyError(f"--no-model contradicts --mode {args.mode}")
    return "deterministic" if args.no_model else (args.mode or "auto")


def _read_snippet(arg: str | None) -> str | None:
    """The snippet text; None when no SNIPPET was given. A given but empty snippet is bad input."""
    if arg is None:
        return None
    max_bytes = limits.LIMITS.max_bytes
    if arg == "-":
        text = decode_source(read_bounded(sys.stdin.buffer, "the snippet (stdin)", max_bytes), "the snippet (stdin)")
    else:
        text = read_stream(arg, f"snippet {arg}", max_bytes)
    text = text.removeprefix(BOM)  # a snippet saved by a Windows tool; a diff after it must still read as one
    if not text.strip():
        raise EmptySnippetError()
    return text


def _remote(args, req: ApplyRequest) -> ApplyResult:
    from engine.apply.client import remote_apply

    return remote_apply(args.engine, req)


def _tokenizer(args):
    """The engine config (its context resolved) and the model's tokenizer (no weights loaded)."""
    from engine.config import EngineConfig
    from engine.service import config_for, tokenizer_for

    try:
        cfg = config_for(EngineConfig.from_env(model=args.model, backend=args.backend, vllm_url=args.vllm_url))
        return cfg, tokenizer_for(cfg)
    except (RuntimeError, ValueError, OSError) as exc:  # not installed, not a model folder
        raise ApplyError(str(exc)) from None


def _local(args, req: ApplyRequest, err: Console) -> ApplyResult:
    # The context checks need only the tokenizer: a file too large fails before the model loads,
    # and in model mode before the merge runs.
    cfg = tokenizer = None
    if req.mode == "model":
        limits.check(req)  # sizes first: before torch and the tokenizer load
        cfg, tokenizer = _tokenizer(args)
        limits.check_context(req, tokenizer, cfg.max_model_len)
    plan = prepare(req)
    if not plan.needs_model:
        return apply_edit(None, req, plan=plan)
    from engine.apply.model_path import build_job

    if tokenizer is None:  # mode auto, and the merge was not trusted
        cfg, tokenizer = _tokenizer(args)
        limits.check_context(req, tokenizer, cfg.max_model_len)
    job = build_job(plan, tokenizer, cfg.max_model_len)
    doing = "the model ranks the readings" if job is None else "the model writes the file"
    err.print(f"{plan.reason}: {doing}", markup=False, highlight=False, soft_wrap=True, style="dim")
    name = os.path.basename(str(cfg.model).rstrip('/'))
    doing = f"connecting to vLLM at {cfg.vllm_url}" if cfg.vllm_url else f"starting vLLM for {name}" \
        if cfg.backend == "vllm" else f"loading {name}"
    with err.status(doing):
        from engine.service import open_service

        engine = open_service(cfg)
    try:
        if engine.cfg.max_model_len != cfg.max_model_len:  # a vLLM server's own context decides
            limits.check_context(req, tokenizer, engine.cfg.max_model_len)
            job = build_job(plan, tokenizer, engine.cfg.max_model_len)
        if job is None:
            with err.status("ranking the readings"):
                return apply_edit(engine, req, plan=plan)
        first = Text(f"prefilling {job.prompt_tokens} prompt tokens ...", style="dim")
        with Live(first, console=err, transient=True, refresh_per_second=8) as live:
            return apply_edit(engine, req, on_progress=lambda p: live.update(_progress_line(p, job.max_tokens)),
                              plan=plan, job=job)
    finally:
        engine.shutdown()


def _progress_line(p: Progress, max_tokens: int) -> Text:
    return Text(f"generating: {p.tokens}/{max_tokens} tokens · {p.tokens_per_second:.1f} tok/s · "
                f"{p.accepted_per_step:.2f} accepted/step · {p.steps} steps", style="cyan")


def _print_diff(diff: str) -> None:
    if not sys.stdout.isatty():
        sys.stdout.write(diff)  # exact text: `editapply apply f s > fix.patch` is a patch
        sys.stdout.flush()
        return
    out = Console(highlight=False, soft_wrap=True)
    for line in diff.splitlines():
        style = next((s for prefix, s in DIFF_STYLES if line.startswith(prefix)), None)
        out.print(Text(line.rstrip("\r"), style=style or ""))


def _print_summary(err: Console, result: ApplyResult) -> None:
    s, u = result.stats, result.usage
    line = f"{s.path} path · {s.reason}"
    if (rk := s.ranking) is not None:
        line += (f"\nthe model ranked {rk.readings} readings in {rk.seconds:.2f} s ({rk.prompt_tokens} prompt + "
                 f"{rk.scored_tokens} scored tokens): margin {rk.margin:.1f} nats, {rk.threshold:g} needed")
    if s.path == "model":
        ttft = f"{s.ttft_ms / 1000:.1f} s" if s.ttft_ms is not None else "-"
        line += (f"\n{u.completion_tokens} tokens in {s.seconds:.1f} s · {s.tokens_per_second:.1f} tok/s · "
                 f"{s.accepted_per_step:.2f} accepted/step over {s.steps} steps · prompt {u.prompt_tokens} tokens, "
                 f"first token after {ttft} · prediction tokens accepted {u.accepted_prediction_tokens}, "
                 f"rejected {u.rejected_prediction_tokens} · prompt form {s.prompt_form}")
    else:
        line += f" · {s.seconds * 1000:.0f} ms"
    err.print(line, markup=False, highlight=False, soft_wrap=True)
    if not result.diff:
        err.print("no changes", markup=False, highlight=False)
    verdict = Text("validation ok", style="green") if result.ok else Text("validation failed", style="bold red")
    err.print(verdict)
    for p in result.validation.problems:
        err.print(Text(f"  {p.severity}: {p}", style="red" if p.severity == "error" else "yellow"), soft_wrap=True)
    if result.candidate is not None:
        err.print(Text(f"{result.candidate.label}: --mode deterministic gives it", style="cyan"),
                  soft_wrap=True)
    if result.readings and not result.ok:
        err.print("the snippet can be read these ways; take one with --reading N:", soft_wrap=True)
        for n, r in enumerate(result.readings, 1):
            score = "" if r.logprob is None else f" (log-probability {r.logprob:.1f})"
            err.print(Text(f"  reading {n}{score}: {r.label}", style="cyan"), soft_wrap=True)


def _finish(args, err: Console, source, result: ApplyResult) -> int:
    """Write (or not) and choose the exit code."""
    def say(text: str, style: str = "") -> None:
        err.print(Text(text, style=style), soft_wrap=True)

    if not args.write:
        if not result.ok:
            say(f"{args.file} not written (preview only); validation failed", "red")
            return EXIT_FAILED
        if result.diff:
            say(f"preview only: pass --write to change {args.file}", "dim")
        return EXIT_OK
    if not result.ok and not args.force:
        say(f"refusing to write {args.file}: validation failed (pass --force to write anyway)", "bold red")
        return EXIT_FAILED
    if result.merged_code == source.text:
        say(f"{args.file} unchanged; nothing to write", "dim")
        return EXIT_OK
    try:
        how = write_source(source, result.merged_code)
    except FileChangedError as exc:
        say(f"editapply: {exc}", "bold red")
        return EXIT_CHANGED
    except WriteError as exc:
        say(f"editapply: {exc}", "bold red")
        return EXIT_FAILED
    say(f"wrote {args.file}" + (" in place (hard links and owner kept)" if how == "in place" else "")
        + (" (forced past failed validation)" if not result.ok else ""), "green")
    return EXIT_OK
