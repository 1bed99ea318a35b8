"""Running one call: the native warm call, else the memo's launcher (`fa512.launch.memo`).

This is the op's body (`fa512.api.op`) and what eager `fa512.attention` calls. The path runs one
way: the call's metadata (`fa512.call.Call`) -> the checked problem -> the plan -> the launcher
-> the launch, and a warm call goes straight from the signature to its launcher. ``FA512_DEBUG=1``
builds a fresh launcher for every call, with the checks that read device memory.
"""

from __future__ import annotations

import torch

from ..call import Call, with_out
from ..planning.validate import debug_enabled
from . import memo, native

# Set by each eager call: which kernel served it, with how many splits and which config. Tests
# and tools read it (`launched`) to prove which kernel actually ran; it is not part of the API.
last_launch: dict = {}


def launched() -> dict:
    """kernel / num_splits / config of the last eager call in this process."""
    return last_launch


def run(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of ``call``; its ``out`` may be None, and is then allocated like q.

    A signature served before goes through the native warm call when it is loaded (it declines,
    None, under FA512_DEBUG and for anything unusual); otherwise through the memo, after which
    the signature is registered with the native side.
    """
    fast = native.loaded()
    hit = None
    if fast is not None:
        hit = fast.run(call)
        if hit:
            return hit
    full = with_out(call)
    launcher = memo.build(full, debug=True) if debug_enabled() else memo.launcher_for(full)
    last_launch.update(launcher.record)
    lse = launcher(full)
    # Unknown to the native side (None; False = known as Python only): register the call as
    # given (out None or not: the native side allocates it too), which builds the extension the
    # first time a launch could use it.
    if hit is None and (fast is not None or launcher.native_spec is not None):
        native.register(call, launcher, call.out is None, last_launch)
    return full.out, lse


def run_positional(*args) -> torch.Tensor:
    """The op's body on its 20 schema arguments; returns lse (``out`` is written in place)."""
    if len(args) == 19:  # torch passes no trailing argument equal to its default (precision="auto")
        args = args + ("auto",)
    return run(tuple.__new__(Call, args))[1]  # Call(*args) would add a Python-level __new__ per call


__all__ = ["last_launch", "launched", "run", "run_positional"]
