"""The split-d consumer warpgroups of the SM90 forward (layout "split_d", every MMA path).

Warpgroup w computes the partial logits S_w = Q[:, dw] K[:, dw]^T over its own half dw of the
head dimension, and the two fp32 partials are summed through smem (`ConsumerBase.exchange`):
both warpgroups hold bit-identical S, run the same softmax and multiply the same P by their own
V half into their 64 x 256 fp32 O (128 registers per thread). No MMA work is duplicated. The
MMA path decides what happens between "stage full" and "issue the MMA"
(`cute_kernels.mma_paths`): bf16/f16 K/V are MMA'd in their TMA stages; the dequant control
MMAs the f16 rings its converter warps fill (X[w] in the block's own f16 K stage, released
after the exchange) with the first `q_reg_steps` k-steps of Q in registers; fp8_mma quantises
its Q half and transposes each V block into its V^T tile. fp8_mma long contexts promote P.V
(`pv_promote`: each block's P.V into zeroed 64-column slices added into O in fp32).

Timeline for block n (blocks high -> low, intra-warpgroup overlap):
    wait K[n] -> issue QK(n) -> O *= corr(n+1) -> wait V[n+1] -> issue PV(n+1) with P regs
    -> wait QK -> release K[n] -> exchange S halves -> mask (boundary blocks only)
    -> online softmax -> wait PV -> release V[n+1] -> P(n) = cvt(S) in A registers.
The first block (highest) runs QK, exchange, mask and softmax alone; the last PV runs after
the loop.
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .config import CVT_F16_STAGES
from .consumer_base import ConsumerArgs, ConsumerBase, mask_and_step
from .fragments import acc_mn_view, transpose_view, wgmma
from .mma_paths import unit_view


class PromoteParts(NamedTuple):
    """What fp8_mma's promoted P.V uses besides O (`SplitDConsumer._promote_parts`)."""

    tiled: object  # the m64n64 slice MMA (A = P from registers)
    vt: list  # V^T B fragment of each 64-column slice
    temp: object  # the zeroed fp32 temporary of one slice
    p_next: object  # P of the next block, converted before slices 1..
    scale: object  # O's rescale factor for the block being added (rows r, r+8)


class SplitDConsumer(ConsumerBase):
    """One consumer warpgroup of a split-d variant (see the module docstring)."""

    def __init__(self, cfg, path, epilogue, tracer):
        super().__init__(cfg, path, epilogue, tracer)
        self.promote = cfg.pv_promote  # fp8_mma: each block's P.V into zeroed temporaries

    @cute.jit
    def consume(self, wg, tidx_wg, args: ConsumerArgs, t):
        """QK (its d half), S exchange, softmax, PV into its O half, epilogue."""
        mask, n_min, n_max = t.mask, t.n_min, t.n_max
        # -- operand partitions ------------------------------------------------------------------
        thr_qk = args.tiled_mma_qk.get_slice(tidx_wg)
        thr_pv = args.tiled_mma_pv.get_slice(tidx_wg)
        sQ_w = cute.local_tile(args.sQ, (self.tile_m, self.half_d), (0, wg))
        sK_w = cute.local_tile(args.sK, (self.tile_n, self.half_d), (0, wg, None))
        if const_expr(not self.path.needs_staging):
            # this warpgroup's d half of every buffer a path may quantise or transpose
            sQ_in_w = cute.local_tile(args.sQ_in, (self.tile_m, self.half_d), (0, wg))
            sQ_mma_w = cute.local_tile(args.sQ, (self.tile_m, self.half_d), (0, wg))
            sK_src_w = cute.local_tile(args.sK_tma, (self.tile_n, self.half_d), (0, wg, None))
            sK_dst_w = cute.local_tile(args.sK, (self.tile_n, self.half_d), (0, wg, None))
            sV_src_w = cute.local_tile(args.sV_tma, (self.tile_n, self.half_d), (0, wg, None))
            sV_dst_w = cute.local_tile(args.sV, (self.tile_n, self.half_d), (0, wg, None))
            if const_expr(not self.fp8_mma):  # 16-bit: the V ring as 16-byte units, for the tail zeroing
                sV_dst_w = unit_view(args.storage.sV.data_ptr(), self.stages * self.tile_n * self.head_dim * 2,
                                     self.dtype)
        else:  # fp8_dequant: 16-byte unit views of the Q tile (bf16 Q is narrowed in place)
            q_bytes = self.tile_m * self.head_dim * 2
            kv_bytes = self.tile_n * self.head_dim
            sQ_in_w = unit_view(args.storage.sQ.data_ptr(), q_bytes, self.q_dtype)
            sQ_mma_w = unit_view(args.storage.sQ.data_ptr(), q_bytes, Float16)
            sK_src_w = unit_view(args.storage.sKs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
            sV_src_w = unit_view(args.storage.sVs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
            sK_dst_w = unit_view(args.storage.sK.data_ptr(), 2 * kv_bytes, Float16)
            sV_dst_w = unit_view(args.storage.sV.data_ptr(), 2 * kv_bytes, Float16)
        tSrQ = thr_qk.make_fragment_A(thr_qk.partition_A(sQ_w))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK_w))
        n_s = self.tile_n // 2  # fp32 logits per thread
        if const_expr(self.fp8_mma):
            sVt_w, sV_src_w, sV_dst_w = self.fp8_v_views(args.storage, wg, args.sVt_layout)
        else:
            sVt = transpose_view(args.sV)  # (512, tile_n, stages): V as the MN-major B operand of PV
            sVt_w = cute.local_tile(sVt, (self.half_d, self.tile_n), (wg, 0, None))
        tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt_w))
        acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((self.tile_m, self.half_d)))
        s_shape = thr_qk.partition_shape_C((self.tile_m, self.tile_n))
        tScS = thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))

        # partial-S exchange buffers: X[w] holds WG w's fragment, 4-float vectors per thread
        x_shape = (4, 128, n_s // 4, 2)
        if const_expr(self.fp8_mma):
            sX = self.fp8_exchange_view(args.storage, x_shape)
        elif const_expr(self.cvt_warps):
            sX = self._dequant_exchange_view(args.storage, x_shape)
        else:
            sX = args.storage.sX.get_tensor(cute.make_layout(x_shape, stride=(1, 4, 512, n_s * 128)))
        x_mine = sX[None, tidx_wg, None, wg] if const_expr(not self.cvt_warps) else None
        x_other = sX[None, tidx_wg, None, 1 - wg] if const_expr(not self.cvt_warps) else None

        # -- softmax state ---------------------------------------------------------------------
        softmax, row_scale, v_descale = self.softmax_state(args, t)
        warp_live = self.warp_live(t, tidx_wg)
        acc_O.fill(0.0)
        tOrP = self.p_fragment(thr_pv, s_shape)
        promo = None  # pv_promote: (64-column slice MMA, its V^T fragments, two temporaries, next P)
        if const_expr(self.promote):
            promo = self._promote_parts(sVt_w, tidx_wg, tOrP)
        sScales = None  # fp8_mma: e4m3 Q row scales (row, d half)
        q_row_scale = None  # fp8_mma: scales of this thread's two S rows (its d half's)
        if const_expr(self.fp8_mma):
            sScales = args.storage.sQscale.get_tensor(cute.make_layout((self.tile_m, 2)))
            q_row_scale = cute.make_rmem_tensor(2, Float32)
        q_regs = None  # q_reg_steps: (RS QK MMA, Q's first k-steps as A fragments, their smem source)
        if const_expr(self.q_reg_steps):
            q_regs = self._q_reg_parts(sQ_w, tidx_wg)
        q_cons = args.pipe_q.make_consumer()
        k_cons = args.pipe_k.make_consumer()
        v_cons = args.pipe_v.make_consumer()
        warp = 4 * (wg + 1) + tidx_wg // 32  # for the trace only
        n_blocks = n_max - n_min
        if n_blocks > 0:
            hq = q_cons.wait_and_advance()
            self.tracer.event(warp, "consumer Q ready", Int32(0), Int32(0))
            self.path.prepare_q(sQ_in_w, sQ_mma_w, sScales[None, wg] if const_expr(self.fp8_mma) else None,
                                tidx_wg, wg)
            if const_expr(self.q_reg_steps):
                cute.autovec_copy(q_regs[2], q_regs[1])  # once per tile
            if const_expr(self.fp8_mma):
                rows_c = acc_mn_view(tScS)
                for r in cutlass.range_constexpr(2):
                    row = rows_c[r, 0][0]
                    q_row_scale[r] = sScales[row, wg]
            # ---- first block (highest), always masked ----
            n = n_max - 1
            hk = k_cons.wait_and_advance()
            self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
            k_idx = self.path.prepare_k(hk, sK_src_w, sK_dst_w, tidx_wg, wg, None)
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs)
            warpgroup.wait_group(0)
            if const_expr(not self.cvt_warps):  # cvt_warps: the K stage holds X until the exchange
                self.path.finish_k(hk)
                self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
            xm, xo = self._x_pair(sX, x_mine, x_other, tidx_wg, wg, k_idx)
            self.exchange(acc_S, xm, xo, wg, True, n_blocks == 1, warp_live, q_row_scale)
            self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
            if const_expr(self.cvt_warps):
                self.path.finish_k(hk)
            mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, True)
            self.p_to_a(acc_S, tOrP, softmax, warp_live)
            # ---- steady state: QK(n) overlaps PV(n+1) (fp8_mma: and the transpose of V(n+1)) ----
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                hk = k_cons.wait_and_advance()
                self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
                k_idx = self.path.prepare_k(hk, sK_src_w, sK_dst_w, tidx_wg, wg, None)
                acc_S = cute.make_rmem_tensor(s_shape, Float32)
                self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs)
                if const_expr(not self.promote):
                    softmax.rescale(acc_O, row_scale)
                hv = v_cons.wait_and_advance()
                self.tracer.event(warp, "consumer V ready: block, stage", n + 1, hv.index)
                v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg, mask.seqlen_k - (n + 1) * self.tile_n)
                if const_expr(self.promote):
                    self._pv_slice(promo, 0, tOrP, v_idx)
                else:
                    self.pv(args.tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
                warpgroup.wait_group(1)  # QK(n) done (PV(n+1) may still run)
                if const_expr(not self.cvt_warps):
                    self.path.finish_k(hk)
                    self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
                if const_expr(self.promote):
                    # corr(n+1), applied to O in the slice adds, before softmax(n) replaces it
                    promo.scale.store(row_scale.load())
                xm, xo = self._x_pair(sX, x_mine, x_other, tidx_wg, wg, k_idx)
                self.exchange(acc_S, xm, xo, wg, False, i == n_blocks - 2, warp_live, q_row_scale)
                self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
                if const_expr(self.cvt_warps):
                    self.path.finish_k(hk)
                mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, False)
                if const_expr(self.promote):
                    self.p_to_a(acc_S, promo.p_next, softmax, warp_live)  # P(n) now: S dies before the other slices
                    self._pv_promote_rest(promo, acc_O, tOrP, v_idx)
                else:
                    warpgroup.wait_group(0)
                self.path.finish_v(hv)
                self.tracer.event(warp, "consumer V released: block, stage", n + 1, hv.index)
                if const_expr(self.promote):
                    tOrP.store(promo.p_next.load())
                else:
                    self.p_to_a(acc_S, tOrP, softmax, warp_live)
            # ---- last PV ----
            if const_expr(self.promote):
                promo.scale.store(row_scale.load())
            else:
                softmax.rescale(acc_O, row_scale)
            hv = v_cons.wait_and_advance()
            self.tracer.event(warp, "consumer V ready: block, stage", n_min, hv.index)
            v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg, mask.seqlen_k - n_min * self.tile_n)
            if const_expr(self.promote):
                self._pv_slice(promo, 0, tOrP, v_idx)
                self._pv_promote_rest(promo, acc_O, tOrP, v_idx)
            else:
                self.pv(args.tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
                warpgroup.wait_group(0)
            self.path.finish_v(hv)
            self.tracer.event(warp, "consumer V released: block, stage", n_min, hv.index)
            hq.release()
            self.tracer.event(warp, "consumer Q released, epilogue next", Int32(0), Int32(0))

        # -- epilogue ----------------------------------------------------------------------------
        self.store_tile(softmax, v_descale, acc_O, thr_pv, thr_qk, wg, tidx_wg, args, t)

    # -- fp8_dequant: the S exchange lives in the f16 K stages ----------------------------------
    # Warpgroup w's d half of an f16 K stage (tile_n x 256 f16, contiguous: the 128 B swizzle
    # atoms run down the rows first) is dead from the end of QK(n) until the converter warps
    # refill the stage, which happens only after both warpgroups released it (after the
    # exchange): exactly when X[w] is live.

    def _dequant_exchange_view(self, storage, x_shape):
        """X[w] at the start of warpgroup w's half of each f16 K stage (an extra last mode)."""
        half_words = self.tile_n * self.half_d * 2 // 4
        assert x_shape[0] * x_shape[1] * x_shape[2] <= half_words, "X[w] must fit in a d half of sK"
        x_ptr = cute.recast_ptr(storage.sK.data_ptr(), dtype=Float32)
        return cute.make_tensor(x_ptr, cute.make_layout((*x_shape, CVT_F16_STAGES),
                                                        stride=(1, 4, 512, half_words, 2 * half_words)))

    def _x_pair(self, sX, x_mine, x_other, tidx_wg, wg, k_idx):
        """This thread's (X[w], X[1-w]) for the block whose K stage is ``k_idx``."""
        if self.cvt_warps:
            return sX[None, tidx_wg, None, wg, k_idx], sX[None, tidx_wg, None, 1 - wg, k_idx]
        return x_mine, x_other

    def _q_reg_parts(self, sQ_w, tidx_wg):
        """(RS QK MMA, registers for Q[:, first q_reg_steps x 16 columns of this d half] as its
        A fragments, the thread's elements of them in the f16 Q tile)."""
        tiled = self.warpgroup_mma(self.tile_n, a_in_regs=True)
        thr = tiled.get_slice(tidx_wg)
        sQ_r = cute.local_tile(sQ_w, (self.tile_m, 16 * self.q_reg_steps), (0, 0))
        tSsQ = thr.partition_A(sQ_r)
        tSrQ = cute.make_rmem_tensor(thr.partition_shape_A((self.tile_m, 16 * self.q_reg_steps)), self.dtype)
        return tiled, tSrQ, tSsQ

    # -- fp8_mma pv_promote: P.V of one block in four 64-column slices --------------------------
    # Slice j (columns 64j.. of this warpgroup's O half) runs into a zeroed fp32 temporary that
    # is then added into O (`ConsumerBase.add_slice`): the tensor core never accumulates across
    # blocks, so each block's sum starts from zero and O itself is summed in fp32. One temporary
    # (a second one, so that slice j+1 runs while slice j is added, spilled).

    def _promote_parts(self, sVt_w, tidx_wg, tOrP):
        """(slice MMA, V^T fragment per slice, the temporary, P of the next block, the O rescale
        factor of the block being added), as a `PromoteParts`."""
        tiled = self.warpgroup_mma(64, a_in_regs=True)
        thr = tiled.get_slice(tidx_wg)
        vt = [thr.make_fragment_B(thr.partition_B(cute.local_tile(sVt_w, (64, self.tile_n), (j, 0, None))))
              for j in range(self.half_d // 64)]
        temp = thr.make_fragment_C(thr.partition_shape_C((self.tile_m, 64)))
        return PromoteParts(tiled, vt, temp, cute.make_rmem_tensor_like(tOrP), cute.make_rmem_tensor(2, Float32))

    @cute.jit
    def _pv_slice(self, promo, j: cutlass.Constexpr[int], tOrP, v_idx):
        """Issue T = P V[:, slice j] (zeroed first), committed as one group."""
        warpgroup.fence()
        wgmma(promo.tiled, promo.temp, tOrP, promo.vt[j][None, None, None, v_idx], zero_init=True)
        warpgroup.commit_group()

    @cute.jit
    def _pv_promote_rest(self, promo, acc_O, tOrP, v_idx):
        """Slice 0 is in flight (the last group committed); add each finished slice into O and
        issue the next; returns with every group complete."""
        n_slices = self.half_d // 64
        for j in cutlass.range_constexpr(1, n_slices):
            warpgroup.wait_group(0)
            self.add_slice(acc_O, promo.temp, j - 1, promo.scale)
            self._pv_slice(promo, j, tOrP, v_idx)
        warpgroup.wait_group(0)
        self.add_slice(acc_O, promo.temp, n_slices - 1, promo.scale)


__all__ = ["SplitDConsumer", "PromoteParts"]
