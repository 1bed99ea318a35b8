"""The staged O epilogue of the alternating prefill layout (`cute_kernels.epilogue.store_staged`),
lane by lane on the CPU: the stmatrix addresses each lane gives agree with the accumulator values it
holds, the read back returns every row as it was, and both access patterns are free of bank
conflicts (PTX semantics from `ptx_model`; no GPU)."""

from __future__ import annotations

import importlib.util

import pytest

from ptx_model import bank_conflict_degree, stmatrix_x4

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")

ROWS, COLS, WARPS = 64, 256, 4  # a warpgroup's O half, 16-bit values


def _epilogue():
    from cute_kernels import epilogue

    return epilogue


def _stage(o):
    """The stage's 16-bit slots after every warp's 16 stmatrix.x4 of ``o`` (ROWS x COLS)."""
    ep = _epilogue()
    smem = [None] * (ROWS * COLS)
    for warp in range(WARPS):
        for jj in range(ep.CHUNKS_PER_ROW // 2):
            addrs = [16 * ep.staged_chunk(*ep.stsm_row_chunk(lane, warp, jj)) for lane in range(32)]
            words = []
            for t in range(32):  # the accumulator: lane t holds rows t // 4 (+ 8), columns 8 J + 2 (t % 4) + {0, 1}
                mats = [ep.stsm_matrix(m, jj) for m in range(4)]
                words.append([tuple(o[16 * warp + 8 * h + t // 4][8 * g + 2 * (t % 4) + c] for c in range(2))
                              for h, g in mats])
            stmatrix_x4(smem, addrs, words)
            for i in range(4):
                assert bank_conflict_degree(addrs[8 * i: 8 * i + 8]) == 1, (warp, jj, i)
    return smem


def test_the_stage_holds_each_value_once_and_reads_back_as_rows():
    ep = _epilogue()
    o = [[r * COLS + c for c in range(COLS)] for r in range(ROWS)]
    smem = _stage(o)
    assert sorted(smem) == list(range(ROWS * COLS))  # every slot written once, nothing overwritten
    for row in range(ROWS):
        for lane in range(32):  # warp row % 4's lane reads chunk `lane` of the row: columns 8 lane .. 8 lane + 7
            start = 8 * ep.staged_chunk(row, lane)
            assert smem[start: start + 8] == o[row][8 * lane: 8 * lane + 8], (row, lane)


def test_the_read_back_is_free_of_bank_conflicts():
    ep = _epilogue()
    for row in range(ROWS):
        addrs = [16 * ep.staged_chunk(row, lane) for lane in range(32)]
        for phase in range(4):  # a 16-byte load is served 8 lanes at a time
            assert bank_conflict_degree(addrs[8 * phase: 8 * phase + 8]) == 1, (row, phase)
        assert len(set(addrs)) == 32 and max(addrs) - min(addrs) < ROWS * COLS * 2


def test_a_wrong_lane_mapping_is_caught():
    """The round trip can fail: a lane that gives its neighbour's row address scrambles rows."""
    ep = _epilogue()
    real = ep.stsm_row_chunk
    try:
        ep.stsm_row_chunk = lambda lane, warp, jj: real(lane ^ 1, warp, jj)
        o = [[r * COLS + c for c in range(COLS)] for r in range(ROWS)]
        smem = _stage(o)
        assert any(smem[8 * ep.staged_chunk(r, 0): 8 * ep.staged_chunk(r, 0) + 8] != o[r][:8] for r in range(ROWS))
    finally:
        ep.stsm_row_chunk = real


def test_every_alternating_unsplit_variant_stages_and_no_other():
    """The staged epilogue serves exactly the unsplit alternating-layout variants of the dispatch
    table, local windows included (their q_start reload keeps them free of spills)."""
    from cute_kernels.variants import variant_list

    ep = _epilogue()
    variants = variant_list()
    staged = {c.key() for c in variants if ep.Epilogue(c).staged}
    expected = {c.key() for c in variants if c.layout == "alternate" and not c.split}
    assert staged == expected
    assert any("-local-" in key for key in staged) and any("-causal-" in key for key in staged)
