"""fp8_mma decode P.V computed transposed: O^T = V^T P^T (`Sm90FwdConfig.pv_transposed`).

A decode tile has at most 8 rows of real queries (`Sm90FwdConfig.qk_rows`), so the usual
O = P V (M = 64 query rows, N = 256 d per warpgroup) spends 7/8 of its MMA on idle rows, holds a
64 x 256 fp32 accumulator (128 registers per thread) of which one warp's rows are kept, and
needs V^T K-major in shared memory: the V transpose writes 32 KB per block and the MMA reads
it back. Transposed, the same product is M = 256 d (four m64 tiles) x N = 8 queries x K = 64
keys per warpgroup:

- A = V^T comes from registers. One ``ldmatrix.trans`` of four 8-key x 16-byte matrices plus
  four ``prmt`` give a warp's whole m64k32 e4m3 fragment (16 d rows x 32 keys), read straight
  from the TMA stage: no Vt tile, no stores, no wgmma read of it.
- B = P^T, 8 query rows x 64 keys (512 B, 64 B swizzle, double-buffered by block parity),
  written by the one warp holding the queries' P (warp 0 after the qk_rows exchange).
- The accumulator O^T is 4 x m64n8: 16 fp32 registers per thread, every warp's d rows real.

Orders and layouts (checked lane by lane on a model of the PTX instructions in
tests/test_decode_pv.py):

- ``ldmatrix.trans`` gives lane t (c = t // 4, q = t % 4) the d-byte pair 2c, 2c+1 of keys
  2q, 2q+1 of each matrix; ``prmt`` of the words of keys 16j + 0..7 and 16j + 8..15 makes
  d row 2c's bytes of keys 16j + 2q + {0, 1, 8, 9} (`fp8_operands.P_KEY_ORDER`) and d row
  2c + 1's. So A row c of warp w's 16 rows is d 16 chunk + 2c and row c + 8 is d 16 chunk + 2c + 1,
  with chunk = 4 m + w in m tile m (`pvt_d_of_row`), and A's k order is P's register order.
- P^T row n holds P[n, key_of_k(k)]: the e4m3 A-fragment words of P that warp 0 already
  builds (`p_to_fp8_a`), stored as they are (`pt_word_index`).
- The softmax state lives in warp 0's rows; the O^T columns are queries, so warp 0 also
  publishes each block's rescale factors and the final 1/row sum next to P^T (`SLOT_*`).

Numerics: each output element is the same k=32 dot products of the same e4m3 values in the
same k order, accumulated across blocks by the tensor core as before.
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float8E4M3FN, Float32, Int32, Uint32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .config import DECODE_QUERY_ROWS
from .dsl_utils import byte_perm_var, ldmatrix_x4_trans
from .fp8_operands import PRMT_EVEN_D, PRMT_ODD_D, vt_word_index
from .fragments import wgmma

QUERIES = DECODE_QUERY_ROWS  # N of the transposed MMA: the decode tile's rows of real queries
M_TILES = 4  # m64 tiles of d per warpgroup (256 d)
K_STEPS = 2  # k32 steps per 64-key block
PT_BYTES = QUERIES * 64  # one P^T buffer (8 rows x 64 keys e4m3)
PT_BUFFERS = 2  # by block parity: written one block ahead of the MMA that reads it
SLOT_O_SCALE = 2  # scale slots 0, 1: rescale factors per buffer; 2: the final 1 / row sum
SMEM_BYTES = PT_BUFFERS * PT_BYTES + 3 * QUERIES * 4


def smem_bytes(two_term: bool = False) -> int:
    """This warpgroup's P^T buffers and scale slots; ``two_term`` (`Sm90FwdConfig.two_term`):
    P_lo^T buffers as well, at buffer index PT_BUFFERS + parity."""
    return (2 if two_term else 1) * PT_BUFFERS * PT_BYTES + 3 * QUERIES * 4


# -- the plan (Python or DSL ints) -----------------------------------------------------------


def pvt_source_row(lane, warp, wg, m: int, kb: int):
    """(key, 16-byte d chunk of 0..31) of the V row lane ``lane`` addresses in the ldmatrix of
    m tile m, k-step kb: matrix lane // 8 holds keys 32 kb + 8 (lane // 8) .. + 7 of the
    chunk that warp ``warp`` holds in m tile m (eight keys in eight distinct bank columns)."""
    return 32 * kb + lane, 16 * wg + 4 * m + warp


def pvt_d_of_row(warp, row: int, lane, m: int):
    """d (of the warpgroup's 256) of accumulator row half ``row`` (0: row r, 1: row r + 8) of
    ``lane`` in m tile m: the ldmatrix/prmt order (module docstring)."""
    return 16 * (4 * m + warp) + 2 * (lane // 4) + row


# As in `fp8_operands.ldsm_lane_offset`: one register per thread, the eight rows of a block by
# an XOR and immediates (the V stage base is 1024-aligned).
def pvt_lane_offset(lane, warp, wg):
    """Byte offset in the V stage of ``lane``'s row for m = 0, kb = 0; (m, kb)'s is
    `pvt_iteration_offset` (== 16 `v_chunk_index` of `pvt_source_row`)."""
    return 16 * (1024 * wg + 8 * lane + (warp ^ (lane & 7)))


def pvt_iteration_offset(lane_offset, m: int, kb: int):
    return (lane_offset ^ (64 * (m & 1))) + 8192 * (m >> 1) + 4096 * kb


def pt_word_index(lane, word: int, buf):
    """Word of the P^T buffers that word ``word`` (row half 0: 0, 2, 4, 6) of warp 0's e4m3 A
    fragment of P goes to: query row lane // 4, k = 32 kb + 16 kh + 4 (lane % 4) ..,
    (kh, kb) = ((word >> 1) & 1, word >> 2), 64 B swizzle as the Vt tile's."""
    kh, kb = (word >> 1) & 1, word >> 2
    return (PT_BYTES // 4) * buf + vt_word_index(lane // 4, 8 * kb + 4 * kh + lane % 4, 64)


def pvt_tail_chunk(lane, warp, wg):
    """d chunk of the V rows past the sequence that ``lane`` zeroes (`fp8_operands.tail_unit`):
    the four chunks its warp's ldmatrix reads, 4 m + warp."""
    return 16 * wg + 4 * (lane % 4) + warp


# -- the kernel side ---------------------------------------------------------------------------


def acc_index(col: int, row: int, m: int) -> int:
    """Register of O^T's m64n8 fragments holding (row half ``row``, query 2 (lane % 4) + col) of
    m tile m: mode 0 of a wgmma accumulator is (column pair, row half) (`fragments`), then m."""
    return col + 2 * row + 4 * m


def _acc_values(acc: cute.Tensor) -> cute.Tensor:
    return cute.make_tensor(acc.iterator, cute.make_layout(4 * M_TILES))


class PvtParts(NamedTuple):
    """Per consumer warpgroup (built by `make_pvt_parts`)."""

    tiled: object  # m64n8k32 e4m3, A from registers, over M = 256: four instructions per k-step
    acc: object  # O^T fragment (4 values, 4 m tiles, 1)
    vt: object  # V^T A fragment (16 e4m3, 4 m tiles, 2 k-steps)
    pt: object  # P^T B fragment (.., 1, 2 k-steps, 2 buffers)
    pt_words: object  # the P^T buffers as words
    slots: object  # (8 queries, 3) fp32: rescale factors per buffer, the final scale


def make_pvt_parts(base_u8, tidx_wg, two_term: bool = False) -> PvtParts:
    """The transposed P.V's MMA, fragments and smem views; ``base_u8``: byte pointer to this
    warpgroup's `smem_bytes` (512-aligned); ``two_term``: P_lo^T buffers after P^T's."""
    buffers = (2 if two_term else 1) * PT_BUFFERS
    tiled = sm90_utils.make_trivial_tiled_mma(
        Float8E4M3FN, Float8E4M3FN, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K, Float32,
        atom_layout_mnk=(1, 1, 1), tiler_mn=(64, QUERIES), a_source=warpgroup.OperandSource.RMEM,
    )
    thr = tiled.get_slice(tidx_wg)
    atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW64, Float8E4M3FN)
    pt_layout = cute.tile_to_shape(atom, (QUERIES, 64, buffers), order=(0, 1, 2))
    sPt = cute.make_tensor(cute.recast_ptr(base_u8, pt_layout.inner, dtype=Float8E4M3FN), pt_layout.outer)
    pt_words = cute.make_tensor(cute.recast_ptr(base_u8, dtype=Uint32), cute.make_layout(buffers * PT_BYTES // 4))
    slots = cute.make_tensor(cute.recast_ptr(base_u8 + buffers * PT_BYTES, dtype=Float32),
                             cute.make_layout((QUERIES, 3), stride=(1, QUERIES)))
    acc = thr.make_fragment_C(thr.partition_shape_C((64 * M_TILES, QUERIES)))
    vt = cute.make_rmem_tensor(thr.partition_shape_A((64 * M_TILES, 64)), Float8E4M3FN)
    pt = thr.make_fragment_B(thr.partition_B(sPt))
    return PvtParts(tiled, acc, vt, pt, pt_words, slots)


@cute.jit
def publish_p(parts: PvtParts, tOrP: cute.Tensor, row_scale: cute.Tensor, buf, tidx_wg: Int32, warp_live):
    """Warp 0 (the live warp of a decode tile): P^T of this block and its rows' rescale factors
    into buffer ``buf``; the fence makes P^T visible to the wgmma (the reader's barrier is in
    `mma_paths.Fp8MmaPath.prepare_v`). Rows r and r + 8 of the qk_rows exchange hold the same
    query: row half 0. Only warp 0 writes, even if a call breaks the dispatch's bound of 8 query
    rows and makes another warp live: its rows would go unstored, not overwrite these."""
    if warp_live and tidx_wg < 32:
        lane = tidx_wg % 32
        words = cute.recast_tensor(tOrP, Uint32)
        for w in cutlass.range_constexpr(0, 8, 2):
            parts.pt_words[pt_word_index(lane, w, buf)] = words[w]
        if lane % 4 == 0:
            parts.slots[lane // 4, buf] = row_scale[0]
        cute.arch.fence_view_async_shared()


@cute.jit
def publish_p_lo(parts: PvtParts, tOrPlo: cute.Tensor, buf, tidx_wg: Int32, warp_live):
    """Warp 0: P_lo^T of this block (two-term P) into buffer PT_BUFFERS + ``buf``, as
    `publish_p` writes P^T (whose fence covers both, so call this first)."""
    if warp_live and tidx_wg < 32:
        lane = tidx_wg % 32
        words = cute.recast_tensor(tOrPlo, Uint32)
        for w in cutlass.range_constexpr(0, 8, 2):
            parts.pt_words[pt_word_index(lane, w, buf + PT_BUFFERS)] = words[w]


@cute.jit
def load_vt(parts: PvtParts, sV_chunks: cute.Tensor, stage, wg, tidx_wg: Int32):
    """V^T A fragments of this warpgroup's d half of V stage ``stage`` (keys past the sequence
    already zeroed in the stage)."""
    lane = tidx_wg % 32
    warp = tidx_wg // 32
    v_row = sV_chunks.iterator.toint() + stage * (64 * 512) + pvt_lane_offset(lane, warp, wg)
    for m in cutlass.range_constexpr(M_TILES):
        for kb in cutlass.range_constexpr(K_STEPS):
            w = ldmatrix_x4_trans(pvt_iteration_offset(v_row, m, kb))
            a = cute.recast_tensor(parts.vt[None, m, kb], Uint32)
            # words: (row r, keys 0-15), (row r + 8, 0-15), (row r, 16-31), (row r + 8, 16-31)
            a[0] = byte_perm_var(w[0], w[1], PRMT_EVEN_D)
            a[1] = byte_perm_var(w[0], w[1], PRMT_ODD_D)
            a[2] = byte_perm_var(w[2], w[3], PRMT_EVEN_D)
            a[3] = byte_perm_var(w[2], w[3], PRMT_ODD_D)


@cute.jit
def scale_columns(parts: PvtParts, slot, tidx_wg: Int32):
    """O^T[:, n] *= slots[n, slot] for this thread's two query columns 2 (lane % 4) + {0, 1}."""
    q0 = 2 * (tidx_wg % 4)
    s = (parts.slots[q0, slot], parts.slots[q0 + 1, slot])
    o = _acc_values(parts.acc)
    for i in cutlass.range_constexpr(4 * M_TILES):
        o[i] = o[i] * s[i % 2]


@cute.jit
def issue_pv(parts: PvtParts, buf, two_term: cutlass.Constexpr[bool] = False):
    """O^T += V^T P^T[buf] for one block, then (two-term P) O^T += V^T P_lo^T[buf] into the
    same accumulator (committed; the caller waits)."""
    warpgroup.fence()
    wgmma(parts.tiled, parts.acc, parts.vt, parts.pt[None, None, None, buf], zero_init=False)
    if const_expr(two_term):
        wgmma(parts.tiled, parts.acc, parts.vt, parts.pt[None, None, None, buf + PT_BUFFERS], zero_init=False)
    warpgroup.commit_group()


@cute.jit
def publish_o_scale(parts: PvtParts, o_scale: cute.Tensor, tidx_wg: Int32, warp_live):
    """Warp 0: the final per-query scale (v_descale / row sum) into its slot."""
    if warp_live and tidx_wg < 32:
        lane = tidx_wg % 32
        if lane % 4 == 0:
            parts.slots[lane // 4, SLOT_O_SCALE] = o_scale[0]


@cute.jit
def store_o(parts: PvtParts, gO: cute.Tensor, out_dtype: cutlass.Constexpr, tidx_wg: Int32, rows_valid):
    """gO (tile rows, 256 d of this warpgroup) <- O^T of query rows < rows_valid, two d per store."""
    lane = tidx_wg % 32
    warp = tidx_wg // 32
    o = _acc_values(parts.acc)
    pair = cute.make_rmem_tensor(2, out_dtype)
    for c in cutlass.range_constexpr(2):
        n = 2 * (lane % 4) + c
        if n < rows_valid:
            for m in cutlass.range_constexpr(M_TILES):
                pair[0] = o[acc_index(c, 0, m)].to(out_dtype)
                pair[1] = o[acc_index(c, 1, m)].to(out_dtype)
                d = pvt_d_of_row(warp, 0, lane, m)
                cute.autovec_copy(pair, cute.local_tile(gO[n, None], (2,), (d // 2,)))


__all__ = [
    "QUERIES", "SMEM_BYTES", "SLOT_O_SCALE", "PvtParts", "make_pvt_parts", "publish_p", "load_vt", "scale_columns",
    "issue_pv", "publish_o_scale", "publish_p_lo", "smem_bytes", "store_o", "acc_index", "pvt_source_row",
    "pvt_d_of_row", "pvt_lane_offset",
    "pvt_iteration_offset", "pt_word_index", "pvt_tail_chunk",
]
