"""The public Python API: `attention` (run) and `plan` (what would run, and why)."""

from __future__ import annotations

from typing import Optional

import torch

from ..call import Call, default_bounds, default_seqused_k, make_call, with_out
from ..launch.run import run
from ..planning.dispatch import Plan, Target, make_plan, target_of
from ..planning.validate import check
from . import op  # noqa: F401  (registers torch.ops.fa512.fwd, which attention uses under torch.compile)

_new_call = tuple.__new__  # builds a Call without NamedTuple's keyword __new__ (~0.3 us less per call)


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
    precision: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward for head_dim 512 over varlen queries and a paged or packed KV cache.

    Parameters
    ----------
    q : (total_q, Hq, 512) bfloat16 or float16 (float32: the reference kernel only)
        Packed queries of all sequences; last dim contiguous, other strides free.
    k, v : (num_pages, page_size, Hkv, 512) with ``page_table``, or (total_k, Hkv, 512) with
        ``cu_seqlens_k``; float8_e4m3fn, or q's dtype; k and v share dtype and layout.
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
        Split-KV pieces; 0 lets `fa512.planning.splits` decide. At most `fa512.MAX_SPLITS`.
    kernel : {"auto", "fp8_mma", "mma16", "triton", "reference"}
        "auto" follows the dispatch table (`fa512.plan` shows the decision); a named kernel that
        cannot serve the call raises `fa512.KernelUnavailableError` with the reason.
    precision : {"auto", "fast", "accurate"}
        The numerics of fp8_mma, the one kernel that rounds Q and P to e4m3. "fast": one e4m3
        term each. "accurate": two e4m3 terms each (Q ~ Q_hi + Q_lo, P ~ P_hi + P_lo), about the
        dequant control's accuracy; where fp8_mma has no accurate variant, "auto" kernel
        selection passes it over (a named ``kernel="fp8_mma"`` raises). "auto": accurate where
        it costs no measurable time, else fast (`fa512.planning.precision`; `fa512.plan` says
        which and why). mma16, Triton and the reference are accurate by construction and
        accept any value.

    Returns
    -------
    out : (total_q, Hq, 512) in q's dtype
    lse : (Hq, total_q) float32
        Natural-log log-sum-exp of the scaled logits; -inf for rows with no visible key
        (whose out is 0).
    """
    # Guarded so that a warm call passing every bound pays no helper calls (~1 us each).
    if seqused_k is None:
        seqused_k = default_seqused_k(k, page_table, cu_seqlens_k)
    if max_seqlen_q is None or max_seqlen_k is None or softmax_scale is None:
        max_seqlen_q, max_seqlen_k, softmax_scale = default_bounds(
            q, k, page_table, max_seqlen_q, max_seqlen_k, softmax_scale
        )
    call = _new_call(Call, (
        q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
        softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
        precision,
    ))
    # Eager calls skip the dispatcher (fa512.api.op says why) and allocate out there when it is
    # None (in C++ on the native warm call); torch.compile needs the op itself.
    if torch.compiler.is_compiling():
        call = with_out(call)
        return call.out, torch.ops.fa512.fwd(*call)
    return run(call)


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
    precision: str = "auto",
    target: Optional[str | Target] = None,
) -> Plan:
    """The decision `attention` would make for these arguments, without running anything.

    Same arguments as `attention` (only shapes, dtypes and devices are read; "meta" tensors
    work), plus ``target``: a `Target` or a string such as "cpu" or "sm_90:132" to plan for a
    device other than the tensors'. Returns a `Plan` (kernel, config, num_splits, workspace
    bytes, reason); ``print(plan.describe())`` shows it.
    """
    problem, _ = check(make_call(
        q, k, v, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=page_table, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
        window_left=window_left, window_right=window_right, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, out=out, num_splits=num_splits, kernel=kernel, precision=precision,
    ))
    if target is None:
        tgt = target_of(q.device)
    elif isinstance(target, Target):
        tgt = target
    else:
        tgt = Target.parse(target)
    return make_plan(problem, tgt, kernel, num_splits, precision)


__all__ = ["attention", "plan"]
