"""SM90 (Hopper) warp-specialised attention forward for head_dim 512: host setup and kernel entry.

Features: packed varlen or paged K/V (TMA, page_size a multiple of tile_n), varlen queries,
GQA packing of a kv head's query heads into the M tile, causal / local (bottom-right) masks with
only boundary blocks masked, lse output, per-(batch, kv head) descales, split-KV fp32 partials;
16-bit KV, e4m3 KV dequantised to f16, or e4m3 KV on FP8 wgmma. This module holds the host side
(smem layouts, TMA atoms, SharedStorage, grid, launch) and the `@cute.kernel` entry (pipelines,
roles, register rebalance); the roles live in their own modules (see `FlashFwdSm90`). See
docs/sm90_kernel.md for the design.
"""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float32, Int32, Int64, const_expr, pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from . import pipeline_checks
from .config import CVT_F16_STAGES, HEAD_DIM, SMEM_LIMIT, Sm90FwdConfig
from .consumer_alternate import BAR_P_FREE, BAR_P_FULL, AlternateConsumer
from .consumer_base import BAR_S_READY, BAR_X_FREE, DTYPES, ConsumerArgs, make_warpgroup_mma
from .consumer_decode import DecodeConsumer
from .consumer_decode_alt import BAR_DECODE_MERGE, BAR_DECODE_MERGE_WRITTEN, DecodeAltConsumer
from .consumer_split_d import SplitDConsumer
from .converter import DequantConverter
from .diagnostics import Tracer
from .epilogue import Epilogue
from .fused_combine import BAR_MERGE, MERGE_THREADS, FusedCombine
from .mma_paths import BAR_Q_READY, BAR_WG_LOCAL, CVT_THREADS, make_mma_path
from .paged_kv import kv_tma_view, vt_scratch_tma_view
from .producer import TmaProducer
from .softmax import LOG2_E
from .tile_scheduler import SingleTileScheduler

_CONSUMERS = {"split_d": SplitDConsumer, "alternate": AlternateConsumer, "decode": DecodeConsumer,
              "decode_alt": DecodeAltConsumer}


class FlashFwdSm90:
    """d512 attention forward, one 64-row query tile per CTA, 3 warpgroups (384 threads).

    Roles (`kernel`; which tile: `tile_scheduler.SingleTileScheduler`)
    ------------------------------------------------------------------
    WG0, warp 0 : producer (`producer.TmaProducer`). TMA for Q (once) and the K/V blocks into
                  smem rings; `setmaxnreg` down to ``cfg.producer_regs`` (40; 24 in fp8_mma's
                  long-context and alternating variants; 72 with the converter warps).
    WG0, warps 1-3 : rebalance registers and exit, except in the dequant control (fp8_dequant):
                  they convert each e4m3 K/V block into the f16 rings the consumers MMA from
                  (`converter.DequantConverter`).
    WG1, WG2    : consumers, `setmaxnreg` up to ``cfg.consumer_regs`` (232; 240 / 216 as
                  above). WG w owns output columns d[256w, 256w+256): acc_O is 64 x 256 fp32 =
                  128 registers per thread (decode at tile_n=64: O^T 256 x 8 = 16). One module
                  per ``cfg.layout``: `consumer_split_d.SplitDConsumer` (each warpgroup's QK^T
                  over its d half, the partial S summed through smem), `consumer_alternate.
                  AlternateConsumer` (fp8_mma prefill: the warpgroups take the key blocks in
                  turn, P handed over through smem), `consumer_decode.DecodeConsumer` (fp8_mma
                  decode tiles: a k-step of QK^T per spare M row, P.V as O^T = V^T P^T); shared
                  pieces in `consumer_base`, the stores in `epilogue.Epilogue`.
    (40 + 2 x 232) x 128 = 64512 = the CTA's register pool (168 launch registers x 384 threads);
    a larger total makes the consumers' setmaxnreg.inc wait forever.

    Pipelines (producer -> consumer, stages, arrivals; rechecked by `pipeline_checks`)
    -------------------------------------------------------------------------------
    Q : TMA warp -> 8 consumer warps, 1 stage, tx = 64 x 512 x q-dtype bytes (one tile per CTA);
        released after the last P.V.
    K : TMA warp -> 8 consumer warps, ``kv_stages``, tx = tile_n x 512 x kv-dtype bytes;
        released after QK (alternate: by the 4 warps of the block's owner).
    V : TMA warp -> 8 consumer warps, ``kv_stages``, same tx; released after P.V (fp8_mma:
        after the transpose or the V^T register load; alternate: V^T boxes of the prepass).
    fp8_dequant: K/V TMA -> 3 converter warps (``kv_stages`` = 1 staging stage each), then
        converter threads (96) -> consumer threads (256), `CVT_F16_STAGES` f16 stages each.
    Producer order: Q, K[hi], then per step K[n], V[n+1], finally V[lo] (blocks high -> low).
    Every role derives the block range from `TileMask.block_range` with the same inputs.

    Named barriers: S_READY (1) and X_FREE[w] (2 + w): the split-d S exchange
    (`consumer_base`); WG_LOCAL[w] (4 + w): one warpgroup's hand-off around a Q conversion, a V
    transpose or the decode P^T; Q_READY (6): both e4m3 Q halves written (alternate);
    P_FULL[w] (9 + w), P_FREE[w] (11 + w): the alternating hand-off (`consumer_alternate`).

    Per-role timeline: producer as above; converter warps: staging stage -> f16 stage per block
    in the producer's order; consumers: the layout module's docstring (split-d: QK(n) under
    PV(n+1), S exchange and softmax between them).

    Diagnostics: ``cfg.stage`` cuts the kernel here, at its entry: "launch" returns at once,
    "setup" after mbarrier init, the CTA barrier and setmaxnreg, before any role runs;
    ``cfg.trace`` records per-role progress of CTA (0, 0, 0) (`diagnostics.Tracer`). See
    profiles/gpu_mma16_smoke.py --diag.

    Shared memory (`Sm90FwdConfig.smem_plan`; limit 232448 B with the 1 KB static section)
    ---------------------------------------------------------------------------------------
    16-bit, tile_n=64, 1 stage: Q 64 KB + K 64 KB + V 64 KB + X 2 x 16 KB = 224 KB (231424 B).
    Dequant (tile_n=32): Q 64 + f16 K 2 x 32 (and X) + f16 V 2 x 32 + e4m3 staging 2 x 16 KB.
    fp8_mma (tile_n=64, 2 stages): Q 64 (q dtype; its halves reused for X, V^T, P^T or the P
    slots) + e4m3 Q 32 + K 2 x 32 + V 2 x 32 KB + Q scales.
    """

    num_threads = 384
    num_consumer_wgs = 2

    def __init__(self, config: Sm90FwdConfig):
        ok, why = config.can_implement()
        if not ok:
            raise ValueError(f"fa512: Sm90FwdConfig cannot be built: {why}")
        self.cfg = config
        self.path = make_mma_path(config.mma_path, config.q_dtype, config.tile_n,
                                  config.layout not in ("alternate", "decode_alt"),
                                  qk_rows=config.layout == "decode", k_step_scales=config.layout == "decode_alt")
        self.dtype = self.path.mma_dtype  # MMA operand dtype (f16 for the dequant path)
        self.q_dtype = DTYPES[config.q_dtype]  # Q as it arrives (TMA'd as is)
        self.tile_m = config.tile_m
        self.q_rows = config.q_tile_rows  # rows of the Q tile in smem and of its TMA box
        self.tile_n = config.tile_n
        self.head_dim = HEAD_DIM
        self.half_d = HEAD_DIM // 2
        self.stages = config.kv_stages
        self.group = config.qhead_per_kvhead
        self.paged = config.is_paged
        self.fp8_mma = config.mma_path == "fp8_mma"
        self.cvt_warps = config.cvt_warps  # fp8_dequant: converter warps fill f16 rings
        # warps that release each K (and, decode_alt, each V) stage: the block's warpgroup only
        self.k_reader_warps = 4 if config.layout in ("alternate", "decode_alt") else 8
        self.v_reader_warps = 4 if config.layout == "decode_alt" else 8
        pipeline_checks.check_register_split(
            config.producer_regs, config.consumer_regs, self.num_consumer_wgs, self.num_threads
        )
        pipeline_checks.check_named_barriers(
            {"S_READY": BAR_S_READY, "X_FREE0": BAR_X_FREE, "X_FREE1": BAR_X_FREE + 1,
             "WG_LOCAL0": BAR_WG_LOCAL, "WG_LOCAL1": BAR_WG_LOCAL + 1, "Q_READY": BAR_Q_READY,
             "P_FULL0": BAR_P_FULL, "P_FULL1": BAR_P_FULL + 1, "P_FREE0": BAR_P_FREE, "P_FREE1": BAR_P_FREE + 1,
             "MERGE": BAR_MERGE, "DECODE_MERGE": BAR_DECODE_MERGE,
             "DECODE_MERGE_WRITTEN": BAR_DECODE_MERGE_WRITTEN},
            {"S_READY": 256, "X_FREE": 256, "WG_LOCAL": 128, "Q_READY": 256, "P_FULL": 256, "P_FREE": 256,
             "MERGE": MERGE_THREADS, "DECODE_MERGE": 256,
             "DECODE_MERGE_WRITTEN": 256},
        )
        pipeline_checks.check_smem(config.smem_bytes(), SMEM_LIMIT)
        # the roles
        self.tracer = Tracer(config.trace, config.timeline)
        self.scheduler = SingleTileScheduler(config.mask, self.tile_m, self.tile_n, self.group, config.split)
        self.producer = TmaProducer(config, self.tracer)
        self.converter = DequantConverter(config, self.path) if self.cvt_warps else None
        self.consumer = _CONSUMERS[config.layout](config, self.path, Epilogue(config), self.tracer)
        self.fused = FusedCombine(self.tile_m, self.group, self.q_dtype, self.tracer) if config.fused_combine else None

    # ------------------------------------------------------------------------------------
    # host side
    # ------------------------------------------------------------------------------------
    def _smem_layouts(self):
        """(sQ MMA operand, sQ as loaded (q dtype), sKV operand stages, sStage e4m3 staging or
        None, sVt fp8_mma transposed V of one warpgroup or None); K-major; 128 B swizzle except
        sVt, whose rows are tile_n bytes (64 B or 32 B swizzle). With ``vt_prepass`` sVt is the
        V ring itself: (256, tile_n, 2 x stages), d half h of stage s at slab h * stages + s."""
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, self.dtype)
        sQ = cute.tile_to_shape(atom, (self.q_rows, self.head_dim), order=(0, 1))
        atom_q = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, self.q_dtype)
        sQ_in = cute.tile_to_shape(atom_q, (self.q_rows, self.head_dim), order=(0, 1))
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
        return (make_warpgroup_mma(self.dtype, self.tile_m, self.tile_n),
                make_warpgroup_mma(self.dtype, self.tile_m, self.half_d, a_in_regs=True, b_major=v_major))

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
        trace_addr: Int64,  # cfg.trace: host-mapped int32[TRACE_BUFFER_WORDS]; cfg.timeline: device int32[TIMELINE_WORDS + CTA_RECORD_WORDS]; else 0
        mOut: Optional[cute.Tensor],  # fused_combine: (total_q, Hq, 512) q dtype, the merged output
        mLSEOut: Optional[cute.Tensor],  # fused_combine: (Hq, total_q) fp32
        mCounters: Optional[cute.Tensor],  # fused_combine: zeroed int32 (>= 2 x tiles,): arrivals, departures
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
            tma_op, q_rows, sQ_in_layout, ((self.group, self.q_rows // self.group), self.head_dim)
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
            tx_bytes=self.q_bytes, boxes_bytes=self.q_rows * self.head_dim * self.q_dtype.width // 8,
        )
        kv_consumer_warps = CVT_THREADS // 32 if const_expr(self.cvt_warps) else 8  # converter or consumer warps
        pipeline_checks.check_tma_pipeline(
            "K/V", producer_arrives=1, consumer_warps=kv_consumer_warps, consumer_arrives=kv_consumer_warps,
            tx_bytes=self.kv_bytes, boxes_bytes=self.path.kv_tile_bytes(self.tile_n, self.head_dim),
        )
        if const_expr(self.k_reader_warps == 4):  # a K block is read by the warpgroup whose turn it is
            pipeline_checks.check_tma_pipeline(
                "K", producer_arrives=1, consumer_warps=4, consumer_arrives=self.k_reader_warps,
                tx_bytes=self.kv_bytes, boxes_bytes=self.path.kv_tile_bytes(self.tile_n, self.head_dim),
            )
        if const_expr(self.v_reader_warps == 4):  # decode_alt: so is its V block
            pipeline_checks.check_tma_pipeline(
                "V", producer_arrives=1, consumer_warps=4, consumer_arrives=self.v_reader_warps,
                tx_bytes=self.kv_bytes, boxes_bytes=self.path.kv_tile_bytes(self.tile_n, self.head_dim),
            )

        # -- output views -------------------------------------------------------------------
        if const_expr(self.cfg.split):
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
        if const_expr(not self.path.needs_staging and not self.fp8_mma):
            fields["sX"] = Align[MemRange[Float32, 2 * self.tile_m * self.tile_n], 1024]
        if const_expr(sStage_layout is not None):
            fields["sKs"] = Align[MemRange[self.path.kv_gmem_dtype, cute.cosize(sStage_layout)], 1024]
            fields["sVs"] = Align[MemRange[self.path.kv_gmem_dtype, cute.cosize(sStage_layout)], 1024]
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage
        self.smem_struct_bytes = SharedStorage.size_in_bytes()  # read by the compile checker

        # -- grid: (m blocks, tile heads x splits, batch); m blocks launched heaviest first -----
        grid = self.scheduler.grid(max_seqlen_q, mQ.shape[1] // self.group, num_splits, mCuSeqlensQ.shape[0] - 1)
        scale_log2 = softmax_scale * Float32(LOG2_E)

        # fused_combine: the raw partials for the merge (the combine kernel's indexing)
        mOPart, mLSEPart = (mO, mLSE) if const_expr(self.cfg.fused_combine) else (None, None)

        self.kernel(
            tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v,
            mO_rows, mLSE_rows, mCuSeqlensQ, mCuSeqlensK, mSeqUsedK, mPageTable,
            mQDescale, mKDescale, mVDescale,
            scale_log2, window_left, window_right, num_splits, mQ.shape[1] // mK.shape[-2], trace_addr,
            mOPart, mLSEPart, mOut, mLSEOut, mCounters,
            sQ_layout, sQ_in_layout, sKV_layout, sStage_layout, sVt_layout, tiled_mma_qk, tiled_mma_pv,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], stream=stream, min_blocks_per_mp=1,
                 cooperative=self.cfg.fused_combine, use_pdl=not self.cfg.fused_combine)

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
        mOPart: Optional[cute.Tensor],
        mLSEPart: Optional[cute.Tensor],
        mOut: Optional[cute.Tensor],
        mLSEOut: Optional[cute.Tensor],
        mCounters: Optional[cute.Tensor],
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
        if const_expr(self.cfg.split):
            # Programmatic dependent launch: the split combine (launched with use_pdl) may be
            # scheduled from now on; it waits for this whole grid before it reads a partial.
            cute.arch.griddepcontrol_launch_dependents()

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
        v_readers = kv_readers
        if const_expr(self.k_reader_warps == 4):
            k_readers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.k_reader_warps)
        if const_expr(self.v_reader_warps == 4):
            v_readers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.v_reader_warps)
        pipe_k = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages, producer_group=tma_group,
            consumer_group=k_readers, tx_count=self.kv_bytes, defer_sync=True,
        )
        pipe_v = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages, producer_group=tma_group,
            consumer_group=v_readers, tx_count=self.kv_bytes, defer_sync=True,
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
        # Programmatic dependent launch (the forward is launched with use_pdl): up to here only
        # this CTA's shared memory and the kernel parameters were touched, which may overlap the
        # previous kernel's tail; no global memory is read before that grid has completed.
        cute.arch.griddepcontrol_wait()
        self.tracer.event(warp_idx, "mbarriers initialised, CTA barrier passed", Int32(0), Int32(0))

        # Roles first, tile facts after: values computed before setmaxnreg would stay live
        # across the producer's drop to 24 registers and spill (seen with the local mask).
        # Stage "setup" stops after setmaxnreg, before any role runs.
        if wg_idx == 0:
            # ======== producer warpgroup: TMA warp (and the dequant control's converter warps) ========
            cute.arch.setmaxregister_decrease(self.cfg.producer_regs)
            self.tracer.event(warp_idx, "producer setmaxnreg.dec done", Int32(0), Int32(0))
            if const_expr(self.cfg.stage == "full"):
                if warp_idx == 0:
                    t = self.scheduler.tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left,
                                            window_right)
                    if t.valid:
                        k_start = Int32(0)
                        page_row = None
                        if const_expr(self.paged):
                            page_row = mPageTable[t.batch, None]
                        else:
                            k_start = mCuSeqlensK[t.batch]
                        self.producer.produce(
                            tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v, sQ_in, sK_tma, sV_tma,
                            pipe_q, pipe_k, pipe_v, t.q_start, t.m_block, t.tile_head, t.kv_head, k_start,
                            page_row, t.n_min, t.n_max, t.batch,
                        )
                if const_expr(self.cvt_warps):
                    if warp_idx > 0:
                        tc = self.scheduler.tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left,
                                                 window_right)
                        if tc.valid:
                            self.converter.convert_kv(storage, pipe_k, pipe_v, pipe_kf, pipe_vf, tidx - 32,
                                                      tc.mask.seqlen_k, tc.n_min, tc.n_max)
        else:
            # ======== consumer warpgroups ========
            cute.arch.setmaxregister_increase(self.cfg.consumer_regs)
            self.tracer.event(warp_idx, "consumer setmaxnreg.inc done", Int32(0), Int32(0))
            if const_expr(self.cfg.stage == "full"):
                t = self.scheduler.tile(mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left,
                                        window_right)
                self.tracer.event(warp_idx, "consumer tile: n_min, n_max", t.n_min, t.n_max)
                if t.valid:
                    args = ConsumerArgs(
                        storage, sQ, sQ_in, sK, sV, sK_tma, sV_tma, sVt_layout, pipe_q, pipe_kf, pipe_vf,
                        tiled_mma_qk, tiled_mma_pv, mO_rows, mLSE_rows, mQDescale, mKDescale, mVDescale, scale_log2,
                        mCuSeqlensQ,
                    )
                    self.consumer.consume(wg_idx - 1, tidx % 128, args, t)
                    if const_expr(self.cfg.fused_combine):  # the K ring is dead: the merge's scratch
                        self.fused.run(cute.recast_ptr(storage.sK.data_ptr(), dtype=Float32), t, mOPart, mLSEPart,
                                       mOut, mLSEOut, mCounters, num_splits, tidx - 128, warp_idx - 4)
                self.tracer.event(warp_idx, "consumer done", Int32(0), Int32(0))
        self.tracer.exit()


__all__ = ["FlashFwdSm90"]
