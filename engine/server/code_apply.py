"""`POST /v1/code/apply`: apply as Relace serves it, so the assistants built for Relace's instant
apply use editapply as is (Continue's `relace` provider posts to its apiBase + "code/apply").

Body `{initialCode, editSnippet, instruction?, model?}` (camelCase; other keys are ignored, as
Relace's clients send metadata of their own); answer `{mergedCode, usage}`, `usage` in OpenAI's
shape. The same pipeline as `/v1/apply` in mode auto, and the same errors; a merge that does not
validate is a 422 with the reasons or the readings (`apply.refused`), never a `mergedCode`
(Continue's adapter applies whatever `mergedCode` holds). `model` names nothing here: the
served model applies. `stream: true` is refused: what Relace streams is not documented, and no
client of it streams.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi import Request as HTTPRequest
from pydantic import Field

from engine.apply.errors import ApplyError
from engine.apply.pipeline import ApplyRequest
from engine.apply.text import BOM
from engine.server.apply import HTTPApply, apply_error, refused
from engine.server.errors import APIError
from engine.server.generation import usage
from engine.server.schemas import ERRORS, Body, ModelName, Text
from engine.server.state import get_state

ROUTE = "/v1/code/apply"
router = APIRouter()


class CodeApplyBody(Body):
    model: ModelName | None = None
    initialCode: Text = Field(description="The file as it is now")
    editSnippet: Text = Field(description="The lazy edit snippet ('... existing code ...' marks elided code)")
    instruction: Text | None = Field(None, description="What the edit does, in words")
    stream: bool = False


@router.post(ROUTE, responses=ERRORS, summary="Merge an edit snippet into a file (Relace-compatible)")
async def code_apply(body: CodeApplyBody, http: HTTPRequest):
    state = get_state(http)
    if body.stream:
        raise APIError(400, f"stream is not supported on {ROUTE}; POST /v1/apply with stream: true streams",
                       param="stream")
    try:
        req = ApplyRequest(initial_code=body.initialCode, edit_snippet=body.editSnippet.removeprefix(BOM),
                           instruction=body.instruction)
    except ApplyError as exc:
        raise apply_error(exc) from None
    run = HTTPApply(state, req, ROUTE)
    await run.prepare(http)
    if run.disconnected:
        run.record()
        return None  # nobody is listening
    result = await run.run(http)
    if result is None:
        return None
    if not result.ok:
        raise refused(result)
    return {"mergedCode": result.merged_code, "usage": usage(result.engine_stats())}
