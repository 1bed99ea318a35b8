"""cute_kernels/consumer_decode_alt.py: the transposed, alternating decode tile (CPU).

Lane by lane on models of the wgmma accumulator layout, shfl.bfly and prmt: where each S^T value
sits, how every lane turns its four P values into one P^T word (one shuffle with lane ^ 4, one
prmt), and that the P^T buffer then holds P[query, key_of_k(k)] at every (query, k), the k order
of `decode_pv`'s V^T fragments (tests/test_decode_pv.py checks those against (P V)^T). The
numerics of the layout (two softmax states merged once) are `Design.wg_blocks`, tested in
tests/test_emulation.py. The GPU tests run the dispatched decode tiles (tests/test_cute_compile.py,
tests/test_many_splits.py, `python -m fa512 fuzz`) against the emulation of the variant that ran.
"""

from __future__ import annotations

import torch

from cute_kernels.consumer_decode_alt import (
    PRMT_EVEN_R, PRMT_ODD_R, pt_word_index, pt_word_of_lane, value_coords,
)
from cute_kernels.decode_pv import PT_BYTES, QUERIES
from cute_kernels.fp8_operands import key_of_k, vt_word_index
from ptx_model import prmt


def _accumulator_coords(lane: int, warp: int, i: int) -> tuple:
    """(row, column) of value i of an m64n8 wgmma accumulator (PTX ISA's D fragment layout:
    row 16 warp + lane / 4 + 8 (i / 2 % 2), column 2 (lane % 4) + i % 2)."""
    return 16 * warp + lane // 4 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2


def test_value_coords_are_the_accumulator_layout_with_keys_as_rows():
    seen = set()
    for warp in range(4):
        for lane in range(32):
            for i in range(4):
                assert value_coords(lane, warp, i) == _accumulator_coords(lane, warp, i)
                seen.add(value_coords(lane, warp, i))
    assert seen == {(key, q) for key in range(64) for q in range(QUERIES)}


def test_every_lane_writes_one_whole_p_word_in_the_pv_k_order():
    g = torch.Generator().manual_seed(0)
    p = torch.randint(0, 256, (QUERIES, 64), dtype=torch.int64, generator=g)  # e4m3 bytes of P[query, key]
    for buf in (0, 1):
        pt = [None] * (2 * PT_BYTES)
        for warp in range(4):
            mine = []
            for lane in range(32):  # the word of the thread's four converted P values, value i at byte i
                mine.append(sum(int(p[q, key]) << (8 * i)
                                for i, (key, q) in enumerate(value_coords(lane, warp, i) for i in range(4))))
            theirs = [mine[lane ^ 4] for lane in range(32)]  # shfl.bfly 4
            words = [prmt(mine[lane], theirs[lane], PRMT_ODD_R if (lane // 4) % 2 else PRMT_EVEN_R)
                     for lane in range(32)]
            idx = [pt_word_index(lane, warp, buf) for lane in range(32)]
            assert len(set(idx)) == 32
            # 4-byte banks: the 64 B swizzle spreads the warp's 8 rows x 4 words over all 32
            banks = [i % 32 for i in idx]
            assert max(banks.count(b) for b in banks) == 1
            for lane in range(32):
                q, w4 = pt_word_of_lane(lane, warp)
                assert idx[lane] == (PT_BYTES // 4) * buf + vt_word_index(q, w4, 64)
                for e in range(4):
                    assert pt[4 * idx[lane] + e] is None
                    pt[4 * idx[lane] + e] = (words[lane] >> (8 * e)) & 0xFF
        # the wgmma's B[n, k] (K-major, 64 B swizzle) is P[n, key_of_k(k)] everywhere
        for n in range(QUERIES):
            for k in range(64):
                got = pt[PT_BYTES * buf + 4 * vt_word_index(n, k // 4, 64) + k % 4]
                assert got == int(p[n, key_of_k(k)]), (buf, n, k)
        other = 1 - buf
        assert all(b is None for b in pt[PT_BYTES * other: PT_BYTES * other + PT_BYTES])


def test_a_wrong_selector_is_caught():
    # the check above fails if the two halves of the lane pair swap roles
    p = torch.arange(QUERIES * 64).reshape(QUERIES, 64) % 251
    warp, lane = 0, 0
    mine = sum(int(p[q, key]) << (8 * i) for i, (key, q) in enumerate(value_coords(lane, warp, i) for i in range(4)))
    theirs = sum(int(p[q, key]) << (8 * i)
                 for i, (key, q) in enumerate(value_coords(lane ^ 4, warp, i) for i in range(4)))
    q, w4 = pt_word_of_lane(lane, warp)
    right = [int(p[q, key_of_k(4 * w4 + e)]) for e in range(4)]
    assert [(prmt(mine, theirs, PRMT_EVEN_R) >> (8 * e)) & 0xFF for e in range(4)] == right
    assert [(prmt(mine, theirs, PRMT_ODD_R) >> (8 * e)) & 0xFF for e in range(4)] != right
