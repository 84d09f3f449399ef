"""Command arguments: one JSON object whose keys are checked before any work.

A wrong or missing key is the client's bug, not the user's: it fails with JSON-RPC's
InvalidParams naming the key, and unknown keys fail too (`snipet` would otherwise apply nothing).
"""

from __future__ import annotations

from pygls.exceptions import JsonRpcInvalidParams


def parse_args(command: str, args: dict, fields: dict[str, tuple[type, ...]], required: tuple[str, ...]) -> dict:
    """`args` checked against `fields` (name -> accepted types) and `required`; raises InvalidParams
    naming the first bad key."""
    unknown = sorted(set(args) - set(fields))
    if unknown:
        raise JsonRpcInvalidParams(f"{command}: unknown argument(s) {', '.join(unknown)} (known: {', '.join(fields)})")
    for name in required:
        if args.get(name) is None:
            raise JsonRpcInvalidParams(f"{command}: missing argument {name!r}")
    for name, kinds in fields.items():
        value = args.get(name)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise JsonRpcInvalidParams(f"{command}: {name} must be {' or '.join(k.__name__ for k in kinds)}, "
                                       f"got {type(value).__name__}")
    return args
