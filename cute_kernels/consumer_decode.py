"""The decode consumer warpgroups of the SM90 forward (layout "decode", fp8_mma, <= 8 query rows).

A decode tile holds at most 8 rows of real queries (one token x G=8 heads); its other 56 M rows
only fill the MMA shape. Two uses of that:

- QK^T (`Sm90FwdConfig.qk_rows`): in each warpgroup's d half, Q row 8c + i holds query row i
  restricted to the 32 columns of k-step c, with its own power-of-two scale
  (`fp8_operands.quantize_q_half(k_step_rows=True)`), so one QGMMA pass computes every k-step's
  product from a zero accumulator, each in its own row. The split-d exchange then adds the 16
  scaled products in fp32 in a fixed order (`ConsumerBase.exchange` with ``sX_rows``): the
  exact-accumulation error of the design (`fa512.numerics.emulation.Design.qk_rows`).
- P.V at tile_n=64 (`Sm90FwdConfig.pv_transposed`): O^T = V^T P^T (`cute_kernels.decode_pv`),
  M = 256 d x N = 8 queries per warpgroup, V^T loaded from the V stage into A registers by
  ldmatrix.trans (no V^T tile in shared memory), P^T an 8-row smem operand written by warp 0.
  O^T is 16 registers per thread instead of 128. At tile_n=32 (page size 32) the warpgroups
  transpose V into a V^T tile as the split-d fp8_mma consumers do and run the usual O = P V.

Timeline for block n, tile_n=64 (blocks high -> low): wait K[n] -> issue QK(n) -> wait
V[n+1] -> warpgroup barrier (P^T(n+1) published) -> V^T(n+1) into registers, release V[n+1]
-> O^T *= corr(n+1) -> issue PV(n+1) -> wait QK -> release K[n] -> exchange the k-step rows ->
mask, softmax -> wait PV -> P(n); warp 0 stores P^T(n) and corr(n) (`decode_pv.publish_p`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint32, const_expr
from cutlass.cute.nvgpu import warpgroup

from . import decode_pv
from .consumer_base import ConsumerArgs, ConsumerBase, mask_and_step
from .decode_pv import QUERIES
from .fp8_operands import q_lo_fragment, zero_keys_past
from .fragments import acc_mn_view
from .mma_paths import BAR_WG_LOCAL

Q_LO_STAGE = 1024  # byte offset of the two-term Q_lo staging in a warpgroup's bf16 Q half


class DecodeConsumer(ConsumerBase):
    """One consumer warpgroup of a decode tile (see the module docstring)."""

    def __init__(self, cfg, path, epilogue, tracer):
        super().__init__(cfg, path, epilogue, tracer)
        self.pv_transposed = cfg.pv_transposed  # tile_n=64: O^T = V^T P^T
        self.two_term = cfg.two_term  # Q and P as two e4m3 terms each

    @cute.jit
    def consume(self, wg, tidx_wg, args: ConsumerArgs, t):
        """QK (its d half, a k-step per M row), exchange of the k-step rows, softmax, P.V, epilogue."""
        mask, n_min, n_max = t.mask, t.n_min, t.n_max
        # -- operand partitions ------------------------------------------------------------------
        thr_qk = args.tiled_mma_qk.get_slice(tidx_wg)
        thr_pv = args.tiled_mma_pv.get_slice(tidx_wg)
        sQ_w = cute.local_tile(args.sQ, (self.tile_m, self.half_d), (0, wg))
        sK_w = cute.local_tile(args.sK, (self.tile_n, self.half_d), (0, wg, None))
        sQ_in_w = cute.local_tile(args.sQ_in, (self.tile_m, self.half_d), (0, wg))
        sQ_mma_w = cute.local_tile(args.sQ, (self.tile_m, self.half_d), (0, wg))
        tSrQ = thr_qk.make_fragment_A(thr_qk.partition_A(sQ_w))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK_w))
        n_s = self.tile_n // 2  # fp32 logits per thread
        sVt_w, sV_src_w, sV_dst_w = self.fp8_v_views(args.storage, wg, args.sVt_layout)
        pvt = None  # pv_transposed: O^T = V^T P^T (`decode_pv`), in place of the V^T tile
        if const_expr(self.pv_transposed):
            if const_expr(decode_pv.smem_bytes(self.two_term) > self.q_half_bytes() - self.vt_offset()):
                raise ValueError("fa512: decode_pv's P^T buffers do not fit where the V^T tile was")
            pvt = decode_pv.make_pvt_parts(self.q_half_ptr(args.storage, wg, self.vt_offset()), tidx_wg,
                                           self.two_term)
            acc_O = pvt.acc
        else:
            tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt_w))
            acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((self.tile_m, self.half_d)))
        s_shape = thr_qk.partition_shape_C((self.tile_m, self.tile_n))
        tScS = thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))

        # exchange tiles: X[w] holds WG w's row-pair sums; the live warps read all of both
        sX = self.fp8_exchange_view(args.storage, (4, 128, n_s // 4, 2))
        x_mine = sX[None, tidx_wg, None, wg]
        x_other = sX[None, tidx_wg, None, 1 - wg]
        lane = tidx_wg % 32

        # -- softmax state ---------------------------------------------------------------------
        softmax, row_scale, v_descale = self.softmax_state(args, t)
        warp_live = self.warp_live(t, tidx_wg)
        acc_O.fill(0.0)
        tOrP = self.p_fragment(thr_pv, s_shape)
        # two_term: P_lo's fragment; Q_lo's RS QK MMA, its A fragments and their compact
        # staging (8 x 256 e4m3) at Q_LO_STAGE of this warpgroup's bf16 Q half: Q rows 8..63 of
        # its first 64-column atom, which no decode tile reads; the S exchange overwrites them
        # after a warpgroup barrier that follows the fragment loads
        tOrPlo, q_lo, sQlo_words = None, None, None
        if const_expr(self.two_term):
            tOrPlo = self.p_fragment(thr_pv, s_shape)
            tiled_lo = self.warpgroup_mma(self.tile_n, a_in_regs=True)
            q_lo = (tiled_lo, cute.make_rmem_tensor(
                tiled_lo.get_slice(tidx_wg).partition_shape_A((self.tile_m, self.half_d)), self.dtype))
            sQlo_words = cute.make_tensor(cute.recast_ptr(self.q_half_ptr(args.storage, wg, Q_LO_STAGE), dtype=Uint32),
                                          cute.make_layout(QUERIES * self.half_d // 4))
        sScales = args.storage.sQscale.get_tensor(cute.make_layout((self.tile_m, 2)))  # e4m3 Q row scales
        q_row_scale = cute.make_rmem_tensor(2, Float32)  # its d half's scales of the thread's two rows
        q_cons = args.pipe_q.make_consumer()
        k_cons = args.pipe_k.make_consumer()
        v_cons = args.pipe_v.make_consumer()
        warp = 4 * (wg + 1) + tidx_wg // 32  # for the trace only
        n_blocks = n_max - n_min
        if n_blocks > 0:
            hq = q_cons.wait_and_advance()
            self.tracer.event(warp, "consumer Q ready", Int32(0), Int32(0))
            self.path.prepare_q(sQ_in_w, sQ_mma_w, sScales[None, wg], tidx_wg, wg, sQlo_words)
            if const_expr(self.two_term):  # after prepare_q's warpgroup barrier
                q_lo_fragment(sQlo_words, q_lo[1], tidx_wg)
                # the first exchange writes over the staging: every warp's loads come first (the
                # QK^T that needs all the fragments orders them on the GPU, but not in PTX's
                # model: racecheck flagged this WAR, H200 2026-12-03)
                cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
            rows_c = acc_mn_view(tScS)
            for r in cutlass.range_constexpr(2):
                row = rows_c[r, 0][0]
                q_row_scale[r] = sScales[row, wg]
            self.tracer.event(warp, "consumer Q converted", Int32(0), Int32(0))
            # ---- first block (highest), always masked ----
            n = n_max - 1
            hk = k_cons.wait_and_advance()
            self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
            k_idx = self.path.prepare_k(hk, None, None, tidx_wg, wg, None)
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_lo=q_lo)
            warpgroup.wait_group(0)
            self.path.finish_k(hk)
            self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
            self.exchange(acc_S, x_mine, x_other, wg, True, n_blocks == 1, warp_live, q_row_scale, sX, lane)
            self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
            mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, True)
            self.p_to_a(acc_S, tOrP, softmax, warp_live, tOrPlo)
            if const_expr(self.pv_transposed):
                if const_expr(self.two_term):
                    decode_pv.publish_p_lo(pvt, tOrPlo, n % 2, tidx_wg, warp_live)
                decode_pv.publish_p(pvt, tOrP, row_scale, n % 2, tidx_wg, warp_live)
            self.tracer.event(warp, "consumer P published: block", n, Int32(0))
            # ---- steady state: QK(n) overlaps PV(n+1) ----
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                hk = k_cons.wait_and_advance()
                self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
                k_idx = self.path.prepare_k(hk, None, None, tidx_wg, wg, None)
                acc_S = cute.make_rmem_tensor(s_shape, Float32)
                self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_lo=q_lo)
                if const_expr(not self.pv_transposed):
                    softmax.rescale(acc_O, row_scale)
                hv = v_cons.wait_and_advance()
                self.tracer.event(warp, "consumer V ready: block, stage", n + 1, hv.index)
                if const_expr(self.pv_transposed):
                    self._load_vt(pvt, hv, sV_src_w, tidx_wg, wg, mask.seqlen_k - (n + 1) * self.tile_n)
                    decode_pv.scale_columns(pvt, (n + 1) % 2, tidx_wg)  # published with P(n+1)
                    decode_pv.issue_pv(pvt, (n + 1) % 2, self.two_term)
                else:
                    v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg,
                                                mask.seqlen_k - (n + 1) * self.tile_n)
                    self.pv(args.tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
                warpgroup.wait_group(1)  # QK(n) done (PV(n+1) may still run)
                self.path.finish_k(hk)
                self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
                self.exchange(acc_S, x_mine, x_other, wg, False, i == n_blocks - 2, warp_live, q_row_scale, sX,
                              lane)
                self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
                mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, False)
                warpgroup.wait_group(0)
                self.tracer.event(warp, "consumer V released: block, stage", n + 1, hv.index)
                self.p_to_a(acc_S, tOrP, softmax, warp_live, tOrPlo)
                if const_expr(self.pv_transposed):
                    if const_expr(self.two_term):
                        decode_pv.publish_p_lo(pvt, tOrPlo, n % 2, tidx_wg, warp_live)
                    decode_pv.publish_p(pvt, tOrP, row_scale, n % 2, tidx_wg, warp_live)
                self.tracer.event(warp, "consumer P published: block", n, Int32(0))
            # ---- last PV ----
            if const_expr(not self.pv_transposed):
                softmax.rescale(acc_O, row_scale)
            hv = v_cons.wait_and_advance()
            self.tracer.event(warp, "consumer V ready: block, stage", n_min, hv.index)
            if const_expr(self.pv_transposed):
                self._load_vt(pvt, hv, sV_src_w, tidx_wg, wg, mask.seqlen_k - n_min * self.tile_n)
                decode_pv.scale_columns(pvt, n_min % 2, tidx_wg)
                decode_pv.issue_pv(pvt, n_min % 2, self.two_term)
            else:
                v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg, mask.seqlen_k - n_min * self.tile_n)
                self.pv(args.tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
            warpgroup.wait_group(0)
            self.tracer.event(warp, "consumer V released: block, stage", n_min, hv.index)
            hq.release()
            self.tracer.event(warp, "consumer Q released, epilogue next", Int32(0), Int32(0))

        # -- epilogue ----------------------------------------------------------------------------
        if const_expr(self.pv_transposed):
            o_scale, lse = self.finalize(softmax, v_descale)
            decode_pv.publish_o_scale(pvt, o_scale, tidx_wg, warp_live)
            cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
            decode_pv.scale_columns(pvt, decode_pv.SLOT_O_SCALE, tidx_wg)
            gO, gL = self.epilogue.out_tiles(wg, args, t)
            decode_pv.store_o(pvt, gO, self.epilogue.out_dtype, tidx_wg, t.seqlen_q * self.group - t.m_block * self.tile_m)
            self.epilogue.store_lse(gL, lse, thr_qk, wg, tidx_wg, t.seqlen_q, t.m_block)
        else:
            self.store_tile(softmax, v_descale, acc_O, thr_pv, thr_qk, wg, tidx_wg, args, t)

    @cute.jit
    def _load_vt(self, pvt, hv, sV_chunks, tidx_wg, wg, rows_valid):
        """tile_n=64: V^T A fragments of this warpgroup's d half of V stage ``hv`` into ``pvt``,
        then release the stage. The barrier publishes P^T (`decode_pv.publish_p`); keys past
        the sequence are zeroed in the stage first (a NaN in an unused cache slot must not meet
        a zero P)."""
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        if rows_valid < self.tile_n:
            zero_keys_past(sV_chunks, hv.index, decode_pv.pvt_tail_chunk(tidx_wg % 32, tidx_wg // 32, wg), tidx_wg,
                           rows_valid)
        decode_pv.load_vt(pvt, sV_chunks, hv.index, wg, tidx_wg)
        hv.release()


__all__ = ["DecodeConsumer"]
