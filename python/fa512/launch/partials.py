"""Uncombined split partials of one call: what `fa512.distributed` merges across ranks.

``partials(call)`` runs the kernel the op would plan for ``call`` and stops before the split
combine: it returns every split's O (normalised by its own row sum, times v_descale) and lse,
the inputs of `fa512.merge_partials`. The op's ``out`` is in q's dtype; a partial that is merged
again must not be rounded to it first: merging two bf16-rounded partials of a decode step moved
the result 2.7e-3 (rel L2) from the one-process output, fp16 ones 9e-4, fp32 ones 1.7e-6
(CPU simulation of the casts, 2026-12-01). So the SM90 kernels run their split variant (fp32
partials, also for one split) and Triton its split path; the reference kernel returns one
float64 partial (it is the oracle the CPU tests hold the merge to).

Launchers are kept per call signature like the op's (`fa512.launch.memo`); a hit re-validates
and re-plans nothing. There is no C++ warm path here: a partial call costs the Python launch
(tens of us eager), which a CUDA graph removes.
"""

from __future__ import annotations

from ..backends.base import PartialLauncher
from ..backends.registry import BACKENDS
from ..call import Call
from ..planning.dispatch import make_plan, target_of
from ..planning.validate import check, debug_checks, debug_enabled
from .memo import remember, signature

_MAX_ENTRIES = 1024
_launchers: dict = {}
# Which kernel served the last partial call (kernel / num_splits / config), as `fa512.launch.run`.
last_launch: dict = {}


def build(call: Call, debug: bool = False) -> PartialLauncher:
    """check -> plan -> the backend's partial launcher (``call.out`` is ignored)."""
    problem, args = check(call)
    if debug:
        debug_checks(problem, args, call.max_seqlen_q, call.max_seqlen_k)
    plan = make_plan(problem, target_of(args.q.device), call.kernel, call.num_splits, call.precision)
    return BACKENDS[plan.kernel].make_partial_launcher(plan, args)


def partials(call: Call) -> tuple:
    """(o_parts (S, total_q, Hq, 512), lse_parts (S, Hq, total_q)) of ``call``.

    fp32 from the GPU kernels, float64 from the reference; S is the planned split count (1 for
    the reference). Rows past cu_seqlens_q[B] hold no result (they may be unwritten).
    """
    call = tuple.__new__(Call, call[:3] + (None,) + call[4:])
    if debug_enabled():
        launcher = build(call, debug=True)
    else:
        # memo.signature reads out's fields; q stands in for it (the same for every such call)
        key = signature(tuple.__new__(Call, call[:3] + (call.q,) + call[4:]))
        try:
            launcher = _launchers.get(key)
        except TypeError:  # an unhashable scalar: check() names it
            key = launcher = None
        if launcher is None:
            launcher = build(call)
            remember(_launchers, key, launcher, _MAX_ENTRIES)
    last_launch.update(launcher.record)
    return launcher(call)


def clear() -> None:
    _launchers.clear()


__all__ = ["build", "clear", "last_launch", "partials"]
