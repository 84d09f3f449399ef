"""The RAG entry point: documents + question -> a Request whose lookup sources are the documents.

Quoting answers are then drafted from the documents (accepted like copied code), and the
documents' KV blocks are shared between questions by prefix caching.
"""

from __future__ import annotations

from engine.types import SamplingParams
from engine.types import Request
from prompts.rag import rag_messages


def rag_request(tokenizer, documents: list[dict | str], question: str,
                params: SamplingParams | None = None, verify_tokens: int | None = None) -> Request:
    if not documents:
        raise ValueError("a RAG request needs at least one document")
    if not question.strip():
        raise ValueError("empty question")
    docs = [{"text": d} if isinstance(d, str) else d for d in documents]
    ids = tokenizer.encode_chat(rag_messages(docs, question))
    sources = {f"document:{d.get('id') or i}": tokenizer.encode_document(d["text"]) for i, d in enumerate(docs)}
    return Request(ids, params or SamplingParams(max_tokens=512), sources=sources, verify_tokens=verify_tokens)
