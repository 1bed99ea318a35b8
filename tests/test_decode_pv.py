"""cute_kernels/decode_pv.py: the decode P.V computed as O^T = V^T P^T.

CPU: the whole data path lane by lane on a model of the PTX instructions (ldmatrix.trans,
prmt) and of the m64nNk32 wgmma fragment layouts: the V^T A fragments read from a TMA-swizzled
V stage, P^T written from P's e4m3 A fragment, the MMA, and the O store positions, against
(P V)^T. GPU coverage is the fp8_mma decode cases of profiles/gpu_mma16_smoke.py (dispatched
decode tiles run this path) and tests/test_cute_compile.py.
"""

from __future__ import annotations

import pytest
import torch

from cute_kernels.decode_pv import (
    K_STEPS, M_TILES, PT_BYTES, QUERIES, acc_index, pt_word_index, pvt_d_of_row, pvt_iteration_offset,
    pvt_lane_offset, pvt_source_row, pvt_tail_chunk,
)
from cute_kernels.fp8_operands import key_of_k, tail_unit, v_chunk_index, vt_word_index
from ptx_model import bank_conflict_degree, ldmatrix_x4_trans, prmt, v_stage_bytes


def test_lane_offsets_address_the_planned_rows():
    for wg in range(2):
        for warp in range(4):
            for lane in range(32):
                for m in range(M_TILES):
                    for kb in range(K_STEPS):
                        want = 16 * v_chunk_index(*pvt_source_row(lane, warp, wg, m, kb), 64)
                        for base in (0, 32768):  # the kernel XORs on top of a 1024-aligned stage
                            assert pvt_iteration_offset(base + pvt_lane_offset(lane, warp, wg), m, kb) == base + want


@pytest.mark.parametrize("rows_valid", [64, 23])
def test_transposed_pv_computes_p_times_v(rows_valid):
    g = torch.Generator().manual_seed(rows_valid)
    v = torch.randint(0, 256, (64, 512), dtype=torch.int64, generator=g)
    p = torch.randint(0, 256, (QUERIES, 64), dtype=torch.int64, generator=g)
    smem = v_stage_bytes(v)
    buf = 1

    # P^T from warp 0's e4m3 A fragment of P (row half 0 words): word w holds
    # P[lane // 4, key_of_k(k)], k = 32 kb + 16 kh + 4 (lane % 4) + byte, (kh, kb) = ((w >> 1) & 1, w >> 2)
    pt = [0] * (2 * PT_BYTES)
    for lane in range(32):
        for w in (0, 2, 4, 6):
            kh, kb = (w >> 1) & 1, w >> 2
            for e in range(4):
                k = 32 * kb + 16 * kh + 4 * (lane % 4) + e
                pt[4 * pt_word_index(lane, w, buf) + e] = int(p[lane // 4, key_of_k(k)])
    # the wgmma's B[n, k]: K-major, 64 B swizzle
    b = [[pt[PT_BYTES * buf + 4 * vt_word_index(n, k // 4, 64) + k % 4] for k in range(64)] for n in range(QUERIES)]

    for wg in range(2):
        # `zero_keys_past`: each warp zeroes the keys past the sequence in the chunks it reads
        stage = list(smem)
        for warp in range(4):
            read = {pvt_source_row(lane, warp, wg, m, kb)[1] for lane in range(32) for m in range(M_TILES)
                    for kb in range(K_STEPS)}
            assert {pvt_tail_chunk(lane, warp, wg) for lane in range(32)} == read
            for lane in range(32):
                for s in range(8):
                    key, unit = tail_unit(lane, pvt_tail_chunk(lane, warp, wg), s)
                    if key >= rows_valid:
                        stage[16 * unit: 16 * unit + 16] = [0] * 16
        out = torch.full((QUERIES, 256), -1, dtype=torch.int64)
        for m in range(M_TILES):
            a = [[0] * 64 for _ in range(64)]  # the m tile's A[row, k] over both k-steps
            for warp in range(4):
                for kb in range(K_STEPS):
                    addrs = [pvt_iteration_offset(pvt_lane_offset(lane, warp, wg), m, kb) for lane in range(32)]
                    for i in range(4):  # one bank column per row of each matrix
                        assert bank_conflict_degree(addrs[8 * i: 8 * i + 8]) == 1
                    loaded = ldmatrix_x4_trans(stage, addrs)
                    for t in range(32):
                        c, q = t // 4, t % 4
                        words = loaded[t]
                        frag = [prmt(words[0], words[1], 0x6420), prmt(words[0], words[1], 0x7531),
                                prmt(words[2], words[3], 0x6420), prmt(words[2], words[3], 0x7531)]
                        for i, word in enumerate(frag):  # e4m3 A fragment word i: (row half i & 1, k half i >> 1)
                            for e in range(4):
                                a[16 * warp + c + 8 * (i & 1)][32 * kb + 16 * (i >> 1) + 4 * q + e] = (word >> (8 * e)) & 0xFF
            # the MMA, then each thread's accumulator values to their O places
            acc = [[sum(a[r][k] * b[n][k] for k in range(64)) for n in range(QUERIES)] for r in range(64)]
            for warp in range(4):
                for lane in range(32):
                    for col in range(2):
                        for row in range(2):
                            value = acc[16 * warp + lane // 4 + 8 * row][2 * (lane % 4) + col]
                            assert acc_index(col, row, m) < 4 * M_TILES
                            n, d = 2 * (lane % 4) + col, pvt_d_of_row(warp, row, lane, m)
                            assert out[n, d] == -1
                            out[n, d] = value
        vz = v.clone()
        vz[rows_valid:] = 0
        assert torch.equal(out, p @ vz[:, 256 * wg: 256 * wg + 256])
