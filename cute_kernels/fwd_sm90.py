"""SM90 (Hopper) warp-specialised attention forward for head_dim 512, 16-bit warpgroup MMA.

Features: packed varlen or paged K/V (TMA, page_size a multiple of tile_n), varlen queries,
GQA packing of a kv head's query heads into the M tile, causal / local (bottom-right) masks with
only boundary blocks masked, lse output, per-(batch, kv head) descales, split-KV fp32 partials.
See docs/sm90_kernel.md for the design and `FlashFwdSm90` for roles, budgets and pipelines.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple, Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float8E4M3FN, Float16, Float32, Int32, Int64, const_expr, pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from . import decode_pv, pipeline_checks
from .config import CVT_F16_STAGES, HEAD_DIM, SMEM_LIMIT, Sm90FwdConfig
from .diagnostics import Tracer
from .fp8_operands import P_TILE_BYTES, p_to_fp8_a, store_p_tile
from .fragments import acc_as_a_view, acc_mn_view, transpose_view, wgmma
from .mask import TileMask
from .fp8_operands import zero_keys_past
from .mma_paths import BAR_Q_READY, BAR_WG_LOCAL, CVT_THREADS, make_mma_path, unit_view
from .paged_kv import KVBlockTiles, kv_tma_view, vt_scratch_tiles, vt_scratch_tma_view
from .softmax import LOG2_E, OnlineSoftmax

class PromoteParts(NamedTuple):
    """What fp8_mma's promoted P.V uses besides O (`FlashFwdSm90._promote_parts`)."""

    tiled: object  # the m64n64 slice MMA (A = P from registers)
    vt: list  # V^T B fragment of each 64-column slice
    temp: object  # the zeroed fp32 temporary of one slice
    p_next: object  # P of the next block, converted before slices 1..
    scale: object  # O's rescale factor for the block being added (rows r, r+8)


# Named barriers (id 0 is __syncthreads).
BAR_S_READY = 1  # both consumer WGs: partial S tiles written (256 threads, sync)
BAR_X_FREE = 2  # + w: WG w's partial-S buffer was read by the other WG (128 arrive + 128 sync)
BAR_P_FULL = 9  # + w: WG w wrote P and its softmax state to slot w (layout "alternate"; 128 arrive + 128 sync)
BAR_P_FREE = 11  # + w: the other WG's P.V has read slot w (layout "alternate"; 128 arrive + 128 sync)

_DTYPES = {"bf16": BFloat16, "f16": Float16, "f32": Float32}



class FlashFwdSm90:
    """d512 attention forward, one 64-row query tile per CTA, 3 warpgroups (384 threads).

    Roles
    -----
    WG0, warp 0 : producer. Issues TMA for Q (once) and K/V blocks into smem rings; `setmaxnreg`
                  down to ``cfg.producer_regs`` (40). Warps 1-3 only rebalance registers and exit,
                  except with ``cfg.cvt_warps`` (the dequant control): they convert each e4m3
                  K/V block into the f16 rings the consumers MMA from (`convert_kv`).
                  (40 + 2 x 232) x 128 = 64512 = the CTA's register pool (168 launch registers x
                  384 threads); a larger total makes the consumers' setmaxnreg.inc wait forever.
    WG1, WG2    : consumers, `setmaxnreg` up to ``cfg.consumer_regs`` (232). WG w owns output
                  columns d[256w, 256w+256): acc_O is 64x256 fp32 = 128 registers per thread
                  (fp8_mma decode tiles, ``pv_transposed``: O^T 256 x 8 = 16, `decode_pv`).

    QK^T without duplicated MMA work (layout "split_d")
        WG w computes the partial logits S_w = Q[:, dw] K[:, dw]^T over its own half dw of the
        head dimension (64 x tile_n, K = 256), writes the fp32 fragment to its smem buffer X[w],
        and adds the other warpgroup's X[1-w]. fp32 addition is commutative, so both warpgroups
        hold bit-identical S and run identical softmax. Per block the tensor cores execute
        QK 64*n*512 + PV 64*n*512 MACs: the useful work (the vLLM fork's layout repeats QK in
        both warpgroups: 1.5x).

    Key blocks taken in turn (layout "alternate", fp8_mma with V^T from the prepass)
        Block j is WG (j % 2)'s: it computes S over all of d, runs the softmax step and hands P
        (e4m3) and the softmax state to the other warpgroup through smem; both run P.V on their
        d halves. Useful MMA work only, and no per-block exchange (`_alternate_blocks`).

    Pipelines (producer -> consumer, stages, arrivals)
    --------------------------------------------------
    Q : TMA warp -> 8 consumer warps, 1 stage, tx = 64*512*2 B (one tile per CTA).
    K : TMA warp -> 8 consumer warps, ``kv_stages``, tx = tile_n*512*2 B; released after QK.
    V : TMA warp -> 8 consumer warps, ``kv_stages``, tx = tile_n*512*2 B; released after PV.
    Producer order: Q, K[hi], then per step K[n], V[n+1], finally V[lo] (blocks high -> low).
    Both roles derive the block range from `TileMask.block_range` with the same inputs.

    Named barriers (split_d): S_READY (id 1, 256 threads) after both partial S tiles are in smem;
    X_FREE[w] (id 2+w, WG 1-w arrives after reading X[w], WG w syncs before rewriting it).
    alternate: P_FULL[w] (id 9+w) and P_FREE[w] (id 11+w), see `_alternate_blocks`; its K stages
    are released by the one warpgroup that read them (4 warp arrivals).

    Consumer timeline for block n (intra-warpgroup overlap):
        wait K[n] -> issue QK(n) -> O *= corr(n+1) -> wait V[n+1] -> issue PV(n+1) with P regs
        -> wait QK -> release K[n] -> exchange S halves -> mask (boundary blocks only)
        -> online softmax -> wait PV -> release V[n+1] -> P(n) = bf16(S) in A registers.
        ``pv_transposed``: warp 0 also stores P(n) as P^T with corr(n) (`decode_pv.publish_p`);
        block n+1's V^T is loaded into A registers after a warpgroup barrier, the stage released,
        O^T *= corr(n+1), then PV(n+1) is issued.

    MMA path (strategy object, `mma_paths`): bf16/f16 K/V are MMA'd in their TMA stages;
    fp8 e4m3 K/V (the dequant control of the FP8 A/B) are TMA'd into staging rings and converted
    to f16 by the converter warps into two-stage f16 rings (``cvt_warps``; pipelines staging ->
    converter warps -> consumers, X[w] in WG w's half of the block's f16 K stage, which is
    released after the exchange).

    Diagnostics: ``cfg.stage`` cuts the kernel at its entry, after the launch / setup (mbarrier
    init, CTA barrier, setmaxnreg); ``cfg.trace`` records per-role progress of CTA (0, 0, 0)
    (`diagnostics.Tracer`). See `Sm90FwdConfig` and profiles/gpu_mma16_smoke.py --diag.

    Registers (consumer, per thread): O 128 + S tile_n/2 + P tile_n/4 + stats ~8 + addressing.
    Shared memory (tile_n=64, 1 stage): Q 64 KB + K 64 KB + V 64 KB + X 2x16 KB = 224 KB
    (+ barriers, + 1 KB static: 231424 B of 232448). Dequant (tile_n=32): Q 64 + f16 K 2 x 32
    (and X) + f16 V 2 x 32 + e4m3 staging 2 x 16 KB = 224 KB.
    """

    num_threads = 384
    num_consumer_wgs = 2

    def __init__(self, config: Sm90FwdConfig):
        ok, why = config.can_implement()
        if not ok:
            raise ValueError(f"fa512: Sm90FwdConfig cannot be built: {why}")
        self.cfg = config
        self.path = make_mma_path(config.mma_path, config.q_dtype, config.tile_n, config.layout != "alternate",
                                  qk_rows=config.qk_rows)
        self.dtype = self.path.mma_dtype  # MMA operand dtype (f16 for the dequant path)
        self.q_dtype = _DTYPES[config.q_dtype]  # Q as it arrives (TMA'd as is)
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.head_dim = HEAD_DIM
        self.half_d = HEAD_DIM // 2
        self.split_d = config.layout != "alternate"
        self.alternate = config.layout == "alternate"  # key blocks taken in turn, P shared through smem
        self.qk_k = self.half_d if self.split_d else HEAD_DIM
        self.stages = config.kv_stages
        self.group = config.qhead_per_kvhead
        self.is_split = config.split
        self.paged = config.is_paged
        pipeline_checks.check_register_split(
            config.producer_regs, config.consumer_regs, self.num_consumer_wgs, self.num_threads
        )
        pipeline_checks.check_named_barriers(
            {"S_READY": BAR_S_READY, "X_FREE0": BAR_X_FREE, "X_FREE1": BAR_X_FREE + 1,
             "WG_LOCAL0": BAR_WG_LOCAL, "WG_LOCAL1": BAR_WG_LOCAL + 1, "Q_READY": BAR_Q_READY,
             "P_FULL0": BAR_P_FULL, "P_FULL1": BAR_P_FULL + 1, "P_FREE0": BAR_P_FREE, "P_FREE1": BAR_P_FREE + 1},
            {"S_READY": 256, "X_FREE": 256, "WG_LOCAL": 128, "Q_READY": 256, "P_FULL": 256, "P_FREE": 256},
        )
        pipeline_checks.check_smem(config.smem_bytes(), SMEM_LIMIT)
        self.fp8_mma = config.mma_path == "fp8_mma"
        self.promote = config.pv_promote  # fp8_mma: each block's P.V into zeroed temporaries
        self.q_reg_steps = config.q_reg_steps  # fp8_dequant: QK k-steps with Q from registers
        # fp8_dequant's converter warps fill f16 rings; X[w] lives in the block's f16 K stage
        self.cvt_warps = config.cvt_warps
        self.k_reader_warps = 4 if self.alternate else 8  # warps that release each K stage (consumer side)
        self.tracer = Tracer(config.trace)

    # ------------------------------------------------------------------------------------
    # host side
    # ------------------------------------------------------------------------------------
    def _smem_layouts(self):
        """(sQ MMA operand, sQ as loaded (q dtype), sKV operand stages, sStage e4m3 staging or
        None, sVt fp8_mma transposed V of one warpgroup or None); K-major; 128 B swizzle except
        sVt, whose rows are tile_n bytes (64 B or 32 B swizzle). With ``vt_prepass`` sVt is the
        V ring itself: (256, tile_n, 2 x stages), d half h of stage s at slab h * stages + s."""
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, self.dtype)
        sQ = cute.tile_to_shape(atom, (self.tile_m, self.head_dim), order=(0, 1))
        atom_q = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, self.q_dtype)
        sQ_in = cute.tile_to_shape(atom_q, (self.tile_m, self.head_dim), order=(0, 1))
        mma_stages = self.path.mma_stages(self.stages)
        sKV = cute.tile_to_shape(atom, (self.tile_n, self.head_dim, mma_stages), order=(0, 1, 2))
        sStage = None
        if self.path.needs_staging:
            atom8 = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, self.path.kv_gmem_dtype)
            sStage = cute.tile_to_shape(atom8, (self.tile_n, self.head_dim, self.stages), order=(0, 1, 2))
        sVt = None
        if self.fp8_mma:
            kind = warpgroup.SmemLayoutAtomKind.K_SW64 if self.tile_n == 64 else warpgroup.SmemLayoutAtomKind.K_SW32
            atom_t = warpgroup.make_smem_layout_atom(kind, Float8E4M3FN)
            slabs = 2 * self.stages if self.cfg.vt_prepass else 1
            sVt = cute.tile_to_shape(atom_t, (self.half_d, self.tile_n, slabs), order=(0, 1, 2))
        return sQ, sQ_in, sKV, sStage, sVt

    def _tiled_mmas(self):
        """QK^T from smem (both K-major) and P.V with P in registers. V is the B operand as
        loaded (MN-major) for 16-bit MMA; FP8 wgmma takes only K-major B, hence V^T in smem."""
        v_major = cute.nvgpu.OperandMajorMode.K if self.fp8_mma else cute.nvgpu.OperandMajorMode.MN
        return self._warpgroup_mma(self.tile_n), self._warpgroup_mma(self.half_d, a_in_regs=True, b_major=v_major)

    def _warpgroup_mma(self, n: int, a_in_regs: bool = False, b_major=cute.nvgpu.OperandMajorMode.K):
        """One warpgroup's (tile_m x n) MMA with fp32 accumulators: K-major A from smem or from
        registers, B from smem (K-major unless ``b_major``)."""
        return sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, b_major, Float32,
            atom_layout_mnk=(1, 1, 1), tiler_mn=(self.tile_m, n),
            a_source=warpgroup.OperandSource.RMEM if a_in_regs else warpgroup.OperandSource.SMEM,
        )

    def _packed_rows_view(self, t: cute.Tensor) -> cute.Tensor:
        """(total_q, Hq, d, *rest) -> ((G, total_q), d, Hq/G, *rest).

        Row p of an M tile is (q head p % G of the tile's group, query p // G); ``rest`` is the
        split mode of the partial outputs.
        """
        g = self.group
        rest = [i for i in range(3, cute.rank(t))]
        return cute.make_tensor(
            t.iterator,
            cute.make_layout(
                ((g, t.shape[0]), t.shape[2], t.shape[1] // g, *[t.shape[i] for i in rest]),
                stride=((t.stride[1], t.stride[0]), t.stride[2], t.stride[1] * g, *[t.stride[i] for i in rest]),
            ),
        )

    def _packed_lse_view(self, t: cute.Tensor) -> cute.Tensor:
        """(Hq, total_q, *rest) -> ((G, total_q), Hq/G, *rest)."""
        g = self.group
        rest = [i for i in range(2, cute.rank(t))]
        return cute.make_tensor(
            t.iterator,
            cute.make_layout(
                ((g, t.shape[1]), t.shape[0] // g, *[t.shape[i] for i in rest]),
                stride=((t.stride[0], t.stride[1]), t.stride[0] * g, *[t.stride[i] for i in rest]),
            ),
        )

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (total_q, Hq, 512)
        mK: cute.Tensor,  # (total_k, Hkv, 512) packed | (num_pages, page_size, Hkv, 512) paged
        mV: cute.Tensor,
        mO: cute.Tensor,  # (total_q, Hq, 512) q dtype | (S, total_q, Hq, 512) fp32 with splits
        mLSE: cute.Tensor,  # (Hq, total_q) fp32 | (S, Hq, total_q) fp32 with splits
        mCuSeqlensQ: cute.Tensor,  # (B+1,) int32
        mCuSeqlensK: Optional[cute.Tensor],  # (B+1,) int32, packed only
        mSeqUsedK: cute.Tensor,  # (B,) int32
        mPageTable: Optional[cute.Tensor],  # (B, max_pages) int32, paged only
        mQDescale: Optional[cute.Tensor],  # (B, Hkv) fp32 views, any strides
        mKDescale: Optional[cute.Tensor],
        mVDescale: Optional[cute.Tensor],
        softmax_scale: Float32,
        window_left: Int32,  # WINDOW_INF when unbounded
        window_right: Int32,
        max_seqlen_q: Int32,
        num_splits: Int32,
        trace_addr: Int64,  # host-mapped int32[TRACE_BUFFER_WORDS] for cfg.trace, else ignored (pass 0)
        stream: cuda.CUstream,
    ):
        if const_expr(mK.element_type == cutlass.Uint8):  # e4m3 K/V passed as uint8 views
            kv8 = self.path.kv_gmem_dtype
            mK = cute.make_tensor(cute.recast_ptr(mK.iterator, dtype=kv8), mK.layout)
            mV = cute.make_tensor(cute.recast_ptr(mV.iterator, dtype=kv8), mV.layout)
        sQ_layout, sQ_in_layout, sKV_layout, sStage_layout, sVt_layout = self._smem_layouts()
        sKV_tma_layout = sStage_layout if const_expr(self.path.needs_staging) else sKV_layout
        tiled_mma_qk, tiled_mma_pv = self._tiled_mmas()

        # -- TMA atoms ------------------------------------------------------------------
        tma_op = cpasync.CopyBulkTensorTileG2SOp()
        q_rows = self._packed_rows_view(mQ)
        tma_atom_q, tma_q = cpasync.make_tiled_tma_atom(
            tma_op, q_rows, sQ_in_layout, ((self.group, self.tile_m // self.group), self.head_dim)
        )
        tma_atom_k, tma_k = cpasync.make_tiled_tma_atom(
            tma_op, kv_tma_view(mK, self.paged), sKV_tma_layout, (self.tile_n, self.head_dim)
        )
        if const_expr(self.cfg.vt_prepass):  # mV is the V^T scratch (B, Hkv, 512, Kpad)
            tma_atom_v, tma_v = cpasync.make_tiled_tma_atom(
                tma_op, vt_scratch_tma_view(mV), sVt_layout, (self.half_d, self.tile_n)
            )
        else:
            tma_atom_v, tma_v = cpasync.make_tiled_tma_atom(
                tma_op, kv_tma_view(mV, self.paged), sKV_tma_layout, (self.tile_n, self.head_dim)
            )
        self.q_bytes = cute.size_in_bytes(self.q_dtype, sQ_in_layout)
        self.kv_bytes = cute.size_in_bytes(mK.element_type, cute.select(sKV_tma_layout, mode=[0, 1]))
        pipeline_checks.check_tma_pipeline(
            "Q", producer_arrives=1, consumer_warps=8, consumer_arrives=8,
            tx_bytes=self.q_bytes, boxes_bytes=self.tile_m * self.head_dim * self.q_dtype.width // 8,
        )
        kv_consumer_warps = CVT_THREADS // 32 if const_expr(self.cvt_warps) else 8  # converter or consumer warps
        pipeline_checks.check_tma_pipeline(
            "K/V", producer_arrives=1, consumer_warps=kv_consumer_warps, consumer_arrives=kv_consumer_warps,
            tx_bytes=self.kv_bytes, boxes_bytes=self.path.kv_tile_bytes(self.tile_n, self.head_dim),
        )
        if const_expr(self.alternate):  # a K block is read by the warpgroup whose turn it is
            pipeline_checks.check_tma_pipeline(
                "K", producer_arrives=1, consumer_warps=4, consumer_arrives=self.k_reader_warps,
                tx_bytes=self.kv_bytes, boxes_bytes=self.path.kv_tile_bytes(self.tile_n, self.head_dim),
            )

        # -- output views -------------------------------------------------------------------
        if const_expr(self.is_split):
            mO_rows = self._packed_rows_view(
                cute.make_tensor(mO.iterator, cute.select(mO.layout, mode=[1, 2, 3, 0]))
            )
            mLSE_rows = self._packed_lse_view(
                cute.make_tensor(mLSE.iterator, cute.select(mLSE.layout, mode=[1, 2, 0]))
            )
        else:
            mO_rows = self._packed_rows_view(mO)
            mLSE_rows = self._packed_lse_view(mLSE)

        # -- shared memory: mbarriers first, then 1 KB aligned buffers (config.smem_plan order);
        #    buffers a variant does not use are left out of the struct ----------------------
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        fields = {
            "mbar_q": MemRange[cutlass.Int64, 2],
            "mbar_k": MemRange[cutlass.Int64, 2 * self.stages],
            "mbar_v": MemRange[cutlass.Int64, 2 * self.stages],
        }
        if const_expr(self.cvt_warps):  # the converter warps' f16 rings
            fields["mbar_kf"] = MemRange[cutlass.Int64, 2 * CVT_F16_STAGES]
            fields["mbar_vf"] = MemRange[cutlass.Int64, 2 * CVT_F16_STAGES]
        if const_expr(self.fp8_mma):
            # Q as loaded, then (per warpgroup half) the S exchange tile and V^T: see config
            fields["sQscale"] = Align[MemRange[Float32, 2 * self.tile_m], 16]
            fields["sQ"] = Align[MemRange[self.q_dtype, cute.cosize(sQ_in_layout)], 1024]
            fields["sQ8"] = Align[MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
        else:
            fields["sQ"] = Align[MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
        fields["sK"] = Align[MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
        fields["sV"] = Align[MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
        if const_expr(self.split_d and not self.path.needs_staging and not self.fp8_mma):
            fields["sX"] = Align[MemRange[Float32, 2 * self.tile_m * self.tile_n], 1024]
        if const_expr(sStage_layout is not None):
            fields["sKs"] = Align[MemRange[self.path.kv_gmem_dtype, cute.cosize(sStage_layout)], 1024]
            fields["sVs"] = Align[MemRange[self.path.kv_gmem_dtype, cute.cosize(sStage_layout)], 1024]
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage
        self.smem_struct_bytes = SharedStorage.size_in_bytes()  # read by the compile checker

        # -- grid: (m blocks, tile heads x splits, batch); m blocks launched heaviest first -----
        num_tile_heads = mQ.shape[1] // self.group
        m_blocks = (max_seqlen_q * self.group + (self.tile_m - 1)) // self.tile_m
        grid = (m_blocks, num_tile_heads * num_splits, mCuSeqlensQ.shape[0] - 1)
        scale_log2 = softmax_scale * Float32(LOG2_E)

        self.kernel(
            tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v,
            mO_rows, mLSE_rows, mCuSeqlensQ, mCuSeqlensK, mSeqUsedK, mPageTable,
            mQDescale, mKDescale, mVDescale,
            scale_log2, window_left, window_right, num_splits, mQ.shape[1] // mK.shape[-2], trace_addr,
            sQ_layout, sQ_in_layout, sKV_layout, sStage_layout, sVt_layout, tiled_mma_qk, tiled_mma_pv,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], stream=stream, min_blocks_per_mp=1)

    # ------------------------------------------------------------------------------------
    # device side
    # ------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tma_atom_q: cute.CopyAtom,
        tma_q: cute.Tensor,
        tma_atom_k: cute.CopyAtom,
        tma_k: cute.Tensor,
        tma_atom_v: cute.CopyAtom,
        tma_v: cute.Tensor,
        mO_rows: cute.Tensor,
        mLSE_rows: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mCuSeqlensK: Optional[cute.Tensor],
        mSeqUsedK: cute.Tensor,
        mPageTable: Optional[cute.Tensor],
        mQDescale: Optional[cute.Tensor],
        mKDescale: Optional[cute.Tensor],
        mVDescale: Optional[cute.Tensor],
        scale_log2: Float32,
        window_left: Int32,
        window_right: Int32,
        num_splits: Int32,
        qheads_per_kvhead: Int32,
        trace_addr: Int64,
        sQ_layout: cute.ComposedLayout,
        sQ_in_layout: cute.ComposedLayout,
        sKV_layout: cute.ComposedLayout,
        sStage_layout: Optional[cute.ComposedLayout],
        sVt_layout: Optional[cute.ComposedLayout],
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = warp_idx // 4
        self.tracer.bind(trace_addr)  # an SSA value of the kernel entry, read by every role's events
        self.tracer.event(warp_idx, "start", Int32(0), Int32(0))
        if const_expr(self.cfg.stage == "launch"):
            self.tracer.exit()
            return
        if warp_idx == 0:
            for atom in (tma_atom_q, tma_atom_k, tma_atom_v):
                cpasync.prefetch_descriptor(atom)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # -- pipelines (mbarrier init by warp 0; one fence + CTA barrier below) -----------------
        tma_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        consumer_warps = pipeline.CooperativeGroup(pipeline.Agent.Thread, 4 * self.num_consumer_wgs)
        # K/V TMA stages go to the consumers, or (cvt_warps) to the converter warps, one arrive each
        kv_readers = consumer_warps
        if const_expr(self.cvt_warps):
            kv_readers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CVT_THREADS // 32)
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_q.data_ptr(), num_stages=1, producer_group=tma_group,
            consumer_group=consumer_warps, tx_count=self.q_bytes, defer_sync=True,
        )
        k_readers = kv_readers
        if const_expr(self.alternate):
            k_readers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.k_reader_warps)
        pipe_k = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages, producer_group=tma_group,
            consumer_group=k_readers, tx_count=self.kv_bytes, defer_sync=True,
        )
        pipe_v = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages, producer_group=tma_group,
            consumer_group=kv_readers, tx_count=self.kv_bytes, defer_sync=True,
        )
        # cvt_warps: converter threads -> consumer threads (every thread arrives on both sides)
        pipe_kf, pipe_vf = pipe_k, pipe_v
        if const_expr(self.cvt_warps):
            cvt_threads = pipeline.CooperativeGroup(pipeline.Agent.Thread, CVT_THREADS)
            mma_threads = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128 * self.num_consumer_wgs)
            pipe_kf = pipeline.PipelineAsync.create(
                barrier_storage=storage.mbar_kf.data_ptr(), num_stages=CVT_F16_STAGES, producer_group=cvt_threads,
                consumer_group=mma_threads, defer_sync=True,
            )
            pipe_vf = pipeline.PipelineAsync.create(
                barrier_storage=storage.mbar_vf.data_ptr(), num_stages=CVT_F16_STAGES, producer_group=cvt_threads,
                consumer_group=mma_threads, defer_sync=True,
            )
        pipeline_init_arrive()

        # sQ: the MMA operand; sQ_in: Q as loaded (16-bit paths: the same bytes, narrowed in place
        # by the dequant path; fp8_mma: its own buffer, quantised into sQ8)
        if const_expr(self.fp8_mma):
            sQ = storage.sQ8.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
            sQ_in = storage.sQ.get_tensor(sQ_in_layout.outer, swizzle=sQ_in_layout.inner)
        else:
            sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
            sQ_in = storage.sQ.get_tensor(sQ_in_layout.outer, swizzle=sQ_in_layout.inner, dtype=self.q_dtype)
        sK = storage.sK.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)
        if const_expr(self.cfg.vt_prepass):  # the V ring holds V^T boxes (see _smem_layouts)
            sV = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)
        else:
            sV = storage.sV.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)
        sK_tma, sV_tma = sK, sV
        if const_expr(self.path.needs_staging):
            kv8 = self.path.kv_gmem_dtype
            sK_tma = storage.sKs.get_tensor(sStage_layout.outer, swizzle=sStage_layout.inner, dtype=kv8)
            sV_tma = storage.sVs.get_tensor(sStage_layout.outer, swizzle=sStage_layout.inner, dtype=kv8)

        pipeline_init_wait()
        self.tracer.event(warp_idx, "mbarriers initialised, CTA barrier passed", Int32(0), Int32(0))

        # Roles first, tile facts after: values computed before setmaxnreg would stay live
        # across the producer's drop to 24 registers and spill (seen with the local mask).
        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(self.cfg.producer_regs)
            self.tracer.event(warp_idx, "producer setmaxnreg.dec done", Int32(0), Int32(0))
            if const_expr(self.cfg.stage == "full"):  # stage "setup" stops after setmaxnreg
                if warp_idx == 0:
                    t = self._tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left, window_right)
                    if t.valid:
                        k_start = Int32(0)
                        page_row = None
                        if const_expr(self.paged):
                            page_row = mPageTable[t.batch, None]
                        else:
                            k_start = mCuSeqlensK[t.batch]
                        self.produce(
                            tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v, sQ_in, sK_tma, sV_tma,
                            pipe_q, pipe_k, pipe_v, t.q_start, t.m_block, t.tile_head, t.kv_head, k_start,
                            page_row, t.n_min, t.n_max, t.batch,
                        )
                if const_expr(self.cvt_warps):
                    if warp_idx > 0:
                        tc = self._tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left, window_right)
                        if tc.valid:
                            self.convert_kv(storage, pipe_k, pipe_v, pipe_kf, pipe_vf, tidx - 32, tc.mask.seqlen_k,
                                            tc.n_min, tc.n_max)
        else:
            cute.arch.setmaxregister_increase(self.cfg.consumer_regs)
            self.tracer.event(warp_idx, "consumer setmaxnreg.inc done", Int32(0), Int32(0))
            if const_expr(self.cfg.stage == "full"):
                t = self._tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left, window_right)
                self.tracer.event(warp_idx, "consumer tile: n_min, n_max", t.n_min, t.n_max)
                if t.valid:
                    self.consume(
                        wg_idx - 1, tidx % 128, sQ, sQ_in, sK, sV, sK_tma, sV_tma, sVt_layout, storage,
                        pipe_q, pipe_kf, pipe_vf,
                        tiled_mma_qk, tiled_mma_pv, t.mask, t.n_min, t.n_max, mO_rows, mLSE_rows,
                        mQDescale, mKDescale, mVDescale, scale_log2, t.q_start, t.seqlen_q, t.m_block,
                        t.tile_head, t.kv_head, t.split_idx, t.batch,
                    )
                self.tracer.event(warp_idx, "consumer done", Int32(0), Int32(0))
        self.tracer.exit()

    def _tile(self, mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left, window_right):
        """This CTA's tile: grid (m blocks heaviest first, tile head x split, batch) -> facts.

        Every role derives the block range from the same inputs (pitfall 1: counts must agree).
        """
        bidx, bidy, bidz = cute.arch.block_idx()
        gdimx, _, _ = cute.arch.grid_dim()
        m_block = gdimx - 1 - bidx
        tile_head = bidy // num_splits
        batch = bidz
        q_start = mCuSeqlensQ[batch]
        seqlen_q = mCuSeqlensQ[batch + 1] - q_start
        seqlen_k = mSeqUsedK[batch]
        mask = TileMask(
            self.cfg.mask, self.tile_m, self.tile_n, self.group, m_block, seqlen_q, seqlen_k,
            window_left, window_right,
        )
        split_idx = bidy - tile_head * num_splits
        n_min, n_max = mask.block_range(split_idx, num_splits, self.is_split)
        return SimpleNamespace(
            m_block=m_block, split_idx=split_idx, tile_head=tile_head, batch=batch, q_start=q_start,
            seqlen_q=seqlen_q, kv_head=tile_head * self.group // qheads_per_kvhead, mask=mask,
            n_min=n_min, n_max=n_max, valid=m_block * self.tile_m < seqlen_q * self.group,
        )

    # ------------------------------------------------------------------------------------
    @cute.jit
    def produce(
        self, tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v, sQ, sK, sV,
        pipe_q, pipe_k, pipe_v, q_start, m_block, tile_head, kv_head, k_start, page_row,
        n_min, n_max, batch,
    ):
        """Warp 0 of WG0: Q once, then K[hi], (K[n], V[n+1])..., V[lo]."""
        gQ = cute.local_tile(
            cute.domain_offset(((0, q_start), 0, 0), tma_q),
            ((self.group, self.tile_m // self.group), self.head_dim),
            (m_block, 0, tile_head),
        )
        tQsQ, tQgQ = cpasync.tma_partition(
            tma_atom_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
        )
        k_tiles = KVBlockTiles(tma_k, self.tile_n, self.head_dim, self.paged, self.cfg.page_size,
                               kv_head, k_start, page_row)
        if const_expr(self.cfg.vt_prepass):
            v_tiles = None  # block n is box (d half, n): `_load_v`
            gV = vt_scratch_tiles(tma_v, self.half_d, self.tile_n, kv_head, batch)
        else:
            v_tiles = KVBlockTiles(tma_v, self.tile_n, self.head_dim, self.paged, self.cfg.page_size,
                                   kv_head, k_start, page_row)
            gV = v_tiles.tiles
        tKsK, tKgK = cpasync.tma_partition(
            tma_atom_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2),
            cute.group_modes(k_tiles.tiles, 0, 2),
        )
        tVsV, tVgV = cpasync.tma_partition(
            tma_atom_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2),
            cute.group_modes(gV, 0, 2),
        )
        q_prod = pipe_q.make_producer()
        k_prod = pipe_k.make_producer()
        v_prod = pipe_v.make_producer()
        n_blocks = n_max - n_min
        self.tracer.event(Int32(0), "producer tile: n_min, n_max", n_min, n_max)
        if n_blocks > 0:
            hq = q_prod.acquire_and_advance()
            cute.copy(tma_atom_q, tQgQ, tQsQ, tma_bar_ptr=hq.barrier)
            self.tracer.event(Int32(0), "producer Q issued", Int32(0), Int32(0))
            hk = k_prod.acquire_and_advance()
            self._load_block(tma_atom_k, tKgK, tKsK, hk, k_tiles, n_max - 1)
            self.tracer.event(Int32(0), "producer K issued: block, stage", n_max - 1, hk.index)
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                hk = k_prod.acquire_and_advance()
                self._load_block(tma_atom_k, tKgK, tKsK, hk, k_tiles, n)
                self.tracer.event(Int32(0), "producer K issued: block, stage", n, hk.index)
                hv = v_prod.acquire_and_advance()
                self._load_v(tma_atom_v, tVgV, tVsV, hv, v_tiles, n + 1)
                self.tracer.event(Int32(0), "producer V issued: block, stage", n + 1, hv.index)
            hv = v_prod.acquire_and_advance()
            self._load_v(tma_atom_v, tVgV, tVsV, hv, v_tiles, n_min)
            self.tracer.event(Int32(0), "producer V issued: block, stage", n_min, hv.index)
        self.tracer.event(Int32(0), "producer done", Int32(0), Int32(0))

    @cute.jit
    def _load_block(self, tma_atom, tXgX, tXsX, h, tiles: KVBlockTiles, n_block):
        """TMA one K or V block into the stage ``h`` acquired (its barrier expects the bytes)."""
        coord = tiles.block_coord(n_block)
        if const_expr(self.paged):
            src = tXgX[None, coord[0], coord[1]]
        else:
            src = tXgX[None, coord]
        cute.copy(tma_atom, src, tXsX[None, h.index], tma_bar_ptr=h.barrier)

    @cute.jit
    def _load_v(self, tma_atom, tVgV, tVsV, h, tiles, n_block):
        """TMA one V block (``vt_prepass``: its two V^T d halves, slabs half * stages + stage)."""
        if const_expr(self.cfg.vt_prepass):
            for half in cutlass.range_constexpr(2):
                cute.copy(tma_atom, tVgV[None, half, n_block], tVsV[None, half * self.stages + h.index],
                          tma_bar_ptr=h.barrier)
        else:
            self._load_block(tma_atom, tVgV, tVsV, h, tiles, n_block)

    # ------------------------------------------------------------------------------------
    @cute.jit
    def convert_kv(self, storage, pipe_k, pipe_v, pipe_kf, pipe_vf, cvt_tidx, seqlen_k, n_min, n_max):
        """Converter warps 1-3 of WG0 (`Sm90FwdConfig.cvt_warps`): every e4m3 K/V block, in the
        producer's order, from its TMA staging stage into an f16 stage of the consumers' rings
        (V rows past seqlen_k as zeros, so garbage in unused cache slots never reaches O)."""
        kv_bytes = self.tile_n * self.head_dim
        src_k = unit_view(storage.sKs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
        src_v = unit_view(storage.sVs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
        dst_k = unit_view(storage.sK.data_ptr(), CVT_F16_STAGES * 2 * kv_bytes, Float16)
        dst_v = unit_view(storage.sV.data_ptr(), CVT_F16_STAGES * 2 * kv_bytes, Float16)
        ks_cons = pipe_k.make_consumer()
        vs_cons = pipe_v.make_consumer()
        kf_prod = pipe_kf.make_producer()
        vf_prod = pipe_vf.make_producer()
        n_blocks = n_max - n_min
        # (the pipeline participants advance here, in the loop body: the DSL threads their state
        # through the loop only as local variables)
        if n_blocks > 0:
            self._convert_stage(ks_cons.wait_and_advance(), kf_prod.acquire_and_advance(), src_k, dst_k, cvt_tidx, None)
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                self._convert_stage(ks_cons.wait_and_advance(), kf_prod.acquire_and_advance(), src_k, dst_k,
                                    cvt_tidx, None)
                self._convert_stage(vs_cons.wait_and_advance(), vf_prod.acquire_and_advance(), src_v, dst_v,
                                    cvt_tidx, seqlen_k - (n + 1) * self.tile_n)
            self._convert_stage(vs_cons.wait_and_advance(), vf_prod.acquire_and_advance(), src_v, dst_v, cvt_tidx,
                                seqlen_k - n_min * self.tile_n)

    @cute.jit
    def _convert_stage(self, hs, hd, src, dst, cvt_tidx, rows_valid):
        """One block from staging stage ``hs`` into f16 stage ``hd`` (both acquired): convert,
        free the staging stage, publish the f16 stage (the fence makes the generic-proxy stores
        visible to wgmma)."""
        units = self.tile_n * self.head_dim // 16  # 16-byte units of one e4m3 stage
        self.path.convert_block(src, hs.index * units, dst, hd.index * 2 * units, cvt_tidx, rows_valid)
        hs.release()
        cute.arch.fence_view_async_shared()
        hd.commit()

    # ------------------------------------------------------------------------------------
    @cute.jit
    def consume(
        self, wg, tidx_wg, sQ, sQ_in, sK, sV, sK_tma, sV_tma, sVt_layout, storage, pipe_q, pipe_k, pipe_v,
        tiled_mma_qk, tiled_mma_pv,
        mask: TileMask, n_min, n_max, mO_rows, mLSE_rows, mQDescale, mKDescale, mVDescale,
        scale_log2, q_start, seqlen_q, m_block, tile_head, kv_head, split_idx, batch,
    ):
        """One consumer warpgroup: QK (its d half), S exchange, softmax, PV into its O half."""
        # -- operand partitions ------------------------------------------------------------------
        thr_qk = tiled_mma_qk.get_slice(tidx_wg)
        thr_pv = tiled_mma_pv.get_slice(tidx_wg)
        if const_expr(self.split_d):
            sQ_w = cute.local_tile(sQ, (self.tile_m, self.qk_k), (0, wg))
            sK_w = cute.local_tile(sK, (self.tile_n, self.qk_k), (0, wg, None))
        else:
            sQ_w = sQ
            sK_w = sK
        if const_expr(not self.path.needs_staging):
            # this warpgroup's d half of every buffer a path may quantise or transpose
            sQ_in_w = cute.local_tile(sQ_in, (self.tile_m, self.half_d), (0, wg))
            sQ_mma_w = cute.local_tile(sQ, (self.tile_m, self.half_d), (0, wg))
            sK_src_w = cute.local_tile(sK_tma, (self.tile_n, self.half_d), (0, wg, None))
            sK_dst_w = cute.local_tile(sK, (self.tile_n, self.half_d), (0, wg, None))
            sV_src_w = sV_dst_w = None  # vt_prepass: nothing to prepare
            if const_expr(not self.cfg.vt_prepass):
                sV_src_w = cute.local_tile(sV_tma, (self.tile_n, self.half_d), (0, wg, None))
                sV_dst_w = cute.local_tile(sV, (self.tile_n, self.half_d), (0, wg, None))
        else:  # fp8_dequant: 16-byte unit views of whole buffers (the conversion picks the d half)
            q_bytes = self.tile_m * self.head_dim * 2
            kv_bytes = self.tile_n * self.head_dim
            sQ_in_w = unit_view(storage.sQ.data_ptr(), q_bytes, self.q_dtype)
            sQ_mma_w = unit_view(storage.sQ.data_ptr(), q_bytes, Float16)
            sK_src_w = unit_view(storage.sKs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
            sV_src_w = unit_view(storage.sVs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
            sK_dst_w = unit_view(storage.sK.data_ptr(), 2 * kv_bytes, Float16)
            sV_dst_w = unit_view(storage.sV.data_ptr(), 2 * kv_bytes, Float16)
        tSrQ = thr_qk.make_fragment_A(thr_qk.partition_A(sQ_w))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK_w))
        n_s = self.tile_n // 2  # fp32 logits per thread
        if const_expr(self.cfg.vt_prepass):  # this warpgroup's d half of every V stage
            sVt_w = cute.local_tile(sV, (self.half_d, self.tile_n, self.stages), (0, 0, wg))
        elif const_expr(self.fp8_mma):
            sVt_w, sV_src_w, sV_dst_w = self._fp8_v_views(storage, wg, sVt_layout)
        else:
            sVt = transpose_view(sV)  # (512, tile_n, stages): V as the MN-major B operand of PV
            sVt_w = cute.local_tile(sVt, (self.half_d, self.tile_n), (wg, 0, None))
        pvt = None  # pv_transposed: O^T = V^T P^T (`decode_pv`), in place of the Vt tile
        if const_expr(self.cfg.pv_transposed):
            if const_expr(decode_pv.SMEM_BYTES > self._q_half_bytes() - self._vt_offset()):
                raise ValueError("fa512: decode_pv's P^T buffers do not fit where the V^T tile was")
            pvt = decode_pv.make_pvt_parts(self._q_half_ptr(storage, wg, self._vt_offset()), tidx_wg)
        tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt_w))
        if const_expr(self.cfg.pv_transposed):
            acc_O = pvt.acc
        else:
            acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((self.tile_m, self.half_d)))
        s_shape = thr_qk.partition_shape_C((self.tile_m, self.tile_n))
        tScS = thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))

        # partial-S exchange buffers: X[w] holds WG w's fragment, 4-float vectors per thread
        x_shape = (4, 128, n_s // 4, 2)
        sX = None
        if const_expr(self.fp8_mma and self.split_d):
            sX = self._fp8_exchange_view(storage, x_shape)
        elif const_expr(self.cvt_warps):
            sX = self._dequant_exchange_view(storage, x_shape)
        elif const_expr(self.split_d):
            sX = storage.sX.get_tensor(cute.make_layout(x_shape, stride=(1, 4, 512, n_s * 128)))
        x_mine = sX[None, tidx_wg, None, wg] if const_expr(self.split_d and not self.cvt_warps) else None
        x_other = sX[None, tidx_wg, None, 1 - wg] if const_expr(self.split_d and not self.cvt_warps) else None
        sX_rows = sX if const_expr(self.cfg.qk_rows) else None  # `_exchange` sums all 8 warps' slots
        lane = tidx_wg % 32

        # -- softmax state ---------------------------------------------------------------------
        qk_descale = Float32(1.0)
        v_descale = Float32(1.0)
        if const_expr(mQDescale is not None):
            qk_descale = qk_descale * mQDescale[batch, kv_head]
        if const_expr(mKDescale is not None):
            qk_descale = qk_descale * mKDescale[batch, kv_head]
        if const_expr(mVDescale is not None):
            v_descale = mVDescale[batch, kv_head]
        softmax = OnlineSoftmax(scale_log2 * qk_descale, 2, self.cfg.p_offset, sum_e4m3=self.fp8_mma)
        softmax.reset()
        row_scale = cute.make_rmem_tensor(2, Float32)
        row_scale.fill(1.0)
        # Whether this warp's 16 rows hold any query of the sequence (warp-uniform). A decode
        # tile (one query x G heads) fills only the first G rows: the other warps still take
        # part in the warpgroup MMAs and the S exchange but skip masks, softmax and the O
        # rescale; their rows are never stored.
        warp_live = (m_block * self.tile_m + 16 * (tidx_wg // 32)) // self.group < seqlen_q
        acc_O.fill(0.0)
        if const_expr(self.fp8_mma):
            tOrP = cute.make_rmem_tensor(thr_pv.partition_shape_A((self.tile_m, self.tile_n)), self.dtype)
        else:
            tOrP = cute.make_rmem_tensor_like(acc_as_a_view(cute.make_rmem_tensor(s_shape, Float32)), self.dtype)
        promo = None  # pv_promote: (64-column slice MMA, its V^T fragments, two temporaries, next P)
        if const_expr(self.promote):
            promo = self._promote_parts(sVt_w, tidx_wg, tOrP)
        sScales = None  # fp8_mma: e4m3 Q row scales (row, d half)
        q_row_scale = None  # fp8_mma: scales of this thread's two S rows: its d half's (split-d
        q_row_scale_hi = None  # QK), or d half 0's and (here) d half 1's (alternate: all of d)
        if const_expr(self.fp8_mma):
            sScales = storage.sQscale.get_tensor(cute.make_layout((self.tile_m, 2)))
            q_row_scale = cute.make_rmem_tensor(2, Float32)
            if const_expr(not self.split_d):
                q_row_scale_hi = cute.make_rmem_tensor(2, Float32)

        q_regs = None  # q_reg_steps: (RS QK MMA, Q's first k-steps as A fragments, their smem source)
        if const_expr(self.q_reg_steps):
            q_regs = self._q_reg_parts(sQ_w, tidx_wg)
        q_cons = pipe_q.make_consumer()
        k_cons = pipe_k.make_consumer()
        v_cons = pipe_v.make_consumer()
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
                    if const_expr(self.split_d):
                        q_row_scale[r] = sScales[row, wg]
                    else:
                        q_row_scale[r] = sScales[row, 0]
                        q_row_scale_hi[r] = sScales[row, 1]
            if const_expr(self.alternate):
                if wg == 0:
                    self._alternate_blocks(
                        0, tidx_wg, storage, tiled_mma_qk, tSrQ, tSrK, tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
                        tScS, tOrP, softmax, row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks,
                        k_cons, v_cons, warp_live,
                    )
                else:
                    self._alternate_blocks(
                        1, tidx_wg, storage, tiled_mma_qk, tSrQ, tSrK, tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
                        tScS, tOrP, softmax, row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks,
                        k_cons, v_cons, warp_live,
                    )
            else:
                # ---- first block (highest), always masked ----
                n = n_max - 1
                hk = k_cons.wait_and_advance()
                self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
                k_idx = self.path.prepare_k(hk, sK_src_w, sK_dst_w, tidx_wg, wg, None)
                acc_S = cute.make_rmem_tensor(s_shape, Float32)
                self._qk(tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs)
                warpgroup.wait_group(0)
                if const_expr(not self.cvt_warps):  # cvt_warps: the K stage holds X until the exchange
                    self.path.finish_k(hk)
                    self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
                xm, xo = self._x_pair(sX, x_mine, x_other, tidx_wg, wg, k_idx)
                self._exchange(acc_S, xm, xo, wg, True, n_blocks == 1, warp_live, q_row_scale, sX_rows, lane)
                self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
                if const_expr(self.cvt_warps):
                    self.path.finish_k(hk)
                _mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, True)
                self._p_to_a(acc_S, tOrP, softmax, warp_live)
                if const_expr(self.cfg.pv_transposed):
                    decode_pv.publish_p(pvt, tOrP, row_scale, n % 2, tidx_wg, warp_live)
                # ---- steady state: QK(n) overlaps PV(n+1) (fp8_mma: and the transpose of V(n+1)) ----
                for i in cutlass.range(n_blocks - 1, unroll=1):
                    n = n_max - 2 - i
                    hk = k_cons.wait_and_advance()
                    self.tracer.event(warp, "consumer K ready: block, stage", n, hk.index)
                    k_idx = self.path.prepare_k(hk, sK_src_w, sK_dst_w, tidx_wg, wg, None)
                    acc_S = cute.make_rmem_tensor(s_shape, Float32)
                    self._qk(tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs)
                    if const_expr(not self.promote and not self.cfg.pv_transposed):
                        softmax.rescale(acc_O, row_scale)
                    hv = v_cons.wait_and_advance()
                    self.tracer.event(warp, "consumer V ready: block, stage", n + 1, hv.index)
                    if const_expr(self.cfg.pv_transposed):
                        self._load_vt(pvt, hv, sV_src_w, tidx_wg, wg, mask.seqlen_k - (n + 1) * self.tile_n)
                        decode_pv.scale_columns(pvt, (n + 1) % 2, tidx_wg)  # published with P(n+1)
                        decode_pv.issue_pv(pvt, (n + 1) % 2)
                    else:
                        v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg,
                                                    mask.seqlen_k - (n + 1) * self.tile_n)
                        if const_expr(self.promote):
                            self._pv_slice(promo, 0, tOrP, v_idx)
                        else:
                            self._pv(tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
                    warpgroup.wait_group(1)  # QK(n) done (PV(n+1) may still run)
                    if const_expr(not self.cvt_warps):
                        self.path.finish_k(hk)
                        self.tracer.event(warp, "consumer K released: block, stage", n, hk.index)
                    if const_expr(self.promote):
                        # corr(n+1), applied to O in the slice adds, before softmax(n) replaces it
                        promo.scale.store(row_scale.load())
                    xm, xo = self._x_pair(sX, x_mine, x_other, tidx_wg, wg, k_idx)
                    self._exchange(acc_S, xm, xo, wg, False, i == n_blocks - 2, warp_live, q_row_scale,
                                   sX_rows, lane)
                    self.tracer.event(warp, "consumer S exchanged: block", n, Int32(0))
                    if const_expr(self.cvt_warps):
                        self.path.finish_k(hk)
                    _mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, False)
                    if const_expr(self.promote):
                        self._p_to_a(acc_S, promo.p_next, softmax, warp_live)  # P(n) now: S dies before the other slices
                        self._pv_promote_rest(promo, acc_O, tOrP, v_idx)
                    else:
                        warpgroup.wait_group(0)
                    self.path.finish_v(hv)
                    self.tracer.event(warp, "consumer V released: block, stage", n + 1, hv.index)
                    if const_expr(self.promote):
                        tOrP.store(promo.p_next.load())
                    else:
                        self._p_to_a(acc_S, tOrP, softmax, warp_live)
                    if const_expr(self.cfg.pv_transposed):
                        decode_pv.publish_p(pvt, tOrP, row_scale, n % 2, tidx_wg, warp_live)
                # ---- last PV ----
                if const_expr(self.promote):
                    promo.scale.store(row_scale.load())
                elif const_expr(not self.cfg.pv_transposed):
                    softmax.rescale(acc_O, row_scale)
                hv = v_cons.wait_and_advance()
                self.tracer.event(warp, "consumer V ready: block, stage", n_min, hv.index)
                if const_expr(self.cfg.pv_transposed):
                    self._load_vt(pvt, hv, sV_src_w, tidx_wg, wg, mask.seqlen_k - n_min * self.tile_n)
                    decode_pv.scale_columns(pvt, n_min % 2, tidx_wg)
                    decode_pv.issue_pv(pvt, n_min % 2)
                    warpgroup.wait_group(0)
                else:
                    v_idx = self.path.prepare_v(hv, sV_src_w, sV_dst_w, tidx_wg, wg, mask.seqlen_k - n_min * self.tile_n)
                    if const_expr(self.promote):
                        self._pv_slice(promo, 0, tOrP, v_idx)
                        self._pv_promote_rest(promo, acc_O, tOrP, v_idx)
                    else:
                        self._pv(tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx)
                        warpgroup.wait_group(0)
                self.path.finish_v(hv)
                self.tracer.event(warp, "consumer V released: block, stage", n_min, hv.index)
            hq.release()
            self.tracer.event(warp, "consumer Q released, epilogue next", Int32(0), Int32(0))

        # -- epilogue ----------------------------------------------------------------------------
        o_scale = cute.make_rmem_tensor(2, Float32)
        lse = cute.make_rmem_tensor(2, Float32)
        softmax.finalize(v_descale, o_scale, lse)
        if const_expr(self.cfg.pv_transposed):
            decode_pv.publish_o_scale(pvt, o_scale, tidx_wg, warp_live)
            cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
            decode_pv.scale_columns(pvt, decode_pv.SLOT_O_SCALE, tidx_wg)
            gO, gL = self._out_tiles(wg, mO_rows, mLSE_rows, q_start, m_block, tile_head, split_idx)
            decode_pv.store_o(pvt, gO, _DTYPES[self.cfg.out_dtype], tidx_wg,
                              seqlen_q * self.group - m_block * self.tile_m)
            self._store_lse(gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block)
        else:
            softmax.rescale(acc_O, o_scale)
            self._store(acc_O, o_scale, lse, thr_pv, thr_qk, wg, tidx_wg, mO_rows, mLSE_rows,
                        q_start, seqlen_q, m_block, tile_head, split_idx)

    # -- fp8_mma: the spent q-dtype Q tile, reused (config.Sm90FwdConfig._fp8_mma_smem_plan) --
    # Warpgroup w's 32 KB half holds its fp32 S exchange tile X[w] (64 x tile_n x 4 B) and
    # then its V^T (256 x tile_n B).

    def _fp8_exchange_view(self, storage, x_shape):
        """X[w] at the start of warpgroup w's half: (4 floats, thread, vector, w)."""
        x_ptr = cute.recast_ptr(self._q_half_ptr(storage, 0, 0), dtype=Float32)
        return cute.make_tensor(x_ptr, cute.make_layout(x_shape, stride=(1, 4, 512, self._q_half_bytes() // 4)))

    def _vt_offset(self) -> int:
        """Byte offset of V^T (or `decode_pv`'s P^T) in a warpgroup's Q half: after X[w]."""
        return self.tile_m * self.tile_n * 4

    def _fp8_v_views(self, storage, wg, sVt_layout):
        """(V^T of warpgroup wg as the PV B operand (256, tile_n, 1), the V ring as 16-byte chunks
        for the transpose's loads, (Q-tile words, first word of wg's V^T) for its stores)."""
        vt_offset = self._vt_offset()
        sVt_w = cute.make_tensor(
            cute.recast_ptr(self._q_half_ptr(storage, wg, vt_offset), sVt_layout.inner, dtype=Float8E4M3FN),
            sVt_layout.outer,
        )
        q_words = cute.make_tensor(cute.recast_ptr(storage.sQ.data_ptr(), dtype=cutlass.Uint32),
                                   cute.make_layout(2 * self._q_half_bytes() // 4))
        v_chunks = cute.make_tensor(
            cute.recast_ptr(storage.sV.data_ptr(), dtype=cutlass.Uint32),
            cute.make_layout((self.stages * self.tile_n * HEAD_DIM // 16, 4), stride=(4, 1)),
        )
        return sVt_w, v_chunks, (q_words, (wg * self._q_half_bytes() + vt_offset) // 4)

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

    def _q_half_bytes(self) -> int:
        return self.tile_m * self.half_d * self.q_dtype.width // 8

    def _q_half_ptr(self, storage, wg, byte_offset: int):
        """Byte pointer into warpgroup wg's half of the (spent) q-dtype Q tile (fp8_mma)."""
        base = cute.recast_ptr(storage.sQ.data_ptr(), dtype=cutlass.Uint8)
        return base + wg * self._q_half_bytes() + byte_offset

    @cute.jit
    def _p_to_a(self, acc_S, tOrP, softmax, warp_live):
        """P (fp32 accumulator) -> the A operand of PV: 16-bit A view, or e4m3 with keys permuted
        (fp8_mma, whose row sums then add the e4m3 P: `OnlineSoftmax.sum_e4m3`)."""
        if const_expr(self.fp8_mma):
            p_to_fp8_a(acc_S, tOrP)
            if const_expr(softmax.sum_e4m3):
                if warp_live:
                    softmax.add_e4m3_sums(tOrP)
        else:
            tOrP.store(acc_as_a_view(acc_S).load().to(self.dtype))

    def _second_half_acc(self, s_shape):
        """fp8_mma, all of d in one warpgroup (alternate): the accumulator of d half 1's QK^T (None otherwise)."""
        if self.fp8_mma and not self.split_d:
            return cute.make_rmem_tensor(s_shape, Float32)
        return None

    @cute.jit
    def _qk(self, tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs=None, acc_T=None):
        """Issue S = Q K^T for one block (this warpgroup's d half; committed, the caller waits).
        With ``q_regs`` (fp8_dequant) the first q_reg_steps k-steps take Q from registers. With
        ``acc_T`` (fp8_mma, alternate: all of d) d half 0 accumulates into S and d half 1
        into T, each from zero: the same FP8 accumulations, and after `_sum_d_halves` the same
        S bit for bit, as the split-d layout's two warpgroups."""
        warpgroup.fence()
        tB = tSrK[None, None, None, k_idx]
        if const_expr(acc_T is not None):
            steps = cute.size(tSrQ.shape[2])
            atom = cute.make_mma_atom(tiled_mma_qk.op)
            for k in cutlass.range_constexpr(steps):
                atom.set(warpgroup.Field.ACCUMULATE, k % (steps // 2) != 0)
                dst = acc_S if k < steps // 2 else acc_T
                cute.gemm(atom, dst, tSrQ[None, None, k], tB[None, None, k], dst)
        elif const_expr(q_regs is None):
            wgmma(tiled_mma_qk, acc_S, tSrQ, tB, zero_init=True)
        else:
            atom_r = cute.make_mma_atom(q_regs[0].op)
            atom_s = cute.make_mma_atom(tiled_mma_qk.op)
            atom_r.set(warpgroup.Field.ACCUMULATE, False)
            atom_s.set(warpgroup.Field.ACCUMULATE, True)
            for k in cutlass.range_constexpr(cute.size(tSrQ.shape[2])):
                if const_expr(k < self.q_reg_steps):
                    cute.gemm(atom_r, acc_S, q_regs[1][None, None, k], tB[None, None, k], acc_S)
                    atom_r.set(warpgroup.Field.ACCUMULATE, True)
                else:
                    cute.gemm(atom_s, acc_S, tSrQ[None, None, k], tB[None, None, k], acc_S)
        warpgroup.commit_group()

    def _q_reg_parts(self, sQ_w, tidx_wg):
        """(RS QK MMA, registers for Q[:, first q_reg_steps x 16 columns of this d half] as its
        A fragments, the thread's elements of them in the f16 Q tile)."""
        tiled = self._warpgroup_mma(self.tile_n, a_in_regs=True)
        thr = tiled.get_slice(tidx_wg)
        sQ_r = cute.local_tile(sQ_w, (self.tile_m, 16 * self.q_reg_steps), (0, 0))
        tSsQ = thr.partition_A(sQ_r)
        tSrQ = cute.make_rmem_tensor(thr.partition_shape_A((self.tile_m, 16 * self.q_reg_steps)), self.dtype)
        return tiled, tSrQ, tSsQ

    # -- layout "alternate": the warpgroups take the key blocks in turn -----------------------
    # Block j (the j-th from the top, n = n_max - 1 - j) is WG (j % 2)'s: it waits for K(j) in
    # its own K stage (two stages, so the blocks of WG w always land in stage w), computes S(j)
    # over all of d, runs the softmax step from the state block j-1 left, converts P(j), and
    # publishes P(j) and the new state in slot j % 2 of the spent Q tile. Both warpgroups add
    # P(j).V(j) to their O halves: the owner with P from registers, the other with the SS wgmma
    # reading the slot. The softmax steps form one chain alternating between the warpgroups;
    # each warpgroup's QK(j + 2) and both P.Vs run under the other's step.
    # P_FULL[w]: WG w arrives after writing slot w, the other syncs before reading it.
    # P_FREE[w]: the other arrives after its P.V has read slot w, WG w syncs before rewriting it
    # (from its second block on; the other skips the arrive when WG w writes no further block).

    def _alternate_views(self, storage):
        """(P slots as the SS A operand (64, tile_n, 2), P slots as words, softmax state slots
        (thread, field, slot): row max r0 r1, partial row sum r0 r1, O factor r0 r1)."""
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW64, Float8E4M3FN)
        sP_layout = cute.tile_to_shape(atom, (self.tile_m, self.tile_n, 2), order=(0, 1, 2))
        base = self._q_half_ptr(storage, 0, 0)
        sP = cute.make_tensor(cute.recast_ptr(base, sP_layout.inner, dtype=Float8E4M3FN), sP_layout.outer)
        p_words = cute.make_tensor(cute.recast_ptr(base, dtype=cutlass.Uint32), cute.make_layout(P_TILE_BYTES // 2))
        state = cute.make_tensor(cute.recast_ptr(self._q_half_ptr(storage, 0, 2 * P_TILE_BYTES), dtype=Float32),
                                 cute.make_layout((128, 6, 2), stride=(1, 128, 6 * 128)))
        return sP, p_words, state

    @cute.jit
    def _alternate_blocks(
        self, wg: cutlass.Constexpr[int], tidx_wg, storage, tiled_mma_qk, tSrQ, tSrK, tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
        tScS, tOrP, softmax, row_scale, q_scale_lo, q_scale_hi, mask, n_max, n_blocks, k_cons, v_cons, warp_live,
    ):
        """Every block of the tile, layout "alternate" (see above); returns with O complete."""
        sP, p_words, state = self._alternate_views(storage)
        tiled_ss = self._warpgroup_mma(self.half_d)  # P.V with P from a slot
        thr_ss = tiled_ss.get_slice(tidx_wg)
        tOsP = thr_ss.make_fragment_A(thr_ss.partition_A(sP))
        tOsVt = thr_ss.make_fragment_B(thr_ss.partition_B(sVt_w))
        mine = state[tidx_wg, None, wg]
        theirs = state[tidx_wg, None, 1 - wg]
        corr = cute.make_rmem_tensor(2, Float32)  # O's factor before the other's block
        v_free = v_cons.clone()  # trails v_cons: V stages are released in order, after their last P.V
        # (Consumer states advance only outside branches: the tracer carries no state changed there.)
        if wg == 0:  # block 0: the first softmax step; no P.V before it
            hk = k_cons.wait()
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = self._second_half_acc(s_shape)
            self._qk(tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            warpgroup.wait_group(0)
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1, softmax, row_scale,
                              tOrP, warp_live, True)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, False)
            hv = v_cons.wait()  # O is zero: no rescale
            self._pv(tiled_mma_pv, acc_O, tOrP, tOrVt, hv.index)
        k_cons.advance(2 - wg)  # WG 0: past blocks 0 and 1 (WG 1's); WG 1: past block 0
        if const_expr(wg == 0):
            v_cons.advance()
        for j in cutlass.range(2 - wg, n_blocks, 2, unroll=1):
            # in flight: this warpgroup's P(j-2).V (j >= 2)
            hk = k_cons.wait_and_advance()
            k_cons.advance()  # block j+1 is the other's
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = self._second_half_acc(s_shape)
            self._qk(tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            warpgroup.wait_group(1)  # P(j-2).V done
            if j >= 2:
                v_free.current_handle().release()
            v_free.advance(cutlass.min(j - 1, 1))  # 0 at WG 1's first block
            # block j-1 (the other's): its softmax state, and its P from the slot
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)
            _load_state(softmax, corr, theirs)
            softmax.rescale(acc_O, corr)
            hv = v_cons.wait_and_advance()
            self._pv(tiled_ss, acc_O, tOsP[None, None, None, 1 - wg], tOsVt, hv.index)
            warpgroup.wait_group(1)  # S(j) done; P(j-1).V may run on
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1 - j, softmax, row_scale,
                              tOrP, warp_live, False)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, j >= 2)
            warpgroup.wait_group(0)  # P(j-1).V done: slot 1-w and V(j-1) are free
            v_free.current_handle().release()
            v_free.advance()
            if j + 1 < n_blocks:
                cute.arch.barrier_arrive(barrier_id=BAR_P_FREE + 1 - wg, number_of_threads=256)
            softmax.rescale(acc_O, row_scale)
            hv = v_cons.wait_and_advance()
            self._pv(tiled_mma_pv, acc_O, tOrP, tOrVt, hv.index)
        if (n_blocks - 1) % 2 != wg:  # the last block is the other's
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)
            _load_state(softmax, corr, theirs)
            warpgroup.wait_group(0)
            if wg == 0 or n_blocks > 1:  # this warpgroup's own last P.V
                v_free.current_handle().release()
            softmax.rescale(acc_O, corr)
            hv = v_cons.wait()
            self._pv(tiled_ss, acc_O, tOsP[None, None, None, 1 - wg], tOsVt, hv.index)
            warpgroup.wait_group(0)
            hv.release()
        else:
            warpgroup.wait_group(0)
            v_free.current_handle().release()

    @cute.jit
    def _own_softmax(self, acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n, softmax, row_scale, tOrP, warp_live,
                     is_first: cutlass.Constexpr[bool]):
        """S = the two d halves' sum; `_mask_and_step`; P -> A."""
        _sum_d_halves(acc_S, acc_T, q_scale_lo, q_scale_hi)
        _mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, is_first)
        self._p_to_a(acc_S, tOrP, softmax, warp_live)

    @cute.jit
    def _publish(self, tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, wait_free):
        """Slot wg <- P and the softmax state after this warpgroup's block; then P_FULL[wg]."""
        if wait_free:
            cute.arch.barrier(barrier_id=BAR_P_FREE + wg, number_of_threads=256)
        store_p_tile(tOrP, p_words, wg * (P_TILE_BYTES // 4), tidx_wg)
        for r in cutlass.range_constexpr(2):
            mine[r] = softmax.row_max[r]
            mine[2 + r] = softmax.row_sum[r]
            mine[4 + r] = row_scale[r]
        cute.arch.fence_view_async_shared()  # P is read by the other warpgroup's wgmma (async proxy)
        cute.arch.barrier_arrive(barrier_id=BAR_P_FULL + wg, number_of_threads=256)

    @cute.jit
    def _load_vt(self, pvt, hv, sV_chunks, tidx_wg, wg, rows_valid):
        """``pv_transposed``: V^T A fragments of this warpgroup's d half of V stage ``hv`` into
        ``pvt``, then release the stage. The barrier publishes P^T (`decode_pv.publish_p`); keys
        past the sequence are zeroed in the stage first."""
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        if rows_valid < self.tile_n:
            zero_keys_past(sV_chunks, hv.index, decode_pv.pvt_tail_chunk(tidx_wg % 32, tidx_wg // 32, wg), tidx_wg,
                           rows_valid)
        decode_pv.load_vt(pvt, sV_chunks, hv.index, wg, tidx_wg)
        hv.release()

    @cute.jit
    def _pv(self, tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx):
        """Issue O += P V for one block (committed; the caller waits)."""
        warpgroup.fence()
        wgmma(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, v_idx], zero_init=False)
        warpgroup.commit_group()

    # -- fp8_mma pv_promote: P.V of one block in four 64-column slices --------------------------
    # Slice j (columns 64j.. of this warpgroup's O half) runs into a zeroed fp32 temporary that
    # is then added into O: the tensor core never accumulates across blocks, so each block's sum
    # starts from zero and O itself is summed in fp32. One temporary (a second one, so that
    # slice j+1 runs while slice j is added, spilled). In the accumulator's (rows, cols) view a
    # thread's columns of slice j are O's columns 16j .. 16j+15 (8-column groups 8j .. 8j+7,
    # `fragments`).

    def _promote_parts(self, sVt_w, tidx_wg, tOrP):
        """(slice MMA, V^T fragment per slice, the temporary, P of the next block, the O rescale
        factor of the block being added), as a `PromoteParts`."""
        tiled = self._warpgroup_mma(64, a_in_regs=True)
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
    def _add_slice(self, acc_O, temp, j: cutlass.Constexpr[int], scale):
        """O[:, slice j] = O * scale[row] + T: the online-softmax rescale of O is folded in, so
        O is touched once per block (a separate conditional rescale pass spilled O)."""
        o_mn = acc_mn_view(acc_O)
        t_mn = acc_mn_view(temp)
        for r in cutlass.range_constexpr(cute.size(t_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(t_mn, mode=[1])):
                o_mn[r, 16 * j + c] = o_mn[r, 16 * j + c] * scale[r] + t_mn[r, c]

    @cute.jit
    def _pv_promote_rest(self, promo, acc_O, tOrP, v_idx):
        """Slice 0 is in flight (the last group committed); add each finished slice into O and
        issue the next; returns with every group complete."""
        n_slices = self.half_d // 64
        for j in cutlass.range_constexpr(1, n_slices):
            warpgroup.wait_group(0)
            self._add_slice(acc_O, promo.temp, j - 1, promo.scale)
            self._pv_slice(promo, j, tOrP, v_idx)
        warpgroup.wait_group(0)
        self._add_slice(acc_O, promo.temp, n_slices - 1, promo.scale)

    @cute.jit
    def _exchange(self, acc_S, x_mine, x_other, wg, is_first: cutlass.Constexpr[bool], is_last, live, own_scale=None,
                  sX_rows=None, lane=None):
        """S = S_0 + S_1 through smem (see class docstring for the barrier protocol).

        ``own_scale`` (fp8_mma): this warpgroup's e4m3 Q row scales (rows r, r+8 of the thread)
        are applied to its own partial first; fp32 addition commutes, so both warpgroups still
        hold bit-identical S. A warp whose rows hold no query (``live`` false; its partner warp
        in the other warpgroup holds the same rows) keeps the barriers but moves no data: in a
        decode tile that is 3 of 4 warps, 3/4 of the exchange's smem traffic.

        ``sX_rows`` (both X tiles) and ``lane``: `Sm90FwdConfig.qk_rows`, where S of query row i
        is the sum of the 16 rows 8c + i that each hold one k-step (8 per warpgroup). Every
        thread writes the sum of its two scaled rows (k-steps 2w and 2w + 1 of warp w); the live
        warp of each warpgroup then adds the four warps' sums of X[0], then of X[1], in that
        order (`fa512.emulation.Design.qk_rows`), and writes the total to both of its rows. It
        also reads its own X[w]; the X_FREE[w] barrier, which all of warpgroup w takes part in,
        keeps the next block's writes after those reads too.
        """
        n_s = cute.size(acc_S)
        frag = cute.make_tensor(acc_S.iterator, cute.make_layout((4, n_s // 4)))
        if const_expr(own_scale is not None):
            _scale_s_rows(acc_S, own_scale)
        pair = None
        if const_expr(sX_rows is not None):
            pair = _row_pair_sums(acc_S)
        if const_expr(not is_first and not self.cvt_warps):
            # wait until the other WG has read what this WG wrote for the previous block
            cute.arch.barrier(barrier_id=BAR_X_FREE + wg, number_of_threads=256)
        if const_expr(sX_rows is not None):
            cute.autovec_copy(pair, cute.local_tile(x_mine, (4, n_s // 8), (0, 0)))
        elif live:
            cute.autovec_copy(frag, x_mine)
        cute.arch.barrier(barrier_id=BAR_S_READY, number_of_threads=256)
        if live:
            if const_expr(sX_rows is not None):
                _sum_row_pairs(acc_S, sX_rows, lane)
            else:
                other = cute.make_rmem_tensor((4, n_s // 4), Float32)
                cute.autovec_copy(x_other, other)
                for i in cutlass.range_constexpr(n_s):
                    frag[i] = frag[i] + other[i]
        if const_expr(not self.cvt_warps):  # cvt_warps: X[w] is in the block's own K stage
            if not is_last:
                cute.arch.barrier_arrive(barrier_id=BAR_X_FREE + 1 - wg, number_of_threads=256)

    def _out_tiles(self, wg, mO_rows, mLSE_rows, q_start, m_block, tile_head, split_idx):
        """(this WG's O half of the tile: (tile rows, 256 d), the tile's lse: (tile rows,)),
        rows as packed (head, query), of the split's partials when split."""
        if const_expr(self.is_split):
            mO_tile_src = mO_rows[None, None, None, split_idx]
            mLSE_src = mLSE_rows[None, None, split_idx]
        else:
            mO_tile_src = mO_rows
            mLSE_src = mLSE_rows
        rows_per_tile = self.tile_m // self.group
        gO = cute.local_tile(
            cute.domain_offset(((0, q_start), 0, 0), mO_tile_src),
            ((self.group, rows_per_tile), self.half_d),
            (m_block, wg, tile_head),
        )
        gL = cute.local_tile(
            cute.domain_offset(((0, q_start), 0), mLSE_src),
            ((self.group, rows_per_tile),),
            (m_block, tile_head),
        )
        return gO, gL

    @cute.jit
    def _store(self, acc_O, o_scale, lse, thr_pv, thr_qk, wg, tidx_wg, mO_rows, mLSE_rows,
               q_start, seqlen_q, m_block, tile_head, split_idx):
        """Write this WG's O half (q dtype, or fp32 partials) and, from WG 0, the lse."""
        out_dtype = _DTYPES[self.cfg.out_dtype]
        gO, gL = self._out_tiles(wg, mO_rows, mLSE_rows, q_start, m_block, tile_head, split_idx)
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
        self._store_lse(gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block)

    @cute.jit
    def _store_lse(self, gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block):
        """WG 0: the lse of this thread's two rows (one lane per quad)."""
        if wg == 0:
            s_c = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
            if tidx_wg % 4 == 0:
                for r in cutlass.range_constexpr(2):
                    row = s_c[r, 0][0]
                    if (m_block * self.tile_m + row) // self.group < seqlen_q:
                        gL[row] = lse[r]


@cute.jit
def _mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, is_first: cutlass.Constexpr[bool]):
    """Mask block n (always the first; later ones only at a boundary) and run the softmax step,
    in warps whose rows hold a query (a dead warp's rows are never stored)."""
    if warp_live:
        if const_expr(is_first):
            mask.apply(acc_S, tScS, n)
        elif mask.needs_mask(n):
            mask.apply(acc_S, tScS, n)
        softmax.step(acc_S, row_scale, is_first=is_first)


@cute.jit
def _load_state(softmax, corr: cute.Tensor, state: cute.Tensor):
    """The softmax state another warpgroup published (`FlashFwdSm90._publish`): row max and
    partial row sum into ``softmax``, O's factor for that block into ``corr``."""
    for r in cutlass.range_constexpr(2):
        softmax.row_max[r] = state[r]
        softmax.row_sum[r] = state[2 + r]
        corr[r] = state[4 + r]


@cute.jit
def _sum_d_halves(acc_S: cute.Tensor, acc_T: cute.Tensor, scale_lo: cute.Tensor, scale_hi: cute.Tensor):
    """S = S * scale_lo[row] + T * scale_hi[row] (the two d halves' QK^T with their e4m3 Q row
    scales; powers of two, so only the sum rounds, as in the split-d exchange)."""
    n = cute.size(acc_S)
    s = cute.make_tensor(acc_S.iterator, cute.make_layout(n))  # register order
    t = cute.make_tensor(acc_T.iterator, cute.make_layout(n))
    for i in cutlass.range_constexpr(n):
        s[i] = s[i] * scale_lo[(i >> 1) & 1] + t[i] * scale_hi[(i >> 1) & 1]


@cute.jit
def _row_pair_sums(acc_S: cute.Tensor) -> cute.Tensor:
    """The sum of the thread's two rows r, r + 8 (register pairs alternate between them, as in
    `_scale_s_rows`), as (4, n / 8) vectors for the exchange tile."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))
    pair = cute.make_rmem_tensor((4, n // 8), Float32)
    pair_regs = cute.make_tensor(pair.iterator, cute.make_layout(n // 2))
    for j in cutlass.range_constexpr(n // 4):
        for e in cutlass.range_constexpr(2):
            pair_regs[2 * j + e] = regs[4 * j + e] + regs[4 * j + 2 + e]
    return pair


@cute.jit
def _sum_row_pairs(acc_S: cute.Tensor, sX: cute.Tensor, lane):
    """S of the thread's rows (both get it) = the row-pair sums of lane ``lane`` of the four
    warps in X[0], then in X[1], added in that order (`Sm90FwdConfig.qk_rows`)."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))
    total = cute.make_rmem_tensor((4, n // 8), Float32)
    total_regs = cute.make_tensor(total.iterator, cute.make_layout(n // 2))
    part = cute.make_rmem_tensor((4, n // 8), Float32)
    part_regs = cute.make_tensor(part.iterator, cute.make_layout(n // 2))
    for h in cutlass.range_constexpr(2):
        for w in cutlass.range_constexpr(4):
            src = cute.local_tile(sX[None, lane + 32 * w, None, h], (4, n // 8), (0, 0))
            if const_expr(h == 0 and w == 0):
                cute.autovec_copy(src, total)
            else:
                cute.autovec_copy(src, part)
                for c in cutlass.range_constexpr(n // 2):
                    total_regs[c] = total_regs[c] + part_regs[c]
    for j in cutlass.range_constexpr(n // 4):
        for e in cutlass.range_constexpr(2):
            regs[4 * j + e] = total_regs[2 * j + e]
            regs[4 * j + 2 + e] = total_regs[2 * j + e]


@cute.jit
def _scale_s_rows(acc_S: cute.Tensor, scale: cute.Tensor):
    """S *= the e4m3 Q row scale of each of the thread's two rows (registers alternate between
    rows r and r + 8 in pairs: wgmma's accumulator layout)."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))  # register order
    for i in cutlass.range_constexpr(n):
        regs[i] = regs[i] * scale[(i >> 1) & 1]


__all__ = ["FlashFwdSm90"]

