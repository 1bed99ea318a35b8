"""Triton d512 forward: the portable kernel for every CUDA GPU other than SM90 (and for CPU tests).

Features: varlen queries (several per sequence: spec-decode verification, chunked prefill,
prefill); paged K/V with any page size and page order, or packed varlen K/V; GQA/MQA with the
query heads of one kv head packed into the M tile, so each K/V block is read once per group;
bottom-right causal and local windows; K/V in float8_e4m3fn (dequantised in registers), bf16 or
fp16; descales per (sequence, kv head); natural-log lse; split-KV with a Triton combine kernel.

Tiling. One program owns (m-block, kv head, split, sequence). Its M tile holds ``block_m``
packed rows, row ``p`` being query ``p // G`` of head ``kv_head * G + p % G`` (G = Hq / Hkv), so
G need not be a power of two. The fp32 accumulator is (block_m, 512): 128 registers a thread at
block_m = 64 with 8 warps, which is why prefill stops at 64 rows and decode uses 16 (the
smallest MMA M; a decode step of Gemma-4-31B fills 8 of them). head_dim is processed as four
128-column chunks (QK sums over them, PV keeps four accumulators): with mma.sync a 512-deep
operand alone takes 128 registers a thread and spills. The program walks only the key blocks
its rows can see, [lo, hi) from the causal/local bounds of its first and last row, cut into
``num_splits`` even pieces of whole blocks at run time from ``seqused_k`` (so the grid, a
function of host ints only, stays valid when a captured CUDA graph is replayed with other
lengths). Each paged block's page-table entries are read one iteration ahead, which lets
Triton's pipeliner double-buffer the K/V tiles (see `_fwd_kernel`).

Masks. Every visited block is masked with a few integer compares per logit. Masking only the
boundary blocks behind a CTA-uniform branch was measured slower with Triton 3.6 on an H200
(2026-11-29, same process, interleaved: causal prefill 8k 12.07 vs 11.39 ms, decode B=4 x 32k
0.306 vs 0.256 ms), so fully masked blocks are skipped by the loop bounds and the rest pay the
compares.

Precision. QK runs in q's dtype; with fp8 K and bf16 Q it runs in fp16 on Q rows scaled by a
power of two (exact; `TritonFwdConfig.q_to_fp16`), so fp8 -> fp16 is the one conversion used.
PV runs in V's 16-bit dtype, and in fp16 for fp8 V (e4m3 -> fp16 is exact and fp16 keeps 3 more
mantissa bits of P than bf16). Logits use exp2 with log2(e) folded into the scale, the max is
tracked in that scaled domain, accumulators are rescaled lazily (only when a row max grows by
more than 2^8), and rows that see no key give out = 0, lse = -inf without ever forming
-inf - -inf.

Split-KV. With num_splits > 1 each split writes fp32 partial O (normalised by its own row sum,
times v_descale) and its lse into a workspace from the caching allocator; empty splits write
O = 0 and lse = -inf; `_combine_kernel` merges them and the combine masks the loads of empty
splits, so no value of an unwritten partial can leak in.

CPU: under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (fp16 / fp8 only; the
interpreter computes bf16 wrongly, see docs/toolchain.md). Uses only what Triton 3.6 and 3.9
share (plain pointer arithmetic; no block pointers, no tensor descriptors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ..contract import HEAD_DIM, MAX_GRID_YZ
from ..planning.problem import FwdArgs, Problem
from .base import grid_refusal

LOG2E = 1.4426950408889634

# Largest dynamic shared memory a block may use, by compute capability (bytes). Unknown parts
# get the smallest value of the family, so a config chosen for them errs toward fitting.
_SMEM_PER_BLOCK = {
    (8, 0): 166912, (8, 7): 166912,
    (8, 6): 101376, (8, 9): 101376,
    (9, 0): 232448,
    (10, 0): 232448, (10, 3): 232448, (11, 0): 232448,
    (12, 0): 101376, (12, 1): 101376,
}
_SMEM_DEFAULT = 101376


@dataclass(frozen=True)
class TritonFwdConfig:
    """Every compile-time choice of one Triton launch (see `make_config`).

    block_m : packed (query, head-in-group) rows per program.
    block_n : keys per inner-loop step.
    num_warps, num_stages : Triton launch options (stages = software-pipelining depth of the
        K/V loads).
    ctas_per_sm : programs resident per SM, as the split planner should assume.
    cta_bw_share : bandwidth one program can draw, in fair shares (split planner input).
    q_to_fp16 : run QK in fp16 on power-of-two-normalised Q rows (bf16 Q with fp8 K; see
        `_fwd_kernel`); otherwise QK runs in q's dtype.
    lazy_rescale : rescale the accumulators only when a row's max grows by more than 2^8.
    combine_block_d : head-dim columns per combine program; combine_num_warps its warps.
    variant : "decode" (few rows per kv head) or "prefill", for `fa512.plan` output.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    ctas_per_sm: int
    q_to_fp16: bool = False
    lazy_rescale: bool = False
    combine_block_d: int = 128
    combine_num_warps: int = 1
    variant: str = "prefill"
    # One program streams about its fair share of bandwidth (H200, 2026-11-29: B=4 x 32k fp8
    # decode measured 48% of copy bandwidth at 11 splits, 52% at 16), so the planner uses 1.0.
    cta_bw_share: float = 1.0


def _smem_per_block(target) -> int:
    if target is None or target.device_type != "cuda":
        return _SMEM_PER_BLOCK[(9, 0)]  # CPU (interpreter) runs the H200's tiles
    return _SMEM_PER_BLOCK.get(tuple(target.capability or ()), _SMEM_DEFAULT)


def _smem_estimate(block_m: int, block_n: int, num_stages: int, kv_bytes: int) -> int:
    """Upper estimate of shared memory: Q tile plus num_stages K/V blocks (compiler reports
    for sm_90 with Triton 3.9 came in at or under this)."""
    return block_m * HEAD_DIM * 2 + 2 * num_stages * block_n * HEAD_DIM * kv_bytes


def make_config(problem: Problem, target) -> TritonFwdConfig:
    """Pick tiles from host values only (measurements: profiles/triton_acceptance.py on an H200).

    Decode-like calls (a kv head's packed rows, max_seqlen_q * G, fit in 16) take a 16-row tile,
    the smallest MMA M, with 4 warps and 32-key blocks in 3 stages: 83 KB of shared memory and
    166 registers, so two programs share an SM and K/V loads overlap the dots. Spec-decode
    sized calls (<= 32 rows) take 32 rows with 8 warps. Longer calls take 64 rows with 8 warps
    (128 accumulator registers a thread). Where shared memory is smaller than the estimate
    (99 KB parts: sm_86/89/120), key blocks shrink to 16 first, then the pipeline depth.

    H200, Triton 3.6, 2026-11-29 (graph replay): decode B=64 x 8192 fp8, Hq/Hkv 32/4: 0.72 ms
    with these tiles against 0.92-0.94 ms for 64-key blocks (4 or 8 warps) and 0.83 ms for
    32 keys x 4 stages (before the page lookahead); causal prefill 8192 bf16: 11.3 ms against
    14.4 ms (64-key blocks, 1 stage) and 13.1 ms (32 rows, 4 warps). Untested elsewhere.
    """
    smem = _smem_per_block(target)
    kv_bytes = problem.kv_dtype.itemsize
    q16 = problem.kv_is_fp8 and problem.q_dtype == torch.bfloat16
    rows = problem.max_seqlen_q * problem.group_size
    cpu = target is None or target.device_type != "cuda"
    combine = dict(combine_block_d=512, combine_num_warps=4) if cpu else {}

    if rows <= 16:
        block_m, block_n, warps, stages, variant = 16, 32, 4, 3, "decode"
    elif rows <= 32:
        block_m, block_n, warps, stages, variant = 32, 32, 8, 3, "decode"
    elif smem >= 200 * 1024:
        block_m, block_n, warps, stages, variant = 64, 64 if kv_bytes == 1 else 32, 8, 2, "prefill"
    else:
        block_m, block_n, warps, stages, variant = 32, 32, 8, 3, "prefill"
    while _smem_estimate(block_m, block_n, stages, kv_bytes) > smem:
        if block_n > 16:
            block_n //= 2
        elif stages > 1:
            stages -= 1
        else:
            break
    ctas = max(1, min(4, smem // _smem_estimate(block_m, block_n, stages, kv_bytes)))
    return TritonFwdConfig(block_m, block_n, warps, stages, ctas, q16, lazy_rescale=True, variant=variant, **combine)


def unsupported(problem: Problem, target) -> Optional[str]:
    """A reason string when this kernel cannot serve the call on ``target``, else None."""
    if target.device_type == "cuda":
        cap = tuple(target.capability or (0, 0))
        if cap < (8, 0):
            return f"the Triton kernel needs sm_80 or newer (bf16 MMA), got sm_{cap[0]}{cap[1]}"
        if problem.kv_is_fp8 and cap < (8, 9):
            return f"fp8 e4m3 K/V needs sm_89 or newer in Triton, got sm_{cap[0]}{cap[1]}"
    elif target.device_type != "cpu":
        return f"the Triton kernel runs on CUDA devices (or CPU under TRITON_INTERPRET=1), not {target.device_type}"
    if (refusal := grid_refusal(problem.batch)) is not None:
        return refusal
    if problem.num_kv_heads > MAX_GRID_YZ:
        return f"Hkv={problem.num_kv_heads} exceeds the grid limit {MAX_GRID_YZ}"
    return None


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _load_tile(base, rows, offs_c, ok):
    """(len(rows), DC) tile: rows are int64 element offsets, offs_c the columns of one chunk."""
    return tl.load(base + rows[:, None] + offs_c[None, :], mask=ok[:, None], other=0.0)


@triton.jit
def _q_chunk(q, q_pow2, Q16: tl.constexpr):
    """A Q chunk as the QK operand: as loaded, or scaled by 2^-k per row and narrowed to fp16."""
    if Q16:
        q = (q.to(tl.float32) * q_pow2[:, None]).to(tl.float16)
    return q


@triton.jit
def _kv_operand(x, KV_FP8: tl.constexpr, dtype: tl.constexpr):
    if KV_FP8:
        x = x.to(dtype)
    return x


@triton.jit
def _store_chunk(base, rows, offs_c, ok, x):
    tl.store(base + rows[:, None] + offs_c[None, :], x, mask=ok[:, None])


@triton.jit
def _kv_rows(PageTable, k_base, offs_n, key_hi, hkv, stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
             PAGE_SIZE: tl.constexpr):
    """int64 element offsets of key rows ``offs_n`` of kv head ``hkv`` in K and in V.

    Paged: one page-table entry per key row (any page size, any page order); ``k_base`` is the
    offset of the sequence's page-table row. Packed: ``k_base`` is the sequence's first key."""
    if PAGE_SIZE > 0:
        page = tl.load(PageTable + k_base + offs_n // PAGE_SIZE, mask=offs_n < key_hi, other=0).to(tl.int64)
        slot = offs_n % PAGE_SIZE
        k_rows = page * stride_kp + slot * stride_ks + hkv * stride_kh
        v_rows = page * stride_vp + slot * stride_vs + hkv * stride_vh
    else:
        tok = k_base + offs_n
        k_rows = tok * stride_kp + hkv * stride_kh
        v_rows = tok * stride_vp + hkv * stride_vh
    return k_rows, v_rows


# Arguments read only by scalar loads or used as loop bounds are not specialised. Triton would
# otherwise compile one variant per class of each (integers: == 1, % 16 == 0, other; pointers:
# 16-byte aligned or not), so a call's batch size, token count, split count, window, or a
# seqused_k / cu_seqlens / descale view at an odd offset could each cost a compile (the fuzzer's
# 500 cases launch 427 distinct forward specialisations, 93 with these unspecialised; CPU count
# 2026-12-02; `launch` copies a misaligned q, 73). Q, K, V, Out and the partials and their strides
# keep theirs: vectorised loads and stores need them. The combine's split stride is only scalar
# arithmetic for one lse load per split (its 30 compiles -> 16).
_FWD_PLAIN_ARGS = ("CuSeqQ", "SeqUsedK", "CuSeqK", "PageTable", "QDescale", "KDescale", "VDescale",
                   "stride_ptb", "stride_qdb", "stride_qdh", "stride_kdb", "stride_kdh", "stride_vdb", "stride_vdh",
                   "total_q", "num_q_heads", "num_batch", "num_splits", "num_mblocks", "window_left", "window_right")
_COMBINE_PLAIN_ARGS = ("CuSeqQ", "stride_ls", "total_q", "num_q_heads", "num_batch", "num_splits")


@triton.jit(do_not_specialize=_FWD_PLAIN_ARGS)
def _fwd_kernel(
    Q, K, V, Out, Lse, OPart, LsePart,
    CuSeqQ, SeqUsedK, CuSeqK, PageTable,
    QDescale, KDescale, VDescale,
    stride_qt, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_ot, stride_oh,
    stride_ptb,
    stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb, stride_vdh,
    total_q, num_q_heads, num_batch, num_splits, num_mblocks,
    qk_scale_log2, window_left, window_right,
    GROUP: tl.constexpr,
    PAGE_SIZE: tl.constexpr,  # 0: packed K/V through CuSeqK
    HAS_WL: tl.constexpr, HAS_WR: tl.constexpr,
    HAS_QD: tl.constexpr, HAS_KD: tl.constexpr, HAS_VD: tl.constexpr,
    KV_FP8: tl.constexpr, Q16: tl.constexpr, SPLIT: tl.constexpr, LAZY_RESCALE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr,
):
    # head_dim 512 is handled as 4 column chunks of DC = 128 (see the module docstring).
    # Heaviest m-blocks first: under a causal mask the last rows see the most keys.
    mblock = num_mblocks - 1 - tl.program_id(0)
    pid_hs = tl.program_id(1)
    b = tl.program_id(2)
    hkv = pid_hs // num_splits
    split = pid_hs % num_splits

    q_start = tl.load(CuSeqQ + b)
    q_len = tl.load(CuSeqQ + b + 1) - q_start
    k_len = tl.load(SeqUsedK + b)

    rows = mblock * BLOCK_M + tl.arange(0, BLOCK_M)
    qi = rows // GROUP
    head = hkv * GROUP + rows % GROUP
    row_ok = qi < q_len
    c0 = tl.arange(0, DC)
    tok = (q_start + qi).to(tl.int64)

    q_rows = tok * stride_qt + head * stride_qh
    q0 = _load_tile(Q, q_rows, c0, row_ok)
    q1 = _load_tile(Q, q_rows, c0 + DC, row_ok)
    q2 = _load_tile(Q, q_rows, c0 + 2 * DC, row_ok)
    q3 = _load_tile(Q, q_rows, c0 + 3 * DC, row_ok)

    # Logit scale in the log2 domain; descales are per (sequence, kv head): one scalar here.
    scale = qk_scale_log2
    if HAS_QD:
        scale = scale * tl.load(QDescale + b * stride_qdb + hkv * stride_qdh)
    if HAS_KD:
        scale = scale * tl.load(KDescale + b * stride_kdb + hkv * stride_kdh)
    row_scale = tl.zeros([BLOCK_M], tl.float32) + scale
    q_pow2 = tl.full([BLOCK_M], 1.0, tl.float32)
    if Q16:
        # bf16 Q against fp8 K: scale each row by a power of two so its largest element lies in
        # [2^12, 2^14) and narrow to fp16. Exact for every element above 2^-26 of the row max
        # (bf16's 8-bit mantissa fits fp16's 11), and both dots then use the one-instruction
        # e4m3 -> fp16 conversion instead of a three-step e4m3 -> bf16 one.
        amax = tl.maximum(
            tl.maximum(tl.max(tl.abs(q0.to(tl.float32)), 1), tl.max(tl.abs(q1.to(tl.float32)), 1)),
            tl.maximum(tl.max(tl.abs(q2.to(tl.float32)), 1), tl.max(tl.abs(q3.to(tl.float32)), 1)),
        )
        e = tl.where(amax > 0.0, tl.floor(tl.log2(tl.where(amax > 0.0, amax, 1.0))) - 12.0, 0.0)
        q_pow2 = tl.exp2(-e)
        row_scale = row_scale * tl.exp2(e)
    qk_dtype: tl.constexpr = tl.float16 if Q16 else Q.dtype.element_ty
    q0 = _q_chunk(q0, q_pow2, Q16)
    q1 = _q_chunk(q1, q_pow2, Q16)
    q2 = _q_chunk(q2, q_pow2, Q16)
    q3 = _q_chunk(q3, q_pow2, Q16)

    # Keys any row of this m-block can see (bottom-right aligned: query i sits at shift + i).
    shift = k_len - q_len
    row_lo = mblock * BLOCK_M
    qi_lo = row_lo // GROUP
    qi_hi = tl.minimum((row_lo + BLOCK_M - 1) // GROUP, q_len - 1)
    key_lo = k_len * 0
    key_hi = k_len
    if HAS_WL:
        key_lo = tl.maximum(qi_lo + shift - window_left, 0)
    if HAS_WR:
        key_hi = tl.minimum(key_hi, qi_hi + shift + window_right + 1)
    key_hi = tl.where(row_lo < q_len * GROUP, key_hi, 0)
    key_hi = tl.maximum(key_hi, key_lo)
    # This split's share of the key blocks [nb_lo, nb_hi), cut at run time (graph-safe).
    nb_lo = key_lo // BLOCK_N
    nb_hi = tl.where(key_hi > key_lo, (key_hi + BLOCK_N - 1) // BLOCK_N, nb_lo)
    per = (nb_hi - nb_lo + num_splits - 1) // num_splits
    n_start = nb_lo + split * per
    n_end = tl.minimum(n_start + per, nb_hi)

    if PAGE_SIZE == 0:
        k_base = tl.load(CuSeqK + b).to(tl.int64)
    else:
        k_base = b.to(tl.int64) * stride_ptb  # this sequence's page-table row
    pos = qi + shift
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc0 = tl.zeros([BLOCK_M, DC], tl.float32)
    acc1 = tl.zeros([BLOCK_M, DC], tl.float32)
    acc2 = tl.zeros([BLOCK_M, DC], tl.float32)
    acc3 = tl.zeros([BLOCK_M, DC], tl.float32)
    # Row offsets of the first block; each iteration computes the next block's. Carrying them
    # keeps the page-table load out of the K/V loads' same-iteration address chain: otherwise
    # Triton's pipeliner treats K/V as indirect loads and gives them one smem buffer, so no load
    # overlaps the dots (Triton 3.9 TTGIR for sm_90, 2026-11-29: 1x64x128 buffers with
    # num_stages=3 before, 2x64x128 and `async_wait num=8` after).
    k_rows, v_rows = _kv_rows(PageTable, k_base, n_start * BLOCK_N + tl.arange(0, BLOCK_N), key_hi, hkv,
                              stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, PAGE_SIZE)
    for nb in range(n_start, n_end):
        offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
        key_ok = offs_n < key_hi
        k_rows_now, v_rows_now = k_rows, v_rows
        k_rows, v_rows = _kv_rows(PageTable, k_base, offs_n + BLOCK_N, key_hi, hkv,
                                  stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, PAGE_SIZE)

        s = tl.dot(q0, tl.trans(_kv_operand(_load_tile(K, k_rows_now, c0, key_ok), KV_FP8, qk_dtype)))
        s = tl.dot(q1, tl.trans(_kv_operand(_load_tile(K, k_rows_now, c0 + DC, key_ok), KV_FP8, qk_dtype)), s)
        s = tl.dot(q2, tl.trans(_kv_operand(_load_tile(K, k_rows_now, c0 + 2 * DC, key_ok), KV_FP8, qk_dtype)), s)
        s = tl.dot(q3, tl.trans(_kv_operand(_load_tile(K, k_rows_now, c0 + 3 * DC, key_ok), KV_FP8, qk_dtype)), s)
        s = s * row_scale[:, None]
        visible = key_ok[None, :]
        if HAS_WR:
            visible = visible & (offs_n[None, :] <= pos[:, None] + window_right)
        if HAS_WL:
            visible = visible & (offs_n[None, :] >= pos[:, None] - window_left)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if LAZY_RESCALE:
            # Keep each row's stale max until it grows by more than 8 (log2 units), so P <= 2^8
            # (exact enough in fp16/bf16, far from overflow) and the 512-wide accumulators are
            # rescaled only on the rare blocks where some row's max jumps (one CTA-uniform branch).
            grow = m_new > m_i + 8.0
            if tl.max(grow.to(tl.int32), 0) > 0:
                m_upd = tl.where(grow, m_new, m_i)
                alpha = tl.exp2(m_i - tl.where(m_upd == float("-inf"), 0.0, m_upd))
                l_i = l_i * alpha
                acc0 = acc0 * alpha[:, None]
                acc1 = acc1 * alpha[:, None]
                acc2 = acc2 * alpha[:, None]
                acc3 = acc3 * alpha[:, None]
                m_i = m_upd
            p = tl.exp2(s - tl.where(m_i == float("-inf"), 0.0, m_i)[:, None])
            l_i = l_i + tl.sum(p, 1)
        else:
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_use[:, None])
            alpha = tl.exp2(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
            acc0 = acc0 * alpha[:, None]
            acc1 = acc1 * alpha[:, None]
            acc2 = acc2 * alpha[:, None]
            acc3 = acc3 * alpha[:, None]

        # PV in V's 16-bit dtype; fp8 V is upcast exactly to fp16.
        pv_dtype: tl.constexpr = tl.float16 if KV_FP8 else V.dtype.element_ty
        p = p.to(pv_dtype)
        acc0 = tl.dot(p, _kv_operand(_load_tile(V, v_rows_now, c0, key_ok), KV_FP8, pv_dtype), acc0)
        acc1 = tl.dot(p, _kv_operand(_load_tile(V, v_rows_now, c0 + DC, key_ok), KV_FP8, pv_dtype), acc1)
        acc2 = tl.dot(p, _kv_operand(_load_tile(V, v_rows_now, c0 + 2 * DC, key_ok), KV_FP8, pv_dtype), acc2)
        acc3 = tl.dot(p, _kv_operand(_load_tile(V, v_rows_now, c0 + 3 * DC, key_ok), KV_FP8, pv_dtype), acc3)

    has_key = l_i > 0.0
    l_safe = tl.where(has_key, l_i, 1.0)
    inv = tl.where(has_key, 1.0 / l_safe, 0.0)
    if HAS_VD:
        inv = inv * tl.load(VDescale + b * stride_vdb + hkv * stride_vdh)
    lse = tl.where(has_key, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    if SPLIT:
        o_rows = ((split * total_q + tok) * num_q_heads + head) * (4 * DC)
        _store_chunk(OPart, o_rows, c0, row_ok, acc0 * inv[:, None])
        _store_chunk(OPart, o_rows, c0 + DC, row_ok, acc1 * inv[:, None])
        _store_chunk(OPart, o_rows, c0 + 2 * DC, row_ok, acc2 * inv[:, None])
        _store_chunk(OPart, o_rows, c0 + 3 * DC, row_ok, acc3 * inv[:, None])
        tl.store(LsePart + (split * num_q_heads + head).to(tl.int64) * total_q + tok, lse, mask=row_ok)
    else:
        out_dtype: tl.constexpr = Out.dtype.element_ty
        o_rows = tok * stride_ot + head * stride_oh
        _store_chunk(Out, o_rows, c0, row_ok, (acc0 * inv[:, None]).to(out_dtype))
        _store_chunk(Out, o_rows, c0 + DC, row_ok, (acc1 * inv[:, None]).to(out_dtype))
        _store_chunk(Out, o_rows, c0 + 2 * DC, row_ok, (acc2 * inv[:, None]).to(out_dtype))
        _store_chunk(Out, o_rows, c0 + 3 * DC, row_ok, (acc3 * inv[:, None]).to(out_dtype))
        tl.store(Lse + head.to(tl.int64) * total_q + tok, lse, mask=row_ok)
        # Rows past cu_seqlens_q[B] belong to no sequence: their lse is -inf (out is untouched).
        if (b == num_batch - 1) & (split == 0):
            pad_start = q_start + q_len
            pad_rows = (total_q - pad_start) * GROUP
            for c in range(mblock * BLOCK_M, pad_rows, num_mblocks * BLOCK_M):
                r = c + tl.arange(0, BLOCK_M)
                t = (pad_start + r // GROUP).to(tl.int64)
                h = hkv * GROUP + r % GROUP
                tl.store(Lse + h.to(tl.int64) * total_q + t, tl.full([BLOCK_M], float("-inf"), tl.float32),
                         mask=r < pad_rows)


@triton.jit(do_not_specialize=_COMBINE_PLAIN_ARGS)
def _combine_kernel(
    OPart, LsePart, Out, Lse, CuSeqQ,
    stride_ot, stride_oh, stride_os, stride_ls,
    total_q, num_q_heads, num_batch, num_splits,
    S_PAD: tl.constexpr, BLOCK_D: tl.constexpr, HEAD: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    dblk = tl.program_id(2)
    valid_end = tl.load(CuSeqQ + num_batch)
    s = tl.arange(0, S_PAD)
    offs_d = dblk * BLOCK_D + tl.arange(0, BLOCK_D)
    # Row validity as vectors: the interpreter mis-types `scalar_bool & vector_bool`.
    row_ok_s = (t + s * 0) < valid_end
    row_ok_d = (t + offs_d * 0) < valid_end

    s_ok = s < num_splits
    lse_s = tl.load(LsePart + s.to(tl.int64) * stride_ls + h * total_q + t, mask=s_ok, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2((lse_s - m_use) * 1.4426950408889634)
    total = tl.sum(w, 0)
    has_key = total > 0.0
    total_safe = tl.where(has_key, total, 1.0)
    wn = tl.where(has_key, w / total_safe, 0.0)

    # Empty splits (lse = -inf) are never read, so no unwritten workspace value can leak in.
    part_ok = s_ok & (lse_s > float("-inf")) & row_ok_s
    part = s.to(tl.int64) * stride_os + (t.to(tl.int64) * num_q_heads + h) * HEAD
    o = tl.load(OPart + part[:, None] + offs_d[None, :], mask=part_ok[:, None], other=0.0)
    out = tl.sum(o * wn[:, None], 0)
    o_ptrs = Out + t.to(tl.int64) * stride_ot + h * stride_oh + offs_d
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok_d)
    lse = tl.where(has_key, m_use + tl.log2(total_safe) * 0.6931471805599453, float("-inf"))
    lse = tl.where(t < valid_end, lse, float("-inf"))
    tl.store(Lse + h.to(tl.int64) * total_q + t, lse, mask=dblk == 0)


# ----------------------------------------------------------------------------------------------
# Launch
# ----------------------------------------------------------------------------------------------


def _descale_args(t: Optional[torch.Tensor], placeholder: torch.Tensor):
    if t is None:
        return placeholder, 0, 0, False
    return t, t.stride(0), t.stride(1), True


def launch(plan, args: FwdArgs, out: Optional[torch.Tensor], partials: bool = False):
    """Run the forward for ``plan`` on ``args``: writes ``out`` in place, returns lse (Hq, total_q).

    With ``partials`` (``out`` unused) it stops before the combine and returns the fp32 split
    partials (o_part (S, total_q, Hq, 512), lse_part (S, Hq, total_q)), S = max(1, num_splits);
    rows past cu_seqlens_q[B] are not written.

    No host synchronisation: every launch argument is a host int from the plan or a tensor
    stride; sequence lengths are read on the device.
    """
    problem: Problem = plan.problem
    cfg: TritonFwdConfig = plan.config
    q, k, v = args.q, args.k, args.v
    if q.data_ptr() % 16:
        # Triton compiles one variant per 16-byte alignment class of each pointer: a q view at an
        # odd offset (rare; every projection output is aligned) is copied instead, so it shares the
        # aligned variant (the fuzzer's 500 cases: 93 -> 73 forward compiles, CPU count 2026-12-04)
        q = q.clone(memory_format=torch.contiguous_format)
    total_q, hq, hkv = problem.total_q, problem.num_q_heads, problem.num_kv_heads
    group = problem.group_size
    splits = max(1, int(plan.num_splits))
    split = partials or splits > 1
    lse = torch.empty((hq, total_q), dtype=torch.float32, device=q.device)
    if split:
        n_o = splits * total_q * hq * HEAD_DIM
        ws = torch.empty(n_o + splits * hq * total_q, dtype=torch.float32, device=q.device)
        o_part, lse_part = ws[:n_o], ws[n_o:]
    else:
        o_part = lse_part = lse  # unused (SPLIT=False)
    if partials:  # a SPLIT kernel stores to o_part; of out it reads only the strides
        result = (o_part.view(splits, total_q, hq, HEAD_DIM), lse_part.view(splits, hq, total_q))
        out = result[0][0]
    if total_q == 0:
        return result if partials else lse

    num_mblocks = max(1, triton.cdiv(problem.max_seqlen_q * group, cfg.block_m))
    if problem.paged:
        page_size = problem.page_size
        kv_strides = (k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2))
        page_table, stride_ptb = args.page_table, args.page_table.stride(0)
        cu_k = args.seqused_k
    else:
        page_size = 0
        kv_strides = (k.stride(0), 0, k.stride(1), v.stride(0), 0, v.stride(1))
        page_table, stride_ptb = args.seqused_k, 0
        cu_k = args.cu_seqlens_k
    qd, sqdb, sqdh, has_qd = _descale_args(args.q_descale, args.seqused_k)
    kd, skdb, skdh, has_kd = _descale_args(args.k_descale, args.seqused_k)
    vd, svdb, svdh, has_vd = _descale_args(args.v_descale, args.seqused_k)

    grid = (num_mblocks, hkv * splits, problem.batch)
    _fwd_kernel[grid](
        q, k, v, out, lse, o_part, lse_part,
        args.cu_seqlens_q, args.seqused_k, cu_k, page_table,
        qd, kd, vd,
        q.stride(0), q.stride(1),
        *kv_strides,
        out.stride(0), out.stride(1),
        stride_ptb,
        sqdb, sqdh, skdb, skdh, svdb, svdh,
        total_q, hq, problem.batch, splits, num_mblocks,
        problem.softmax_scale * LOG2E, problem.window_left, problem.window_right,
        GROUP=group, PAGE_SIZE=page_size,
        HAS_WL=problem.window_left >= 0, HAS_WR=problem.window_right >= 0,
        HAS_QD=has_qd, HAS_KD=has_kd, HAS_VD=has_vd,
        KV_FP8=problem.kv_is_fp8, Q16=cfg.q_to_fp16, LAZY_RESCALE=cfg.lazy_rescale,
        SPLIT=split, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, DC=HEAD_DIM // 4,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if partials:
        return result
    if splits > 1:
        combine_grid = (total_q, hq, HEAD_DIM // cfg.combine_block_d)
        _combine_kernel[combine_grid](
            o_part, lse_part, out, lse, args.cu_seqlens_q,
            out.stride(0), out.stride(1), total_q * hq * HEAD_DIM, hq * total_q,
            total_q, hq, problem.batch, splits,
            S_PAD=triton.next_power_of_2(splits), BLOCK_D=cfg.combine_block_d, HEAD=HEAD_DIM,
            num_warps=cfg.combine_num_warps,
        )
    return lse


def combine(o_parts: torch.Tensor, lse_parts: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
            cu_seqlens_q: torch.Tensor) -> None:
    """`fa512.merge_partials` of S partials in one kernel (the split combine, standalone).

    o_parts (S, total_q, Hq, 512) fp32 and lse_parts (S, Hq, total_q) fp32, each contiguous but
    for the S stride; writes out (total_q, Hq, 512) in its dtype (last dim contiguous) and lse
    (Hq, total_q) fp32, rows past cu_seqlens_q[B] not written (their lse -inf). Used by
    `fa512.distributed` to merge ranks' partials on the GPU (one launch where the torch form
    takes ~20).
    """
    splits, total_q, hq, _ = o_parts.shape
    if total_q == 0:
        return
    gpu = o_parts.is_cuda
    block_d, warps = (128, 1) if gpu else (512, 4)  # the split combine's (make_config)
    _combine_kernel[(total_q, hq, HEAD_DIM // block_d)](
        o_parts, lse_parts, out, lse, cu_seqlens_q,
        out.stride(0), out.stride(1), o_parts.stride(0), lse_parts.stride(0),
        total_q, hq, cu_seqlens_q.shape[0] - 1, splits,
        S_PAD=triton.next_power_of_2(splits), BLOCK_D=block_d, HEAD=HEAD_DIM, num_warps=warps,
    )


__all__ = ["TritonFwdConfig", "combine", "launch", "make_config", "unsupported"]
