"""The O and lse stores of the SM90 forward's consumer warpgroups (every layout).

Each consumer warpgroup writes its d half of O from registers (q dtype, or fp32 partials
``(S, total_q, Hq, 512)`` with splits) for the rows that hold a query of the sequence; WG 0's
quad leaders write the lse (natural log; ``(S, Hq, total_q)`` partials with splits), which the
combine kernel (`cute_kernels.combine`) merges. Rows are packed (q head, query) as in the Q
tile (`FlashFwdSm90._packed_rows_view`). The decode layout's transposed O^T is stored by
`decode_pv.store_o` into the tile `out_tiles` gives.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import const_expr

from .consumer_base import DTYPES
from .fragments import acc_mn_view


class Epilogue:
    """Compile-time facts: tile shape, GQA group, split partials, output dtype."""

    def __init__(self, cfg):
        self.tile_m = cfg.tile_m
        self.tile_n = cfg.tile_n
        self.half_d = cfg.head_dim // 2
        self.group = cfg.qhead_per_kvhead
        self.is_split = cfg.split
        self.out_dtype = DTYPES[cfg.out_dtype]

    def out_tiles(self, wg, args, t):
        """(this WG's O half of tile ``t``: (tile rows, 256 d), the tile's lse: (tile rows,)),
        rows as packed (head, query), of the split's partials when split (``args``: a
        `consumer_base.ConsumerArgs`)."""
        if const_expr(self.is_split):
            mO_tile_src = args.mO_rows[None, None, None, t.split_idx]
            mLSE_src = args.mLSE_rows[None, None, t.split_idx]
        else:
            mO_tile_src = args.mO_rows
            mLSE_src = args.mLSE_rows
        rows_per_tile = self.tile_m // self.group
        gO = cute.local_tile(
            cute.domain_offset(((0, t.q_start), 0, 0), mO_tile_src),
            ((self.group, rows_per_tile), self.half_d),
            (t.m_block, wg, t.tile_head),
        )
        gL = cute.local_tile(
            cute.domain_offset(((0, t.q_start), 0), mLSE_src),
            ((self.group, rows_per_tile),),
            (t.m_block, t.tile_head),
        )
        return gO, gL

    @cute.jit
    def store(self, acc_O, o_scale, lse, thr_pv, thr_qk, wg, tidx_wg, args, t):
        """Write this WG's O half (q dtype, or fp32 partials) and, from WG 0, the lse."""
        out_dtype = self.out_dtype
        seqlen_q, m_block = t.seqlen_q, t.m_block
        gO, gL = self.out_tiles(wg, args, t)
        tOgO = thr_pv.partition_C(gO)
        tOcO = thr_pv.partition_C(cute.make_identity_tensor((self.tile_m, self.half_d)))
        rO = cute.make_rmem_tensor_like(acc_O, out_dtype)
        rO.store(acc_O.load().to(out_dtype))
        g_mn = acc_mn_view(tOgO)
        r_mn = acc_mn_view(rO)
        c_mn = acc_mn_view(tOcO)
        for r in cutlass.range_constexpr(cute.size(r_mn, mode=[0])):
            row = c_mn[r, 0][0]
            if (m_block * self.tile_m + row) // self.group < seqlen_q:
                cute.autovec_copy(r_mn[r, None], g_mn[r, None])
        self.store_lse(gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block)

    @cute.jit
    def store_lse(self, gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block):
        """WG 0: the lse of this thread's two rows (one lane per quad)."""
        if wg == 0:
            s_c = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
            if tidx_wg % 4 == 0:
                for r in cutlass.range_constexpr(2):
                    row = s_c[r, 0][0]
                    if (m_block * self.tile_m + row) // self.group < seqlen_q:
                        gL[row] = lse[r]


__all__ = ["Epilogue"]
