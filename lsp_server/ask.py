"""`editapply.ask {question, uris?, uri?}`: a RAG answer over documents, streamed as work-done
progress and returned at the end as `{answer, finish_reason, documents, stats}`.

The documents are `uris` when given, else the one in `uri`, else every open document; each is
read as the editor holds it (documents.py). The request is `engine.rag.rag_request`'s (the HTTP
API's `/v1/rag` builds the same one): the documents come first in the prompt, so questions about
the same documents share a prefix the KV cache keeps, and each document is a lookup source, so an
answer that quotes them is drafted from them and accepted in long runs. Greedy; `maxTokens`
(settings) caps the answer, 512 tokens by default. Every ask runs the model: it loads the local
engine's model on first use, or needs the remote engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pygls.exceptions import JsonRpcInvalidParams

from engine.apply.errors import ApplyError
from lsp_server import documents
from lsp_server.arguments import parse_args
from lsp_server.progress import ModelProgress, figures

if TYPE_CHECKING:
    from lsp_server.server import EditApplyServer

ASK = "editapply.ask"


def register(server: EditApplyServer) -> None:
    @server.command(ASK)
    async def ask(ls: EditApplyServer, args: dict) -> dict:
        a = parse_args(ASK, args, {"question": (str,), "uris": (list,), "uri": (str,)}, ("question",))
        if not a["question"].strip():
            raise JsonRpcInvalidParams(f"{ASK}: the question is empty")
        uris = a.get("uris") or ([a["uri"]] if a.get("uri") else [doc.uri for doc in ls.workspace.text_documents.values()])
        if not all(isinstance(u, str) for u in uris):
            raise JsonRpcInvalidParams(f"{ASK}: uris must be a list of strings")
        if not uris:
            raise ApplyError("no documents to answer from: open one, or pass uri or uris")
        snaps = [documents.snapshot(ls, uri) for uri in uris]
        docs = [{"id": s.path or s.uri, "text": s.text} for s in snaps]
        async with ModelProgress(ls, f"editapply: ask ({len(docs)} document{'s' if len(docs) > 1 else ''})",
                                 stream_text=True) as progress:
            answer = await ls.engine().ask(docs, a["question"], ls.settings.max_tokens, progress.report, progress.status)
            s = answer.stats
            progress.done(figures(s.get("completion_tokens"), s.get("tokens_per_second"), s.get("accepted_per_step")))
        return {"answer": answer.text, "finish_reason": answer.finish_reason, "documents": [d["id"] for d in docs],
                "stats": answer.stats}
