"""Build bench/data/dev_hard.jsonl: lazy edit snippets in twelve styles, from real commits.

Every case is one real commit that edits one source file: `original` is the file at the
parent, `expected` the file at the commit, both exact bytes. Only the snippet is written
here, and it is written the way chat models and peer tools' fixtures write them: markers of
many wordings and depths, chat prose around fenced blocks, snippets that start at line 1 or
stop at the last line without a marker, a whole class with the untouched methods left out,
one bare function, new doc comments over bodies elided, and so on (STYLES below).

Construction, in order:

1. Mine. Walk each repository's non-merge history (`git log --no-renames --raw`). Keep a
   commit when exactly one non-test source file of the repo's extensions changes and it is
   modified (tests and docs changed beside it are ignored), the subject is a real edit (no
   merge, revert, release, version bump, formatter or lint run, changelog), the file is
   800-20,000 characters, valid UTF-8 with LF endings, not generated, the diff has 1-5
   `-U3` hunks and 2-120 changed lines and is not whitespace-only.
2. Build. Try every style on every commit with a random generator seeded by
   (seed, case id, style). A builder returns None when its style cannot express the commit
   fairly: a careful human reading original + snippet must produce `expected`. Windows of
   context around the `-U0` change blocks are widened until their context occurs once in
   the original (or is pinned by the unique context on the window's other side); with
   --rstrip-context, lines that differ only in trailing whitespace count as the same line there.
3. Select. Whole repositories are assigned to `eval` or `train`. Per split, styles are
   filled round-robin, scarcest first, each time with the candidate whose repository,
   language and path are least used so far (caps: N cases per repository, 2 per path,
   1 per commit; never a snippet with a copied line that opens with ``` (it would read as a
   fence)). editapply is never run: no case is picked or dropped by its result.
4. Perturb. Some snippets get whitespace drift (leading tabs of context lines as 4 spaces,
   tab-indented files only), a bare code fence, a trailing blank line or no final newline.
5. Check. expected != original; every line of the snippet is a line of `expected`, a marker,
   a fence or (outside fences) prose; each style's shape holds. Counts are printed.

Usage (the exact command that made the committed file is in bench/data/README.md):

    .venv/bin/python bench/make_dev_hard.py --seed 404 --out bench/data/dev_hard.jsonl \
        --repo encode/starlette=$M/encode+starlette/repo:18:py:eval ...

where each --repo is owner/name=GITDIR:N:exts:split (N: the most cases taken from it).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import json
import random
import re
import subprocess
import sys
import typing
from functools import cached_property

import tree_sitter

from engine.apply import languages

STYLES = (
    "markers", "prose_fences", "top_no_marker", "bottom_no_marker", "deletion_near_marker",
    "whole_file", "open_end", "blank_join", "class_rewrite", "single_function",
    "comment_every_method", "top_imports_no_marker",
)

LANGUAGE_BY_EXT = {
    "py": "python", "js": "javascript", "mjs": "javascript", "cjs": "javascript",
    "ts": "typescript", "mts": "typescript", "go": "go", "rs": "rust", "java": "java", "rb": "ruby",
    # Languages the engine has no grammar for (dev_langs.jsonl); their grammar wheels are the
    # generator's own (the `bench` extra), imported where a repository asks for them.
    "kt": "kotlin", "php": "php", "swift": "swift", "scala": "scala", "lua": "lua",
}
LINE_COMMENT = {"python": "#", "ruby": "#", "lua": "--"}  # every other language here: "//"
FENCE_TAGS = {
    "python": ("python", "py"), "javascript": ("javascript", "js"), "typescript": ("typescript", "ts"),
    "go": ("go",), "rust": ("rust", "rs"), "java": ("java",), "ruby": ("ruby", "rb"),
    "kotlin": ("kotlin", "kt"), "php": ("php",), "swift": ("swift",), "scala": ("scala",), "lua": ("lua",),
}

MIN_CHARS, MAX_CHARS = 800, 20_000
MIN_CHANGED, MAX_CHANGED = 2, 120
MAX_HUNKS = 5
MAX_LINE_CHARS = 400
MAX_WIDEN = 10  # extra context lines a side may take to become unique

EXCLUDED_DIRS = re.compile(
    r"(^|/)([^/]*(test|example|bench)[^/]*|specs?|fixtures?|docs?|scripts|performance|metrics|vendor|vendored|"
    r"third_party|node_modules|dist|build|www|website|playground|tools|_unicode_data|\.[^/]+)/", re.IGNORECASE)
EXCLUDED_FILES = re.compile(
    r"(^|/)(test[^/]*|[^/]*_tests?\.\w+|bench[^/]*|[^/]*[Bb]enchmark[^/]*|[^/]*\.(test|spec)\.\w+|[^/]*\.d\.ts|[^/]*\.min\.js|setup\.py|"
    r"conf\.py|conftest\.py|_?version\.(py|rb|go|ts|js)|__version__\.py|[^/]*\.config\.\w+|"
    r"(gulpfile|Gruntfile|rollup|webpack|jest|karma)[^/]*|\.[^/]*)$")
EXCLUDED_SUBJECTS = re.compile(
    r"^(merge|revert)|\brelease\b|\bbump|\bversion\b|^v?\d+\.\d+|\bprepare\b|changelog|\bhistory\b|"
    r"\bformat|\bfmt\b|prettier|\bblack\b|\bisort\b|\blint|clippy|\bsubmodule|\b[0-9a-f]{7,40}\b|"
    r"\breview\b|\bfeedback\b|\bwip\b", re.IGNORECASE)
GENERATED = re.compile(r"DO NOT EDIT|@generated|auto-generated|autogenerated", re.IGNORECASE)

# A context side made only of these cannot place a window, so it is widened past them.
TRIVIAL = re.compile(r"^\s*([{}()\[\];,]*|\"\"\"|'''|end|\*/|\)\s*\{|\}\s*else\s*\{|else:?)\s*$")

IMPORT_LINE = {
    "python": re.compile(r"^\s*(import\s|from\s+\S+\s+import\b)"),
    "javascript": re.compile(r"^\s*(import\b|export\s.*\bfrom\b|.*\brequire\()"),
    "typescript": re.compile(r"^\s*(import\b|export\s.*\bfrom\b|.*\brequire\()"),
    "go": re.compile(r"^\s*(import\b|(\w+\s+)?\"[\w./-]+\"\s*$)"),
    "rust": re.compile(r"^\s*(pub(\(\w+\))?\s+)?(use\s|extern\s+crate\b|mod\s+\w+;)"),
    "java": re.compile(r"^\s*import\s"),
    "ruby": re.compile(r"^\s*require(_relative)?\b"),
    "kotlin": re.compile(r"^\s*import\s"),
    "php": re.compile(r"^\s*(use\s|(require|include)(_once)?\b)"),
    "swift": re.compile(r"^\s*(@testable\s+)?import\s"),
    "scala": re.compile(r"^\s*import\s"),
    "lua": re.compile(r"^\s*(local\s+\w+\s*=\s*)?require\b"),
}


# --------------------------------------------------------------------------- git


class Git:
    """Read-only access to one bare mirror: history, blobs, blob diffs."""

    def __init__(self, gitdir: str):
        self.gitdir = gitdir
        self._cat = subprocess.Popen(["git", "--git-dir", gitdir, "cat-file", "--batch"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, *args: str) -> str:
        out = subprocess.run(["git", "--git-dir", self.gitdir, *args], capture_output=True, check=True)
        return out.stdout.decode("utf-8", "replace")

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").strip()

    def blob(self, sha: str) -> bytes | None:
        """The blob's bytes, or None where the snapshot lacks it."""
        self._cat.stdin.write(sha.encode() + b"\n")
        self._cat.stdin.flush()
        header = self._cat.stdout.readline().split()
        if len(header) < 3 or header[1] != b"blob":
            return None
        data = self._cat.stdout.read(int(header[2]))
        self._cat.stdout.read(1)  # the newline after each object
        return data

    def commits(self):
        """Yield (sha, parents, subject, [(status, old_blob, new_blob, path)]) newest first."""
        log = self.run("log", "--no-merges", "--no-renames", "--raw", "--no-abbrev",
                       "--format=%x00%H %P%x01%s")
        for record in log.split("\x00")[1:]:
            head, _, raw = record.partition("\n")
            shas, _, subject = head.partition("\x01")
            changes = []
            for line in raw.splitlines():
                if line.startswith(":"):
                    meta, _, path = line.partition("\t")
                    fields = meta.split()
                    changes.append((fields[4], fields[2], fields[3], path))
            sha, *parents = shas.split()
            yield sha, parents, subject.strip(), changes

    def diff(self, old_blob: str, new_blob: str, context: int) -> str:
        return self.run("diff", f"-U{context}", "--no-color", "--no-ext-diff", "--no-textconv",
                        "--diff-algorithm=myers", old_blob, new_blob)


# --------------------------------------------------------------------------- commits


@dataclasses.dataclass(frozen=True)
class Block:
    """One `-U0` change block, 0-based: old lines [old_start, old_end) became new [new_start, new_end)."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int

    @property
    def old_end(self) -> int:
        return self.old_start + self.old_len

    @property
    def new_end(self) -> int:
        return self.new_start + self.new_len


HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def parse_blocks(diff_u0: str) -> list[Block]:
    """-U0 hunk headers as 0-based blocks (git numbers an empty side by the line before it)."""
    blocks = []
    for a, b, c, d in HUNK_HEADER.findall(diff_u0):
        old_len = 1 if b == "" else int(b)
        new_len = 1 if d == "" else int(d)
        blocks.append(Block(int(a) - (old_len > 0), old_len, int(c) - (new_len > 0), new_len))
    return blocks


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


@dataclasses.dataclass
class Commit:
    """A commit that passed the mining rules, with its file before and after."""

    repo: str
    split: str
    sha: str
    parent: str
    path: str
    language: str
    subject: str
    original: str
    expected: str
    blocks: list[Block]
    n_hunks: int
    # --rstrip-context: trailing whitespace, which a reader cannot see, does not tell context apart
    rstrip_context: typing.ClassVar[bool] = False

    @property
    def id(self) -> str:
        return f"{self.repo}@{self.sha[:10]}:{self.path}"

    @cached_property
    def old(self) -> list[str]:
        return split_lines(self.original)

    @cached_property
    def new(self) -> list[str]:
        return split_lines(self.expected)

    @cached_property
    def instruction(self) -> str:
        return clean_instruction(self.subject)

    @cached_property
    def changed_lines(self) -> int:
        return sum(b.old_len + b.new_len for b in self.blocks)

    @cached_property
    def new_to_old(self) -> list[int | None]:
        """For each line of `new`: its index in `old`, or None where the commit added it."""
        mapping: list[int | None] = []
        old_i = 0
        for b in self.blocks:
            while len(mapping) < b.new_start:
                mapping.append(old_i)
                old_i += 1
            mapping.extend([None] * b.new_len)
            old_i = b.old_end
        while len(mapping) < len(self.new):
            mapping.append(old_i)
            old_i += 1
        return mapping

    @cached_property
    def old_positions(self) -> dict[str, list[int]]:
        index = collections.defaultdict(list)
        for i, line in enumerate(self.old):
            index[self.key(line)].append(i)
        return index

    def key(self, line: str) -> str:
        return line.rstrip() if self.rstrip_context else line

    @cached_property
    def defs_new(self) -> list[Def]:
        return definitions(self.expected, self.language)

    @cached_property
    def defs_old(self) -> list[Def]:
        return definitions(self.original, self.language)

    def occurrences(self, seq: list[str]) -> list[int]:
        """Start indices in `old` where the lines `seq` occur in a row."""
        if not seq:
            return []
        n, want = len(seq), [self.key(line) for line in seq]
        return [i for i in self.old_positions.get(want[0], ())
                if [self.key(line) for line in self.old[i:i + n]] == want]


def clean_instruction(subject: str) -> str:
    """The commit subject as dev.jsonl writes it: no PR number, no [skip ci], no type prefix, no final dot."""
    s = re.sub(r"\[skip ci\]|\[ci skip\]", "", subject, flags=re.IGNORECASE)
    s = re.sub(r"(\s*\(#\d+\))+\s*$", "", s.strip())
    s = re.sub(r"^(feat|fix|chore|docs|refactor|perf|style|test|build|ci|types?|deps)(\([^)]*\))?!?:\s*",
               "", s, flags=re.IGNORECASE)
    s = s.strip().rstrip(".").strip()
    return s[:1].upper() + s[1:]


def source_language(path: str, exts: set[str]) -> str | None:
    ext = path.rsplit(".", 1)[-1] if "." in path else ""
    if ext not in exts or EXCLUDED_DIRS.search(path) or EXCLUDED_FILES.search(path):
        return None
    return LANGUAGE_BY_EXT.get(ext)


def decode(data: bytes | None) -> str | None:
    if data is None or b"\r" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def plausible_file(text: str) -> bool:
    return (MIN_CHARS <= len(text) <= MAX_CHARS and not GENERATED.search(text[:1500])
            and max(map(len, text.split("\n"))) <= MAX_LINE_CHARS)


def mine(repo: str, split: str, git: Git, exts: set[str]):
    """Yield every Commit of one repository that passes the mining rules (module docstring, step 1)."""
    for sha, parents, subject, changes in git.commits():
        if not parents or len(subject.split()) < 3 or EXCLUDED_SUBJECTS.search(subject):
            continue
        sources = [c for c in changes if source_language(c[3], exts)]
        if len(sources) != 1 or sources[0][0] != "M":
            continue
        _, old_blob, new_blob, path = sources[0]
        original, expected = decode(git.blob(old_blob)), decode(git.blob(new_blob))
        if original is None or expected is None or original == expected:
            continue
        if not plausible_file(original) or len(expected) > MAX_CHARS + 4000:
            continue
        if max(map(len, expected.split("\n"))) > MAX_LINE_CHARS:
            continue
        if re.sub(r"\s+", "", original) == re.sub(r"\s+", "", expected):
            continue  # whitespace-only
        blocks = parse_blocks(git.diff(old_blob, new_blob, 0))
        n_hunks = len(HUNK_HEADER.findall(git.diff(old_blob, new_blob, 3)))
        changed = sum(b.old_len + b.new_len for b in blocks)
        if not (1 <= n_hunks <= MAX_HUNKS and MIN_CHANGED <= changed <= MAX_CHANGED):
            continue
        yield Commit(repo, split, sha, parents[0], path, source_language(path, exts), subject,
                     original, expected, blocks, n_hunks)


# --------------------------------------------------------------------------- syntax


FUNCTION_NODES = {
    "python": {"function_definition"},
    "javascript": {"function_declaration", "generator_function_declaration", "method_definition"},
    "typescript": {"function_declaration", "generator_function_declaration", "method_definition"},
    "go": {"function_declaration", "method_declaration"},
    "rust": {"function_item"},
    "java": {"method_declaration", "constructor_declaration"},
    "ruby": {"method", "singleton_method"},
    "kotlin": {"function_declaration"},
    "php": {"method_declaration", "function_definition"},
    "swift": {"function_declaration", "init_declaration"},
    "scala": {"function_definition"},
    "lua": {"function_declaration"},
}
CONTAINER_NODES = {
    "python": {"class_definition"},
    "javascript": {"class_declaration", "class"},
    "typescript": {"class_declaration", "class", "abstract_class_declaration"},
    "go": set(),
    "rust": {"impl_item", "trait_item"},
    "java": {"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"},
    "ruby": {"class", "module"},
    "kotlin": {"class_declaration", "object_declaration", "companion_object"},
    "php": {"class_declaration", "interface_declaration", "trait_declaration"},
    "swift": {"class_declaration", "protocol_declaration"},
    "scala": {"class_definition", "object_definition", "trait_definition"},
    "lua": set(),
}
# Other definitions a doc comment sits on (comment_every_method).
ITEM_NODES = {
    "python": set(),
    "javascript": {"lexical_declaration", "variable_declaration", "field_definition"},
    "typescript": {"lexical_declaration", "variable_declaration", "interface_declaration", "enum_declaration",
                   "type_alias_declaration", "public_field_definition", "property_signature",
                   "method_signature", "abstract_method_signature", "function_signature"},
    "go": {"type_declaration", "const_declaration", "var_declaration", "field_declaration", "method_elem",
           "method_spec", "const_spec"},
    "rust": {"struct_item", "enum_item", "type_item", "const_item", "static_item", "mod_item", "union_item",
             "macro_definition", "field_declaration", "enum_variant", "function_signature_item"},
    "java": {"field_declaration", "enum_constant", "annotation_type_declaration"},
    "ruby": set(),
    "kotlin": {"property_declaration"},
    "php": {"property_declaration", "const_declaration"},
    "swift": {"property_declaration", "protocol_function_declaration"},
    "scala": {"val_definition", "var_definition", "function_declaration"},
    "lua": set(),
}
# The grammars the engine has not (the `bench` extra's wheels), as (module, function); every other
# language's comes from the engine (`languages.grammar`).
BENCH_GRAMMARS = {
    "swift": ("tree_sitter_swift", "language"), "scala": ("tree_sitter_scala", "language"),
    "lua": ("tree_sitter_lua", "language"),
}
BODIES = {"class_body", "function_body", "enum_class_body"}  # Kotlin's bodies have no field name
WRAPPERS = {"decorated_definition", "export_statement"}  # a definition starts where its wrapper does
FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}

_PARSERS: dict[str, tree_sitter.Parser] = {}


def parser(language: str) -> tree_sitter.Parser:
    if language not in _PARSERS:
        if language in BENCH_GRAMMARS:
            module, function = BENCH_GRAMMARS[language]
            grammar = tree_sitter.Language(getattr(importlib.import_module(module), function)())
        else:
            grammar = languages.grammar(language)
            if grammar is None:
                raise RuntimeError(f"no grammar for {language}: install the engine's tree-sitter wheels")
        _PARSERS[language] = tree_sitter.Parser(grammar)
    return _PARSERS[language]


@dataclasses.dataclass
class Def:
    """A definition in a file, by 0-based lines (inclusive)."""

    kind: str            # "function" | "container" | "item"
    name: str
    start: int           # first line, decorators / `export` included
    end: int             # last line
    header_end: int      # last line of the signature
    lead: int            # first line of the comments and attributes attached above `start`
    members: list[Def] = dataclasses.field(default_factory=list)  # containers: their direct members
    docstring: tuple[int, int] | None = None  # Python: lines of the body's leading string


def node_text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def end_line(node) -> int:
    row, col = node.end_point
    return row - 1 if col == 0 and row > node.start_point.row else row


def function_value(node):
    """JS/TS: the function a declaration or assignment binds, and the name it binds it to."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) == 1:
            value = declarators[0].child_by_field_name("value")
            if value is not None and value.type in FUNCTION_VALUES:
                return value, node_text(declarators[0].child_by_field_name("name"))
    if node.type == "expression_statement" and node.named_children:
        expr = node.named_children[0]
        if expr.type == "assignment_expression":
            right = expr.child_by_field_name("right")
            if right is not None and right.type in FUNCTION_VALUES:
                return right, node_text(expr.child_by_field_name("left"))
    if node.type in ("pair", "public_field_definition", "field_definition"):
        value = node.child_by_field_name("value")
        key = node.child_by_field_name("key") or node.child_by_field_name("name") \
            or node.child_by_field_name("property")
        if value is not None and value.type in FUNCTION_VALUES:
            return value, node_text(key)
    return None, ""


def classify(node, language: str) -> tuple[str, str, object]:
    """(kind, name, body node) for a definition node, kind "" for anything else."""
    t = node.type
    if t in FUNCTION_NODES[language]:
        return "function", node_text(node.child_by_field_name("name")), body_of(node)
    if language in ("javascript", "typescript"):
        value, name = function_value(node)
        if value is not None:
            return "function", name, value.child_by_field_name("body")
        if t == "object" and sum(1 for c in node.named_children if is_function_member(c, language)) >= 3:
            return "container", object_name(node), node
    if t in CONTAINER_NODES[language]:
        return "container", node_text(node.child_by_field_name("name")) or t, body_of(node)
    if t in ITEM_NODES[language]:
        name = node.child_by_field_name("name")
        return "item", node_text(name) if name is not None else node_text(node).split("\n")[0], \
            node.child_by_field_name("body")
    return "", "", None


def body_of(node):
    """The node's body: its `body` field, or (Kotlin) its child that is one."""
    body = node.child_by_field_name("body")
    return body if body is not None else next((c for c in node.named_children if c.type in BODIES), None)


def is_function_member(node, language: str) -> bool:
    return node.type in FUNCTION_NODES[language] or function_value(node)[0] is not None


def object_name(node) -> str:
    parent = node.parent
    if parent is not None and parent.type == "variable_declarator":
        return node_text(parent.child_by_field_name("name"))
    if parent is not None and parent.type == "assignment_expression":
        return node_text(parent.child_by_field_name("left"))
    return "object"


def attached_lead(lines: list[str], start: int, language: str) -> int:
    """First line of the comments / attributes directly above `start` (no blank line between)."""
    line_comment = LINE_COMMENT.get(language, "//")
    j = start
    while j > 0:
        t = lines[j - 1].strip()
        if t.startswith(line_comment) and not (language == "rust" and t.startswith("#")) or \
                t.startswith(("#[", "#![")) and language == "rust" or t.startswith("@") and language != "ruby":
            j -= 1
        elif t.endswith("*/") and line_comment == "//":
            k = j - 1
            while k >= 0 and "/*" not in lines[k]:
                k -= 1
            if k < 0:
                break
            j = k
        else:
            break
    return j


def header_end_line(node, body, language: str, start_row: int) -> int:
    """Last line of a definition's signature: the body's `{` line, or the line before a Python body."""
    if body is None:
        return start_row if end_line(node) - start_row > 2 else end_line(node)
    row = body.start_point.row
    if language == "python":
        return max(node.start_point.row, row - 1) if row > node.start_point.row else row
    if language in ("ruby", "lua"):
        return max(node.start_point.row, row - 1)
    return row


def python_docstring(body) -> tuple[int, int] | None:
    if body is None or not body.named_children:
        return None
    first = body.named_children[0]
    if first.type == "expression_statement" and first.named_children and first.named_children[0].type == "string":
        return first.start_point.row, end_line(first)
    return None


NOT_MEMBERS = {"comment", "line_comment", "block_comment", "attribute_item", "inner_attribute_item", "decorator"}


def definitions(text: str, language: str) -> list[Def]:
    """Every function, container and doc-commentable item in the file, outermost first."""
    lines = text.split("\n")
    found: list[Def] = []
    containers = []  # (container, its body node)

    def walk(node) -> None:
        kind, name, body = classify(node, language)
        if kind:
            outer = node.parent if node.parent is not None and node.parent.type in WRAPPERS else node
            start = outer.start_point.row
            d = Def(kind, name, start, end_line(outer), header_end_line(node, body, language, node.start_point.row),
                    attached_lead(lines, start, language))
            if language == "python" and kind in ("function", "container"):
                d.docstring = python_docstring(body)
            found.append(d)
            if kind == "container" and body is not None:
                containers.append((d, body))
        for child in node.children:
            walk(child)

    walk(parser(language).parse(text.encode("utf-8")).root_node)
    by_span = {(d.start, d.end): d for d in found}
    for box, body in containers:
        for child in body.named_children:
            if child.type in NOT_MEMBERS:
                continue
            row = child.start_point.row
            member = by_span.get((row, end_line(child))) or Def(
                "other", node_text(child).split("\n")[0].strip(), row, end_line(child), row,
                attached_lead(lines, row, language))
            box.members.append(member)
    return found


def innermost(defs: list[Def], first: int, last: int, kinds: set[str]) -> Def | None:
    """The smallest definition of `kinds` whose lines hold [first, last]."""
    best = None
    for d in defs:
        if d.kind in kinds and d.start <= first and last <= d.end:
            if best is None or d.end - d.start < best.end - best.start:
                best = d
    return best


# --------------------------------------------------------------------------- windows


@dataclasses.dataclass
class Window:
    """Lines [start, end) of `expected` shown together; [first, last) holds its changes."""

    start: int
    end: int
    first: int
    last: int
    fix_up: bool = False    # the upper context has an exact length (deletion_near_marker)
    fix_down: bool = False
    ends_block: bool = False  # the window ends where a shown definition ends (open_end, deleting kind)


def trivial(lines: list[str]) -> bool:
    return all(TRIVIAL.match(line) for line in lines)


def grow_up(c: Commit, w: Window, blank_edge: bool) -> None:
    """Widen the upper context past trivial lines, then until it occurs once in the original."""
    e = c.new
    while w.start > 0 and trivial(e[w.start:w.first]):
        w.start -= 1
    if not blank_edge:
        while w.start < w.first - 1 and not e[w.start].strip():
            w.start += 1
    budget = MAX_WIDEN
    while w.start > 0 and budget and (len(c.occurrences(e[w.start:w.first])) != 1
                                      or not blank_edge and not e[w.start].strip()):
        w.start -= 1
        budget -= 1


def grow_down(c: Commit, w: Window, blank_edge: bool) -> None:
    e, n = c.new, len(c.new)
    while w.end < n and trivial(e[w.last:w.end]):
        w.end += 1
    if not blank_edge:
        while w.end > w.last + 1 and not e[w.end - 1].strip():
            w.end -= 1
    budget = MAX_WIDEN
    while w.end < n and budget and (len(c.occurrences(e[w.last:w.end])) != 1
                                    or not blank_edge and not e[w.end - 1].strip()):
        w.end += 1
        budget -= 1


def merge_close(windows: list[Window], min_gap: int = 3) -> list[Window]:
    """Join windows that overlap or leave fewer than `min_gap` lines between them."""
    merged: list[Window] = []
    for w in sorted(windows, key=lambda w: (w.first, w.last)):
        if merged and w.start - merged[-1].end < min_gap:
            m = merged[-1]
            end = w.end if w.ends_block else max(m.end, w.end)  # a block's end is where the window must stop
            merged[-1] = Window(min(m.start, w.start), end, m.first, max(m.last, w.last),
                                m.fix_up, w.fix_down if w.end >= m.end else m.fix_down, w.ends_block)
        else:
            merged.append(w)
    return merged


def old_span(c: Commit, w: Window) -> tuple[int, int]:
    """The original's lines [start, end) that window `w` stands for."""
    n2o = c.new_to_old
    start = n2o[w.start] if w.start < w.first else (0 if w.start == 0 else old_after(c, w.start))
    end = n2o[w.end - 1] + 1 if w.end > w.last else (len(c.old) if w.end == len(c.new) else old_before(c, w.end))
    return start, end


def old_after(c: Commit, new_index: int) -> int:
    """Index in `old` of the first line a change at `new_index` can touch."""
    for b in c.blocks:
        if b.new_start >= new_index:
            return b.old_start
    return len(c.old)


def old_before(c: Commit, new_index: int) -> int:
    for b in reversed(c.blocks):
        if b.new_end <= new_index:
            return b.old_end
    return 0


def starts_file(c: Commit, w: Window) -> bool:
    """Does `w` start both files? Its context is the original's head, or its first change a pure insertion there."""
    if w.start != 0:
        return False
    if w.first > 0:
        return c.new_to_old[0] == 0
    return c.blocks[0].old_len == 0 and c.blocks[0].old_start == 0


def ends_file(c: Commit, w: Window) -> bool:
    """Does `w` end both files? A snippet ending on a new last line could not say the old tail is gone."""
    if w.end != len(c.new):
        return False
    if w.last < w.end:
        return c.new_to_old[-1] == len(c.old) - 1
    return c.blocks[-1].old_len == 0 and c.blocks[-1].old_end == len(c.old)


def anchored(c: Commit, w: Window) -> bool:
    """Can a reader place `w`? Each side occurs once, or the other side pins it as the nearest occurrence.

    A side at the file's edge is pinned by the edge itself when it really is the original's edge."""
    upper, lower = c.new[w.start:w.first], c.new[w.last:w.end]
    o_start, o_end = old_span(c, w)
    up_free, down_free = starts_file(c, w), ends_file(c, w) or w.ends_block
    up_hits = c.occurrences(upper) if upper else []
    down_hits = c.occurrences(lower) if lower else []
    up_strong = up_free or (len(up_hits) == 1 and not (trivial(upper) and not w.fix_up))
    down_strong = down_free or (len(down_hits) == 1 and not (trivial(lower) and not w.fix_down))
    low_pos = o_end - len(lower)
    up_pinned = up_free or max([h for h in up_hits if h + len(upper) <= low_pos], default=-1) == o_start
    down_pinned = down_free or min([h for h in down_hits if h >= o_start + len(upper)], default=-1) == low_pos
    if not (up_free or upper) or not (down_free or lower):
        return False  # a change at a window's edge with nothing to place it
    if w.ends_block:
        return up_strong  # the definition's header places it; its shown end is its new end
    return (up_strong and down_pinned) or (down_strong and up_pinned)


def covers_all_blocks(c: Commit, windows: list[Window]) -> bool:
    for b in c.blocks:
        if not any(w.first <= b.new_start and b.new_end <= w.last for w in windows):
            return False
    return True


def plan_windows(c: Commit, rng: random.Random, up=(2, 4), down=(2, 4), *, fixed=None,
                 blank_edges=False, top=False, bottom=False, last_span=None) -> list[Window] | None:
    """Windows of context around the change blocks, merged, widened, anchored (module docstring, step 2).

    fixed: {block index: ("up" | "down")} sides that keep exactly one context line.
    top / bottom: the first window starts at line 0 / the last ends at the file's end.
    last_span: (start, end) lines the last window must cover, ending exactly at `end`.
    """
    fixed = fixed or {}
    n = len(c.new)
    windows = []
    for i, b in enumerate(c.blocks):
        u = 1 if fixed.get(i) == "up" else rng.randint(*up)
        d = 1 if fixed.get(i) == "down" else rng.randint(*down)
        windows.append(Window(max(0, b.new_start - u), min(n, b.new_end + d), b.new_start, b.new_end,
                              fixed.get(i) == "up", fixed.get(i) == "down"))
    for _ in range(4):
        windows = merge_close(windows)
        for w in windows:
            if not w.fix_up:
                grow_up(c, w, blank_edges)
            if not w.fix_down:
                grow_down(c, w, blank_edges)
    windows = merge_close(windows)
    if top:
        if windows[0].first > 25:
            return None
        windows[0].start = 0
    if bottom:
        if windows[-1].last < n - 12:
            return None
        windows[-1].end = n
    if last_span is not None:
        lo, hi = last_span
        last = windows[-1]
        if last.last > hi + 1:
            return None
        last.start, last.end, last.ends_block = min(last.start, lo), hi + 1, True
        windows = merge_close(windows)
    if blank_edges:
        add_blank_edges(c, windows)
        windows = merge_close(windows)
    if any(w.fix_up and w.first - w.start != 1 or w.fix_down and w.end - w.last != 1 for w in windows):
        return None
    if not covers_all_blocks(c, windows) or not all(anchored(c, w) for w in windows):
        return None
    return windows


def add_blank_edges(c: Commit, windows: list[Window]) -> None:
    """Move marker-side window edges onto a nearby blank line of the file (blank_join)."""
    e = c.new
    for i, w in enumerate(windows):
        floor = windows[i - 1].end + 3 if i else 1
        for j in range(w.start - 1, max(floor, w.start - 4) - 1, -1):
            if not e[j].strip():
                w.start = j
                break
        ceiling = windows[i + 1].start - 3 if i + 1 < len(windows) else len(e) - 1
        for j in range(w.end, min(ceiling, w.end + 3)):
            if not e[j].strip():
                w.end = j + 1
                break


def blank_joins(c: Commit, windows: list[Window]) -> int:
    """How many marker-side edges are blank lines."""
    count = 0
    for w in windows:
        count += w.start > 0 and not c.new[w.start].strip()
        count += w.end < len(c.new) and not c.new[w.end - 1].strip()
    return count


# --------------------------------------------------------------------------- markers and snippet lines


@dataclasses.dataclass
class Line:
    kind: str   # "ctx" | "new" (lines of expected), "marker", "fence", "prose"
    text: str


COMMON_WORDINGS = (
    "... existing code ...", "...", "... rest of the code ...", "(unchanged)", "... existing code",
    "... unchanged ...", "... keep existing code ...", "existing code ...", "... code unchanged ...",
)
LEAD_WORDINGS = ("... previous code ...", "... code above unchanged ...")
TRAIL_WORDINGS = ("rest of file unchanged", "... rest of the file ...", "... rest unchanged ...")
DEF_LINE = re.compile(r"^\s*(async\s+)?(def|class|func|fn|pub\s+fn|pub\(crate\)\s+fn|function|impl|public|private|"
                      r"protected|static|export\s+function|module)\b")


class Voice:
    """How one case writes its markers: comment syntax, wording, depth (chosen once a case)."""

    def __init__(self, c: Commit, rng: random.Random):
        self.rng = rng
        self.comment = LINE_COMMENT.get(c.language, "//")
        self.wording = rng.choice(COMMON_WORDINGS)
        self.block = self.comment == "//" and rng.random() < 0.15
        file_lines = {line.strip() for line in c.old + c.new}
        self.bare = c.language == "python" and rng.random() < 0.12 and "..." not in file_lines
        self.indent = rng.choices(("depth", "col0", "mixed"), weights=(6, 2, 2))[0]
        self.taken = file_lines

    def text(self, where: str, defs: str) -> str:
        if self.bare:
            return "..."
        wording = self.wording
        r = self.rng.random()
        if defs and r < 0.3:
            wording = f"... other {defs} ..."
        elif where == "trail" and r < 0.45:
            wording = self.rng.choice(TRAIL_WORDINGS)
        elif where == "lead" and r < 0.2:
            wording = self.rng.choice(LEAD_WORDINGS)
        elif r > 0.85:
            wording = self.rng.choice(COMMON_WORDINGS)
        text = f"/* {wording} */" if self.block else f"{self.comment} {wording}"
        return text if text not in self.taken else f"{self.comment} ... existing code ..."

    def line(self, depth: str, where: str, defs: str = "") -> Line:
        at_depth = self.indent == "depth" or self.indent == "mixed" and self.rng.random() < 0.5
        if self.bare:
            at_depth = True  # a bare `...` at column 0 inside a block reads as code at the wrong depth
        return Line("marker", (depth if at_depth else "") + self.text(where, defs))


def indent_of(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def depth_near(lines: list[str], index: int, step: int) -> str:
    """Indentation of the first non-blank line from `index` going by `step`."""
    while 0 <= index < len(lines):
        if lines[index].strip():
            return indent_of(lines[index])
        index += step
    return ""


def elided_defs(c: Commit, lo: int, hi: int) -> str:
    """"methods" / "functions" if the original's stretch [lo, hi) holds nested / top-level definitions."""
    found = [line for line in c.old[lo:hi] if DEF_LINE.match(line)]
    if not found:
        return ""
    return "methods" if any(line[:1].isspace() for line in found) else "functions"


def code_lines(c: Commit, lo: int, hi: int) -> list[Line]:
    n2o = c.new_to_old
    return [Line("ctx" if n2o[i] is not None else "new", c.new[i]) for i in range(lo, hi)]


def render_windows(c: Commit, windows: list[Window], voice: Voice, lead: bool = True,
                   trail: bool = True) -> list[Line]:
    """Windows joined by markers; a marker first / last where the snippet starts / ends mid-file."""
    out: list[Line] = []
    prev_old_end = 0
    for i, w in enumerate(windows):
        o_start, o_end = old_span(c, w)
        if w.start > 0 and (i > 0 or lead):
            where = "mid" if i else "lead"
            out.append(voice.line(depth_near(c.new, w.start, 1), where, elided_defs(c, prev_old_end, o_start)))
        out.extend(code_lines(c, w.start, w.end))
        prev_old_end = o_end
    if trail and windows[-1].end < len(c.new):
        out.append(voice.line(depth_near(c.new, windows[-1].end - 1, -1), "trail",
                              elided_defs(c, prev_old_end, len(c.old))))
    return out


@dataclasses.dataclass
class Built:
    lines: list[Line]
    extra: dict = dataclasses.field(default_factory=dict)


# --------------------------------------------------------------------------- styles


def build_markers(c: Commit, rng: random.Random) -> Built | None:
    """Each change with 1-5 lines of context, windows joined by markers of varied wording."""
    windows = plan_windows(c, rng, up=(1, 5), down=(1, 5))
    if not windows or len(windows) < 2:
        return None
    return Built(render_windows(c, windows, Voice(c, rng)))


INTROS = (
    "Here are the changes to `{base}`:",
    "Sure, here's the updated code for `{path}`.",
    "To {instr}, update `{base}` like this:",
    "I've made the change. First, in `{name}`:",
    "You need to change {n} places in `{base}`.",
    "Here's how you can {instr}:",
)
BETWEENS = ("Then update `{name}`:", "Next, in `{name}`:", "And further down:", "Also change this part:",
            "In `{name}`, make this change:")
CLOSINGS = ("That's it: the rest of the file stays the same.", "No other changes are needed.",
            "Everything else in `{base}` is unchanged.", "Let me know if you'd like tests for this as well.")


def enclosing_name(c: Commit, line: int) -> str:
    d = innermost(c.defs_new, line, line, {"function", "container"})
    return d.name.strip() if d is not None and d.name and "\n" not in d.name and len(d.name) < 60 else ""


def prose(template: str, c: Commit, name: str, n: int) -> str:
    instr = c.instruction[:1].lower() + c.instruction[1:]
    return template.format(base=c.path.rsplit("/", 1)[-1], path=c.path, instr=instr, name=name, n=n)


def pick_prose(rng: random.Random, templates: tuple[str, ...], name: str) -> str:
    usable = [t for t in templates if name or "{name}" not in t]
    return rng.choice(usable)


def fence_open(c: Commit, rng: random.Random) -> str:
    tag = rng.choice(FENCE_TAGS[c.language])
    return rng.choice((f"```{tag}", f"```{tag}", f"```{tag}:{c.path}", f"```{tag} {c.path}"))


def build_prose_fences(c: Commit, rng: random.Random) -> Built | None:
    """A chat answer: a sentence, one fenced block per hunk, prose between, sometimes a closing line."""
    windows = plan_windows(c, rng)
    if not windows or not 2 <= len(windows) <= 4:
        return None
    if any("```" in line for line in c.new):
        return None
    voice = Voice(c, rng)
    names = [enclosing_name(c, w.first) for w in windows]
    out = [Line("prose", prose(pick_prose(rng, INTROS, names[0]), c, names[0], len(windows))), Line("prose", "")]
    for i, w in enumerate(windows):
        if i:
            between = pick_prose(rng, BETWEENS + (("Finally, update `{name}`:",) if i == len(windows) - 1 else ()),
                                 names[i])
            out += [Line("prose", ""), Line("prose", prose(between, c, names[i], len(windows))), Line("prose", "")]
        out.append(Line("fence", fence_open(c, rng)))
        # "rest of file" wordings only where nothing follows: the last block's end.
        if w.start > 0 and rng.random() < 0.6:
            out.append(voice.line(depth_near(c.new, w.start, 1), "mid" if i else "lead"))
        out.extend(code_lines(c, w.start, w.end))
        if w.end < len(c.new) and rng.random() < 0.6:
            out.append(voice.line(depth_near(c.new, w.end - 1, -1), "trail" if i == len(windows) - 1 else "mid"))
        out.append(Line("fence", "```"))
    if rng.random() < 0.5:
        out += [Line("prose", ""), Line("prose", prose(rng.choice(CLOSINGS), c, "", 0))]
    return Built(out)


def build_top_no_marker(c: Commit, rng: random.Random) -> Built | None:
    """The commit edits the first lines; the snippet starts at line 1, a marker after."""
    if c.blocks[0].new_start > 20:
        return None
    windows = plan_windows(c, rng, top=True)
    if not windows or len(windows) != 1 or windows[0].end >= len(c.new):
        return None
    return Built(render_windows(c, windows, Voice(c, rng), lead=False))


def touches_imports(c: Commit, b: Block) -> bool:
    pattern = IMPORT_LINE[c.language]
    changed = c.new[b.new_start:b.new_end] + c.old[b.old_start:b.old_end]
    return any(pattern.match(line) for line in changed)


def build_top_imports_no_marker(c: Commit, rng: random.Random) -> Built | None:
    """New imports from line 1, a marker, the code that uses them further down."""
    windows = plan_windows(c, rng, top=True)
    if not windows or len(windows) < 2:
        return None
    first_blocks = [b for b in c.blocks if b.new_end <= windows[0].last]
    if not any(touches_imports(c, b) for b in first_blocks):
        return None
    return Built(render_windows(c, windows, Voice(c, rng), lead=False))


def build_bottom_no_marker(c: Commit, rng: random.Random) -> Built | None:
    """The commit edits the last lines; a marker first, the snippet runs to the file's last line."""
    windows = plan_windows(c, rng, bottom=True)
    if not windows or windows[0].start == 0:
        return None
    return Built(render_windows(c, windows, Voice(c, rng), trail=False))


def build_deletion_near_marker(c: Commit, rng: random.Random) -> Built | None:
    """A pure deletion with one context line between it and a marker; the other side pins it."""
    deletions = [i for i, b in enumerate(c.blocks) if b.new_len == 0 and b.old_len > 0]
    rng.shuffle(deletions)
    for i in deletions:
        sides = ["up", "down"]
        rng.shuffle(sides)
        for side in sides:
            windows = plan_windows(c, rng, fixed={i: side})
            if windows and next_to_marker(c, windows, c.blocks[i].new_start, side):
                return Built(render_windows(c, windows, Voice(c, rng)), {"deleted_side": side})
    return None


def next_to_marker(c: Commit, windows: list[Window], cut: int, side: str) -> bool:
    """Is the deletion at new line `cut` one context line away from its window's marker on `side`?"""
    for w in windows:
        if side == "up" and w.first == cut and w.start == cut - 1 > 0:
            return True
        if side == "down" and w.last == cut and w.end == cut + 1 < len(c.new):
            return True
    return False


def build_whole_file(c: Commit, rng: random.Random) -> Built | None:
    """The complete new file, no markers: a small edit in a large file."""
    if c.changed_lines > 12 or len(c.original) < 5000:
        return None
    return Built(code_lines(c, 0, len(c.new)))


def build_open_end(c: Commit, rng: random.Random) -> Built | None:
    """No trailing marker mid-file: either the file goes on unchanged, or the shown block ends earlier now."""
    deleting = build_open_end_deleting(c, rng)
    if deleting is not None:
        return deleting
    windows = plan_windows(c, rng)
    if not windows or windows[-1].end >= len(c.new) - 1:
        return None
    return Built(render_windows(c, windows, Voice(c, rng), trail=False), {"open_end_deletes": False})


def build_open_end_deleting(c: Commit, rng: random.Random) -> Built | None:
    """The last change deletes the tail of a definition; the snippet ends with that definition's new end."""
    last = c.blocks[-1]
    if last.new_len != 0 or not any(line.strip() for line in c.old[last.old_start:last.old_end]):
        return None
    cut = last.new_start  # the deleted lines sat right before new line `cut`
    d = innermost(c.defs_new, max(cut - 1, 0), max(cut - 1, 0), {"function", "container"})
    if d is None or d.end - d.start > 60:
        return None
    if c.language == "python":
        ends_here = d.end == cut - 1  # the block now ends on the line above the deleted tail
    else:
        ends_here = d.end == cut      # the deleted lines stood just above the closing line
    if not ends_here or d.start >= cut:
        return None
    # Only lines of the definition's own body were deleted: the original definition spans them.
    was = innermost(c.defs_old, last.old_start, last.old_end - 1, {"function", "container"})
    if was is None or was.name != d.name or c.old[was.start] != c.new[d.start]:
        return None
    windows = plan_windows(c, rng, last_span=(d.start, d.end))
    if not windows or windows[-1].end >= len(c.new):
        return None
    return Built(render_windows(c, windows, Voice(c, rng), trail=False), {"open_end_deletes": True})


def build_blank_join(c: Commit, rng: random.Random) -> Built | None:
    """A blank line right after a leading marker (or before a trailing one), where the file has one."""
    windows = plan_windows(c, rng, blank_edges=True)
    if not windows or blank_joins(c, windows) == 0:
        return None
    return Built(render_windows(c, windows, Voice(c, rng)), {"blank_joins": blank_joins(c, windows)})


def inside(b: Block, lo: int, hi: int) -> bool:
    """Is block `b` within lines [lo, hi] of `expected` (a pure deletion strictly between them)?"""
    if b.new_len:
        return lo <= b.new_start and b.new_end - 1 <= hi
    return lo < b.new_start <= hi


def build_class_rewrite(c: Commit, rng: random.Random) -> Built | None:
    """The class / impl / object literal with its changed members; untouched methods left out, no markers."""
    first = c.blocks[0].new_start
    last = max(c.blocks[-1].new_end - 1, first)
    box = innermost(c.defs_new, first, last, {"container"})
    if box is None or not all(inside(b, box.start, box.end) for b in c.blocks):
        return None
    header = c.new[box.start]
    old_boxes = [d for d in c.defs_old if d.kind == "container" and c.old[d.start] == header]
    if len(old_boxes) != 1 or c.old.count(header) != 1:
        return None
    new_fns = [m.name for m in box.members if m.kind == "function"]
    old_fns = [m.name for m in old_boxes[0].members if m.kind == "function"]
    if len(set(new_fns)) != len(new_fns) or len(set(old_fns)) != len(old_fns) or not new_fns:
        return None
    if not set(old_fns) <= set(new_fns) or [n for n in new_fns if n in old_fns] != old_fns:
        return None  # a method deleted or moved
    first_fn = next(m for m in box.members if m.kind == "function")
    head_end = first_fn.lead  # the header region: lines [box.start, head_end)
    shown = [m for m in box.members if m.lead >= head_end and any(inside(b, m.lead, m.end) for b in c.blocks)]
    for b in c.blocks:
        if not (inside(b, box.start, head_end - 1) or any(inside(b, m.lead, m.end) for m in shown)):
            return None
    if any(n.lead <= m.end for m, n in zip(shown, shown[1:])):
        return None  # members that share lines (a comment attached to two of them)
    omitted = [m for m in box.members if m.kind == "function" and m not in shown and m.lead >= head_end]
    if not shown or not omitted:
        return None
    functions = [m for m in box.members if m.kind == "function"]
    for i, m in enumerate(functions):  # a new method must follow a shown one (or come first)
        if m.name not in old_fns and i and functions[i - 1] not in shown:
            return None
    lines = code_lines(c, box.start, head_end)
    while lines and not lines[-1].text.strip():
        lines.pop()
    for m in shown:
        if not c.new[m.lead - 1].strip():
            lines.append(Line("ctx", c.new[m.lead - 1]))
        lines.extend(code_lines(c, m.lead, m.end + 1))
    if c.language != "python" and box.end > shown[-1].end:
        lines.extend(code_lines(c, box.end, box.end + 1))
    if len(lines) > 160:
        return None
    return Built(lines, {"omitted_methods": len(omitted)})


def build_single_function(c: Commit, rng: random.Random) -> Built | None:
    """One complete function or method, no markers; the commit changes only that function."""
    first = c.blocks[0].new_start
    last = max(c.blocks[-1].new_end - 1, first)
    fn = innermost(c.defs_new, first, last, {"function"})
    if fn is None or not fn.name or fn.end - fn.start > 100:
        return None
    same_name_new = [d for d in c.defs_new if d.kind == "function" and d.name == fn.name]
    same_name_old = [d for d in c.defs_old if d.kind == "function" and d.name == fn.name]
    if len(same_name_new) != 1 or len(same_name_old) != 1:
        return None
    # The doc comment is shown when the commit touches it, else half the time.
    touches_lead = any(b.new_start < fn.start or b.new_len == 0 and b.new_start == fn.start for b in c.blocks)
    start = fn.lead if touches_lead or (fn.lead < fn.start and rng.random() < 0.5) else fn.start
    # `inside` also refuses a deletion right above the first shown line: nothing would show it.
    if not all(inside(b, start, fn.end) for b in c.blocks):
        return None
    if start == 0 and fn.end >= len(c.new) - 1:
        return None
    return Built(code_lines(c, start, fn.end + 1))


# A comment line (or a blank one), by the language's line comment (LINE_COMMENT).
COMMENT_LINE = {"#": re.compile(r"^\s*(#.*)?$"), "--": re.compile(r"^\s*(--.*)?$"),
                "//": re.compile(r"^\s*(//.*|/\*.*|\*.*|\*/\s*)?$")}


def comment_only(c: Commit, lines: list[str]) -> bool:
    """Comment lines (blank ones allowed), at least one of them not blank."""
    pattern = COMMENT_LINE[LINE_COMMENT.get(c.language, "//")]
    return all(pattern.match(line) for line in lines) and any(line.strip() for line in lines)


def docstring_owner(c: Commit, b: Block) -> Def | None:
    """Python: the definition whose docstring holds block `b` (both sides inside docstrings)."""
    for d in c.defs_new:
        if d.docstring and inside(b, d.docstring[0], d.docstring[1]) and b.new_len:
            return d
    return None


def comment_owner(c: Commit, b: Block) -> Def | None:
    """The definition whose attached comment run holds block `b`."""
    for d in c.defs_new:
        if d.lead < d.start and inside(b, d.lead, d.start - 1) and b.new_start >= d.lead:
            if comment_only(c, c.new[b.new_start:b.new_end] + c.old[b.old_start:b.old_end]):
                return d
    return None


def docstring_item(c: Commit, b: Block) -> tuple[Def, int, int] | None:
    """Python: (definition, header line, docstring end) when block `b` only writes that docstring."""
    d = docstring_owner(c, b)
    if d is None or not re.match(r"^\s*[rRuUbB]?(\"\"\"|\'\'\')", c.new[d.docstring[0]]):
        return None
    if b.old_len:  # a rewritten docstring: the old lines must be the old docstring of the same definition
        was = [o for o in c.defs_old if o.start == c.new_to_old[d.start] and o.docstring]
        if not was or not (was[0].docstring[0] <= b.old_start and b.old_end - 1 <= was[0].docstring[1]):
            return None
    return d, d.start, d.docstring[1]


def documented_items(c: Commit) -> list[tuple[Def, int, int]] | None:
    """(definition, first shown line, last shown line) per documented definition, or None if a
    change is anything but a comment above a definition or a Python docstring."""
    items: dict[int, tuple[Def, int, int]] = {}
    for b in c.blocks:
        d = comment_owner(c, b)
        item = (d, d.lead, max(d.header_end, d.start)) if d is not None else None
        if item is None and c.language == "python":
            item = docstring_item(c, b)
        if item is None:
            return None
        items[item[0].start] = item
    ordered = sorted(items.values(), key=lambda t: t[1])
    if any(lo2 <= hi for (_, _, hi), (_, lo2, _) in zip(ordered, ordered[1:])):
        return None
    for d, _, _ in ordered:  # each definition is placed by its own first line, once in the original
        if c.new_to_old[d.start] is None or c.old.count(c.new[d.start]) != 1:
            return None
    return ordered


CLOSERS = ("}", "};", "end", "})", "});", "},")


def build_comment_every_method(c: Commit, rng: random.Random) -> Built | None:
    """New doc comments / docstrings, each shown with its definition's header, bodies elided."""
    items = documented_items(c)
    if not items or len(items) < 2:
        return None
    voice = Voice(c, rng)
    out: list[Line] = []
    shown_to = 0  # lines before this are shown or stood for by a marker
    for k, (d, lo, hi) in enumerate(items):
        if lo > shown_to and (not out or out[-1].kind != "marker"):
            kind = "methods" if indent_of(c.new[lo]) else "functions"
            out.append(voice.line(depth_near(c.new, lo, 1), "mid" if k else "lead", kind if k else ""))
        out.extend(code_lines(c, lo, hi + 1))
        shown_to = hi + 1
        if d.end <= hi:
            continue
        # The body goes on below: one marker for it. A closing line is shown only where no
        # later item sits inside this definition (fields of a documented struct).
        nested = k + 1 < len(items) and items[k + 1][1] <= d.end
        out.append(voice.line(depth_near(c.new, hi + 1, 1), "mid"))
        if not nested and c.new[d.end].strip() in CLOSERS and d.end > hi + 1 and rng.random() < 0.5:
            out.append(Line("ctx", c.new[d.end]))
            shown_to = d.end + 1
        else:
            shown_to = items[k + 1][1] if nested else d.end + 1
    if shown_to < len(c.new) and out[-1].kind != "marker":
        out.append(voice.line(depth_near(c.new, shown_to - 1, -1), "trail"))
    return Built(out, {"documented": len(items)})


BUILDERS = {
    "markers": build_markers, "prose_fences": build_prose_fences, "top_no_marker": build_top_no_marker,
    "bottom_no_marker": build_bottom_no_marker, "deletion_near_marker": build_deletion_near_marker,
    "whole_file": build_whole_file, "open_end": build_open_end, "blank_join": build_blank_join,
    "class_rewrite": build_class_rewrite, "single_function": build_single_function,
    "comment_every_method": build_comment_every_method, "top_imports_no_marker": build_top_imports_no_marker,
}


# --------------------------------------------------------------------------- perturbations

P_DRIFT = 0.75          # of tab-indented files: about a tenth of all cases
P_FENCE = 0.15          # a bare fence around a snippet of any style but prose_fences
P_TRAILING_BLANK = 0.07
P_NO_FINAL_NEWLINE = 0.1


def drift(text: str) -> str:
    """Leading tabs as 4 spaces each, as chat models retype Go context lines."""
    stripped = text.lstrip("\t")
    return "    " * (len(text) - len(stripped)) + stripped


def perturb(c: Commit, style: str, lines: list[Line], rng: random.Random) -> tuple[str, list[str]]:
    """The snippet's final text, with the mess some answers carry, and the names of what was applied."""
    applied = []
    if any(line.kind == "ctx" and line.text.startswith("\t") for line in lines) and rng.random() < P_DRIFT:
        # The model retyped what it copied; the lines it wrote new keep the file's tabs.
        lines = [Line(l.kind, drift(l.text)) if l.kind in ("ctx", "marker") else l for l in lines]
        applied.append("whitespace_drift")
    if style != "prose_fences" and rng.random() < P_FENCE:
        lines = [Line("fence", fence_open(c, rng)), *lines, Line("fence", "```")]
        applied.append("code_fence")
    text = "\n".join(line.text for line in lines) + "\n"
    r = rng.random()
    if r < P_TRAILING_BLANK:
        text += "\n"
        applied.append("trailing_blank_line")
    elif r < P_TRAILING_BLANK + P_NO_FINAL_NEWLINE:
        text = text[:-1]
        applied.append("trailing_newline_stripped")
    return text, applied


# --------------------------------------------------------------------------- selection


@dataclasses.dataclass
class Pick:
    commit: Commit
    style: str
    built: Built


def style_rng(seed: int, c: Commit, style: str) -> random.Random:
    # A string seed is hashed with SHA-512, so the draw is the same in every run and process.
    return random.Random(f"{seed}:{c.id}:{style}")


def build_all(commits: list[Commit], seed: int) -> dict[str, list[Pick]]:
    """Every style's fair snippets over every commit: {style: [Pick]}."""
    pools: dict[str, list[Pick]] = {s: [] for s in STYLES}
    for c in commits:
        for style in STYLES:
            built = BUILDERS[style](c, style_rng(seed, c, style))
            if built is not None:
                pools[style].append(Pick(c, style, built))
    return pools


def wants_variant(p: Pick, taken: list[Pick], target: int) -> bool:
    """open_end: prefer the deleting kind until it is a third of the style."""
    if p.style != "open_end":
        return True
    deleting = sum(1 for q in taken if q.built.extra.get("open_end_deletes"))
    return p.built.extra.get("open_end_deletes") == (deleting < target // 3)


def edit_key(c: Commit) -> tuple[str, str, str]:
    return c.path, c.original, c.expected


def holds_fence(p: Pick) -> bool:
    """A copied line that opens with ``` (Markdown in a doc comment) would read as a fence: never selected."""
    return any(line.kind != "fence" and line.text.lstrip().startswith("```") for line in p.built.lines)


def select_split(pools: dict[str, list[Pick]], target: int, caps: dict[str, int], max_per_path: int,
                 rng: random.Random, style_targets: dict[str, int] | None = None) -> list[Pick]:
    """Fill styles round-robin, scarcest first, spreading repositories, languages and paths.

    Each style stops at `target` cases, or at its own number in `style_targets`."""
    targets = {s: (style_targets or {}).get(s, target) for s in STYLES}
    order = {s: rng.sample(pools[s], len(pools[s])) for s in STYLES}
    taken: dict[str, list[Pick]] = {s: [] for s in STYLES}
    used: set[tuple[str, str, str]] = set()  # one case per edit, cherry-picked copies included
    per_repo, per_path, per_lang = collections.Counter(), collections.Counter(), collections.Counter()
    active = set(STYLES)
    while active:
        style = min(active, key=lambda s: (len(taken[s]), len(order[s]), s))
        avail = [p for p in order[style] if edit_key(p.commit) not in used and not holds_fence(p)
                 and per_repo[p.commit.repo] < caps[p.commit.repo]
                 and per_path[p.commit.repo, p.commit.path] < max_per_path]
        if len(taken[style]) >= targets[style] or not avail:
            active.discard(style)
            continue
        rank = {id(p): i for i, p in enumerate(avail)}
        best = min(avail, key=lambda p: (not wants_variant(p, taken[style], targets[style]),
                                         per_repo[p.commit.repo] / caps[p.commit.repo],
                                         per_lang[style, p.commit.language],
                                         per_path[p.commit.repo, p.commit.path], rank[id(p)]))
        taken[style].append(best)
        used.add(edit_key(best.commit))
        per_repo[best.commit.repo] += 1
        per_path[best.commit.repo, best.commit.path] += 1
        per_lang[style, best.commit.language] += 1
    return [p for s in STYLES for p in taken[s]]


def to_row(p: Pick, seed: int) -> dict:
    c = p.commit
    snippet, applied = perturb(c, p.style, p.built.lines, random.Random(f"{seed}:{c.id}:perturb"))
    row = {
        "id": c.id, "repo": c.repo, "commit": c.sha, "parent": c.parent, "path": c.path,
        "language": c.language, "instruction": c.instruction, "original": c.original,
        "update_snippet": snippet, "expected": c.expected, "n_hunks": c.n_hunks,
        "changed_lines": c.changed_lines, "has_deletion": any(b.new_len == 0 for b in c.blocks),
        "original_chars": len(c.original), "style": p.style, "split": c.split, "perturbations": applied,
    }
    if p.style == "open_end":
        row["open_end_deletes"] = bool(p.built.extra["open_end_deletes"])
    return row


# --------------------------------------------------------------------------- checks and report

MARKER = re.compile(r"^\s*(#|//|/\*|--)\s*.*(\.\.\.|unchanged|existing code|rest of)|^\s*\.\.\.\s*$")
NO_MARKER_STYLES = {"whole_file", "class_rewrite", "single_function"}


def snippet_code(row: dict) -> list[str] | None:
    """The snippet's code lines (prose outside fences dropped), or None if prose sits where it may not."""
    lines = row["update_snippet"].split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not any(line.startswith("```") for line in lines):
        return lines
    code, inside_fence = [], False
    for line in lines:
        if line.startswith("```"):
            inside_fence = not inside_fence
        elif inside_fence:
            code.append(line)
        elif line.strip() and row["style"] != "prose_fences":
            return None
    return code


def check(row: dict) -> list[str]:
    """What is wrong with one case; empty when it holds."""
    problems = []
    if row["expected"] == row["original"]:
        problems.append("expected == original")
    expected = split_lines(row["expected"])
    known = set(expected) | {drift(line) for line in expected}
    code = snippet_code(row)
    if code is None:
        return problems + ["prose outside fences"]
    if "trailing_blank_line" in row["perturbations"] and code and not code[-1].strip():
        code.pop()
    markers = [line for line in code if line not in known]
    if not code:
        problems.append("empty snippet")
    for line in markers:
        if not MARKER.match(line):
            problems.append(f"line not in expected: {line!r}")
    style = row["style"]
    if style in NO_MARKER_STYLES and markers:
        problems.append("markers in a no-marker style")
    if style in ("top_no_marker", "top_imports_no_marker") and code and code[0] not in (expected[0], drift(expected[0])):
        problems.append("does not start at line 1")
    if style == "bottom_no_marker" and code and code[-1] not in (expected[-1], drift(expected[-1])):
        problems.append("does not end at the last line")
    if style == "open_end" and code and code[-1] in markers:
        problems.append("open_end ends with a marker")
    if style == "whole_file" and [line for line in code] != expected and "whitespace_drift" not in row["perturbations"]:
        problems.append("whole_file is not the file")
    return problems


def table(counter: collections.Counter, rows: list[str], cols: list[str], title: str) -> str:
    out = [f"| {title} | " + " | ".join(cols) + " | total |", "|---" * (len(cols) + 2) + "|"]
    for r in rows:
        cells = [counter[r, col] for col in cols]
        out.append(f"| {r} | " + " | ".join(str(x) for x in cells) + f" | {sum(cells)} |")
    totals = [sum(counter[r, col] for r in rows) for col in cols]
    out.append("| total | " + " | ".join(str(x) for x in totals) + f" | {sum(totals)} |")
    return "\n".join(out)


def report(rows: list[dict], heads: dict[str, str]) -> str:
    splits = ["eval", "train"]
    by_style = collections.Counter((r["style"], r["split"]) for r in rows)
    by_lang = collections.Counter((r["language"], r["split"]) for r in rows)
    by_repo = collections.Counter((r["repo"], r["language"]) for r in rows)
    langs = sorted({r["language"] for r in rows})
    perturbations = collections.Counter(k for r in rows for k in r["perturbations"])
    open_end = collections.Counter(r["open_end_deletes"] for r in rows if r["style"] == "open_end")
    repos = sorted({r["repo"] for r in rows}, key=lambda n: (next(r["split"] for r in rows if r["repo"] == n), n))
    return "\n\n".join([
        table(by_style, list(STYLES), splits, "style"),
        table(by_lang, langs, splits, "language"),
        table(by_repo, repos, langs, "repo"),
        "snapshot HEADs: " + ", ".join(f"{n} {heads[n][:10]}" for n in repos),
        "perturbations: " + ", ".join(f"{k} {v}" for k, v in perturbations.most_common()),
        f"open_end: open_end_deletes true {open_end[True]}, false {open_end[False]}",
        f"has_deletion: {sum(r['has_deletion'] for r in rows)}; n_hunks: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(collections.Counter(r['n_hunks'] for r in rows).items())),
    ])


# --------------------------------------------------------------------------- main


@dataclasses.dataclass
class RepoSpec:
    name: str
    gitdir: str
    cap: int
    exts: set[str]
    split: str


def parse_repo(text: str) -> RepoSpec:
    """owner/name=GITDIR:N:ext,ext:split"""
    name, _, rest = text.partition("=")
    gitdir, cap, exts, split = rest.rsplit(":", 3)
    if split not in ("eval", "train"):
        raise argparse.ArgumentTypeError(f"split must be eval or train: {text}")
    return RepoSpec(name, gitdir, int(cap), set(exts.split(",")), split)


def parse_style_target(text: str) -> tuple[str, int]:
    """STYLE=N"""
    style, _, n = text.partition("=")
    if style not in STYLES or not n.isdigit():
        raise argparse.ArgumentTypeError(f"want STYLE=N with STYLE one of {', '.join(STYLES)}: {text}")
    return style, int(n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", type=parse_repo, required=True,
                    help="owner/name=GITDIR:N:exts:split (N: most cases from this repo; exts: py,ts,...)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=404)
    ap.add_argument("--eval-per-style", type=int, default=16)
    ap.add_argument("--train-per-style", type=int, default=8)
    ap.add_argument("--max-per-path", type=int, default=2)
    ap.add_argument("--style-target", action="append", type=parse_style_target, default=[],
                    metavar="STYLE=N", help="N cases of STYLE per split instead of --eval/--train-per-style")
    ap.add_argument("--rstrip-context", action="store_true",
                    help="context lines that differ only in trailing whitespace count as the same line "
                         "when windows are widened until unique and anchored")
    args = ap.parse_args()
    Commit.rstrip_context = args.rstrip_context

    heads, pools_by_split = {}, {"eval": {s: [] for s in STYLES}, "train": {s: [] for s in STYLES}}
    for spec in args.repo:
        git = Git(spec.gitdir)
        heads[spec.name] = git.head()
        commits = list(mine(spec.name, spec.split, git, spec.exts))
        pools = build_all(commits, args.seed)
        for style in STYLES:
            pools_by_split[spec.split][style].extend(pools[style])
        print(f"{spec.name}: {len(commits)} commits; "
              + " ".join(f"{s}={len(pools[s])}" for s in STYLES), file=sys.stderr)

    caps = {spec.name: spec.cap for spec in args.repo}
    targets = {"eval": args.eval_per_style, "train": args.train_per_style}
    picks = []
    for split in ("eval", "train"):
        picks += select_split(pools_by_split[split], targets[split], caps, args.max_per_path,
                              random.Random(f"{args.seed}:{split}"), dict(args.style_target))
    rows = [to_row(p, args.seed) for p in picks]
    rows.sort(key=lambda r: (r["split"] != "eval", STYLES.index(r["style"]), r["id"]))

    failures = {r["id"]: check(r) for r in rows}
    failures = {k: v for k, v in failures.items() if v}
    for case_id, problems in failures.items():
        print(f"CHECK FAILED {case_id}: {problems}", file=sys.stderr)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(report(rows, heads))
    print(f"\n{len(rows)} cases -> {args.out}; checks: {len(rows) - len(failures)} ok, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
