"""One call of the op: its 20 arguments in schema order (`Call`), and the defaults of the API.

`Call` is what flows from the public API to a launch: `fa512.attention` and the op's body build
one, `fa512.planning.validate.check` turns it into a checked problem, the warm-call memo keys on
it and the native warm call reads it by position (it is a tuple). Nothing here reads device
memory.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .contract import DEFAULT_SOFTMAX_SCALE
from .errors import arg_error


class Call(NamedTuple):
    """The arguments of ``torch.ops.fa512.fwd`` in schema order (`fa512.api.op.SCHEMA`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: Optional[torch.Tensor]
    page_table: Optional[torch.Tensor]
    cu_seqlens_k: Optional[torch.Tensor]
    cu_seqlens_q: torch.Tensor
    max_seqlen_q: int
    seqused_k: torch.Tensor
    max_seqlen_k: int
    softmax_scale: float
    causal: bool
    window_left: int
    window_right: int
    q_descale: Optional[torch.Tensor]
    k_descale: Optional[torch.Tensor]
    v_descale: Optional[torch.Tensor]
    num_splits: int
    kernel: str
    precision: str = "auto"  # a default, so that calls built by position before it keep working


def default_bounds(q, k, page_table, max_seqlen_q, max_seqlen_k, softmax_scale):
    """Fill the optional host bounds from shapes alone (no device read).

    max_seqlen_q defaults to total_q; max_seqlen_k to the K/V capacity of one sequence
    (max_pages_per_seq * page_size, or total_k). Both are valid upper bounds, but looser than
    the caller's true maxima: pass the real ones for the best split planning.
    """
    if max_seqlen_q is None and isinstance(q, torch.Tensor) and q.dim() >= 1:
        max_seqlen_q = q.shape[0]
    if max_seqlen_k is None and isinstance(k, torch.Tensor):
        if k.dim() == 4 and isinstance(page_table, torch.Tensor) and page_table.dim() == 2:
            max_seqlen_k = page_table.shape[1] * k.shape[1]
        elif k.dim() >= 1:
            max_seqlen_k = k.shape[0]
    if softmax_scale is None:
        softmax_scale = DEFAULT_SOFTMAX_SCALE
    return max_seqlen_q, max_seqlen_k, softmax_scale


def default_seqused_k(k, page_table, cu_seqlens_k):
    """seqused_k for packed K/V: the lengths in cu_seqlens_k (a device op, no sync). Paged K/V
    has no default; a malformed cu_seqlens_k gives None, which validation then names."""
    if page_table is not None or (isinstance(k, torch.Tensor) and k.dim() == 4):
        raise arg_error(ValueError, "seqused_k", None, "a (B,) int32 tensor of valid keys per sequence for paged K/V")
    if isinstance(cu_seqlens_k, torch.Tensor) and cu_seqlens_k.dim() == 1 and cu_seqlens_k.dtype == torch.int32:
        return cu_seqlens_k[1:] - cu_seqlens_k[:-1]
    return None


def make_call(
    q, k, v, *, cu_seqlens_q, seqused_k=None, page_table=None, cu_seqlens_k=None, max_seqlen_q=None,
    max_seqlen_k=None, softmax_scale=None, causal=False, window_left=-1, window_right=-1, q_descale=None,
    k_descale=None, v_descale=None, out=None, num_splits=0, kernel="auto", precision="auto",
) -> Call:
    """`fa512.attention`'s keyword arguments as a `Call`, with the defaults filled in.

    Shared by `fa512.plan`, the reference and the emulation so that they accept exactly what
    the op does (`fa512.attention` inlines the same steps for its warm path).
    """
    if seqused_k is None:
        seqused_k = default_seqused_k(k, page_table, cu_seqlens_k)
    max_seqlen_q, max_seqlen_k, softmax_scale = default_bounds(
        q, k, page_table, max_seqlen_q, max_seqlen_k, softmax_scale
    )
    return Call(
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
        precision,
    )


def with_out(call: Call) -> Call:
    """``call`` with its out allocated (like q, contiguous) when it is None."""
    if call.out is not None:
        return call
    q = call.q
    if not isinstance(q, torch.Tensor):
        raise arg_error(TypeError, "q", type(q).__name__, "a torch.Tensor")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return tuple.__new__(Call, call[:3] + (out,) + call[4:])  # no Python-level calls (_replace makes two)


__all__ = ["Call", "default_bounds", "default_seqused_k", "make_call", "with_out"]
