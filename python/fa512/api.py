"""The public Python API: `attention` (run) and `plan` (what would run, and why)."""

from __future__ import annotations

import math
from typing import Optional

import torch

from .dispatch import Plan, Target, make_plan, target_of
from .errors import arg_error
from .op import run_call, with_out
from .validate import HEAD_DIM, validate

DEFAULT_SOFTMAX_SCALE = 1.0 / math.sqrt(HEAD_DIM)


def default_bounds(q, k, page_table, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale):
    """Fill optional host bounds from shapes alone (no device read).

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


def _default_seqused_k(k, page_table, cu_seqlens_k, seqused_k):
    if seqused_k is not None:
        return seqused_k
    if page_table is not None or (isinstance(k, torch.Tensor) and k.dim() == 4):
        raise arg_error(ValueError, "seqused_k", None, "a (B,) int32 tensor of valid keys per sequence for paged K/V")
    if isinstance(cu_seqlens_k, torch.Tensor) and cu_seqlens_k.dim() == 1 and cu_seqlens_k.dtype == torch.int32:
        return cu_seqlens_k[1:] - cu_seqlens_k[:-1]  # device op, no sync
    return None  # validate() reports the missing/bad cu_seqlens_k


def validate_call(
    q, k, v, *, cu_seqlens_q, seqused_k=None, page_table=None, cu_seqlens_k=None, max_seqlen_q=None,
    max_seqlen_k=None, softmax_scale=None, causal=False, window_left=-1, window_right=-1, q_descale=None,
    k_descale=None, v_descale=None, out=None, num_splits=0, kernel="auto",
):
    """`fa512.attention`'s keyword arguments -> (Problem, FwdArgs), defaults filled, all checked.

    Shared by `plan`, the reference and the emulations so they accept exactly what the op does.
    """
    seqused_k = _default_seqused_k(k, page_table, cu_seqlens_k, seqused_k)
    max_seqlen_q, max_seqlen_k, softmax_scale = default_bounds(
        q, k, page_table, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale
    )
    return validate(
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
    )


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    seqused_k: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    cu_seqlens_k: Optional[torch.Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    num_splits: int = 0,
    kernel: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward for head_dim 512 over varlen queries and a paged or packed KV cache.

    Parameters
    ----------
    q : (total_q, Hq, 512) bfloat16 or float16
        Packed queries of all sequences; last dim contiguous, other strides free.
    k, v : (num_pages, page_size, Hkv, 512) with ``page_table``, or (total_k, Hkv, 512) with
        ``cu_seqlens_k``; float8_e4m3fn, or q's 16-bit dtype; k and v share dtype and layout.
    cu_seqlens_q : (B+1,) int32
        Query offsets of each sequence in ``q``.
    seqused_k : (B,) int32, optional
        Valid keys per sequence. Required for paged K/V; for packed K/V defaults to the
        lengths in ``cu_seqlens_k``.
    page_table : (B, max_pages_per_seq) int32, optional
        Page indices of each sequence, any order; only the first ceil(seqused_k / page_size)
        entries of a row are read.
    cu_seqlens_k : (B+1,) int32, optional
        Key offsets of each sequence in packed ``k``/``v``.
    max_seqlen_q, max_seqlen_k : int, optional
        Host upper bounds on query length and seqused_k; they size the grid and split plan
        (never a device sync). Default: total_q and the per-sequence K/V capacity.
    softmax_scale : float, default 1/sqrt(512)
        Gemma-4 passes 1.0 (its q/k are RMS-normalised).
    causal : bool, default False
        Bottom-right aligned: query i of a sequence with L queries and K keys sits at K - L + i.
    window_left, window_right : int, default -1 (unbounded)
        Key j is visible to position p when p - window_left <= j <= p + window_right.
    q_descale, k_descale, v_descale : float32 tensor of shape (), (1,), (Hkv,) or (B, Hkv), optional
        Logits are (q.k) * q_descale * k_descale * softmax_scale; out is multiplied by v_descale.
    out : (total_q, Hq, 512) in q's dtype, optional
        Written in place when given (rows past cu_seqlens_q[B] are not written).
    num_splits : int, default 0
        Split-KV pieces; 0 lets `fa512.splits` decide. At most `fa512.MAX_SPLITS`.
    kernel : {"auto", "fp8_mma", "mma16", "triton", "reference"}
        "auto" follows the dispatch table (`fa512.plan` shows the decision); a named kernel that
        cannot serve the call raises `fa512.KernelUnavailableError` with the reason.

    Returns
    -------
    out : (total_q, Hq, 512) in q's dtype
    lse : (Hq, total_q) float32
        Natural-log log-sum-exp of the scaled logits; -inf for rows with no visible key
        (whose out is 0).
    """
    # Guarded so that a warm call passing every bound pays no helper calls (~1 us each).
    if seqused_k is None:
        seqused_k = _default_seqused_k(k, page_table, cu_seqlens_k, seqused_k)
    if max_seqlen_q is None or max_seqlen_k is None or softmax_scale is None:
        max_seqlen_q, max_seqlen_k, softmax_scale = default_bounds(
            q, k, page_table, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale
        )
    call = (
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
    )
    # Eager calls skip the dispatcher (fa512.op says why) and allocate out there when it is
    # None (in C++ on the native warm call); torch.compile needs the op itself.
    if torch.compiler.is_compiling():
        call = with_out(call)
        return call[3], torch.ops.fa512.fwd(*call)
    return run_call(call)


def plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    seqused_k: Optional[torch.Tensor] = None,
    page_table: Optional[torch.Tensor] = None,
    cu_seqlens_k: Optional[torch.Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    num_splits: int = 0,
    kernel: str = "auto",
    target: Optional[str | Target] = None,
) -> Plan:
    """The decision `attention` would make for these arguments, without running anything.

    Same arguments as `attention` (only shapes, dtypes and devices are read; "meta" tensors
    work), plus ``target``: a `Target` or a string such as "cpu" or "sm_90:132" to plan for a
    device other than the tensors'. Returns a `Plan` (kernel, config, num_splits, workspace
    bytes, reason); ``print(plan.describe())`` shows it.
    """
    problem, _ = validate_call(
        q, k, v, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=page_table, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
        window_left=window_left, window_right=window_right, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, out=out, num_splits=num_splits, kernel=kernel,
    )
    if target is None:
        tgt = target_of(q.device)
    elif isinstance(target, Target):
        tgt = target
    else:
        tgt = Target.parse(target)
    return make_plan(problem, tgt, kernel, num_splits)
