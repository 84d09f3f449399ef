"""Render the RAG prompt: documents first (a shared, prefix-cacheable head), the question last."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, StrictUndefined

HERE = Path(__file__).parent


@lru_cache(maxsize=None)
def _template():
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string((HERE / "rag_user.jinja").read_text())


def rag_messages(documents: list[dict], question: str) -> list[dict]:
    """Chat messages for `documents` ([{"id"?, "text"}]) and `question`.

    Everything that depends on the question comes after the documents, so requests about the
    same documents share every KV block up to the question.
    """
    docs = [{"id": d.get("id") or "", "text": d["text"]} for d in documents]
    text = _template().render(documents=docs, question=question)
    # In two pieces, the documents and the question: the first is the same for every question
    # about these documents, so it is tokenized once (`Tokenizer.encode_chat`).
    cut = text.rfind("</document>\n") + len("</document>\n")
    return [{"role": "user", "content": [text[:cut], text[cut:]] if cut >= len("</document>\n") else text}]
