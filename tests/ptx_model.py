"""Python models of the PTX data movement the FP8 operand code relies on, for lane-by-lane
CPU tests (PTX ISA semantics; Python ints, bytes as lists)."""

from __future__ import annotations

import torch

from cute_kernels.fp8_operands import v_chunk_index


def prmt(a: int, b: int, sel: int) -> int:
    """prmt.b32 (default mode): byte i of the result is byte (sel >> 4i) & 7 of (a, b)."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def v_stage_bytes(v: torch.Tensor) -> list:
    """A (64, 512) e4m3 V block as the TMA leaves it in shared memory (128 B swizzle)."""
    tile_n = v.shape[0]
    smem = [0] * (tile_n * 512)
    for key in range(tile_n):
        for d in range(512):
            smem[16 * v_chunk_index(key, d // 16, tile_n) + d % 16] = int(v[key, d])
    return smem


def ldmatrix_x4_trans(smem: list, addrs: list) -> list:
    """ldmatrix.sync.aligned.m8n8.x4.trans.b16: ``addrs[8 i + r]`` is row r of matrix i; lane t
    gets word i = matrix i's b16 elements (row 2q, column c), (row 2q + 1, column c),
    c = t // 4, q = t % 4, little-endian."""
    words = [[0] * 4 for _ in range(32)]
    for i in range(4):
        rows = [smem[a: a + 16] for a in addrs[8 * i: 8 * i + 8]]
        for t in range(32):
            c, q = t // 4, t % 4
            b = [rows[2 * q][2 * c], rows[2 * q][2 * c + 1], rows[2 * q + 1][2 * c], rows[2 * q + 1][2 * c + 1]]
            words[t][i] = b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24
    return words


def bank_conflict_degree(addrs: list) -> int:
    """How many of one matrix phase's eight 16-byte rows share a 16-byte bank column."""
    cols = [(a // 16) % 8 for a in addrs]
    return max(cols.count(c) for c in cols)


def stmatrix_x4(smem: list, addrs: list, words: list) -> None:
    """stmatrix.sync.aligned.m8n8.x4.b16 on a shared memory of 16-bit slots: row r of matrix i
    goes to the 16 bytes at byte address ``addrs[8 i + r]``; its elements 2q, 2q + 1 are lane
    (4 r + q)'s word i, given here as a pair of element values (low half first)."""
    for i in range(4):
        for r in range(8):
            for q in range(4):
                lo, hi = words[4 * r + q][i]
                smem[addrs[8 * i + r] // 2 + 2 * q] = lo
                smem[addrs[8 * i + r] // 2 + 2 * q + 1] = hi
