"""Input validation: a `fa512.call.Call` -> the checked problem (`Problem`, host values) and the
launch tensors (`FwdArgs`).

Every check here reads shapes, dtypes, strides and devices only, so it runs on fake tensors
under torch.compile and never synchronises the device. Checks that must read device memory
(monotone cu_seqlens, page indices in range, lengths within their bounds) run only when the
environment variable ``FA512_DEBUG=1`` is set (`debug_checks`).
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch

from ..call import Call
from ..contract import HEAD_DIM, KERNEL_NAMES, KV_DTYPES, MAX_SPLITS, Q_DTYPES
from ..errors import arg_error
from .descales import normalize_descale
from .precision import check_precision
from .problem import FwdArgs, Problem


def _need_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise arg_error(TypeError, name, type(t).__name__, "a torch.Tensor")
    return t


def _need_int(name: str, x: object, minimum: int) -> int:
    # SymInt appears when torch.compile traces with dynamic shapes.
    if isinstance(x, bool) or not isinstance(x, (int, torch.SymInt)):
        raise arg_error(TypeError, name, f"{type(x).__name__} {x!r}", "a Python int")
    if x < minimum:
        raise arg_error(ValueError, name, x, f"an int >= {minimum}")
    return x


def _need_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise arg_error(
            ValueError, name, f"strides {tuple(t.stride())}", "last-dim stride 1",
            "other strides are free; pass a view whose head_dim is contiguous",
        )


def _need_metadata(name: str, t: object, shape: tuple, device: torch.device) -> torch.Tensor:
    t = _need_tensor(name, t)
    if t.dtype != torch.int32:
        raise arg_error(TypeError, name, f"dtype {t.dtype}", "torch.int32")
    if tuple(t.shape) != shape:
        raise arg_error(ValueError, name, f"shape {tuple(t.shape)}", f"shape {shape}")
    if t.device != device:
        raise arg_error(ValueError, name, f"device {t.device}", f"q's device {device}")
    return t


def memory_span(t: torch.Tensor) -> Optional[tuple]:
    """(start, end) byte addresses that ``t`` can touch, or None where there is no real memory."""
    # Fake and functional tensors (torch.compile, opcheck) are subclasses with no memory to
    # overlap; an exact type test is much cheaper than asking is_fake() on every call.
    if type(t) is not torch.Tensor or t.device.type == "meta" or t.numel() == 0:
        return None
    start = t.data_ptr()
    extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return start, start + (extent + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = memory_span(a), memory_span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def check_mask(causal: object, window_left: object, window_right: object) -> tuple[int, int]:
    """The checked (window_left, window_right) of a mask; causal resolves window_right to 0."""
    if not isinstance(causal, bool):
        raise arg_error(TypeError, "causal", type(causal).__name__, "a bool")
    window_left = _need_int("window_left", window_left, -1)
    window_right = _need_int("window_right", window_right, -1)
    if causal:
        if window_right > 0:
            raise arg_error(
                ValueError, "window_right", window_right, "-1 or 0 with causal=True",
                "causal means window_right = 0",
            )
        window_right = 0
    return window_left, window_right


def check(call: Call) -> tuple[Problem, FwdArgs]:
    """Check every argument of ``call``; raise ValueError/TypeError naming the bad one.

    The problem's ``precision`` is left at its default: `make_plan` resolves the call's (a
    backend config made straight from this problem is the fast one)."""
    (q, k, v, out, page_table, cu_seqlens_k, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
     softmax_scale, causal, window_left, window_right, q_descale, k_descale, v_descale, num_splits, kernel,
     precision) = call
    q = _need_tensor("q", q)
    k = _need_tensor("k", k)
    v = _need_tensor("v", v)
    device = q.device

    # -- dtypes and ranks ---------------------------------------------------------------
    if q.dtype not in Q_DTYPES:
        raise arg_error(
            TypeError, "q", f"dtype {q.dtype}", "torch.bfloat16, torch.float16 or torch.float32 (reference kernel only)"
        )
    if q.dim() != 3:
        raise arg_error(ValueError, "q", f"shape {tuple(q.shape)}", "(total_q, Hq, 512)")
    if q.shape[-1] != HEAD_DIM:
        raise arg_error(ValueError, "q", f"head_dim {q.shape[-1]}", f"head_dim {HEAD_DIM}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype not in KV_DTYPES:
            raise arg_error(
                TypeError, name, f"dtype {t.dtype}",
                "torch.float8_e4m3fn, torch.bfloat16, torch.float16 or torch.float32 (reference kernel only)",
            )
        if t.device != device:
            raise arg_error(ValueError, name, f"device {t.device}", f"q's device {device}")
        if t.dim() not in (3, 4):
            raise arg_error(
                ValueError, name, f"shape {tuple(t.shape)}",
                "(num_pages, page_size, Hkv, 512) paged or (total_k, Hkv, 512) packed",
            )
        if t.shape[-1] != HEAD_DIM:
            raise arg_error(ValueError, name, f"head_dim {t.shape[-1]}", f"head_dim {HEAD_DIM}")
    if k.dtype != v.dtype:
        raise arg_error(TypeError, "v", f"dtype {v.dtype}", f"k's dtype {k.dtype}")
    if k.dtype != torch.float8_e4m3fn and k.dtype != q.dtype:
        raise arg_error(
            TypeError, "k", f"dtype {k.dtype} with q {q.dtype}",
            "K/V in q's dtype, or torch.float8_e4m3fn",
        )
    if tuple(k.shape) != tuple(v.shape):
        raise arg_error(ValueError, "v", f"shape {tuple(v.shape)}", f"k's shape {tuple(k.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _need_last_dim_contiguous(name, t)

    num_q_heads = q.shape[1]
    num_kv_heads = k.shape[-2]
    if num_kv_heads < 1 or num_q_heads % num_kv_heads != 0:
        raise arg_error(
            ValueError, "q", f"Hq={num_q_heads} with Hkv={num_kv_heads}",
            "Hq divisible by Hkv (query head h reads kv head h // (Hq / Hkv))",
        )

    # -- sequence metadata ---------------------------------------------------------------
    cu_seqlens_q = _need_tensor("cu_seqlens_q", cu_seqlens_q)
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 2:
        raise arg_error(ValueError, "cu_seqlens_q", f"shape {tuple(cu_seqlens_q.shape)}", "(B+1,) with B >= 1")
    batch = cu_seqlens_q.shape[0] - 1
    _need_metadata("cu_seqlens_q", cu_seqlens_q, (batch + 1,), device)
    seqused_k = _need_metadata("seqused_k", seqused_k, (batch,), device)

    paged = k.dim() == 4
    if paged:
        if page_table is None:
            raise arg_error(ValueError, "page_table", None, "a (B, max_pages_per_seq) int32 tensor for paged K/V")
        if cu_seqlens_k is not None:
            raise arg_error(
                ValueError, "cu_seqlens_k", "a tensor", "None with paged K/V",
                "pass page_table for paged (4-D) K/V or cu_seqlens_k for packed (3-D) K/V, not both",
            )
        page_table = _need_tensor("page_table", page_table)
        if page_table.dim() != 2 or page_table.shape[0] != batch:
            raise arg_error(
                ValueError, "page_table", f"shape {tuple(page_table.shape)}", f"(B={batch}, max_pages_per_seq)"
            )
        _need_metadata("page_table", page_table, tuple(page_table.shape), device)
        _need_last_dim_contiguous("page_table", page_table)
        num_pages, page_size = k.shape[0], k.shape[1]
        if page_size < 1:
            raise arg_error(ValueError, "k", f"page_size {page_size}", "page_size >= 1")
        max_pages = page_table.shape[1]
        kv_rows = num_pages * page_size
        capacity = max_pages * page_size
    else:
        if page_table is not None:
            raise arg_error(
                ValueError, "page_table", "a tensor", "None with packed (total_k, Hkv, 512) K/V",
                "a page table needs K/V shaped (num_pages, page_size, Hkv, 512)",
            )
        if cu_seqlens_k is None:
            raise arg_error(ValueError, "cu_seqlens_k", None, "a (B+1,) int32 tensor for packed K/V")
        cu_seqlens_k = _need_metadata("cu_seqlens_k", cu_seqlens_k, (batch + 1,), device)
        page_size = max_pages = 0
        kv_rows = capacity = k.shape[0]

    max_seqlen_q = min(_need_int("max_seqlen_q", max_seqlen_q, 0), q.shape[0])
    max_seqlen_k = min(_need_int("max_seqlen_k", max_seqlen_k, 0), capacity)

    # -- scalars --------------------------------------------------------------------------
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
        raise arg_error(TypeError, "softmax_scale", type(softmax_scale).__name__, "a Python float")
    softmax_scale = float(softmax_scale)
    if not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise arg_error(ValueError, "softmax_scale", softmax_scale, "a finite float > 0")
    window_left, window_right = check_mask(causal, window_left, window_right)
    num_splits = _need_int("num_splits", num_splits, 0)
    if num_splits > MAX_SPLITS:
        raise arg_error(ValueError, "num_splits", num_splits, f"0 (automatic) .. {MAX_SPLITS}")
    if not isinstance(kernel, str) or kernel not in KERNEL_NAMES:
        raise arg_error(ValueError, "kernel", repr(kernel), " | ".join(repr(n) for n in KERNEL_NAMES))
    check_precision(precision)

    descales = [
        normalize_descale(name, t, batch, num_kv_heads, device)
        for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
    ]

    # -- out ------------------------------------------------------------------------------
    if out is not None:
        out = _need_tensor("out", out)
        if tuple(out.shape) != tuple(q.shape):
            raise arg_error(ValueError, "out", f"shape {tuple(out.shape)}", f"q's shape {tuple(q.shape)}")
        if out.dtype != q.dtype:
            raise arg_error(TypeError, "out", f"dtype {out.dtype}", f"q's dtype {q.dtype}")
        if out.device != device:
            raise arg_error(ValueError, "out", f"device {out.device}", f"q's device {device}")
        _need_last_dim_contiguous("out", out)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if _overlaps(out, t):
                raise arg_error(ValueError, "out", f"memory overlapping {name}", "a buffer of its own")

    problem = Problem(
        batch=batch,
        total_q=q.shape[0],
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        q_dtype=q.dtype,
        kv_dtype=k.dtype,
        paged=paged,
        page_size=page_size,
        max_pages_per_seq=max_pages,
        kv_rows=kv_rows,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=softmax_scale,
        causal=causal,
        window_left=window_left,
        window_right=window_right,
        descale_modes=tuple(d.mode for d in descales),
        device_type=device.type,
    )
    args = FwdArgs(q, k, v, page_table, cu_seqlens_k, cu_seqlens_q, seqused_k, *(d.view for d in descales))
    return problem, args


def debug_enabled() -> bool:
    return os.environ.get("FA512_DEBUG", "0") not in ("", "0")


def debug_checks(problem: Problem, args: FwdArgs, max_seqlen_q: int, max_seqlen_k: int) -> None:
    """Checks that read device memory (one sync). Run only under FA512_DEBUG=1.

    ``max_seqlen_q``/``max_seqlen_k`` are the caller's values before clamping, so a bound that
    is too small is reported as the caller wrote it.
    """
    cu_q = args.cu_seqlens_q.cpu().long()
    used = args.seqused_k.cpu().long()
    q_lens = cu_q[1:] - cu_q[:-1]
    if int(cu_q[0]) != 0 or bool((q_lens < 0).any()) or int(cu_q[-1]) > problem.total_q:
        raise arg_error(
            ValueError, "cu_seqlens_q", cu_q.tolist(), f"non-decreasing from 0 to at most total_q={problem.total_q}"
        )
    if problem.batch and int(q_lens.max()) > max_seqlen_q:
        raise arg_error(ValueError, "max_seqlen_q", max_seqlen_q, f">= the longest query length {int(q_lens.max())}")
    if bool((used < 0).any()):
        raise arg_error(ValueError, "seqused_k", used.tolist(), "values >= 0")
    if problem.batch and int(used.max()) > max_seqlen_k:
        raise arg_error(ValueError, "max_seqlen_k", max_seqlen_k, f">= the largest seqused_k {int(used.max())}")
    if problem.paged:
        capacity = problem.max_pages_per_seq * problem.page_size
        if bool((used > capacity).any()):
            raise arg_error(
                ValueError, "seqused_k", used.tolist(), f"<= max_pages_per_seq * page_size = {capacity}"
            )
        table = args.page_table.cpu().long()
        num_pages = args.k.shape[0]
        for b in range(problem.batch):
            n = -(-int(used[b]) // problem.page_size)
            row = table[b, :n]
            bad = (row < 0) | (row >= num_pages)
            if bool(bad.any()):
                j = int(bad.nonzero()[0])
                raise arg_error(
                    ValueError, f"page_table[{b}, {j}]", int(row[j]), f"a page index in [0, {num_pages})"
                )
    else:
        cu_k = args.cu_seqlens_k.cpu().long()
        k_lens = cu_k[1:] - cu_k[:-1]
        if int(cu_k[0]) != 0 or bool((k_lens < 0).any()) or int(cu_k[-1]) > problem.kv_rows:
            raise arg_error(
                ValueError, "cu_seqlens_k", cu_k.tolist(), f"non-decreasing from 0 to at most total_k={problem.kv_rows}"
            )
        if bool((used > k_lens).any()):
            raise arg_error(ValueError, "seqused_k", used.tolist(), f"<= the packed lengths {k_lens.tolist()}")


__all__ = ["check", "check_mask", "debug_checks", "debug_enabled", "memory_span"]
