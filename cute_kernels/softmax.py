"""Online softmax over wgmma accumulator fragments (exp2, running max and sum, fp32).

State per thread: the raw running max (max of unscaled logits; the logit scale is > 0 so the
max commutes with it) and the *per-thread partial* running sum of each of its rows; the quad
reduction of the sums is deferred to `finalize` (FA2 trick: it commutes with the rescales).

Numerics of fully masked rows (every logit -inf so far): the exp offset is 0 instead of
-inf, so P = exp2(-inf) = 0 and no -inf - -inf NaN appears; the correction factor for the
previous accumulator is exp2(m_old * scale - offset) = exp2(-inf) = 0 while m_old is -inf, so
a row that gains its first visible key later starts from a zeroed O and sum. A row that never
sees a key ends with sum 0: `finalize` returns O scale 0 and lse -inf.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float16, Float32, const_expr

from .dsl_utils import Carried
from .fragments import acc_mn_view

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)


class OnlineSoftmax(Carried):
    """Softmax state of one thread's rows of a (64, tile_n) logit tile.

    Parameters
    ----------
    scale_log2 : Float32
        softmax_scale * q_descale * k_descale * log2(e): multiplies raw logits before exp2.
    num_rows : int
        Rows this thread owns (2 for an m64 wgmma fragment).
    p_offset : float
        Compile-time log2 offset of P: P = exp2(s * scale - max + p_offset), so P is in
        [0, 2^p_offset]. The FP8 kernel uses 8 so that small probabilities survive the e4m3
        conversion (min subnormal 2^-9); the offset cancels in O / row_sum and leaves the lse.
    sum_e4m3 : bool
        Compile-time (fp8_mma): the row sums add P as rounded to e4m3, the values the FP8 P.V
        multiplies, so the weights O is divided by sum to 1 and P's rounding errors stay out
        of the normalisation. `step` then only rescales the sums; `add_e4m3_sums` adds the
        block's P from its e4m3 A fragment once `p_to_fp8_a` has written it.
    """

    def __init__(self, scale_log2: Float32, num_rows: int, p_offset: float = 0.0, sum_e4m3: bool = False):
        self.scale_log2 = scale_log2
        self.num_rows = num_rows
        self.p_offset = float(p_offset)
        self.sum_e4m3 = bool(sum_e4m3)
        self.row_max = cute.make_rmem_tensor(num_rows, Float32)
        self.row_sum = cute.make_rmem_tensor(num_rows, Float32)

    def reset(self) -> None:
        self.row_max.fill(-Float32.inf)
        self.row_sum.fill(0.0)

    @cute.jit
    def step(self, acc_S: cute.Tensor, row_scale: cute.Tensor, is_first: cutlass.Constexpr[bool]):
        """Turn logits into unnormalised probabilities in place and update the row state.

        ``row_scale[r]`` receives the factor the output accumulator must be multiplied by
        before this block's P·V is added (0 for the first block of a row).
        """
        s_mn = acc_mn_view(acc_S)
        n_cols = cute.size(s_mn, mode=[1])
        for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            m_blk = s_mn[r, 0]
            for c in cutlass.range_constexpr(1, n_cols):
                m_blk = cute.arch.fmax(m_blk, s_mn[r, c])
            # the 4 threads of a quad share a row
            m_blk = cute.arch.fmax(m_blk, cute.arch.shuffle_sync_bfly(m_blk, offset=1))
            m_blk = cute.arch.fmax(m_blk, cute.arch.shuffle_sync_bfly(m_blk, offset=2))
            m_old = self.row_max[r]
            m_new = m_blk
            if const_expr(not is_first):
                m_new = cute.arch.fmax(m_old, m_blk)
            base = m_new * self.scale_log2
            if m_new == -Float32.inf:
                base = Float32(0.0)
            offset = base - Float32(self.p_offset) if const_expr(self.p_offset != 0.0) else base
            row_total = Float32(0.0)
            for c in cutlass.range_constexpr(n_cols):
                p = cute.math.exp2(s_mn[r, c] * self.scale_log2 - offset, fastmath=True)
                s_mn[r, c] = p
                if const_expr(not self.sum_e4m3):
                    row_total += p
            if const_expr(is_first):
                row_scale[r] = Float32(0.0)
                self.row_sum[r] = row_total  # 0 with sum_e4m3: add_e4m3_sums adds the block
            else:
                corr = cute.math.exp2(m_old * self.scale_log2 - base, fastmath=True)
                if m_new == m_old:
                    corr = Float32(1.0)  # exactly: lets `rescale` skip the O multiplies
                row_scale[r] = corr
                if const_expr(self.sum_e4m3):
                    self.row_sum[r] = self.row_sum[r] * corr
                else:
                    self.row_sum[r] = self.row_sum[r] * corr + row_total
            self.row_max[r] = m_new

    @cute.jit
    def add_e4m3_sums(self, tOrP: cute.Tensor):
        """row_sum[r] += this block's e4m3 P of row r (``sum_e4m3``), read from the A fragment of
        `p_to_fp8_a`: byte i holds row (i >> 2) & 1, and a row's bytes come in column pairs
        (2i, 2i + 1) in column order. A pair is added first: two e4m3 values of P in [0, 2^8]
        sum exactly in fp32, so only the row's running sum rounds."""
        p16 = tOrP.load().to(Float16)  # e4m3 -> f16 is exact
        pairs = cute.size(tOrP) // 4  # per row
        for r in cutlass.range_constexpr(self.num_rows):
            total = Float32(0.0)
            for j in cutlass.range_constexpr(pairs):
                i = 4 * r + 2 * (j % 2) + 8 * (j // 2)
                total += Float32(p16[i]) + Float32(p16[i + 1])
            self.row_sum[r] = self.row_sum[r] + total

    @cute.jit
    def rescale(self, acc_O: cute.Tensor, row_scale: cute.Tensor):
        """acc_O[r, :] *= row_scale[r] for this thread's rows.

        Skipped, warp by warp, when every factor of the warp is exactly 1 (no row max of the
        warp's 16 rows moved): multiplying by 1 is exact, so this changes no value and saves
        the O multiplies (128 per thread at d512) on most blocks once the maxima settle.
        """
        moved = row_scale[0] != Float32(1.0)
        for r in cutlass.range_constexpr(1, self.num_rows):
            moved = moved | (row_scale[r] != Float32(1.0))
        if cute.arch.vote_any_sync(moved):
            o_mn = acc_mn_view(acc_O)
            for r in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
                o_row = o_mn[r, None]
                o_row.store(o_row.load() * row_scale[r])

    @cute.jit
    def finalize(self, out_scale: Float32, o_scale: cute.Tensor, lse: cute.Tensor):
        """Quad-reduce the sums; o_scale[r] = out_scale / sum (0 when empty), lse[r] natural log."""
        for r in cutlass.range_constexpr(self.num_rows):
            total = self.row_sum[r]
            total = total + cute.arch.shuffle_sync_bfly(total, offset=1)
            total = total + cute.arch.shuffle_sync_bfly(total, offset=2)
            m = self.row_max[r]
            scale = Float32(0.0)
            val = -Float32.inf
            if total > Float32(0.0):
                scale = out_scale / total
                val = (m * self.scale_log2 + cute.math.log2(total, fastmath=True) - Float32(self.p_offset)) * Float32(LN_2)
            o_scale[r] = scale
            lse[r] = val


__all__ = ["OnlineSoftmax", "LOG2_E", "LN_2"]
