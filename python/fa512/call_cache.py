"""Warm-call fast path: one `Launcher` per call signature (its C++ form: `fa512.native`).

Everything `validate` and `make_plan` decide depends only on the tensors' shapes, strides,
dtypes and devices and on the host scalars. The first call with a signature validates, plans and
builds a `Launcher`; later calls look it up and redo only what can change between such calls:
the check that ``out`` does not overlap q/k/v (data pointers move; the byte extents are cached)
and the (B, Hkv) descale views (memoised per descale tensor). Calls that fail validation are
never cached, so they fail every time with the same message. ``FA512_DEBUG=1`` bypasses the
cache (fa512.op).

The launcher is what the backend's ``launch`` receives as its plan: it has the Plan's
``problem``, ``config``, ``num_splits`` and ``kernel``, plus ``launch_state``, a slot where a
backend may keep what it derives once per signature (`Mma16Backend` keeps the compiled
functions, the converted scalars and the output shapes there). Everything in the signature is
fixed for a launcher; data pointers are not.

Cost on the 2-core dev VM (2026-11-29, profiles/host_overhead.py --stub: mma16 kernel and stream
stubbed, CPU tensors, min over rounds, noisy to +-30%): a warm decode call (B=64, Hq=32, Hkv=4,
paged fp8/bf16) was 37-66 us through `fa512.attention` and ~195-210 us through
``torch.ops.fa512.fwd`` before launchers; now 14-19 us and 20-24 us. Of that, the signature is
~5 us, the dict lookup ~1.5 us, the mma16 launch ~5 us (two uint8 views, the lse allocation).
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from .backends import BACKENDS
from .descales import descale_view
from .dispatch import Plan, make_plan, target_of
from .errors import arg_error
from .validate import FwdArgs, Problem, _memory_span, validate

_MAX_ENTRIES = 4096  # distinct call signatures kept; cleared whole when full
_MAX_DESCALE_VIEWS = 256  # per launcher: descale tensors seen (one per layer is typical)
_cache: dict = {}


class Launcher:
    """A validated, planned call signature: what a warm call needs besides the tensors."""

    __slots__ = (
        "plan", "problem", "config", "num_splits", "kernel", "record", "launch", "extents",
        "descale_modes", "descale_views", "launch_state", "fast", "native_state",
    )

    def __init__(self, plan: Plan, extents: tuple):
        self.plan = plan
        self.problem: Problem = plan.problem
        self.config = plan.config
        self.num_splits = plan.num_splits
        self.kernel = plan.kernel
        # fa512.op.last_launch is updated from this dict, so a warm call builds no record
        self.record = {"kernel": plan.kernel, "num_splits": plan.num_splits, "config": plan.config}
        self.launch = BACKENDS[plan.kernel].launch
        self.extents = extents  # bytes each of (q, k, v, out) can touch from its data pointer
        # modes whose view is a new tensor; "none" and "per_batch_head" need no view
        self.descale_modes = tuple(m if m in ("scalar", "per_head") else None for m in self.problem.descale_modes)
        self.descale_views: dict = {}  # id(descale) -> (descale, its (B, Hkv) view)
        self.launch_state = None
        # Optional warm launch on the raw call tuple (a backend sets it on its first launch):
        # it skips building FwdArgs and re-reading the launch state (`Mma16Backend`).
        self.fast = None
        # What the native warm call needs (`fa512.native.launch_spec`; set with ``fast``).
        self.native_state = None

    def descale(self, t: Optional[torch.Tensor], mode: Optional[str]) -> Optional[torch.Tensor]:
        """The (B, Hkv) view of ``t`` for a "scalar" or "per_head" ``mode``; made once per tensor
        (an expand costs ~2 us on the dev CPU)."""
        hit = self.descale_views.get(id(t))
        # The view pins t's storage; a t that was re-pointed (set_) no longer shares it.
        if hit is not None and hit[0] is t and hit[1].data_ptr() == t.data_ptr():
            return hit[1]
        if len(self.descale_views) >= _MAX_DESCALE_VIEWS:
            self.descale_views.clear()
        view = descale_view(t, mode, self.problem.batch, self.problem.num_kv_heads)
        self.descale_views[id(t)] = (t, view)
        return view


def _extent(t: torch.Tensor) -> int:
    span = _memory_span(t)
    return 0 if span is None else span[1] - span[0]


def _overlap_error(name: str):
    raise arg_error(ValueError, "out", f"memory overlapping {name}", "a buffer of its own")


def _signature(call: tuple) -> Optional[tuple]:
    """A key of everything validation and planning read; None when an argument is malformed.

    Spelled out per argument (not a loop over the call): this runs on every call, and the
    generic loop cost ~20 us on the dev CPU. Strides are left out for the 1-D metadata and the
    descales, whose strides nothing before the kernel reads.
    """
    try:
        (q, k, v, out, pt, cuk, cuq, msq, sk, msk, scale, causal, wl, wr, qd, kd, vd, ns, kernel) = call
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
            msq, msk, scale, causal, wl, wr, ns, kernel,
            type(msq), type(msk), type(scale), type(causal), type(wl), type(wr), type(ns), type(kernel),
        )
    except (AttributeError, TypeError, ValueError):
        return None  # not tensors where tensors belong: validate names it
    return key


def _cold(call: tuple, key: Optional[tuple]) -> tuple[Launcher, FwdArgs]:
    problem, args = validate(*call)
    plan = make_plan(problem, target_of(args.q.device), call[-1], call[-2])
    extents = tuple(_extent(t) for t in (args.q, args.k, args.v)) + (_extent(call[3]),)
    launcher = Launcher(plan, extents)
    if key is not None:  # None: malformed, and validate has raised already
        if len(_cache) >= _MAX_ENTRIES:
            _cache.clear()
        _cache[key] = launcher
    return launcher, args


def lookup(call: tuple, allow_fast: bool = False) -> tuple[Launcher, Optional[FwdArgs]]:
    """``call`` is the op's 19 arguments in schema order (see `fa512.op`).

    Returns the signature's launcher and the launch tensors (descales as (B, Hkv) views). With
    ``allow_fast``, a warm launcher that has a ``fast`` launch comes back with None for the
    tensors: ``launcher.fast(call)`` reads them from the call itself.
    """
    key = _signature(call)
    try:
        launcher = _cache.get(key)
    except TypeError:  # an unhashable scalar (a list where an int belongs): validate names it
        key = launcher = None
    if launcher is None:
        return _cold(call, key)

    (q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, _, seqused_k, _, _, _, _, _, qd, kd, vd, _, _) = call
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
    if allow_fast and launcher.fast is not None:
        return launcher, None
    mq, mk, mv = launcher.descale_modes
    return launcher, FwdArgs(
        q, k, v, page_table, cu_seqlens_k, cu_seqlens_q, seqused_k,
        qd if mq is None else launcher.descale(qd, mq),
        kd if mk is None else launcher.descale(kd, mk),
        vd if mv is None else launcher.descale(vd, mv),
    )


def validate_and_plan(call: tuple) -> tuple[Problem, FwdArgs, Plan]:
    """`lookup`, returning the (Problem, FwdArgs, Plan) that full validation and planning would."""
    launcher, args = lookup(call)
    return launcher.problem, args, launcher.plan


def clear() -> None:
    _cache.clear()
