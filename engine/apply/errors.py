"""What the apply pipeline reports: exceptions for bad input, `Problem` for findings.

Bad input (an empty snippet, a snippet made only of elision markers, a diff that does not parse or
does not apply) raises one of the exceptions below, so callers can map them to "bad input" (the
CLI's exit 2). A merge or a validation that ran but found something doubtful does not raise: it
returns `Problem`s, and the caller decides.
"""

from __future__ import annotations

from dataclasses import dataclass


class ApplyError(ValueError):
    """Base class of every bad-input error of the apply pipeline."""

    def __reduce__(self):
        # Subclasses build their message in __init__ from other arguments, so the default pickle
        # (the class called on `args`) would garble it: a copy (the server's merge workers send
        # errors across processes) is rebuilt from the message and the attributes instead.
        return _rebuild, (type(self), str(self), dict(self.__dict__))


def _rebuild(cls: type, message: str, attrs: dict) -> ApplyError:
    exc = cls.__new__(cls)
    ValueError.__init__(exc, message)
    exc.__dict__.update(attrs)
    return exc


class SnippetError(ApplyError):
    """The update snippet cannot be used at all."""


class EmptySnippetError(SnippetError):
    DEFAULT = "the update snippet is empty (nothing but whitespace or an empty code fence)"

    def __init__(self, message: str = DEFAULT) -> None:
        super().__init__(message)


class MarkerOnlySnippetError(SnippetError):
    def __init__(self, markers: int) -> None:
        super().__init__(
            f"the update snippet holds only elision markers ({markers} marker line(s), no code): "
            "it says 'keep everything' and changes nothing"
        )


class DiffError(ApplyError):
    """A unified diff does not parse, names several files, or its hunks do not apply."""


@dataclass(frozen=True)
class Problem:
    """A named finding with a human reason.

    `severity` is 'error' (the result should not be written as is) or 'warning' (worth showing).
    `line` is a 1-based line number in the text the problem is about, when there is one.
    """

    name: str
    reason: str
    severity: str = "error"
    line: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.name}{where}: {self.reason}"


class BinaryFileError(ApplyError):
    """The input holds NUL bytes: a binary file, not source code."""

    def __init__(self, what: str = "the file") -> None:
        super().__init__(f"{what} is binary (it contains NUL bytes); only text files can be edited")


class InvalidUtf8Error(ApplyError):
    """The input's bytes are not valid UTF-8."""

    def __init__(self, what: str, error: UnicodeDecodeError) -> None:
        super().__init__(f"{what} is not valid UTF-8 (byte 0x{error.object[error.start]:02x} at offset {error.start})")


class NoMatchError(ApplyError):
    """Deterministic mode only: no segment of the snippet matches anywhere in the file."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("the snippet matches nowhere in the file, so it cannot be merged without the model"
                         + (f" ({detail})" if detail else ""))


class ContextTooLongError(ApplyError):
    """The prompt plus the expected answer do not fit the model's context window."""

    def __init__(self, prompt_tokens: int, max_tokens: int, limit: int) -> None:
        self.prompt_tokens, self.max_tokens, self.limit = prompt_tokens, max_tokens, limit
        super().__init__(f"file too large for the model's context: the prompt is {prompt_tokens} tokens and the answer "
                         f"needs up to {max_tokens} more, over the {limit}-token context")


class FileOverContextError(ContextTooLongError):
    """The file alone has more tokens than the context: no prompt holding it can run."""

    def __init__(self, tokens: int, limit: int, exact: bool) -> None:
        self.prompt_tokens, self.max_tokens, self.limit = tokens, 0, limit
        count = f"{tokens} tokens" if exact else f"at least {tokens} tokens"
        ValueError.__init__(self, f"file too large for the model's context: the file alone is {count}, and the prompt "
                                  f"holds it whole; the context is {limit} tokens (prompt + answer)")


class InputTooLargeError(ApplyError):
    """A text of the request is over a size limit of `limits.py`; refused before any work."""

    def __init__(self, what: str, param: str, size: str, limit: str, variable: str) -> None:
        self.param = param
        super().__init__(f"{what} is {size}; the limit is {limit} ({variable}), which keeps the merge fast "
                         "and is beyond any model context")


class NeedsModelError(ApplyError):
    """The request can only be served by the model, and none is available or allowed."""


class ApplyCancelled(Exception):
    """The caller cancelled the apply (a cancel event, or the stream was closed) while generating."""
