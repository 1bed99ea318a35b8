"""The warm-call memo: one `fa512.backends.base.Launcher` per call signature.

Everything validation and planning decide depends only on the tensors' shapes, strides, dtypes
and devices and on the host scalars. The first call with a signature is checked
(`fa512.planning.validate.check`), planned (`fa512.planning.dispatch.make_plan`) and given a
launcher by its backend (`build`); later calls find the launcher and redo only what can change
between such calls: the check that ``out`` does not overlap q/k/v (data pointers move; the byte
extents are kept) here, and the (B, Hkv) descale views in the launcher. A hit re-validates and
re-plans nothing. Calls that fail validation are never stored, so they fail every time with the
same message. Its C++ form is `fa512.launch.native`.

Cost on the 2-core dev VM (2026-11-29, profiles/host_overhead.py --stub: mma16 kernel and stream
stubbed, CPU tensors, min over rounds, noisy to +-30%): a warm decode call (B=64, Hq=32, Hkv=4,
paged fp8/bf16) was 37-66 us through `fa512.attention` and ~195-210 us through
``torch.ops.fa512.fwd`` before launchers; 14-19 us and 20-24 us with them. Of that, the
signature is ~5 us, the dict lookup ~1.5 us, the mma16 launch ~5 us (two uint8 views, the lse
allocation).
"""

from __future__ import annotations

import os
from typing import Optional

from ..backends.base import Launcher
from ..backends.registry import BACKENDS
from ..call import Call
from ..errors import arg_error
from ..planning.dispatch import make_plan, target_of
from ..planning.validate import check, debug_checks, memory_span

_MAX_ENTRIES = 4096  # distinct call signatures kept; cleared whole when full
_memo: dict = {}


def _extent(t) -> int:
    span = memory_span(t)
    return 0 if span is None else span[1] - span[0]


def _overlap_error(name: str):
    raise arg_error(ValueError, "out", f"memory overlapping {name}", "a buffer of its own")


def signature(call: Call) -> Optional[tuple]:
    """A key of everything validation and planning read; None when an argument is malformed.

    Spelled out per argument (not a loop over the call): this runs on every call, and the
    generic loop cost ~20 us on the dev CPU. Strides are left out for the 1-D metadata and the
    descales, whose strides nothing before the kernel reads.
    """
    try:
        (q, k, v, out, pt, cuk, cuq, msq, sk, msk, scale, causal, wl, wr, qd, kd, vd, ns, kernel, precision) = call
        dev = q.device
        key = (
            # The Triton interpreter switch decides whether CPU tensors can use Triton.
            dev if dev.type == "cuda" else (dev, os.environ.get("TRITON_INTERPRET")),
            q.shape, q.stride(), q.dtype, type(q),
            k.shape, k.stride(), k.dtype, k.device, type(k),
            v.shape, v.stride(), v.dtype, v.device, type(v),
            out.shape, out.stride(), out.dtype, out.device, type(out),
            cuq.shape, cuq.dtype, cuq.device,
            sk.shape, sk.dtype, sk.device,
            None if pt is None else (pt.shape, pt.stride(), pt.dtype, pt.device),
            None if cuk is None else (cuk.shape, cuk.dtype, cuk.device),
            None if qd is None else (qd.shape, qd.dtype, qd.device),
            None if kd is None else (kd.shape, kd.dtype, kd.device),
            None if vd is None else (vd.shape, vd.dtype, vd.device),
            # types too: True == 1 and 1.0 == 1, but validation tells them apart
            msq, msk, scale, causal, wl, wr, ns, kernel, precision,
            type(msq), type(msk), type(scale), type(causal), type(wl), type(wr), type(ns), type(kernel), type(precision),
        )
    except (AttributeError, TypeError, ValueError):
        return None  # not tensors where tensors belong: check() names it
    return key


def build(call: Call, debug: bool = False) -> Launcher:
    """The launcher of ``call``'s signature: check -> plan -> the backend's launcher. ``debug``
    adds the checks that read device memory (`fa512.planning.validate.debug_checks`)."""
    problem, args = check(call)
    if debug:
        debug_checks(problem, args, call.max_seqlen_q, call.max_seqlen_k)
    plan = make_plan(problem, target_of(args.q.device), call.kernel, call.num_splits, call.precision)
    extents = tuple(_extent(t) for t in (args.q, args.k, args.v, call.out))
    return BACKENDS[plan.kernel].make_launcher(plan, args, call.out, extents)


def remember(store: dict, key, launcher, max_entries: int = _MAX_ENTRIES) -> None:
    """Keep ``launcher`` under ``key`` (not when the key was unhashable: None); a full store is
    cleared whole."""
    if key is not None:
        if len(store) >= max_entries:
            store.clear()
        store[key] = launcher


def launcher_for(call: Call) -> Launcher:
    """The launcher of ``call`` (its ``out`` allocated): the memo's, after the per-call overlap
    check, or a new one (stored unless the call is malformed, which `build` has raised for)."""
    key = signature(call)
    try:
        launcher = _memo.get(key)
    except TypeError:  # an unhashable scalar (a list where an int belongs): check() names it
        key = launcher = None
    if launcher is None:
        launcher = build(call)
        remember(_memo, key, launcher)
        return launcher
    q, k, v, out = call[:4]
    eq, ek, ev, eo = launcher.extents
    if eo:  # unrolled: this runs on every warm call
        o0 = out.data_ptr()
        o1 = o0 + eo
        t0 = q.data_ptr()
        if eq and t0 < o1 and o0 < t0 + eq:
            _overlap_error("q")
        t0 = k.data_ptr()
        if ek and t0 < o1 and o0 < t0 + ek:
            _overlap_error("k")
        t0 = v.data_ptr()
        if ev and t0 < o1 and o0 < t0 + ev:
            _overlap_error("v")
    return launcher


def size() -> int:
    return len(_memo)


def clear() -> None:
    _memo.clear()


__all__ = ["build", "clear", "launcher_for", "remember", "signature", "size"]
