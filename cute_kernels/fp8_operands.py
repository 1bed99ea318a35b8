"""The operands of the FP8 (QGMMA) forward: Q quantised per row, P in A registers, V transposed.

FP8 wgmma takes both smem operands K-major and an A operand from registers in its own
fragment layout. Three consequences, each handled here by one warpgroup on its d half:

Q (`quantize_q_half`)
    Q arrives in bf16/fp16. Each warpgroup quantises its (64, 256) half to e4m3 with one
    power-of-two scale per row and half: scale = 2^k for the smallest k with amax <= 448 * 2^k
    (k clamped to [-126, 126]; an all-zero row gets 1). q / scale is exact, so the only rounding
    is e4m3's own, and S_half = scale * (Q8_half . K_half) is what `FlashFwdSm90` sums across the
    two warpgroups. `fa512.emulation` (design fa512_fp8) reproduces this rule bit for bit.

P (`p_to_fp8_a`)
    The fp32 accumulator of an m64nN wgmma holds, per thread (q = lane % 4), columns
    8j + 2q + {0, 1} of rows r and r+8. The e4m3 A fragment of an m64k32 wgmma holds
    k = 4q..4q+3 and 16+4q..19+4q of rows r and r+8. Register renaming alone maps one onto the
    other if P's key order inside each 16-key group is permuted: A's k index 16G + 4q + e holds
    the key ``key_of_k(16G + 4q + e) = 16G + 2q + (e & 1) + 8 (e >> 1)`` (`P_KEY_ORDER`).
    No shuffles: the C->A move is a compile-time register permutation (`P_REGISTER_PERM`).

V (`transpose_v_half`)
    PV needs V^T K-major (keys contiguous per d row) in the same permuted key order, so the
    transpose writes ``Vt[d, k] = V[key_of_k(k), d]``. A thread reads 16 d-bytes of the four
    keys that land in one 4-byte word of Vt (16G + 2q + {0, 1, 8, 9}), transposes the 4 x 4 byte
    blocks with 8 ``prmt`` each and writes 16 words. Rows at or past ``rows_valid`` are written
    as zeros: a NaN bit pattern in an unused cache slot must not meet a zero P in the MMA.

P as an smem operand (`store_p_tile`)
    With ``qk_mode="alternate"`` one warpgroup's P is the other's A operand, read from smem by
    an SS wgmma: a (64, 64) K-major tile with 64 B swizzle (the layout of a Vt tile), the
    register fragment's words stored at their (row, k) places (`p_word_index`).

The pure-Python tables at the top are what the CPU tests check; the DSL code below uses them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float32, Int32, Uint32, const_expr

from .dsl_utils import bits_f32, byte_perm_var, f32_bits, sw128_unit

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
                    k_step_rows: cutlass.Constexpr[bool] = False):
    """sQ8 (64, 256) e4m3 <- sQ_in (64, 256) bf16/f16 / scale[row]; sScale (64,) fp32 <- scale.

    Thread t handles the 16 columns of chunk t % 16 in rows t // 16 + 8 i; the 16 threads of a
    row are 16 consecutive lanes, so the row amax is a 4-step butterfly. Two passes over smem
    (amax, then scale and convert) keep 16 values live per thread instead of 128.

    ``k_step_rows`` (`Sm90FwdConfig.qk_rows`): row 8 i + r becomes row r restricted to the
    32 columns of k-step i (zeros elsewhere), scaled by that chunk's own amax.
    """
    rows = cute.size(sQ_in, mode=[0])
    chunk = tidx_wg % 16
    for i in cutlass.range_constexpr(rows // 8):
        row = tidx_wg // 16 + 8 * i
        src_row = row
        if const_expr(k_step_rows):
            src_row = tidx_wg // 16
        src = cute.local_tile(sQ_in, (1, 16), (src_row, chunk))
        r_in = cute.make_rmem_tensor((1, 16), sQ_in.element_type)
        cute.autovec_copy(src, r_in)
        vals = r_in.load().to(Float32)
        if const_expr(k_step_rows):
            keep = Float32(0.0)
            if chunk // 2 == i:  # 16-column chunks 2i and 2i + 1 make k-step i
                keep = Float32(1.0)
            vals = vals * keep
        amax = Float32(0.0)
        for c in cutlass.range_constexpr(16):
            amax = cute.arch.fmax(amax, abs(vals[c]))
        for off in (1, 2, 4, 8):
            amax = cute.arch.fmax(amax, cute.arch.shuffle_sync_bfly(amax, offset=off))
        k = _scale_exponent(amax)
        inv = bits_f32((127 - k) << 23)  # 2^-k: exact
        r_f = cute.make_rmem_tensor((1, 16), Float32)
        r_f.store(vals * inv)
        r_out = cute.make_rmem_tensor((1, 16), Float8E4M3FN)
        r_out.store(r_f.load().to(Float8E4M3FN))
        cute.autovec_copy(r_out, cute.local_tile(sQ8, (1, 16), (row, chunk)))
        if chunk == 0:
            sScale[row] = bits_f32((127 + k) << 23)


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


# qk_mode "alternate" hands P to the other warpgroup as the A operand of an SS wgmma: a
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
                     rows_valid, tile_n: cutlass.Constexpr[int], tail_branch: cutlass.Constexpr[bool] = False):
    """Vt (256, tile_n) e4m3, K-major <- warpgroup wg's d half of V stage ``stage``, keys in
    `P_KEY_ORDER`.

    sV_chunks : the V stage ring as (16-byte chunks, 4) words; sVt_words : words, Vt of this
    warpgroup from word ``vt_base``. Addresses are computed from `v_chunk_index` /
    `vt_word_index` rather than through the swizzled CuTe views: those made the compiler hoist
    one address per store out of the block loop and spill.

    Unit (word column w4, 16-byte d chunk): the four source keys of Vt columns 4 w4 .. 4 w4 + 3,
    16 bytes each, become 16 Vt words. Which thread takes which unit, and in which order it
    stores the four rows of each 4 x 4 block, is `transpose_lane_plan`: bank-conflict free
    loads and stores (the first version's lane order cost 8-way conflicts on the loads and
    2-way on the stores: half of the kernel's excess shared-memory wavefronts, ncu on the H200).
    Keys >= ``rows_valid`` are stored as zeros (None: all valid). Only a sequence's last block
    has such keys; with ``tail_branch`` the zeroing (a select per loaded word) runs only there,
    behind a warp-uniform branch. The second copy of the transpose costs registers: the split-d
    variants spill 2-11 STL/LDL with it, so only the pingpong ones take it.
    """
    if const_expr(rows_valid is None or not tail_branch):
        _transpose_units(sV_chunks, stage, sVt_words, vt_base, wg, tidx_wg, rows_valid, tile_n)
    elif rows_valid >= tile_n:
        _transpose_units(sV_chunks, stage, sVt_words, vt_base, wg, tidx_wg, None, tile_n)
    else:
        _transpose_units(sV_chunks, stage, sVt_words, vt_base, wg, tidx_wg, rows_valid, tile_n)


@cute.jit
def _transpose_units(sV_chunks: cute.Tensor, stage, sVt_words: cute.Tensor, vt_base, wg, tidx_wg: Int32,
                     rows_valid, tile_n: cutlass.Constexpr[int]):
    """The body of `transpose_v_half`; ``rows_valid`` None: no key is zeroed."""
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


__all__ = [
    "E4M3_MAX",
    "P_KEY_ORDER",
    "P_REGISTER_PERM",
    "P_TILE_BYTES",
    "p_word_index",
    "key_of_k",
    "key_of_word_byte",
    "q_scale_exponent",
    "quantize_q_half",
    "store_p_tile",
    "p_to_fp8_a",
    "transpose_lane_plan",
    "transpose_selectors_of",
    "transpose_v_half",
    "v_chunk_index",
    "vt_word_index",
]
