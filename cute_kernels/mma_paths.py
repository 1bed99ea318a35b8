"""How K/V reach the 16-bit warpgroup MMA: the strategy objects of the SM90 forward.

The kernel's pipeline (producer TMA -> K/V smem stages -> consumer warpgroups) is the same for
every path; a path decides the smem dtype of the MMA operands, where the producer's TMA writes,
and what a consumer warpgroup does between "stage full" and "issue the MMA":

- `Mma16Path` (bf16 / f16 KV): TMA writes straight into the MMA operand stages; the consumer
  MMAs the stage it waited on and releases it after the MMA completed. In the block that holds
  a sequence's last key, each warpgroup first zeroes its d half of the V rows past seqused_k
  (`zero_half_tile_rows`): the TMA box reads whatever the cache holds there, and P = 0 times a
  NaN or Inf slot is NaN (the 16-bit paths returned NaN rows on such caches until 2026-12-01;
  the masks already set those logits to -inf, so K needs nothing).
- `DequantFp8Path` (e4m3 KV -> f16): TMA writes e4m3 tiles into staging stages; the producer
  warpgroup's converter warps (`cute_kernels.converter`) convert each block, both d halves,
  into a two-stage f16 ring (`convert_block`), and the consumers MMA its stages and release
  them, as for 16-bit KV. V rows past seqused_k are written as zeros, so a NaN bit pattern in
  an unused cache slot cannot reach O through 0 x NaN. A bf16 Q is narrowed to f16 in place
  by the consumers (each warpgroup its half, `_convert_half_tile`).

- `Fp8MmaPath` (e4m3 KV, FP8 wgmma): K is MMA'd in its TMA stage (e4m3, K-major as QGMMA
  wants); each warpgroup quantises its Q half to e4m3 once and transposes each V stage's half
  into its Vt buffer (keys in P's register order), releasing the stage at once. See
  `fp8_operands`. (Decode tiles at tile_n=64 load V^T from the stage into registers instead,
  `cute_kernels.consumer_decode`; the alternating layout's V^T arrives by TMA.)

Every method is called by one consumer warpgroup (128 threads, ``tidx_wg`` in 0..127) on its own
(rows, 256) half tiles. ``prepare_k`` / ``prepare_v`` return the index of the operand buffer
the MMA reads; ``finish_k`` / ``finish_v`` run once that MMA completed.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float16, Float8E4M3FN, Int32, const_expr

from .config import CVT_F16_STAGES, HEAD_DIM
from .dsl_utils import sw128_unit
from .fp8_operands import quantize_q_half, transpose_v_half

BAR_WG_LOCAL = 4  # + wg: 128-thread barrier of one consumer warpgroup (conversion hand-off)
# both consumer WGs: the e4m3 Q tile is complete (fp8_mma layout "alternate", once per tile:
# each warpgroup's QK^T reads both d halves)
BAR_Q_READY = 6
_DTYPES = {"bf16": BFloat16, "f16": Float16}


@dataclass(frozen=True)
class Mma16Path:
    """bf16 or f16 K/V, MMA'd where the TMA put them; ``sDst_w`` of `prepare_v` is the V ring as
    16-byte units (`unit_view`), where the rows past seqused_k of a tail block are zeroed."""

    dtype_name: str  # "bf16" | "f16" (== q dtype)
    tile_n: int

    @property
    def mma_dtype(self):
        return _DTYPES[self.dtype_name]

    @property
    def kv_gmem_dtype(self):
        return self.mma_dtype

    @property
    def needs_staging(self) -> bool:
        return False

    def mma_stages(self, kv_stages: int) -> int:
        return kv_stages

    def kv_tile_bytes(self, tile_n: int, head_dim: int) -> int:
        """Bytes one K (or V) block's TMA boxes write (the pipeline tx_count)."""
        return tile_n * head_dim * 2

    @cute.jit
    def prepare_q(self, sQ_in_w: cute.Tensor, sQ_mma_w: cute.Tensor, sScale_w, tidx_wg: Int32, wg: Int32):
        pass

    @cute.jit
    def prepare_k(self, handle, sSrc_w: cute.Tensor, sDst_w: cute.Tensor, tidx_wg: Int32, wg: Int32, rows_valid):
        """Return the operand stage the MMA reads: the TMA stage itself."""
        return handle.index

    @cute.jit
    def prepare_v(self, handle, sSrc_w: cute.Tensor, sDst_w: cute.Tensor, tidx_wg: Int32, wg: Int32, rows_valid):
        """The stage the TMA filled; in a tail block (``rows_valid`` < tile_n, CTA-uniform) this
        warpgroup's d half of its rows past seqused_k zeroed first, fenced for the wgmma and
        published to the warpgroup (only this warpgroup's P.V reads that half)."""
        if rows_valid < self.tile_n:
            zero_half_tile_rows(sDst_w, handle.index * (self.tile_n * HEAD_DIM * 2 // 16), self.tile_n, wg, tidx_wg,
                                rows_valid)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        return handle.index

    @cute.jit
    def finish_k(self, handle):
        """Called once the MMA reading the stage completed: hand it back to the producer."""
        handle.release()

    @cute.jit
    def finish_v(self, handle):
        handle.release()


@dataclass(frozen=True)
class DequantFp8Path:
    """e4m3 K/V converted in-kernel to f16 (SM90 converts e4m3x2 -> f16x2 in one instruction).

    The producer warpgroup's converter warps (`Sm90FwdConfig.cvt_warps`) fill a two-stage f16
    ring (`convert_block`); the consumers' prepare/finish only name and release its stages, as
    for 16-bit KV. Q's buffers are passed as 16-byte unit views (`unit_view`): ``sQ_in_w`` /
    ``sQ_mma_w`` the Q tile as loaded and as f16.
    """

    q_dtype_name: str  # "bf16" | "f16"
    tile_n: int

    @property
    def mma_dtype(self):
        return Float16

    @property
    def kv_gmem_dtype(self):
        return Float8E4M3FN

    @property
    def needs_staging(self) -> bool:
        return True

    def mma_stages(self, kv_stages: int) -> int:
        # the converter warps' f16 ring (the e4m3 staging ring holds kv_stages)
        return CVT_F16_STAGES

    def kv_tile_bytes(self, tile_n: int, head_dim: int) -> int:
        return tile_n * head_dim

    @cute.jit
    def prepare_q(self, sQ_in_w: cute.Tensor, sQ_mma_w: cute.Tensor, sScale_w, tidx_wg: Int32, wg: Int32):
        """bf16 Q: narrow this warpgroup's half to f16 in place (same bytes, same swizzle)."""
        if const_expr(self.q_dtype_name == "bf16"):
            _convert_half_tile(sQ_in_w, 0, sQ_mma_w, 64, wg, tidx_wg, None)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)

    @cute.jit
    def prepare_k(self, handle, sSrc_w: cute.Tensor, sDst_w: cute.Tensor, tidx_wg: Int32, wg: Int32, rows_valid):
        """The f16 stage the converter warps filled."""
        return handle.index

    @cute.jit
    def prepare_v(self, handle, sSrc_w: cute.Tensor, sDst_w: cute.Tensor, tidx_wg: Int32, wg: Int32, rows_valid):
        return handle.index

    @cute.jit
    def finish_k(self, handle):
        handle.release()

    @cute.jit
    def finish_v(self, handle):
        handle.release()

    @cute.jit
    def convert_block(self, src: cute.Tensor, src_base, dst: cute.Tensor, dst_base, cvt_tidx: Int32, rows_valid):
        """Converter warps (`Sm90FwdConfig.cvt_warps`): one staged e4m3 block, both d halves,
        into an f16 stage. The work is the consumer warpgroups' two half-tile conversions (256
        thread slots, `convert_slot`) dealt out to the CVT_THREADS threads in warp-sized runs,
        so each warp keeps the conflict-free access pattern of a consumer warp."""
        # Thread t takes slots t and t + 96 together (all their loads ahead of the stores: three
        # warps hide little latency otherwise), then t + 192 for t < 64 (warps 0 and 1).
        a, b = cvt_tidx, cvt_tidx + CVT_THREADS
        _convert_jobs(src, src_base, dst, self.tile_n, ((a // 128, a % 128), (b // 128, b % 128)), rows_valid,
                      dst_base, self.tile_n // 8)
        c = cvt_tidx + 2 * CVT_THREADS
        if c < 2 * 128:
            _convert_jobs(src, src_base, dst, self.tile_n, ((c // 128, c % 128),), rows_valid, dst_base,
                          self.tile_n // 8)


CVT_THREADS = 96  # converter warps 1-3 of the producer warpgroup


def unit_view(ptr, nbytes: int, dtype) -> cute.Tensor:
    """A shared buffer as (16-byte units, values per unit) of ``dtype``, unswizzled: the
    conversion computes swizzled unit indices itself (`_convert_half_tile`)."""
    per_unit = 128 // dtype.width
    return cute.make_tensor(cute.recast_ptr(ptr, dtype=dtype), cute.make_layout((nbytes // 16, per_unit), stride=(per_unit, 1)))


@dataclass(frozen=True)
class Fp8MmaPath:
    """e4m3 K/V on FP8 wgmma: Q quantised per row in-kernel, V transposed per block."""

    q_dtype_name: str  # "bf16" | "f16"
    tile_n: int
    shared_q: bool = False  # layout "alternate": each warpgroup's QK^T reads the whole e4m3 Q tile
    qk_rows: bool = False  # layout "decode": one 32-d chunk of a query row per M row
    k_step_scales: bool = False  # layout "decode_alt": query rows in place, a scale per 32-d chunk

    @property
    def mma_dtype(self):
        return Float8E4M3FN

    @property
    def kv_gmem_dtype(self):
        return Float8E4M3FN

    @property
    def needs_staging(self) -> bool:
        return False  # K is MMA'd in its TMA stage; V's stage is the transpose's source

    def mma_stages(self, kv_stages: int) -> int:
        return kv_stages

    def kv_tile_bytes(self, tile_n: int, head_dim: int) -> int:
        return tile_n * head_dim

    @cute.jit
    def prepare_q(self, sQ_in_w: cute.Tensor, sQ_mma_w: cute.Tensor, sScale_w, tidx_wg: Int32, wg: Int32,
                  sQlo_words=None):
        """Quantise this warpgroup's Q half to e4m3 (row scales to sScale_w) and make it visible
        to the wgmma (async proxy) and its scales to the threads that read them: this
        warpgroup's, or both warpgroups' when each computes QK^T over all of d (``shared_q``).
        ``sQlo_words``: the decode tile's compact Q_lo as well (`Sm90FwdConfig.two_term`)."""
        quantize_q_half(sQ_in_w, sQ_mma_w, sScale_w, tidx_wg, self.qk_rows, sQlo_words, self.k_step_scales)
        cute.arch.fence_view_async_shared()
        if const_expr(self.shared_q):
            cute.arch.barrier(barrier_id=BAR_Q_READY, number_of_threads=256)
        else:
            cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)

    @cute.jit
    def prepare_k(self, handle, sSrc_w: cute.Tensor, sDst_w: cute.Tensor, tidx_wg: Int32, wg: Int32, rows_valid):
        return handle.index

    @cute.jit
    def prepare_v(self, handle, sSrc_w, sDst_w, tidx_wg: Int32, wg: Int32, rows_valid):
        """Transpose the stage's V half into the warpgroup's Vt buffer and free the stage.

        ``sSrc_w``: the V ring as 16-byte chunks (`fp8_operands.transpose_v_half`);
        ``sDst_w``: (Vt words, first word of this warpgroup's Vt).
        """
        vt_words, vt_base = sDst_w
        _rewrite_from_stage(handle, wg, lambda: transpose_v_half(
            sSrc_w, handle.index, vt_words, vt_base, wg, tidx_wg, rows_valid, self.tile_n))
        return 0

    @cute.jit
    def finish_k(self, handle):
        handle.release()

    @cute.jit
    def finish_v(self, handle):
        pass  # released by prepare_v, right after the transpose


def _rewrite_from_stage(handle, wg, write) -> None:
    """One consumer warpgroup rewrites its operand buffer from a TMA stage (``write()``), then
    frees the stage. The first barrier orders the warpgroup's previous wgmma reads of the buffer
    (each warp waited on its own) before any warp overwrites it; the fence and the second barrier
    make every warp's generic-proxy writes visible to the warpgroup's async wgmma."""
    cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
    write()
    handle.release()
    cute.arch.fence_view_async_shared()
    cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)


CONVERT_BATCH = 2  # 16-byte loads `_convert_half_tile` issues before their stores


def convert_slot(tidx_wg, i):
    """(row, 16-column chunk) that thread ``tidx_wg`` of a warpgroup converts in step ``i`` of
    `_convert_half_tile` (Python or DSL ints; tests/test_cute_compile.py checks the banks)."""
    return tidx_wg % 8 + 8 * i, tidx_wg // 8


@cute.jit
def _convert_half_tile(src: cute.Tensor, src_base, dst: cute.Tensor, rows: cutlass.Constexpr[int], wg,
                       tidx_wg: Int32, rows_valid, dst_base=0, batch: cutlass.Constexpr[int] = CONVERT_BATCH):
    """Warpgroup wg's d half of a (rows, 512) K-major, 128 B-swizzled tile: dst f16 <- src
    (e4m3 or bf16). ``src``, ``dst``: 16-byte unit views (`unit_view`); the source tile starts
    at unit ``src_base`` (its staging stage), the destination at ``dst_base``.

    Thread t converts 16 consecutive columns (chunk t // 8) of rows t % 8 + 8 i: 16-byte e4m3
    loads / 2 x 16-byte f16 stores that stay contiguous under the 128 B swizzle. A 16-byte shared
    access is served 8 threads (128 B) at a time; those 8 threads hold the same chunk of 8
    consecutive rows, which the swizzle (16-byte column XOR row % 8) spreads over all 32 banks,
    so loads and stores are conflict-free. (Eight neighbouring chunks of two rows, the first
    mapping, put pairs of threads on the same banks: ncu on the H200 counted 2-way conflicts on
    every f16 store, 41% of the kernel's store wavefronts, 2026-11-29.) Rows >= rows_valid
    (when given) are written as zeros.

    A thread's rows keep row % 8, so each of its units moves by 8 rows x 8 units per step: the
    unit indices are computed once (`sw128_unit`) and stepped by a constant. (Through the
    swizzled CuTe views the compiler recomputed the swizzle for every access: 4 integer
    instructions per 16-byte access, ~15% of the dequant kernel's instructions, ncu 2026-11-29.)
    """
    _convert_jobs(src, src_base, dst, rows, ((wg, tidx_wg),), rows_valid, dst_base, batch)


@cute.jit
def _convert_jobs(src: cute.Tensor, src_base, dst: cute.Tensor, rows: cutlass.Constexpr[int], jobs,
                  rows_valid, dst_base, batch: cutlass.Constexpr[int]):
    """`_convert_half_tile` for one or more (wg, tidx_wg) thread slots at once (the converter
    warps run two): each batch issues its loads for every slot before any store."""
    src_vals = cute.size(src, mode=[1])  # values per 16-byte unit: 16 (e4m3) or 8 (bf16)
    row0s, src_units, dst_units = [], [], []
    for wg, tidx_wg in jobs:
        row0, chunk = convert_slot(tidx_wg, 0)
        row0s.append(row0)
        if const_expr(src_vals == 16):
            src_units.append([src_base + sw128_unit(row0, 16 * wg + chunk, rows)])
        else:
            src_units.append([src_base + sw128_unit(row0, 32 * wg + 2 * chunk + j, rows) for j in range(2)])
        dst_units.append([dst_base + sw128_unit(row0, 32 * wg + 2 * chunk + j, rows) for j in range(2)])
    step = 8 * 8  # units per 8 rows
    # Loads in batches ahead of their stores: the compiler cannot tell src from dst, so a load
    # placed after a store waits for it (a shared-memory round trip per step). In the consumers
    # 4 at once spilled the variants with Q in registers (CONVERT_BATCH = 2).
    for b in cutlass.range_constexpr(0, rows // 8, batch):
        r_in = [[cute.make_rmem_tensor(16, src.element_type) for _ in range(batch)] for _ in jobs]
        for q in cutlass.range_constexpr(len(jobs)):
            for j in cutlass.range_constexpr(batch):
                for u in cutlass.range_constexpr(len(src_units[q])):
                    part = cute.make_tensor(r_in[q][j].iterator + src_vals * u, cute.make_layout(src_vals))
                    cute.autovec_copy(src[src_units[q][u] + step * (b + j), None], part)
        for q in cutlass.range_constexpr(len(jobs)):
            for j in cutlass.range_constexpr(batch):
                r_out = cute.make_rmem_tensor(16, Float16)
                r_out.store(r_in[q][j].load().to(Float16))
                if const_expr(rows_valid is not None):
                    if row0s[q] + 8 * (b + j) >= rows_valid:
                        r_out.fill(0.0)
                for u in cutlass.range_constexpr(2):
                    part = cute.make_tensor(r_out.iterator + 8 * u, cute.make_layout(8))
                    cute.autovec_copy(part, dst[dst_units[q][u] + step * (b + j), None])


@cute.jit
def zero_half_tile_rows(dst: cute.Tensor, dst_base, rows: cutlass.Constexpr[int], wg, tidx_wg: Int32, rows_valid):
    """Zero rows >= rows_valid of warpgroup wg's d half of a (rows, 512) K-major, 128 B-swizzled
    16-bit tile (``dst``: 16-byte unit view, the tile from unit ``dst_base``). The threads take
    the slots of `_convert_half_tile` (conflict-free 16-byte stores); rows below rows_valid are
    left alone."""
    row0, chunk = convert_slot(tidx_wg, 0)
    units = [dst_base + sw128_unit(row0, 32 * wg + 2 * chunk + j, rows) for j in range(2)]
    zeros = cute.make_rmem_tensor(8, dst.element_type)
    zeros.fill(0.0)
    for i in cutlass.range_constexpr(rows // 8):
        if row0 + 8 * i >= rows_valid:
            for u in cutlass.range_constexpr(2):
                cute.autovec_copy(zeros, dst[units[u] + 8 * 8 * i, None])


def make_mma_path(mma_path: str, q_dtype: str, tile_n: int, split_d: bool = True, qk_rows: bool = False,
                  k_step_scales: bool = False):
    if mma_path in ("bf16", "f16"):
        return Mma16Path(mma_path, tile_n)
    if mma_path == "fp8_dequant":
        return DequantFp8Path(q_dtype, tile_n)
    if mma_path == "fp8_mma":
        return Fp8MmaPath(q_dtype, tile_n, shared_q=not split_d, qk_rows=qk_rows, k_step_scales=k_step_scales)
    raise ValueError(f"unknown mma_path {mma_path!r}")


__all__ = ["CVT_THREADS", "Mma16Path", "DequantFp8Path", "Fp8MmaPath", "make_mma_path", "convert_slot", "unit_view",
           "zero_half_tile_rows", "BAR_WG_LOCAL", "BAR_Q_READY"]
