"""Tokenizer and chat template, both from the model folder's own metadata.

The chat template is rendered the way transformers renders it (jinja2, trim_blocks and
lstrip_blocks, `raise_exception`, a `tojson` that keeps non-ASCII), so a prompt is byte-for-byte
the one the model was trained on.

Special tokens come only from the template: text (message contents, files, snippets, documents)
is encoded with special-token spellings as plain text, so a file or a user message holding
`<|im_end|><|im_start|>system` cannot forge a turn.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer

# Tokenized by two sides (a vLLM server and us, a draft model and its target): the same ids mean
# the same tokenizer as far as a prompt's ids go (tabs, code, an accent, a non-ASCII symbol).
TOKENIZER_PROBE = "def f(x):\n\treturn x + 1  # ok ✓\n"


def _raise(message: str):
    raise TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class Tokenizer:
    def __init__(self, folder: str | Path):
        folder = Path(folder)
        self._tok = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        # A second instance that reads special-token spellings as text (the flag is per instance,
        # and instances are shared between threads, so it is never toggled).
        self._plain = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        self._plain.encode_special_tokens = True
        # The last few long documents' ids (encode_document); lru_cache is safe across threads.
        self._document_ids = lru_cache(maxsize=16)(lambda text: tuple(self.encode(text)))
        cfg_path = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        template_file = folder / "chat_template.jinja"
        self.chat_template: str | None = (
            template_file.read_text() if template_file.is_file() else cfg.get("chat_template")
        )
        self.bos_token = _token_text(cfg.get("bos_token"))
        self.eos_token = _token_text(cfg.get("eos_token"))
        self.add_bos = bool(cfg.get("add_bos_token", False)) and self.bos_token is not None
        self.bos_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_ids = _eos_ids(folder, self._tok, self.eos_token)
        self.vocab_size = self._tok.get_vocab_size()
        self._template = None

    def encode(self, text: str, add_special: bool = False, parse_special: bool = False) -> list[int]:
        """Token ids of `text`. Special-token spellings in it stay text unless `parse_special`."""
        ids = (self._tok if parse_special else self._plain).encode(text, add_special_tokens=False).ids
        if add_special and self.add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] + ids
        return ids

    def encode_document(self, text: str) -> list[int]:
        """`encode(text)` for a long text that comes back request after request (a RAG document, a
        file applied to again): the last few such encodings are kept, so asking the tenth question
        about a document does not tokenize it a tenth time. Returns a fresh list."""
        return list(self._document_ids(text)) if len(text) >= 4096 else self.encode(text)

    @cached_property
    def max_token_bytes(self) -> int:
        """The longest token spelling in UTF-8 bytes: no token covers more bytes of text than that.

        Spellings over-count (byte-level BPE spells a space 'Ġ', 2 bytes; SentencePiece '▁', 3),
        which only makes `min_tokens` a safer bound."""
        return max(len(t.encode()) for t in self._plain.get_vocab(with_added_tokens=True))

    def min_tokens(self, text: str) -> int:
        """A lower bound of `len(encode(text))` without tokenizing (microseconds on megabytes).

        Each token covers at most `max_token_bytes` bytes, hence at most that many characters. The
        factor 2 covers normalizers that shrink text before the vocabulary sees it (NFC composes
        a decomposed 'é', 3 bytes, into 2)."""
        return len(text) // (2 * self.max_token_bytes)

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special)

    def token_text(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template")
        if self._template is None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._template = env.from_string(self.chat_template)
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "",
        )

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """The chat prompt's ids: template text with its special tokens, contents as plain text.

        A content may be a list of strings, the message being their concatenation: a long piece
        that comes back request after request (a RAG prompt's documents) is then tokenized once
        (`encode_document`). The pieces' ids are joined only where the text's own tokenization
        splits there too (`_joins`); elsewhere the message is tokenized whole."""
        marked = [dict(m, content=f"\ue000{i}\ue001") for i, m in enumerate(messages)]
        text = self.apply_chat_template(marked, add_generation_prompt)
        parts = _MARK.split(text)
        if len(parts) != 2 * len(messages) + 1 or [int(p) for p in parts[1::2]] != list(range(len(messages))):
            # The template rewrote a content (trimmed it, say), so contents cannot be told from the
            # template here: encode the real rendering as a whole, special spellings included.
            whole = [dict(m, content=_joined(m.get("content"))) for m in messages]
            return self._with_bos(self.encode(self.apply_chat_template(whole, add_generation_prompt), parse_special=True))
        ids: list[int] = []
        for j, part in enumerate(parts):
            if j % 2 == 0:
                ids += self.encode(part, parse_special=True) if part else []
            else:
                content = messages[int(part)].get("content") or ""
                ids += self.encode_pieces([content] if isinstance(content, str) else content)
        return self._with_bos(ids)

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """`encode("".join(pieces))` (special spellings as text), each long piece from the cache
        of `encode_document` where the pieces tokenize apart at their joins."""
        pieces = [p for p in pieces if p]
        if all(self._joins(a, b) for a, b in zip(pieces, pieces[1:])):
            return [t for p in pieces for t in self.encode_document(p)]
        return self.encode("".join(pieces))

    def _joins(self, a: str, b: str) -> bool:
        """Whether `a + b` tokenizes as `a` then `b`: `a` ends a line and no token spans the join
        of `a`'s last line with text (and the blank lines after it) and `b`'s blank lines and first
        line with text (byte-level BPE splits words from the newlines before them, but may take a
        run of newlines and spaces as one token; a tokenizer that prefixes a piece with a space
        would not split)."""
        if not a.endswith("\n"):
            return False
        tail = a[a.rstrip().rfind("\n") + 1 :]
        text_starts = len(b) - len(b.lstrip())
        line_end = b.find("\n", text_starts)
        head = b if line_end < 0 else b[:line_end]
        return self.encode(tail + head) == self.encode(tail) + self.encode(head)

    def _with_bos(self, ids: list[int]) -> list[int]:
        # Templates that spell the BOS themselves must not get a second one.
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] + ids
        return ids


_MARK = re.compile("\ue000(\\d+)\ue001")


def _joined(content) -> str:
    """A message's content as one string (`encode_chat` takes a list of pieces too)."""
    return "".join(content) if isinstance(content, list) else content


def _token_text(tok) -> str | None:
    return tok.get("content") if isinstance(tok, dict) else tok


def _eos_ids(folder: Path, tok: HFTokenizer, eos_token: str | None) -> tuple[int, ...]:
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            for i in eos if isinstance(eos, list) else [eos]:
                if i is not None and i not in ids:
                    ids.append(i)
    if eos_token is not None and tok.token_to_id(eos_token) is not None and tok.token_to_id(eos_token) not in ids:
        ids.append(tok.token_to_id(eos_token))
    return tuple(ids)


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas without splitting a multi-byte char.

    Decodes a window that starts at the previous chunk (context for a leading space) and emits
    only text that does not end in a replacement character (an incomplete UTF-8 sequence).
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = True):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def push(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset : self.read_offset], self.skip_special)
        full = self.tokenizer.decode(self.ids[self.prefix_offset :], self.skip_special)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return full[len(prefix) :]
        return ""
