"""How a command fails: a JSON-RPC error with a one-line message and a machine-readable reason.

LSP's `RequestFailed` (-32803) is "a request that was syntactically correct but failed"; `data`
carries `{"reason": ...}` so a client can tell a stale document from an unreachable engine
without parsing the message. Bad arguments are JSON-RPC's `InvalidParams` (-32602), and a run the
user cancelled is `RequestCancelled` (-32800).
"""

from __future__ import annotations

from lsprotocol.types import LSPErrorCodes
from pygls.exceptions import JsonRpcException

# The reasons a command fails, as `data.reason`.
BAD_INPUT = "bad_input"  # the file or the snippet cannot be applied (binary, empty snippet, no match, ...)
STALE = "stale_version"  # the document changed while the command ran
BUSY = "busy"  # an apply already runs on this document
ENGINE_UNAVAILABLE = "engine_unavailable"  # cannot reach or load the engine
ENGINE_FAILED = "engine_failed"  # the engine failed while serving
NOT_APPLIED = "not_applied"  # the editor refused the workspace edit


class CommandFailed(JsonRpcException):
    CODE = LSPErrorCodes.RequestFailed.value
    MESSAGE = "Request Failed"

    def __init__(self, reason: str, message: str):
        super().__init__(message, data={"reason": reason})
        self.reason = reason

