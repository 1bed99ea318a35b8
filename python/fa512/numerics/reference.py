"""Golden reference: the op's semantics in float64 (or float32) PyTorch, and the CPU kernel.

Implements everything the contract promises: paged K/V gathered through the page table in any
page order and page size, packed varlen K/V, GQA, bottom-right causal and local masks,
descales, lse, empty rows and empty sequences, and split-KV (partial (O, lse) per split merged
by `merge_partials`). Work is chunked over query rows so one 32k x 32k head stays within a few GB.

The reference reads sequence lengths on the host (it synchronises): it is a test oracle and
the CPU implementation, not a graph-capturable GPU path.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..call import make_call
from ..planning.problem import FwdArgs, Problem
from ..planning.validate import check

# Logit elements materialised per chunk (x8 bytes in float64): 2**26 -> 512 MB peak per chunk.
_CHUNK_ELEMS = 1 << 26


def merge_weights(lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight of each partial in the merge, and the merged lse.

    Parameters
    ----------
    lse_parts : (S, ...) tensor, each partial's log-sum-exp; -inf marks a partial with no visible key.

    Returns
    -------
    (weights, lse): weights (S, ...) = exp(lse_s - lse), 0 for empty partials and for rows where
    every partial is empty; lse (...) = log(sum_s exp(lse_s)), -inf where every partial is empty.
    """
    lse_max = lse_parts.max(dim=0).values
    safe_max = torch.where(torch.isfinite(lse_max), lse_max, torch.zeros_like(lse_max))
    weights = torch.exp(lse_parts - safe_max)  # exp(-inf) = 0 for empty splits
    total = weights.sum(dim=0)
    lse = torch.where(total > 0, safe_max + torch.log(total), torch.full_like(total, -math.inf))
    norm = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    return weights * norm, lse


def merge_partials(o_parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge split-KV partials.

    Parameters
    ----------
    o_parts : (S, ..., D) tensor, each split's output already normalised by its own row sum.
    lse_parts : (S, ...) tensor, each split's log-sum-exp; -inf marks a split with no visible key.

    Returns
    -------
    (out, lse) with the split axis reduced: out = sum_s exp(lse_s - lse) * o_s (`merge_weights`).
    A split with lse = -inf adds nothing whatever its O holds (a kernel may leave an empty
    split's O unwritten); rows where every split is empty give out = 0, lse = -inf.
    """
    weights, lse = merge_weights(lse_parts)
    w = weights.unsqueeze(-1)
    out = torch.where(w > 0, w * o_parts, torch.zeros_like(o_parts)).sum(dim=0)
    return out, lse


def split_key_ranges(seqlen_k: int, num_splits: int, block_n: int) -> list[tuple[int, int]]:
    """Key ranges of each split: whole blocks of ``block_n`` keys, as even as possible.

    The same rule the kernels use: with n = ceil(seqlen_k / block_n) blocks, split s covers
    blocks [s * per, (s + 1) * per) with per = ceil(n / num_splits); trailing splits may be empty.
    """
    n_blocks = -(-seqlen_k // block_n)
    per = max(1, -(-n_blocks // num_splits))
    ranges = []
    for s in range(num_splits):
        lo = min(s * per * block_n, seqlen_k)
        hi = min((s + 1) * per * block_n, seqlen_k)
        ranges.append((lo, hi))
    return ranges


def _gather_kv(problem: Problem, args: FwdArgs, b: int, seqlen_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(seqlen_k, Hkv, D) keys and values of sequence ``b``, in the cache's dtype."""
    if problem.paged:
        n_pages = -(-seqlen_k // problem.page_size)
        pages = args.page_table[b, :n_pages].long()
        hkv, d = args.k.shape[-2:]
        k = args.k[pages].reshape(-1, hkv, d)[:seqlen_k]
        v = args.v[pages].reshape(-1, hkv, d)[:seqlen_k]
        return k, v
    start = int(args.cu_seqlens_k[b])
    return args.k[start : start + seqlen_k], args.v[start : start + seqlen_k]


def _visible(problem: Problem, rows: torch.Tensor, keys: torch.Tensor, seqlen_q: int, seqlen_k: int):
    """(n, k) bool mask: key j visible to query row i (bottom-right aligned)."""
    pos = (seqlen_k - seqlen_q + rows).unsqueeze(1)
    j = keys.unsqueeze(0)
    ok = torch.ones(rows.shape[0], keys.shape[0], dtype=torch.bool, device=rows.device)
    if problem.window_right >= 0:
        ok &= j <= pos + problem.window_right
    if problem.window_left >= 0:
        ok &= j >= pos - problem.window_left
    return ok


def _attend(logits: torch.Tensor, visible: torch.Tensor, v: torch.Tensor):
    """Softmax over visible keys and P @ V for one group.

    logits (Hkv, G, n, k) already scaled; visible (n, k); v (k, Hkv, D).
    Returns out (Hkv, G, n, D) and lse (Hkv, G, n); rows with no visible key give 0 / -inf.
    """
    if logits.shape[-1] == 0:  # an empty split or a sequence with no keys
        h, g, n, _ = logits.shape
        out = logits.new_zeros(h, g, n, v.shape[-1])
        return out, logits.new_full((h, g, n), -math.inf)
    logits = logits.masked_fill(~visible, -math.inf)
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = torch.exp(logits - row_max)
    row_sum = p.sum(dim=-1, keepdim=True)
    out = torch.einsum("hgnk,khd->hgnd", p, v)
    out = out * torch.where(row_sum > 0, 1.0 / row_sum, torch.zeros_like(row_sum))
    lse = torch.where(row_sum > 0, row_max + torch.log(row_sum), torch.full_like(row_sum, -math.inf))
    return out, lse.squeeze(-1)


def reference_forward(
    problem: Problem,
    args: FwdArgs,
    compute_dtype: torch.dtype = torch.float64,
    num_splits: int = 1,
    split_block_n: int = 64,
    out: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference forward on validated arguments.

    Returns out (total_q, Hq, D) in ``compute_dtype`` (or written into ``out`` and returned),
    and lse (Hq, total_q) in ``compute_dtype``. Rows past cu_seqlens_q[B] are left at 0 / -inf
    (or untouched in a caller's ``out``). With ``num_splits > 1`` each sequence's keys are cut
    into split ranges (`split_key_ranges`), each computed alone and merged: the split-KV path.
    """
    total_q, hq, d = args.q.shape
    hkv, group = problem.num_kv_heads, problem.group_size
    device = args.q.device
    result = torch.zeros(total_q, hq, d, dtype=compute_dtype, device=device)
    lse_all = torch.full((hq, total_q), -math.inf, dtype=compute_dtype, device=device)
    written = torch.zeros(total_q, dtype=torch.bool, device=device)
    cu_q = args.cu_seqlens_q.tolist()
    used = args.seqused_k.tolist()
    ones = torch.ones(problem.batch, hkv, dtype=compute_dtype, device=device)
    qd, kd, vd = (ones if t is None else t.to(compute_dtype) for t in (args.q_descale, args.k_descale, args.v_descale))

    for b in range(problem.batch):
        q0, q1 = cu_q[b], cu_q[b + 1]
        seqlen_q, seqlen_k = q1 - q0, used[b]
        if seqlen_q <= 0:
            continue
        written[q0:q1] = True
        k, v = _gather_kv(problem, args, b, seqlen_k)
        k = k.to(compute_dtype)
        v = v.to(compute_dtype) * vd[b].view(1, hkv, 1)
        # Per kv head: softmax_scale * q_descale * k_descale multiplies the raw dot product.
        logit_scale = (problem.softmax_scale * qd[b] * kd[b]).view(hkv, 1, 1, 1)
        ranges = split_key_ranges(seqlen_k, max(1, num_splits), split_block_n)
        chunk = max(1, _CHUNK_ELEMS // max(1, hq * max(seqlen_k, 1)))
        for i0 in range(0, seqlen_q, chunk):
            i1 = min(seqlen_q, i0 + chunk)
            qc = args.q[q0 + i0 : q0 + i1].to(compute_dtype).view(i1 - i0, hkv, group, d)
            rows = torch.arange(i0, i1, device=device)
            o_parts, lse_parts = [], []
            for lo, hi in ranges:
                keys = torch.arange(lo, hi, device=device)
                logits = torch.einsum("nhgd,khd->hgnk", qc, k[lo:hi]) * logit_scale
                o, l = _attend(logits, _visible(problem, rows, keys, seqlen_q, seqlen_k), v[lo:hi])
                o_parts.append(o)
                lse_parts.append(l)
            o, l = merge_partials(torch.stack(o_parts), torch.stack(lse_parts))
            # (Hkv, G, n, D) -> (n, Hq, D); query head h = kv_head * G + g.
            result[q0 + i0 : q0 + i1] = o.permute(2, 0, 1, 3).reshape(i1 - i0, hq, d)
            lse_all[:, q0 + i0 : q0 + i1] = l.reshape(hq, i1 - i0)

    if out is not None:
        out[written] = result[written].to(out.dtype)
        return out, lse_all
    return result, lse_all


def attention_ref(
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
    num_splits: int = 1,
    split_block_n: int = 64,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The golden reference with `fa512.attention`'s arguments; out and lse in ``compute_dtype``.

    Feed it the same K/V values a kernel reads (fp8 caches are upcast exactly) and compare.
    """
    problem, args = check(make_call(
        q, k, v, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=page_table, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
        window_left=window_left, window_right=window_right, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, kernel="reference",
    ))
    return reference_forward(problem, args, compute_dtype, num_splits, split_block_n)
