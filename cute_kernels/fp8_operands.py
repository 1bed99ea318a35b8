"""The operands of the FP8 (QGMMA) forward: Q quantised per row, P in A registers, V transposed.

FP8 wgmma takes both smem operands K-major and an A operand from registers in its own
fragment layout. Three consequences, each handled here by one warpgroup on its d half:

Q (`quantize_q_half`)
    Q arrives in bf16/fp16. Each warpgroup quantises its (64, 256) half to e4m3 with one
    power-of-two scale per row and half: scale = 2^k for the smallest k with amax <= 448 * 2^k
    (k clamped to [-126, 126]; an all-zero row gets 1). q / scale is exact, so the only rounding
    is e4m3's own, and S_half = scale * (Q8_half . K_half) is what `FlashFwdSm90` sums across the
    two warpgroups. `fa512.numerics.emulation` (design fa512_fp8) reproduces this rule bit for bit.

P (`p_to_fp8_a`)
    The fp32 accumulator of an m64nN wgmma holds, per thread (q = lane % 4), columns
    8j + 2q + {0, 1} of rows r and r+8. The e4m3 A fragment of an m64k32 wgmma holds
    k = 4q..4q+3 and 16+4q..19+4q of rows r and r+8. Register renaming alone maps one onto the
    other if P's key order inside each 16-key group is permuted: A's k index 16G + 4q + e holds
    the key ``key_of_k(16G + 4q + e) = 16G + 2q + (e & 1) + 8 (e >> 1)`` (`P_KEY_ORDER`).
    No shuffles: the C->A move is a compile-time register permutation (`P_REGISTER_PERM`).

V (`transpose_v_half`)
    PV needs V^T K-major (keys contiguous per d row) in the same permuted key order, so the
    transpose writes ``Vt[d, k] = V[key_of_k(k), d]``: at tile_n=64 with ``ldmatrix.trans``, two
    ``prmt`` per word pair and ``stmatrix`` (`_transpose_ldsm`), at tile_n=32 with 16-byte loads
    of the four keys of one Vt word, a 4 x 4 byte transpose in 8 ``prmt`` and 32-bit stores
    (`_transpose_units`). Keys at or past ``rows_valid`` become zeros: a NaN bit pattern in an
    unused cache slot must not meet a zero P in the MMA. (Decode tiles skip the Vt tile:
    `decode_pv`.)

P as an smem operand (`store_p_tile`)
    In the alternating layout (`cute_kernels.consumer_alternate`) one warpgroup's P is the other's A operand, read from smem by
    an SS wgmma: a (64, 64) K-major tile with 64 B swizzle (the layout of a Vt tile), the
    register fragment's words stored at their (row, k) places (`p_word_index`).

The pure-Python tables at the top are what the CPU tests check; the DSL code below uses them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float32, Int32, Uint32, const_expr

from .dsl_utils import bits_f32, byte_perm_var, f32_bits, ldmatrix_x4_trans, stmatrix_x4, sw128_unit

E4M3_MAX = 448.0
Q_SCALE_K_MIN, Q_SCALE_K_MAX = -126, 126


def key_of_k(k: int) -> int:
    """Key (column of P / row of V) that A-operand index k of the P.V product holds."""
    return key_of_word_byte(k // 4, k % 4)


def key_of_word_byte(w4, e: int):
    """`key_of_k` (4 w4 + e): byte e of P's 4-key word w4 (Python or DSL ints)."""
    return 16 * (w4 // 4) + 2 * (w4 % 4) + (e & 1) + 8 * (e >> 1)


P_KEY_ORDER = tuple(key_of_k(k) for k in range(16))  # (0, 1, 8, 9, 2, 3, 10, 11, ...)
# A-fragment value j (e + 4 h + 8 kh in one k32 block: byte e, row half h, k half kh) takes
# accumulator value (e & 1) + 2 h + 4 (e >> 1) + 8 kh (column pair, row half, 8-column group).
P_REGISTER_PERM = tuple((j & 1) + 2 * ((j >> 2) & 1) + 4 * ((j >> 1) & 1) + 8 * (j >> 3) for j in range(16))


def q_scale_exponent(amax: float) -> int:
    """k of the power-of-two row scale 2^k (Python mirror of the kernel's bit arithmetic)."""
    import struct

    bits = struct.unpack("<I", struct.pack("<f", amax))[0]
    if amax == 0.0:
        return 0
    biased, frac = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    k = biased - 127 - 8 + (1 if frac > 0x600000 else 0)  # 1.frac > 1.75 = 448 / 256
    return max(Q_SCALE_K_MIN, min(Q_SCALE_K_MAX, k))


@cute.jit
def _scale_exponent(amax: Float32) -> Int32:
    bits = f32_bits(amax)
    k = ((bits >> 23) & 0xFF) - 135
    if (bits & 0x7FFFFF) > 0x600000:
        k = k + 1
    k = cutlass.max(Int32(Q_SCALE_K_MIN), cutlass.min(Int32(Q_SCALE_K_MAX), k))
    if amax == Float32(0.0):
        k = Int32(0)
    return k


@cute.jit
def quantize_q_half(sQ_in: cute.Tensor, sQ8: cute.Tensor, sScale: cute.Tensor, tidx_wg: Int32,
                    k_step_rows: cutlass.Constexpr[bool] = False, sQlo_words=None,
                    k_step_scales: cutlass.Constexpr[bool] = False):
    """sQ8 (64, 256) e4m3 <- sQ_in (64, 256) bf16/f16 / scale[row]; sScale (64,) fp32 <- scale.

    Thread t handles the 16 columns of chunk t % 16 in rows t // 16 + 8 i; the 16 threads of a
    row are 16 consecutive lanes, so the row amax is a 4-step butterfly. Two passes over smem
    (amax, then scale and convert) keep 16 values live per thread instead of 128.

    ``k_step_rows`` (`Sm90FwdConfig.qk_rows`): row 8 i + r becomes row r restricted to the
    32 columns of k-step i (zeros elsewhere), scaled by that chunk's own amax. With
    ``sQlo_words`` (`Sm90FwdConfig.two_term`, k_step_rows only) the residual Q_lo =
    e4m3(Q s - Q_hi) of the 8 query rows goes there as well, compact (row r, 256 bytes), for
    `q_lo_fragment`.

    ``k_step_scales`` (layout "decode_alt", whose S^T = K Q^T reads Q rows 0..7 as they are):
    the scales of ``k_step_rows`` (k-step i of query row r: sScale[r + 8 i]) with the values
    in place, row r, and no zero rows.
    """
    rows = cute.size(sQ_in, mode=[0])
    chunk = tidx_wg % 16
    if const_expr(k_step_rows or k_step_scales):
        _quantize_q_k_steps(sQ_in, sQ8, sScale, tidx_wg, rows, sQlo_words, in_place=k_step_scales)
    else:
        for i in cutlass.range_constexpr(rows // 8):
            row = tidx_wg // 16 + 8 * i
            vals, amax = _load_q_chunk(sQ_in, row, chunk)
            for off in (1, 2, 4, 8):
                amax = cute.arch.fmax(amax, cute.arch.shuffle_sync_bfly(amax, offset=off))
            k = _scale_exponent(amax)
            r_out = cute.make_rmem_tensor((1, 16), Float8E4M3FN)
            _scaled_e4m3(vals, k, r_out)
            cute.autovec_copy(r_out, cute.local_tile(sQ8, (1, 16), (row, chunk)))
            if chunk == 0:
                sScale[row] = bits_f32((127 + k) << 23)


@cute.jit
def _load_q_chunk(sQ_in: cute.Tensor, row, chunk):
    """(the 16 values of chunk ``chunk`` of Q row ``row`` as fp32, their amax): one load."""
    r_in = cute.make_rmem_tensor((1, 16), sQ_in.element_type)
    cute.autovec_copy(cute.local_tile(sQ_in, (1, 16), (row, chunk)), r_in)
    vals = r_in.load().to(Float32)
    amax = Float32(0.0)
    for c in cutlass.range_constexpr(16):
        amax = cute.arch.fmax(amax, abs(vals[c]))
    return vals, amax


@cute.jit
def _scaled_e4m3(vals, k: Int32, r_out: cute.Tensor):
    """r_out (1, 16) e4m3 <- vals * 2^-k (exact scaling, one rounding in the conversion)."""
    r_f = cute.make_rmem_tensor((1, 16), Float32)
    r_f.store(vals * bits_f32((127 - k) << 23))
    r_out.store(r_f.load().to(Float8E4M3FN))


@cute.jit
def _quantize_q_k_steps(sQ_in: cute.Tensor, sQ8: cute.Tensor, sScale: cute.Tensor, tidx_wg: Int32,
                        rows: cutlass.Constexpr[int], sQlo_words=None, in_place: cutlass.Constexpr[bool] = False):
    """`quantize_q_half` with ``k_step_rows``. Thread t holds chunk c = t % 16 of query row
    r = t // 16, one half of k-step c // 2: one load, the k-step's amax over the lane pair
    (chunks 2i and 2i + 1 are neighbouring lanes), then row 8 (c // 2) + r of sQ8 gets the
    scaled values and the thread's seven other rows 8 i + r get zeros. The same bytes as
    looping over the eight k-steps with the other chunks masked to zero, which loaded and
    reduced every chunk eight times. ``in_place``: the scaled values go to row r itself and
    no zeros are written (`quantize_q_half`'s ``k_step_scales``)."""
    chunk = tidx_wg % 16
    src_row = tidx_wg // 16
    step = chunk // 2
    vals, amax = _load_q_chunk(sQ_in, src_row, chunk)
    amax = cute.arch.fmax(amax, cute.arch.shuffle_sync_bfly(amax, offset=1))
    k = _scale_exponent(amax)
    r_q = cute.make_rmem_tensor((1, 16), Float8E4M3FN)
    _scaled_e4m3(vals, k, r_q)
    # e4m3 zeros as bits: ptxas merged a converted all-zero vector with a stale register's
    # upper half (F2FP...PACK_AB_MERGE_C R, RZ, RZ, R0), every 4th byte wrong (H200 probe, s18)
    r_zero_words = cute.make_rmem_tensor((1, 4), Uint32)
    r_zero_words.fill(0)
    r_zero = cute.recast_tensor(r_zero_words, Float8E4M3FN)
    if const_expr(in_place):
        cute.autovec_copy(r_q, cute.local_tile(sQ8, (1, 16), (src_row, chunk)))
    else:
        for i in cutlass.range_constexpr(rows // 8):
            dst = cute.local_tile(sQ8, (1, 16), (src_row + 8 * i, chunk))
            if step == i:
                cute.autovec_copy(r_q, dst)
            else:
                cute.autovec_copy(r_zero, dst)
    if chunk % 2 == 0:
        sScale[src_row + 8 * step] = bits_f32((127 + k) << 23)
    if const_expr(sQlo_words is not None):  # Q_lo = e4m3(Q s - Q_hi): Q s is exact, one rounding
        r_lo = cute.make_rmem_tensor((1, 16), Float8E4M3FN)
        r_lo.store((vals * bits_f32((127 - k) << 23) - r_q.load().to(Float32)).to(Float8E4M3FN))
        lo_words = cute.make_tensor(cute.recast_ptr(r_lo.iterator, dtype=Uint32), cute.make_layout(4))
        for i in cutlass.range_constexpr(4):  # row src_row, bytes 16 chunk ..
            sQlo_words[64 * src_row + 4 * chunk + i] = lo_words[i]


def q_lo_source_word(lane, warp, h: int, kh: int):
    """Word of the compact Q_lo (8 rows x 64 words) that row half ``h``, k half ``kh`` of
    ``lane``'s A fragment holds at its k-step 2 ``warp`` + ``h``: query lane // 4, columns
    32 (2 warp + h) + 16 kh + 4 (lane % 4) .. + 3 (Python or DSL ints; the other k-steps'
    words of that row half are zeros, `q_lo_fragment`)."""
    return 64 * (lane // 4) + 16 * warp + 8 * h + 4 * kh + lane % 4


@cute.jit
def q_lo_fragment(sQlo_words: cute.Tensor, frag: cute.Tensor, tidx_wg: Int32):
    """The RS QGMMA A fragments of Q_lo in the k-step-rows tile (`Sm90FwdConfig.two_term`) from
    the compact (8 rows x 256 bytes) Q_lo of `quantize_q_half`: lane l of warp w holds rows
    16 w + l // 4 (words 0, 2 of a k-step) and 16 w + 8 + l // 4 (words 1, 3), which in the
    k-step-rows tile are query l // 4 at k-steps 2 w and 2 w + 1 and zeros at every other
    k-step (`p_word_index`'s word order). Four loads; the other 28 words are zeros."""
    lane = tidx_wg % 32
    warp = tidx_wg // 32
    mine = [sQlo_words[q_lo_source_word(lane, warp, h, kh)] for h, kh in ((0, 0), (0, 1), (1, 0), (1, 1))]
    words = cute.recast_tensor(frag, Uint32)
    words.fill(0)
    for j in cutlass.range_constexpr(cute.size(words) // 4):
        if warp * 2 == j:  # row half 0 at k-step 2 w: k halves 0 and 1
            words[4 * j] = mine[0]
            words[4 * j + 2] = mine[1]
        if warp * 2 + 1 == j:  # row half 1 at k-step 2 w + 1
            words[4 * j + 1] = mine[2]
            words[4 * j + 3] = mine[3]


@cute.jit
def p_to_fp8_a(acc_P: cute.Tensor, tOrP: cute.Tensor):
    """Write the fp32 probabilities of an m64nN accumulator into an e4m3 A fragment (k = N).

    A pure register renaming (`P_REGISTER_PERM`) plus ``cvt.rn.satfinite.e4m3x2.f32``; the key
    order it implies is `P_KEY_ORDER`, which `transpose_v_half` applies to V.
    """
    n = cute.size(acc_P)
    # (byte bit 0, byte bit 1, row half, k half, k32 block) -> accumulator register
    perm = cute.make_layout((2, 2, 2, 2, n // 16), stride=(1, 4, 2, 8, 16))
    src = cute.make_tensor(acc_P.iterator, perm)
    dst = cute.make_tensor(tOrP.iterator, cute.make_layout((2, 2, 2, 2, n // 16)))
    dst.store(src.load().to(Float8E4M3FN))


@cute.jit
def p_to_fp8_a_two_term(acc_P: cute.Tensor, tOrP: cute.Tensor, tOrPlo: cute.Tensor):
    """`p_to_fp8_a` into ``tOrP`` (P_hi) and the residual P_lo = e4m3(P - P_hi) into ``tOrPlo``,
    in the same register order (`Sm90FwdConfig.two_term`)."""
    n = cute.size(acc_P)
    perm = cute.make_layout((2, 2, 2, 2, n // 16), stride=(1, 4, 2, 8, 16))
    p = cute.make_tensor(acc_P.iterator, perm).load()
    frag = cute.make_layout((2, 2, 2, 2, n // 16))
    hi = p.to(Float8E4M3FN)
    cute.make_tensor(tOrP.iterator, frag).store(hi)
    cute.make_tensor(tOrPlo.iterator, frag).store((p - hi.to(Float32)).to(Float8E4M3FN))


# The alternating layout hands P to the other warpgroup as the A operand of an SS wgmma: a
# (64, 64) e4m3 K-major tile with 64 B swizzle, laid out like a V^T tile (rows of 64 bytes), in
# the k order of the register fragment, so both warpgroups multiply the same P by the same V^T.
P_TILE_BYTES = 64 * 64


def p_word_index(tidx_wg, word: int):
    """Word of the P tile that word ``word`` of thread ``tidx_wg``'s e4m3 A fragment belongs in.

    Fragment words run over (row half h, k half kh, k32 block kb) = (word & 1, (word >> 1) & 1,
    word >> 2); each holds k = 32 kb + 16 kh + 4 (lane % 4) .. + 3 of row 16 warp + lane // 4
    + 8 h (`p_to_fp8_a`). Python or DSL ints for ``tidx_wg``; bank-conflict free per warp.
    """
    h, kh, kb = word & 1, (word >> 1) & 1, word >> 2
    lane = tidx_wg % 32
    row = 16 * (tidx_wg // 32) + lane // 4 + 8 * h
    return vt_word_index(row, 8 * kb + 4 * kh + lane % 4, 64)


@cute.jit
def store_p_tile(tOrP: cute.Tensor, sP_words: cute.Tensor, base, tidx_wg: Int32):
    """Write a thread's e4m3 P fragment (64 keys: 8 words) into the P tile at word ``base``."""
    words = cute.recast_tensor(tOrP, Uint32)
    for w in cutlass.range_constexpr(cute.size(words)):
        sP_words[base + p_word_index(tidx_wg, w)] = words[w]


# 4 x 4 byte transpose in two prmt stages. Stage 1 pairs rows (a, b) and (c, d) by byte
# halves, stage 2 interleaves the pairs; the selectors are per lane so that a lane can produce
# its four output words in the rotated order `transpose_lane_plan` gives it (see there).
_STAGE1 = (0x5140, 0x7362)  # (bytes 0-1 of each row, bytes 2-3): a0 b0 a1 b1 / a2 b2 a3 b3
_STAGE2 = (0x5410, 0x7632)  # (first, second byte of each pair): a0 b0 c0 d0 / a1 b1 c1 d1


def transpose_selectors_of(p) -> tuple:
    """prmt selectors (stage-1 first, stage-1 second, stage-2 first, stage-2 second) that make
    output word k of `_transpose4x4` the transposed word k ^ p (p in 0..3). Branch-free (a
    swap is an XOR with the pair's difference), for Python ints and DSL Int32 alike."""
    s1, s2 = (p >> 1) & 1, p & 1
    d1, d2 = _STAGE1[0] ^ _STAGE1[1], _STAGE2[0] ^ _STAGE2[1]
    return (_STAGE1[0] ^ (d1 * s1), _STAGE1[1] ^ (d1 * s1), _STAGE2[0] ^ (d2 * s2), _STAGE2[1] ^ (d2 * s2))


def _transpose4x4(a, b, c, d, sel):
    """Words a..d hold bytes [x0 x1 x2 x3] of four rows; returns words k = 0..3 whose byte r is
    row r's byte (k ^ p), with ``sel`` = `transpose_selectors_of` (p) in registers."""
    ab0 = byte_perm_var(a, b, sel[0])
    cd0 = byte_perm_var(c, d, sel[0])
    ab1 = byte_perm_var(a, b, sel[1])
    cd1 = byte_perm_var(c, d, sel[1])
    return (
        byte_perm_var(ab0, cd0, sel[2]),
        byte_perm_var(ab0, cd0, sel[3]),
        byte_perm_var(ab1, cd1, sel[2]),
        byte_perm_var(ab1, cd1, sel[3]),
    )


def transpose_lane_plan(tidx_wg, it: int, tile_n: int):
    """(w4, chunk, p) of thread ``tidx_wg`` in iteration ``it`` of `transpose_v_half`.

    Works on Python ints (tests) and DSL Int32 (kernel). Lane bits: q = w4 % 4 (bits 0-1), the
    low bit of the d chunk (bit 2), the 16-key group g = w4 // 4 (next log2(tile_n / 16) bits),
    the rest of the chunk from the remaining lane bits, the warp and the iteration. So:
    - each 8-lane phase of a 128-bit V load reads 8 different 16-byte columns of the 128 B
      swizzled rows (q and the chunk bit cover the 8 XOR positions): no bank conflict;
    - the 32-bit Vt stores of one instruction go to rows whose parity (bit 0 of d; for
      tile_n=32 bits 0-1) differs across lanes through the rotation p, and to 16 (8) distinct
      words of a row through w4: 32 distinct banks.
    """
    lane = tidx_wg % 32
    warp = tidx_wg // 32
    q = lane % 4
    cb = (lane // 4) % 2
    g_bits = 2 if tile_n == 64 else 1
    g = (lane // 8) % (1 << g_bits)
    extra = lane // (8 << g_bits)  # 0 for tile_n=64; bit 4 of the lane for tile_n=32
    lanes_rest = 1 << (2 - g_bits)  # chunk values the remaining lane bits cover (1 or 2)
    rest = extra + lanes_rest * (warp + 4 * it)
    chunk = cb + 2 * rest
    p = cb + 2 * extra
    return 4 * g + q, chunk, p


def vt_word_index(d: int, w4, tile_n: int):
    """Word (4-key) index of Vt[d, 4 w4 .. 4 w4 + 3] in the K-major Vt tile of one warpgroup:
    rows of tile_n bytes, 64 B swizzle (tile_n=64: 16-byte chunk ^= (d >> 1) & 3) or 32 B
    swizzle (tile_n=32: chunk ^= (d >> 2) & 1), as `warpgroup.make_smem_layout_atom` lays them
    out (checked against the CuTe layout by tests/test_fp8_operands.py)."""
    if tile_n == 64:
        return d * 16 + (w4 ^ (((d >> 1) & 3) << 2))
    return d * 8 + (w4 ^ (((d >> 2) & 1) << 2))


def v_chunk_index(key, c16, tile_n: int):
    """16-byte chunk index of V[key, 16 c16 .. 16 c16 + 15] in one (tile_n, 512) e4m3 TMA
    stage: 128 B swizzle atoms (8 keys x 128 B) stacked along keys, then along d."""
    return sw128_unit(key, c16, tile_n)


@cute.jit
def transpose_v_half(sV_chunks: cute.Tensor, stage, sVt_words: cute.Tensor, vt_base, wg, tidx_wg: Int32,
                     rows_valid, tile_n: cutlass.Constexpr[int]):
    """Vt (256, tile_n) e4m3, K-major <- warpgroup wg's d half of V stage ``stage``, keys in
    `P_KEY_ORDER`.

    sV_chunks : the V stage ring as (16-byte chunks, 4) words; sVt_words : words, Vt of this
    warpgroup from word ``vt_base``. Addresses are computed from `v_chunk_index` /
    `vt_word_index` rather than through the swizzled CuTe views: those made the compiler hoist
    one address per store out of the block loop and spill.

    tile_n=64 runs on ldmatrix.trans / stmatrix (`_transpose_ldsm`), tile_n=32 on 16-byte loads,
    prmt and 32-bit stores (`_transpose_units`); both write the same Vt image.

    Keys >= ``rows_valid`` are stored as zeros (None: all valid); only a sequence's last block
    has such keys. At tile_n=64 they are zeroed in the V stage first, only in a block that has
    them (`zero_keys_past`). At tile_n=32 the zeroing is a select per loaded word (a branch to
    a second, unzeroed copy of the transpose for the other blocks spilled the split-d variants
    2-11 STL/LDL).
    """
    if const_expr(tile_n == 64):
        if const_expr(rows_valid is not None):
            if rows_valid < tile_n:
                zero_keys_past(sV_chunks, stage, transpose_tail_chunk(tidx_wg % 32, tidx_wg // 32, wg), tidx_wg,
                               rows_valid)
        _transpose_ldsm(sV_chunks, stage, sVt_words, vt_base, wg, tidx_wg)
    else:
        _transpose_units(sV_chunks, stage, sVt_words, vt_base, wg, tidx_wg, rows_valid, tile_n)


@cute.jit
def _transpose_units(sV_chunks: cute.Tensor, stage, sVt_words: cute.Tensor, vt_base, wg, tidx_wg: Int32,
                     rows_valid, tile_n: cutlass.Constexpr[int]):
    """`transpose_v_half` for tile_n=32; ``rows_valid`` None: no key is zeroed.

    Unit (word column w4, 16-byte d chunk): the four source keys of Vt columns 4 w4 .. 4 w4 + 3,
    16 bytes each, become 16 Vt words. Which thread takes which unit, and in which order it
    stores the four rows of each 4 x 4 block, is `transpose_lane_plan`: bank-conflict free
    loads and stores (the first version's lane order cost 8-way conflicts on the loads and
    2-way on the stores: half of the kernel's excess shared-memory wavefronts, ncu on the H200).
    Per 16 bytes of V: one 128-bit load, 8 prmt, four 32-bit stores."""
    n_w4 = tile_n // 4  # 4-key words per Vt row
    units = n_w4 * 16  # x 16 d chunks of 16 bytes in a 256-column half
    stage_base = stage * (tile_n * 32)
    for it in cutlass.range_constexpr(units // 128):
        w4, chunk, p = transpose_lane_plan(tidx_wg, it, tile_n)
        sel = transpose_selectors_of(p)
        words = []  # per source key e: its 16 d-bytes as 4 words
        for e in cutlass.range_constexpr(4):
            key = key_of_word_byte(w4, e)
            row = cute.make_rmem_tensor(4, Uint32)
            cute.autovec_copy(sV_chunks[stage_base + v_chunk_index(key, 16 * wg + chunk, tile_n), None], row)
            if const_expr(rows_valid is not None):
                if key >= rows_valid:
                    row.fill(0)
            words.append(row)
        row0 = vt_base + (16 * chunk) * (tile_n // 4)  # Vt row 16 chunk: the swizzle only sees d % 8
        for w in cutlass.range_constexpr(4):
            cols = _transpose4x4(words[0][w], words[1][w], words[2][w], words[3][w], sel)
            for k in cutlass.range_constexpr(4):
                # output word k holds row 4w + (k ^ p); the swizzle term of vt_word_index only
                # reads d's bits 1-2 (tile_n=64) or bit 2 (tile_n=32), which p never flips
                d_static = 4 * w + k
                d_shift = ((k ^ p) - k) * (tile_n // 4)
                sVt_words[row0 + d_shift + vt_word_index(d_static, w4, tile_n)] = cols[k]


# -- tile_n=64: the transpose on ldmatrix.trans and stmatrix ------------------------------------
# ldmatrix.trans reads an 8 x 8 matrix of b16 (8 keys x 16 d-bytes) and gives lane t the
# d-byte pair 2c, 2c+1 (c = t // 4) of keys 2q and 2q+1 (q = t % 4). Two such words, from the
# keys 16j + 0..7 and 16j + 8..15, hold d-row 2c's bytes of keys 16j + 2q + {0, 1, 8, 9}: one prmt
# gathers them, which is exactly Vt word 4j + q of row 2c in `P_KEY_ORDER`, and a second prmt
# gives row 2c + 1. stmatrix then writes each such word where lane t's row of the matrix lies,
# rows addressed per lane, so the swizzled Vt needs no address math beyond one row per lane.
# Per 16 bytes of V: one ldmatrix, 4 prmt, one stmatrix (the tile_n=32 body: 13 instructions).
LDSM_PER_THREAD = 8  # x4 ldmatrix / stmatrix pairs: (256 d x 64 keys) / 128 threads / 16 B
LDSM_AHEAD = 1  # ldmatrix issued ahead of the first store: 2 x 4 words in flight
PRMT_EVEN_D, PRMT_ODD_D = 0x6420, 0x7531  # bytes 0 and 2 (d even) / 1 and 3 (d odd) of each word


def ldsm_source_row(lane, warp, wg, it: int):
    """(key, 16-byte d chunk of 0..31) of the V row lane ``lane`` of warp ``warp`` addresses in
    ldmatrix ``it`` (Python or DSL ints). Matrix i = lane // 8 holds keys 32 jp + 8 i .. + 7 of
    one d chunk; iteration it = 2 dd + jp covers d chunk 4 warp + dd of warpgroup wg's half and
    the key half jp. Eight consecutive keys of one chunk sit in eight distinct 16-byte bank
    columns of the 128 B swizzle: no bank conflict."""
    dd, jp = it >> 1, it & 1
    return 32 * jp + lane, 16 * wg + 4 * warp + dd


def stsm_target_row(lane, warp, it: int):
    """(Vt row d of the warpgroup's half, 16-key chunk j) whose 16 bytes lane ``lane``
    addresses in stmatrix ``it``: row r = lane % 8 of matrix i = lane // 8.

    Matrices 0 and 1 are d rows 2r and 2r+1 of the chunk's 16 (key chunk 2 jp), matrices 2 and 3
    the same rows of key chunk 2 jp + 1; for r >= 4 matrix 0 takes the odd row and 1 the even
    one (`stsm_selectors`). Rows d and d + 8 share their banks under the 64 B swizzle, so this
    is what spreads each matrix's eight rows over all 32 banks."""
    dd, jp = it >> 1, it & 1
    i, r = lane >> 3, lane & 7
    odd = (r >> 2) ^ (i & 1)
    return 16 * (4 * warp + dd) + 2 * r + odd, 2 * jp + (i >> 1)


def stsm_selectors(lane):
    """prmt selectors (stmatrix words 0 and 2, words 1 and 3) of ``lane``: the even d row first,
    the odd one for lanes 16..31 (they hold rows 2c with c >= 4, see `stsm_target_row`)."""
    swap = (lane >> 4) * (PRMT_EVEN_D ^ PRMT_ODD_D)
    return PRMT_EVEN_D ^ swap, PRMT_ODD_D ^ swap


# The kernel forms the 16 addresses of a block from one register per side, so that nothing
# per iteration is hoisted out of the block loop (16 hoisted addresses spilled 4-31 STL/LDL in
# the split-d variants): iteration it = 2 dd + jp flips address bits with an XOR and adds an
# immediate. Valid because the V stage base is 1024-aligned and the Vt base 64-aligned.
def ldsm_lane_offset(lane, warp, wg):
    """Byte offset in the V stage of ``lane``'s ldmatrix row in iteration 0; iteration it's is
    ``(offset ^ 16 dd) + 4096 jp`` (== 16 `v_chunk_index` of `ldsm_source_row`)."""
    return 16 * ((2 * wg + (warp >> 1)) * 512 + 8 * lane + ((4 * (warp & 1)) ^ (lane & 7)))


def ldsm_iteration_offset(lane_offset, it: int):
    dd, jp = it >> 1, it & 1
    return (lane_offset ^ (16 * dd)) + 4096 * jp


def stsm_lane_offset(lane, warp):
    """Byte offset in the warpgroup's Vt of ``lane``'s stmatrix row in iteration 0; iteration
    it's is ``(offset ^ 32 jp) + 1024 dd`` (== 4 `vt_word_index` of `stsm_target_row`)."""
    i, r = lane >> 3, lane & 7
    odd = (r >> 2) ^ (i & 1)
    return 4096 * warp + 64 * (2 * r + odd) + 16 * (((i >> 1) ^ r) & 1) + 32 * ((r >> 1) & 1)


def stsm_iteration_offset(lane_offset, it: int):
    dd, jp = it >> 1, it & 1
    return (lane_offset ^ (32 * jp)) + 1024 * dd


def tail_unit(lane, chunk, s: int):
    """(key, 16-byte unit index in a tile_n=64 V stage) that ``lane`` zeroes in step s of
    `zero_keys_past` if key >= rows_valid: key lane // 4 + 8 s of d chunk ``chunk``. Written out
    (== `v_chunk_index`) so that the eight steps are one register plus immediates."""
    row = lane // 4
    return row + 8 * s, (chunk // 8) * 512 + 8 * row + ((chunk % 8) ^ row) + 64 * s


def transpose_tail_chunk(lane, warp, wg):
    """The d chunk ``lane`` zeroes for `_transpose_ldsm`: the four its warp's ldmatrix reads
    (`ldsm_source_row`), 4 warp + 0..3 of warpgroup wg's half."""
    return 16 * wg + 4 * warp + lane % 4


@cute.jit
def zero_keys_past(sV_chunks: cute.Tensor, stage, chunk, tidx_wg: Int32, rows_valid):
    """Zero the keys >= rows_valid of d chunk ``chunk`` (this lane's) in a tile_n=64 V stage:
    the warp's lanes cover the chunks that warp alone reads next, so a warp barrier orders the
    zeros before its loads; the proxy fence orders them before the TMA that refills the stage
    once it is released. (A NaN bit pattern in an unused cache slot must not meet a zero P.)"""
    zero = cute.make_rmem_tensor(4, Uint32)
    zero.fill(0)
    for s in cutlass.range_constexpr(8):
        key, unit = tail_unit(tidx_wg % 32, chunk, s)
        if key >= rows_valid:
            cute.autovec_copy(zero, sV_chunks[stage * (64 * 32) + unit, None])
    cute.arch.fence_view_async_shared()
    cute.arch.sync_warp()


@cute.jit
def _transpose_ldsm(sV_chunks: cute.Tensor, stage, sVt_words: cute.Tensor, vt_base, wg, tidx_wg: Int32):
    """`transpose_v_half` for tile_n=64 on ldmatrix.trans / stmatrix, every key kept."""
    tile_n = 64
    lane = tidx_wg % 32
    warp = tidx_wg // 32
    v_row = sV_chunks.iterator.toint() + stage * (tile_n * 512) + ldsm_lane_offset(lane, warp, wg)
    vt_row = sVt_words.iterator.toint() + 4 * vt_base + stsm_lane_offset(lane, warp)
    sel = stsm_selectors(lane)
    loaded = [None] * LDSM_PER_THREAD
    # the asm keeps program order, so load LDSM_AHEAD iterations ahead of the stores to
    # overlap the ldmatrix latency
    for step in cutlass.range_constexpr(LDSM_PER_THREAD + LDSM_AHEAD):
        if const_expr(step < LDSM_PER_THREAD):
            loaded[step] = ldmatrix_x4_trans(ldsm_iteration_offset(v_row, step))
        it = step - LDSM_AHEAD
        if const_expr(it >= 0):
            w = loaded[it]
            out = (byte_perm_var(w[0], w[1], sel[0]), byte_perm_var(w[0], w[1], sel[1]),
                   byte_perm_var(w[2], w[3], sel[0]), byte_perm_var(w[2], w[3], sel[1]))
            stmatrix_x4(stsm_iteration_offset(vt_row, it), out)


__all__ = [
    "p_to_fp8_a_two_term",
    "q_lo_fragment",
    "q_lo_source_word",
    "E4M3_MAX",
    "P_KEY_ORDER",
    "P_REGISTER_PERM",
    "P_TILE_BYTES",
    "PRMT_EVEN_D",
    "PRMT_ODD_D",
    "p_word_index",
    "key_of_k",
    "key_of_word_byte",
    "ldsm_iteration_offset",
    "ldsm_lane_offset",
    "ldsm_source_row",
    "q_scale_exponent",
    "quantize_q_half",
    "store_p_tile",
    "stsm_iteration_offset",
    "stsm_lane_offset",
    "stsm_selectors",
    "stsm_target_row",
    "tail_unit",
    "transpose_tail_chunk",
    "zero_keys_past",
    "p_to_fp8_a",
    "transpose_lane_plan",
    "transpose_selectors_of",
    "transpose_v_half",
    "v_chunk_index",
    "vt_word_index",
]
