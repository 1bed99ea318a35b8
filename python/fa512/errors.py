"""One message format for every user-facing error: argument, value seen, value expected."""

from __future__ import annotations


def arg_error(cls: type, arg: str, seen: object, expected: str, hint: str = "") -> Exception:
    """Build ``cls`` (ValueError, TypeError, ...) naming the argument, what was seen and expected."""
    msg = f"fa512: {arg}: got {seen}, expected {expected}"
    if hint:
        msg += f" ({hint})"
    return cls(msg)


class KernelUnavailableError(NotImplementedError):
    """An explicitly requested kernel cannot serve this call; the message says why."""
