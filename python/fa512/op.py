"""The torch custom op ``torch.ops.fa512.fwd``: validate -> plan -> launch.

Schema (``out`` is written in place; only the lse is returned, as a fresh tensor)::

    fa512::fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? page_table,
               Tensor? cu_seqlens_k, Tensor cu_seqlens_q, SymInt max_seqlen_q,
               Tensor seqused_k, SymInt max_seqlen_k, float softmax_scale, bool causal,
               SymInt window_left, SymInt window_right, Tensor? q_descale,
               Tensor? k_descale, Tensor? v_descale, SymInt num_splits, str kernel) -> Tensor

The raw op needs every argument; `fa512.attention` fills defaults and allocates ``out``.
Once `fa512.native` is loaded, its C++ kernel serves the op on CUDA tensors (registered
signatures launch in C++, anything else calls `fwd_impl`).
The op is opaque to torch.compile (its fake only validates shapes and builds the lse), and its
body does no host synchronisation on the kernel paths, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import native
from .backends import BACKENDS
from .call_cache import lookup
from .errors import arg_error
from .dispatch import make_plan, target_of
from .validate import debug_checks, debug_enabled, validate

SCHEMA = (
    "fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? page_table, Tensor? cu_seqlens_k, "
    "Tensor cu_seqlens_q, SymInt max_seqlen_q, Tensor seqused_k, SymInt max_seqlen_k, float softmax_scale, "
    "bool causal, SymInt window_left, SymInt window_right, Tensor? q_descale, Tensor? k_descale, "
    "Tensor? v_descale, SymInt num_splits, str kernel) -> Tensor"
)

# Set by each eager call: which kernel served it and with how many splits. Tests read it to
# prove which kernel actually ran; it is not part of the API.
last_launch: dict = {}


def run(call: tuple) -> torch.Tensor:
    """The op's body on its 19 arguments in schema order: validate -> plan -> launch; returns lse."""
    return run_call(call)[1]


def run_call(call: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) for the op's 19 arguments; ``out`` (``call[3]``) may be None, and is then
    allocated like q (contiguous), as `fa512.attention` does.

    A signature served before goes through the native warm call when it is loaded
    (`fa512.native`); otherwise `fa512.call_cache` (validate and plan once per signature), and
    the signature is then registered with the native side.
    """
    fast = native.loaded()
    hit = None
    if fast is not None:  # declines (None) under FA512_DEBUG
        hit = fast.run(call)
        if hit:
            return hit
    if debug_enabled():
        call = with_out(call)
        problem, args = validate(*call)
        debug_checks(problem, args, call[7], call[9])
        plan = make_plan(problem, target_of(args.q.device), call[18], call[17])
        last_launch.update(kernel=plan.kernel, num_splits=plan.num_splits, config=plan.config)
        return call[3], BACKENDS[plan.kernel].launch(plan, args, call[3])
    full = with_out(call)
    launcher, args = lookup(full, allow_fast=True)
    last_launch.update(launcher.record)
    lse = launcher.fast(full) if args is None else launcher.launch(launcher, args, full[3])
    # Unknown to the native side (None; False = known as Python only): register it, which
    # builds the extension the first time a launch could use it.
    if hit is None and (fast is not None or launcher.native_state is not None):
        native.register(call, launcher, call[3] is None, last_launch)
    return full[3], lse


def with_out(call: tuple) -> tuple:
    """``call`` with its out allocated when it is None."""
    if call[3] is not None:
        return call
    q = call[0]
    if not isinstance(q, torch.Tensor):
        raise arg_error(TypeError, "q", type(q).__name__, "a torch.Tensor")
    return call[:3] + (torch.empty_like(q, memory_format=torch.contiguous_format),) + call[4:]


def fwd_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    page_table: Optional[torch.Tensor],
    cu_seqlens_k: Optional[torch.Tensor],
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    seqused_k: torch.Tensor,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    q_descale: Optional[torch.Tensor],
    k_descale: Optional[torch.Tensor],
    v_descale: Optional[torch.Tensor],
    num_splits: int,
    kernel: str,
) -> torch.Tensor:
    return run((
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
    ))


def _fwd_fake(
    q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
    softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
):
    validate(
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
    )
    return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


# Registered through torch.library.Library rather than torch.library.custom_op: the custom_op
# wrapper runs Python autograd and ADInplaceOrView kernels around the body, ~230 us per direct
# `torch.ops.fa512.fwd` call on the dev CPU against ~9 us for one dispatcher pass into a
# CompositeExplicitAutograd kernel (2026-11-29, no-op body). Without an autograd kernel, a call
# on inputs that require grad gets the dispatcher's autograd-not-implemented fallback.
# Eager `fa512.attention` calls `run` directly: no dispatcher at all, and a bad scalar reaches
# validation (which names it) instead of the schema parser.
_lib = torch.library.Library("fa512", "DEF")
_lib.define(SCHEMA)
_lib.impl("fwd", fwd_impl, "CompositeExplicitAutograd")
torch.library.register_fake("fa512::fwd", _fwd_fake, lib=_lib)
