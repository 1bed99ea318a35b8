"""The SM90 CuTe DSL kernels (cute_kernels/, fa512.backends.compile_cache, fa512.backends.cute).

CPU (no GPU needed): configs and their smem budgets; compiling representative variants for
sm_90a against fake tensors and checking the SASS (HGMMA shapes, setmaxnreg budgets, no
STL/LDL, smem <= 227 KB); the disk cache (a new process loads a cached kernel fast, concurrent
builders do not corrupt it). About a minute on 2 cores.

GPU (``-m gpu``, H100/H200): `Mma16Backend` against the float64 reference over masks, layouts,
GQA packing, splits, descales, empty rows/sequences and a CUDA-graph replay with new lengths.
The kernel first hung on an H200 (setmaxnreg budgets above the CTA register pool); after the
fix profiles/gpu_mma16_smoke.py passed --diag (9/9) and --quick (27/27) there on 2026-11-29.
If a change makes it hang, ``profiles/gpu_mma16_smoke.py --diag`` finds the stage without
hanging the machine.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
HAS_DSL = importlib.util.find_spec("cutlass") is not None and importlib.util.find_spec("tvm_ffi") is not None
needs_dsl = pytest.mark.skipif(not HAS_DSL, reason="nvidia-cutlass-dsl / apache-tvm-ffi not installed")

from cute_kernels.config import SMEM_LIMIT, TILE_M, Sm90FwdConfig  # noqa: E402
from cute_kernels.variants import PV_PROMOTE_MIN_KEYS, default_config, variant_list  # noqa: E402


# ---------------------------------------------------------------------------------------
# configs (pure Python)
# ---------------------------------------------------------------------------------------
def test_variant_list_is_buildable_and_keys_unique():
    variants = variant_list()
    keys = [c.key() for c in variants]
    assert len(keys) == len(set(keys))
    for cfg in variants:
        ok, why = cfg.can_implement()
        assert ok, (cfg.key(), why)
        assert cfg.smem_bytes() <= SMEM_LIMIT
    short = variant_list(full=False)
    assert all(cfg in variants for cfg in short)
    assert {cfg.layout for cfg in short} == {"split_d", "alternate", "decode", "decode_alt"}


def _dispatch_inputs(cfg):
    """Every `default_config` input that could give ``cfg`` (its own fields, the host bounds on
    keys and queries that pick fp8_mma's layouts)."""
    fp8 = cfg.kv_dtype == "fp8_e4m3"
    for keys, queries in ((0, 0), (PV_PROMOTE_MIN_KEYS, 0), (0, 1), (0, TILE_M), (PV_PROMOTE_MIN_KEYS, TILE_M)):
        yield dict(kv_dtype=cfg.kv_dtype, q_dtype=cfg.q_dtype, mask=cfg.mask, paged=cfg.is_paged,
                   page_size=cfg.page_size, group=cfg.qhead_per_kvhead, split=cfg.split, descale=cfg.descale,
                   fp8_mma=fp8 and cfg.mma_path == "fp8_mma", max_seqlen_k=keys, max_seqlen_q=queries,
                   accurate=cfg.two_term)


def test_variant_list_holds_dispatch_rows_only():
    """Nothing is compiled that the dispatch cannot pick: every variant is a `default_config` row,
    or the fused-combine twin of a split row the dispatch fuses (`Mma16Backend.fuses_combine`)."""
    for cfg in variant_list():
        row = cfg.with_(fused_combine=False)
        assert any(default_config(**kw) == row for kw in _dispatch_inputs(row)), cfg.key()
        if cfg.fused_combine:
            assert cfg.mma_path == "fp8_mma" and cfg.split and cfg.mask != "local" and cfg.layout != "alternate", cfg.key()


@pytest.mark.parametrize(
    "changes, fragment",
    [
        (dict(tile_n=48), "tile_n"),
        (dict(tile_n=32, kv_stages=3), "shared memory"),
        (dict(kv_layout="paged", page_size=48), "page_size"),
        (dict(qhead_per_kvhead=3), "divide"),
        (dict(consumer_regs=248), "register file"),
        (dict(producer_regs=32, consumer_regs=240), "register pool"),  # fits 65536, not the pool: the H200 hang
        (dict(stage="half"), "stage"),
        (dict(stage="qk"), "stage"),
        (dict(mma_path="f16"), "q_dtype"),
        (dict(mask="sliding"), "mask"),
        (dict(layout="duplicate"), "layout"),
        (dict(layout="alternate"), "fp8_mma"),
        (dict(layout="decode"), "fp8_mma"),
        (dict(mma_path="fp8_mma", layout="alternate", tile_n=64, kv_stages=1), "two K/V stages"),
        (dict(mma_path="fp8_mma", kv_stages=2, layout="decode", pv_promote=True, producer_regs=24,
              consumer_regs=240), "split_d"),
    ],
)
def test_can_implement_names_the_problem(changes, fragment):
    ok, why = Sm90FwdConfig(**changes).can_implement()
    assert not ok and fragment in why


def test_register_budget_fits_the_cta_pool():
    """setmaxnreg.inc waits until the CTA pool (launch REG x threads) serves it: the budgets must fit
    168 x 384 = 64512, not 65536 (32 + 2 x 240 = 65536 hung every launch on an H200)."""
    from cute_kernels.config import LAUNCH_REGS, REGISTER_POOL
    from cute_kernels.pipeline_checks import PipelineCheckError, check_register_split

    assert (LAUNCH_REGS, REGISTER_POOL) == (168, 64512)
    for cfg in variant_list():
        assert (cfg.producer_regs + 2 * cfg.consumer_regs) * 128 <= REGISTER_POOL, cfg.key()
    check_register_split(24, 240, 2, 384)
    with pytest.raises(PipelineCheckError, match="CTA pool"):
        check_register_split(32, 240, 2, 384)


def test_sass_register_pool_check():
    from fa512.tools.compile import register_pool_problem

    assert register_pool_problem(["DEALLOC.CTAPOOL:24", "TRY_ALLOC.CTAPOOL:240"], 168, 384) is None
    assert "wait forever" in register_pool_problem(["DEALLOC.CTAPOOL:32", "TRY_ALLOC.CTAPOOL:240"], 168, 384)
    assert register_pool_problem([], 80, 128) is None  # no setmaxnreg (combine)


@needs_dsl
def test_diag_stage_keys_and_trace_decoding():
    from cute_kernels.config import STAGES
    from cute_kernels.diagnostics import TRACE_BUFFER_WORDS, TRACE_EVENTS, decode_trace

    base = Sm90FwdConfig()
    keys = {base.with_(stage=st).key() for st in STAGES} | {base.with_(trace=True).key()}
    assert len(keys) == len(STAGES) + 1 and base.key() in keys  # "full" keeps the production key
    words = [0] * TRACE_BUFFER_WORDS
    words[12:15] = [TRACE_EVENTS.index("consumer K ready: block, stage") + 1, 3, 0]
    words[-4] = 7
    lines = decode_trace(words)
    assert "warp  4 (WG1): last event 'consumer K ready: block, stage' (3, 0)" in lines[4]
    assert lines[-1].endswith(": 7")
    assert base.with_(timeline=True).key().endswith("-timeline")
    assert not base.with_(trace=True, timeline=True).can_implement()[0]


def test_timeline_decoding():
    from cute_kernels.diagnostics import TIMELINE_FIRST_WORD, TIMELINE_SLOTS, TIMELINE_WORDS, TRACE_EVENTS, decode_timeline

    assert decode_timeline([0] * TIMELINE_WORDS) == ["timeline: no event recorded"]
    words = [0] * TIMELINE_WORDS
    ready = TRACE_EVENTS.index("consumer Q ready")

    def put(warp, event, clock, ns):
        words[2 * (warp * TIMELINE_SLOTS + event)] = clock
        words[2 * (warp * TIMELINE_SLOTS + event) + 1] = ns

    put(0, 0, 2**32 - 100, 5000)  # the clock wraps between the two warps' starts
    put(4, 0, 50, 5060)
    put(4, ready, 4050, 7060)
    put(4, TIMELINE_SLOTS - 1, 9050, 9560)
    # an event stamped once has its first stamp equal to its last: shown once
    for w, e in ((0, 0), (4, 0), (4, ready), (4, TIMELINE_SLOTS - 1)):
        i = 2 * (w * TIMELINE_SLOTS + e)
        words[TIMELINE_FIRST_WORD + i:TIMELINE_FIRST_WORD + i + 2] = words[i:i + 2]
    k_ready = TRACE_EVENTS.index("consumer K ready: block, stage")  # one stamp per key block
    put(4, k_ready, 7050, 8060)
    i = 2 * (4 * TIMELINE_SLOTS + k_ready)
    words[TIMELINE_FIRST_WORD + i:TIMELINE_FIRST_WORD + i + 2] = [5050, 7560]
    lines = decode_timeline(words, clock_ghz=2.0)
    assert lines[0].startswith("warp  0 (WG0)        0 cyc") and lines[0].endswith("start")
    assert "warp  4 (WG1)      150 cyc =       75 ns  (timer     60 ns)  start" == lines[1]
    assert lines[2].startswith("warp  4 (WG1)     4150 cyc") and lines[2].endswith("consumer Q ready")
    assert lines[3].startswith("warp  4 (WG1)     5150 cyc") and lines[3].endswith("consumer K ready: block, stage (first)")
    assert lines[4].startswith("warp  4 (WG1)     7150 cyc") and lines[4].endswith("consumer K ready: block, stage")
    assert lines[5].endswith("exit") and "(timer   4560 ns)" in lines[5] and len(lines) == 6


def test_cta_records_add_up_the_grids_sm_time():
    """Three CTAs on two SMs: their phases, the gap between two CTAs on SM 5 (and none after the
    last CTA of an SM), a CTA without a record and one without every stamp left out of the sums,
    and a global timer that wraps inside a record."""
    from cute_kernels.diagnostics import CTA_WORDS, TIMELINE_WORDS, cta_phase_summary, cta_records

    words = [0] * (TIMELINE_WORDS + 5 * CTA_WORDS)

    def put(cta, sm, stamps, blocks):
        words[TIMELINE_WORDS + CTA_WORDS * cta: TIMELINE_WORDS + CTA_WORDS * cta + 6] = [sm + 1, *stamps, blocks]

    put(0, 5, [1000, 3000, 13000, 15000], 8)
    put(1, 7, [2**32 - 500, 1500, 11500, 12500], 8)  # stamps wrap: start at 2**32 - 500
    put(3, 5, [17000, 18000, 22000, 23000], 4)  # SM 5 again, 2 us after CTA 0's done
    put(4, 7, [20000, 21000, 0, 0], 2)  # never reached its epilogue: not in the sums
    recs = cta_records(words)
    assert [r["cta"] for r in recs] == [0, 1, 3, 4] and recs[1]["consumer done"] == 2**32 + 12500
    assert recs[2]["sm"] == 5 and recs[2]["blocks"] == 4 and recs[3]["consumer done"] is None
    # unwrapped, CTA 1 starts at 2**32 - 500 and the others near 0: put them on one clock
    for r in recs[:1] + recs[2:3]:
        for e in ("start", "consumer Q ready", "consumer Q released, epilogue next", "consumer done"):
            r[e] += 2**32
    s = cta_phase_summary(recs, num_sms=2)
    assert (s["ctas"], s["sms"]) == (3, 2)
    assert s["span_us"] == pytest.approx((2**32 + 23000 - (2**32 - 500)) / 1e3)
    assert s["prologue_us"] == pytest.approx((2000 + 2000 + 1000) / 1e3)
    assert s["blocks_us"] == pytest.approx((10000 + 10000 + 4000) / 1e3)
    assert s["epilogue_us"] == pytest.approx((2000 + 1000 + 1000) / 1e3)
    assert s["between_us"] == pytest.approx(2.0)
    assert s["blocks share"] == pytest.approx(24.0 / (2 * s["span_us"]))
    assert "merge_us" not in s  # no fused-combine stamps: the epilogue stays whole
    assert cta_phase_summary([], num_sms=2) == {}


def test_cta_records_divide_a_fused_combines_epilogue():
    """Fused-combine records (`FUSED_EVENTS` in the record's last two words): the epilogue as
    store, merge wait and merge, and the arrival's spread against the last partial stored; a
    record missing one of the two fused stamps keeps the epilogue whole."""
    from cute_kernels.diagnostics import CTA_WORDS, FUSED_EVENTS, TIMELINE_WORDS, cta_phase_summary, cta_records

    words = [0] * (TIMELINE_WORDS + 2 * CTA_WORDS)
    # start, Q ready, epilogue next, done | blocks | partials stored, splits arrived
    words[TIMELINE_WORDS: TIMELINE_WORDS + 8] = [1, 1000, 2000, 8000, 14000, 4, 9000, 12000]
    words[TIMELINE_WORDS + 8: TIMELINE_WORDS + 16] = [2, 1500, 2500, 10000, 15000, 4, 11000, 12500]
    recs = cta_records(words)
    assert recs[0][FUSED_EVENTS[0]] == 9000 and recs[1][FUSED_EVENTS[1]] == 12500
    s = cta_phase_summary(recs, num_sms=2)
    assert s["store_us"] == pytest.approx((1000 + 1000) / 1e3)
    assert s["merge wait_us"] == pytest.approx((3000 + 1500) / 1e3)
    assert s["merge_us"] == pytest.approx((2000 + 2500) / 1e3)
    assert s["epilogue_us"] == pytest.approx(s["store_us"] + s["merge wait_us"] + s["merge_us"])
    assert (s["last_store_us"], s["first_arrival_us"], s["last_arrival_us"]) == pytest.approx((10.0, 11.0, 11.5))
    words[TIMELINE_WORDS + 15] = 0  # CTA 1 without its arrival stamp
    s = cta_phase_summary(cta_records(words), num_sms=2)
    assert "merge_us" not in s and s["epilogue_us"] == pytest.approx((6000 + 5000) / 1e3)


def test_default_config_shapes():
    cfg = default_config(kv_dtype="bf16", q_dtype="bf16", mask="causal", paged=True, page_size=16, group=8)
    assert not cfg.can_implement()[0]  # page_size 16 < tile_n: refused with a reason
    cfg = default_config(kv_dtype="bf16", q_dtype="bf16", mask="causal", paged=True, page_size=32, group=8)
    assert cfg.tile_n == 32 and cfg.kv_stages == 2 and cfg.can_implement()[0]
    cfg = default_config(kv_dtype="f16", q_dtype="f16", mask="none", paged=False, group=6)
    assert cfg.qhead_per_kvhead == 1  # 6 does not divide 64: no packing


def test_fp8_mma_decode_tiles_spread_qk_over_their_rows():
    """Tiles of at most 8 query rows (decode at G=8) take the decode layout (`Sm90FwdConfig.qk_rows`)
    at any context length (instead of the promoted P.V, which spills with it), split or not; larger
    tiles and other paths do not; the config refuses it where the layout has no spare rows to use."""
    from cute_kernels.variants import QK_ROWS_MAX_QUERY_ROWS

    kw = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", paged=True, page_size=64, group=8, fp8_mma=True, mask="causal")
    for keys in (4096, PV_PROMOTE_MIN_KEYS):
        for split in (False, True):
            cfg = default_config(max_seqlen_k=keys, max_seqlen_q=1, split=split, **kw)
            # tile_n=64: the transposed tile whose warpgroups take the blocks in turn
            assert cfg.layout == "decode_alt" and cfg.qk_rows and cfg.wg_blocks and not cfg.pv_promote
            assert cfg.can_implement()[0]
            assert cfg.key().endswith("-decode_alt-r40-232") and cfg.with_split(not split).qk_rows
            assert cfg.pv_transposed and not cfg.vt_prepass  # P.V as O^T = V^T P^T (`cute_kernels.decode_pv`)
            # two K/V stages (stage w holds warpgroup w's blocks) beside its 8-row Q tile
            assert (cfg.kv_stages, cfg.q_tile_rows) == (2, 8) and cfg.smem_bytes() <= SMEM_LIMIT
            assert cfg.smem_bytes() < cfg.with_(layout="decode").smem_bytes()  # the 64-row Q tile
            # Q and P as two e4m3 terms (tile_n=64, layout "decode") for precision="accurate" only
            accurate = default_config(max_seqlen_k=keys, max_seqlen_q=1, split=split, accurate=True, **kw)
            assert not cfg.two_term and accurate == cfg.with_(layout="decode", two_term=True, kv_stages=2)
            assert not accurate.wg_blocks and not cfg.with_(two_term=True).can_implement()[0]
            assert accurate.key().endswith("-decode-r40-232-2term") and accurate.can_implement()[0]
    assert QK_ROWS_MAX_QUERY_ROWS == 8
    assert not default_config(max_seqlen_k=4096, max_seqlen_q=2, **kw).qk_rows  # 16 rows
    assert default_config(max_seqlen_k=4096, max_seqlen_q=8, **{**kw, "group": 1}).qk_rows
    assert not default_config(max_seqlen_k=4096, max_seqlen_q=0, **kw).qk_rows  # unknown bound
    assert not default_config(max_seqlen_k=4096, max_seqlen_q=1, **{**kw, "fp8_mma": False}).qk_rows
    base = default_config(max_seqlen_k=4096, max_seqlen_q=1, **kw)
    for bad, word in ((dict(mma_path="bf16"), "fp8_mma"), (dict(mma_path="fp8_dequant"), "fp8_mma"),
                      (dict(pv_promote=True, producer_regs=24, consumer_regs=240), "split_d"),
                      (dict(tile_n=32, kv_stages=4), "decode_alt"), (dict(kv_stages=3), "its own K/V stage")):
        ok, why = base.with_(**bad).can_implement()
        assert not ok and word in why, bad
    # page sizes that take tile_n=32 keep the V^T tile (and are compiled)
    page32 = default_config(max_seqlen_k=4096, max_seqlen_q=1, **{**kw, "page_size": 32})
    assert page32.qk_rows and page32.tile_n == 32 and not page32.pv_transposed and not page32.two_term
    ok, why = page32.with_(two_term=True).can_implement()
    assert not ok and "two_term" in why
    assert page32.with_(mask="none", descale=(True, True, True)) in variant_list()


def test_fp8_mma_promotes_pv_where_the_registers_allow():
    """fp8_mma's long-context guard: on from PV_PROMOTE_MIN_KEYS keys (24 / 240 registers), off
    for shorter sequences, split partials and local masks (both spill with it,
    docs/sm90_kernel.md); refused where it cannot apply."""
    kw = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", paged=True, page_size=64, group=8, fp8_mma=True,
              max_seqlen_k=PV_PROMOTE_MIN_KEYS)
    short = default_config(**{**kw, "max_seqlen_k": PV_PROMOTE_MIN_KEYS - 1}, mask="causal")
    assert not short.pv_promote and (short.producer_regs, short.consumer_regs) == (40, 232)
    cfg = default_config(mask="causal", **kw)
    assert cfg.pv_promote and (cfg.producer_regs, cfg.consumer_regs) == (24, 240) and cfg.can_implement()[0]
    assert "promote" in cfg.key()
    split = cfg.with_split(True)
    assert split.split and not split.pv_promote and split.can_implement()[0] and split.with_split(False).split is False
    assert default_config(mask="none", split=True, **kw) == default_config(mask="none", **kw).with_split(True)
    assert not default_config(mask="none", split=True, **kw).pv_promote
    local = default_config(mask="local", **kw)
    assert not local.pv_promote and (local.producer_regs, local.consumer_regs) == (40, 232)
    ok, why = cfg.with_(split=True).can_implement()
    assert not ok and "split" in why
    ok, why = Sm90FwdConfig(pv_promote=True).can_implement()
    assert not ok and "fp8_mma" in why


def test_fp8_mma_alternates_on_the_prepass_for_multi_tile_sequences():
    """fp8_mma runs sequences of several M tiles (prefill, chunked prefill) with V^T from the
    prepass (`cute_kernels.v_prepass`) and the warpgroups taking the key blocks in turn, split or
    not, any mask, promoted from `PV_PROMOTE_MIN_KEYS` keys (masks none and causal); one-tile
    decode, unknown query counts and page size 32 do not. The layout is refused where it cannot
    apply."""
    kw = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", paged=True, page_size=64, group=8, fp8_mma=True, mask="causal")
    prefill = default_config(max_seqlen_q=9, max_seqlen_k=4096, **kw)  # 9 queries x G=8 > 64 rows
    assert prefill.layout == "alternate" and prefill.vt_prepass and not prefill.qk_rows
    assert (prefill.producer_regs, prefill.consumer_regs) == (24, 240) and prefill.key().endswith("-alternate-r24-240")
    for cfg in (prefill, prefill.with_split(True), default_config(max_seqlen_q=9, max_seqlen_k=4096, **{**kw, "mask": "local"}),
                default_config(max_seqlen_q=8192, max_seqlen_k=8192, **{**kw, "paged": False, "page_size": 0})):
        assert cfg.layout == "alternate" and cfg.vt_prepass and cfg.can_implement()[0], cfg.key()
    long = default_config(max_seqlen_q=4096, max_seqlen_k=PV_PROMOTE_MIN_KEYS, **kw)
    assert long.layout == "alternate" and long.pv_promote and long.vt_prepass and long.can_implement()[0]
    assert long.key().endswith("-alternate-r24-240-promote") and not long.with_split(True).pv_promote
    assert not default_config(max_seqlen_q=4096, max_seqlen_k=PV_PROMOTE_MIN_KEYS, **{**kw, "mask": "local"}).pv_promote
    for q, k, page in ((1, 4096, 64), (8, 4096, 64), (0, 4096, 64), (0, PV_PROMOTE_MIN_KEYS, 64), (4096, 4096, 32)):
        cfg = default_config(max_seqlen_q=q, max_seqlen_k=k, **{**kw, "page_size": page})
        assert cfg.layout != "alternate" and not cfg.vt_prepass and cfg.can_implement()[0], (q, k, page)
    assert not default_config(max_seqlen_q=4096, max_seqlen_k=4096, **{**kw, "fp8_mma": False}).vt_prepass
    for bad, word in (
        (prefill.with_(tile_n=32, kv_stages=4), "tile_n 64"),
        (prefill.with_(kv_stages=3), "two K/V stages"),
        (default_config(max_seqlen_q=1, **kw).with_(pv_promote=True), "'split_d' and 'alternate'"),
        (prefill.with_(stage="qk"), "stage"),
        (Sm90FwdConfig(layout="alternate"), "fp8_mma"),
        (default_config(max_seqlen_q=1, **{**kw, "fp8_mma": False}).with_(layout="alternate"), "fp8_mma"),
    ):
        ok, why = bad.can_implement()
        assert not ok and word in why, (bad.key(), why)
    assert prefill.with_(stage="setup").can_implement()[0]  # the cuts are taken at the kernel entry


def test_dequant_control_converts_in_the_producer_warpgroup():
    # Every dequant call: converter warps (cvt_warps), one e4m3 staging stage per K and V, the
    # two-stage f16 rings, 72 / 216 registers, 8 of QK's 16 k-steps of Q in registers.
    from cute_kernels.config import DEQUANT_Q_REG_STEPS

    for mask in ("none", "causal", "local"):
        for q, split in ((0, False), (1, False), (4096, False), (1, True)):
            cfg = default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask=mask, paged=True, page_size=64, group=8,
                                 max_seqlen_q=q, split=split)
            assert cfg.cvt_warps and cfg.layout == "split_d" and cfg.can_implement()[0]
            assert cfg.q_reg_steps == DEQUANT_Q_REG_STEPS == 8
            assert (cfg.tile_n, cfg.kv_stages, cfg.producer_regs, cfg.consumer_regs) == (32, 1, 72, 216)
            plan = cfg.smem_plan()
            assert plan["sK"] == plan["sV"] == 2 * 32 * 512 * 2 and plan["sKs"] == plan["sVs"] == 32 * 512
            assert plan["barriers"] == 8 * (2 + 4 * 1 + 4 * 2)
    deq = default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                         descale=(True, True, True))
    for other in (Sm90FwdConfig(), default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True,
                                                  page_size=64, group=8, fp8_mma=True)):
        assert not other.cvt_warps and other.q_reg_steps == 0
    for bad, word in ((deq.with_(kv_stages=3), "shared memory"), (deq.with_(layout="decode"), "fp8_mma")):
        ok, why = bad.can_implement()
        assert not ok and word in why, why
    assert not deq.pv_promote


# ---------------------------------------------------------------------------------------
# block ranges and masks (the kernel's integer arithmetic, run on Python ints)
# ---------------------------------------------------------------------------------------
def _kernel_visible_keys(kind, g, tile_n, sq, sk, wl, wr, m_block, split, num_splits):
    """Keys the kernel treats as visible, per tile row, walking blocks exactly like the kernel."""
    from cute_kernels.mask import PY_OPS, WINDOW_INF, TileGeometry

    geo = TileGeometry(PY_OPS, kind, 64, tile_n, g, m_block, sq, sk,
                       wl if wl >= 0 else WINDOW_INF, wr if wr >= 0 else WINDOW_INF)
    n_min, n_max = geo.block_range(split, num_splits, num_splits > 1)
    seen = {r: set() for r in range(64)}
    for n in range(n_max - 1, n_min - 1, -1):
        masked = n == n_max - 1 or geo.needs_mask(n)
        for r in range(64):
            lo, hi = geo.visible_cols(r, n) if masked else (0, tile_n - 1)
            seen[r].update(n * tile_n + c for c in range(tile_n) if lo <= c <= hi)
    return seen


@pytest.mark.skipif(not HAS_DSL, reason="cute_kernels.mask imports the DSL")
@pytest.mark.parametrize("seed", range(6))
def test_block_ranges_and_masks_match_the_contract(seed):
    """Every tile/split visits exactly the visible keys; boundary blocks are the masked ones."""
    import random

    from fa512.numerics.reference import split_key_ranges

    rng = random.Random(seed)
    for _ in range(40):
        kind = rng.choice(["none", "causal", "local"])
        g = rng.choice([1, 2, 8, 16])
        tile_n = rng.choice([32, 64])
        sq = rng.choice([0, 1, 3, 17, 64, 130])
        sk = rng.choice([0, 1, 31, 64, 65, 200, 700])
        wl, wr = -1, -1
        if kind == "causal":
            wr = 0
        elif kind == "local":
            wl, wr = rng.choice([(-1, 5), (0, 0), (10, -1), (70, 3), (200, 0), (1, 1)])
        num_splits = rng.choice([1, 1, 2, 3, 7])
        ranges = split_key_ranges(sk, num_splits, 64)
        for m_block in range(-(-sq * g // 64)):
            for split in range(num_splits):
                seen = _kernel_visible_keys(kind, g, tile_n, sq, sk, wl, wr, m_block, split, num_splits)
                lo_k, hi_k = ranges[split]
                for r in range(64):
                    q = (m_block * 64 + r) // g
                    if q >= sq:
                        continue
                    pos = q + sk - sq
                    want = {
                        j for j in range(lo_k, hi_k)
                        if (wl < 0 or j >= pos - wl) and (wr < 0 or j <= pos + wr)
                    }
                    assert seen[r] == want, (kind, g, tile_n, sq, sk, wl, wr, num_splits, m_block, split, r)


# ---------------------------------------------------------------------------------------
# compile for sm_90a and read the SASS
# ---------------------------------------------------------------------------------------
_FP8_KW = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
               descale=(True, True, True), fp8_mma=True)
COMPILE_CASES = [
    # (dispatched config, expected GMMA "shape/A source" keys: QK^T reads Q from smem (SS), P.V
    # reads P from registers (RS))
    (default_config(kv_dtype="bf16", q_dtype="bf16", mask="causal", paged=False, group=8),
     {"HGMMA.64x64x16.F32.BF16/SS", "HGMMA.64x256x16.F32.BF16/RS"}),
    (default_config(kv_dtype="f16", q_dtype="f16", mask="local", paged=True, page_size=64, group=8, split=True,
                    descale=(True, True, True)),
     {"HGMMA.64x64x16.F32/SS", "HGMMA.64x256x16.F32/RS"}),
    # page size 32: tile_n=32, two stages
    (default_config(kv_dtype="bf16", q_dtype="bf16", mask="none", paged=True, page_size=32),
     {"HGMMA.64x32x16.F32.BF16/SS", "HGMMA.64x256x16.F32.BF16/RS"}),
    # the dequant control: the first 8 k-steps of Q from registers (RS QK)
    (default_config(**{**_FP8_KW, "fp8_mma": False}, split=True),
     {"HGMMA.64x32x16.F32/SS", "HGMMA.64x32x16.F32/RS", "HGMMA.64x256x16.F32/RS"}),
    # FP8 wgmma for both products: k = 32 per instruction
    (default_config(**_FP8_KW, split=True), {"QGMMA.64x64x32.F32.E4M3.E4M3/SS", "QGMMA.64x256x32.F32.E4M3.E4M3/RS"}),
    (default_config(**{**_FP8_KW, "q_dtype": "f16", "mask": "local", "page_size": 32, "descale": (False,) * 3}),
     {"QGMMA.64x32x32.F32.E4M3.E4M3/SS", "QGMMA.64x256x32.F32.E4M3.E4M3/RS"}),
    # the promoted P.V (long contexts without splits): four 64-column slices per block
    (default_config(**_FP8_KW, max_seqlen_k=PV_PROMOTE_MIN_KEYS),
     {"QGMMA.64x64x32.F32.E4M3.E4M3/SS", "QGMMA.64x64x32.F32.E4M3.E4M3/RS"}),
    # the warpgroups taking the key blocks in turn (multi-tile): QK^T over all of d by the block's
    # warpgroup, P.V with P from registers (its own block) or from smem (the other's)
    (default_config(**_FP8_KW, max_seqlen_q=TILE_M),
     {"QGMMA.64x64x32.F32.E4M3.E4M3/SS", "QGMMA.64x256x32.F32.E4M3.E4M3/RS", "QGMMA.64x256x32.F32.E4M3.E4M3/SS"}),
    # decode tiles: O^T = V^T P^T on m64n8 with V^T from registers (tile_n=64), the V^T tile at 32;
    # at tile_n=64 two terms: Q_lo's QK^T as RS QGMMA, P_lo's O^T pass on the same m64n8 shape
    (default_config(**_FP8_KW, max_seqlen_q=1, split=True, accurate=True),
     {"QGMMA.64x64x32.F32.E4M3.E4M3/SS", "QGMMA.64x64x32.F32.E4M3.E4M3/RS", "QGMMA.64x8x32.F32.E4M3.E4M3/RS"}),
    (default_config(**_FP8_KW, max_seqlen_q=1),
     {"QGMMA.64x8x32.F32.E4M3.E4M3/SS", "QGMMA.64x8x32.F32.E4M3.E4M3/RS"}),
    # the decode layout the two-term (accurate) mode keeps
    (default_config(**_FP8_KW, max_seqlen_q=1).with_(layout="decode", kv_stages=2),
     {"QGMMA.64x64x32.F32.E4M3.E4M3/SS", "QGMMA.64x8x32.F32.E4M3.E4M3/RS"}),
    (default_config(**{**_FP8_KW, "mask": "none", "page_size": 32}, max_seqlen_q=1),
     {"QGMMA.64x32x32.F32.E4M3.E4M3/SS", "QGMMA.64x256x32.F32.E4M3.E4M3/RS"}),
    # the same decode tile with the combine fused in (the merge after the epilogue)
    (default_config(**_FP8_KW, max_seqlen_q=1, split=True).with_(fused_combine=True),
     {"QGMMA.64x8x32.F32.E4M3.E4M3/SS", "QGMMA.64x8x32.F32.E4M3.E4M3/RS"}),
]


@needs_dsl
@pytest.mark.parametrize("cfg, shapes", COMPILE_CASES, ids=[c.key() for c, _ in COMPILE_CASES])
def test_fwd_compiles_for_sm90a(cfg, shapes, tmp_path):
    from fa512.backends.compile_cache import KernelSpec, compile_spec
    from fa512.tools.compile import inspect_cubin

    res = compile_spec(KernelSpec("fwd", cfg), "sm_90a")
    assert ".target sm_90a" in res.ptx
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(res.cubin)
    fp8 = cfg.mma_path == "fp8_mma"
    rep = inspect_cubin(cubin, cfg.key(), res.seconds, res.smem_struct_bytes, expect_mma="qgmma" if fp8 else "hgmma")
    assert rep.ok, rep.problems
    assert set(rep.hgmma) == shapes
    if cfg.layout == "decode_alt":
        # each warpgroup's code is its own copy with a first block and a loop: S^T as 16 k-steps
        # of QGMMA.64x8x32 from smem per block, P.V as 8 m64 tiles of d x 2 k-steps from
        # registers in the loop and after it
        assert rep.hgmma == {"QGMMA.64x8x32.F32.E4M3.E4M3/SS": 2 * 2 * 16, "QGMMA.64x8x32.F32.E4M3.E4M3/RS": 2 * 2 * 16}
        assert "bar.sync \t7, 256;" in res.ptx  # BAR_DECODE_MERGE
    else:
        # split_d and decode: QK is K=256 per warpgroup -> 256/16 (16-bit) or 256/32 (e4m3)
        # instructions per copy, 2 copies (first block + loop); q_reg_steps of the 16 from registers, RS
        qk_shapes = [s for s in shapes if s.endswith("/SS") and f"x{cfg.tile_n}x" in s]
        if cfg.q_reg_steps:
            qk_rs = f"HGMMA.64x{cfg.tile_n}x16.F32/RS"
            assert rep.hgmma[qk_rs] == 2 * cfg.q_reg_steps
            qk_shapes.append(qk_rs)
        qk_k = 512 if cfg.layout == "alternate" else 256
        # alternate: each warpgroup's code is its own copy (static barrier ids): WG 0's first block and
        # loop, WG 1's loop; its P.V from smem in both loops and both last blocks
        copies = 3 if cfg.layout == "alternate" else 2
        assert sum(rep.hgmma[s] for s in qk_shapes) == copies * qk_k // (32 if fp8 else 16)
        if fp8:  # P.V per block: k = tile_n in steps of 32 (two code copies; x 4 slices when promoted,
            # x 4 m64 tiles of d when transposed; x 2 terms), and two-term Q's k-steps of QK^T again, RS
            slices = 4 if cfg.pv_promote or cfg.pv_transposed else 1
            terms = 2 if cfg.two_term else 1
            pv = next(s for s in shapes if s.endswith("/RS") and not (cfg.two_term and f"x{cfg.tile_n}x32" in s))
            assert rep.hgmma[pv] == copies * slices * cfg.tile_n // 32 * terms
            if cfg.two_term:
                assert rep.hgmma[f"QGMMA.64x{cfg.tile_n}x32.F32.E4M3.E4M3/RS"] == copies * 256 // 32
            if cfg.layout == "alternate":
                assert rep.hgmma["QGMMA.64x256x32.F32.E4M3.E4M3/SS"] == 4 * cfg.tile_n // 32
                assert "fence.proxy.async.shared::cta" in res.ptx
                for bar in range(9, 13):  # P_FULL[w] and P_FREE[w] are arrived on, with immediate ids
                    assert f"bar.arrive {bar}, 256;" in res.ptx
    assert rep.setmaxnreg == [f"DEALLOC.CTAPOOL:{cfg.producer_regs}", f"TRY_ALLOC.CTAPOOL:{cfg.consumer_regs}"]
    assert rep.spill_instructions == 0 and rep.local == 0
    assert rep.smem == cfg.smem_bytes() <= SMEM_LIMIT
    # the K/V pipelines expect exactly the bytes of one block's TMA boxes
    kv_bytes = cfg.tile_n * 512 * (1 if cfg.kv_dtype == "fp8_e4m3" else 2)
    assert f"{kv_bytes};" in res.ptx
    if cfg.mma_path == "fp8_dequant":  # one-instruction e4m3x2 -> f16x2 conversions
        assert "cvt.rn.f16x2.e4m3x2" in res.ptx
    if fp8:  # Q and P quantised in-kernel with saturating round-to-nearest
        assert "cvt.rn.satfinite.e4m3x2.f32" in res.ptx
        # the row sums add P read back from its e4m3 fragment (OnlineSoftmax.sum_e4m3)
        assert "cvt.rn.f16x2.e4m3x2" in res.ptx
        # V^T: transposed in-kernel (prmt byte shuffles) or loaded by ldmatrix.trans + prmt
        # (decode), or TMA-loaded from the prepass's scratch
        assert ("prmt.b32" in res.ptx) != cfg.vt_prepass
    if cfg.fused_combine:  # arrival (release), the acquire poll, the merge's 256-thread barrier
        assert "atom.global.release.add.u32" in res.ptx and "ld.acquire.gpu.global.s32" in res.ptx
        assert re.search(r"bar\.sync\s+13, 256;", res.ptx)


@needs_dsl
@pytest.mark.parametrize("stage, trace, timeline", [("setup", False, False), ("setup", True, False),
                                                    ("full", True, False), ("full", False, True)])
def test_diagnostic_stages_compile(stage, trace, timeline, tmp_path):
    """The cuts profiles/gpu_mma16_smoke.py --diag launches compile; the trace writes sys-scope;
    the timeline (profiles/kernel_timeline.py) reads the SM clock and the global timer and
    stores them GPU-scope, with no printf and no spill."""
    from fa512.backends.compile_cache import KernelSpec, compile_spec
    from fa512.tools.compile import inspect_cubin

    cfg = Sm90FwdConfig(mask="causal", qhead_per_kvhead=8, stage=stage, trace=trace, timeline=timeline)
    res = compile_spec(KernelSpec("fwd", cfg), "sm_90a")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(res.cubin)
    rep = inspect_cubin(cubin, cfg.key(), res.seconds, res.smem_struct_bytes,
                        expect_mma="hgmma" if stage == "full" else None)
    assert rep.setmaxnreg == [f"DEALLOC.CTAPOOL:{cfg.producer_regs}", f"TRY_ALLOC.CTAPOOL:{cfg.consumer_regs}"]
    assert register_ok(rep)
    if trace:  # heartbeat stores to host-mapped memory + printf (its buffers are the only local memory)
        assert "atom.global.sys" in res.ptx and "vprintf" in res.ptx
    else:
        assert ("%globaltimer_lo" in res.ptx) == timeline and ("%clock" in res.ptx) == timeline
        assert ("atom.global.cas" in res.ptx) == timeline  # the first stamp of each event
        assert ("%smid" in res.ptx) == timeline  # every CTA's record names its SM
        assert rep.ok, rep.problems
        assert "vprintf" not in res.ptx


def register_ok(rep) -> bool:
    return not any("setmaxnreg budgets" in p for p in rep.problems)


@needs_dsl
def test_combine_compiles(tmp_path):
    from fa512.backends.compile_cache import KernelSpec, compile_spec
    from fa512.tools.compile import inspect_cubin

    res = compile_spec(KernelSpec("combine", "bf16"), "sm_90a")
    cubin = tmp_path / "c.cubin"
    cubin.write_bytes(res.cubin)
    rep = inspect_cubin(cubin, "combine-bf16", res.seconds, 0, expect_mma=None)
    assert rep.ok, rep.problems
    assert "ld.global.v4" in res.ptx  # 16-byte partial loads


@needs_dsl
@pytest.mark.parametrize("page_size", [64, 0], ids=["paged64", "packed"])
def test_vt_prepass_compiles(page_size, tmp_path):
    from fa512.backends.compile_cache import KernelSpec, compile_spec
    from fa512.tools.compile import inspect_cubin

    spec = KernelSpec("vt_prepass", page_size)
    res = compile_spec(spec, "sm_90a")
    cubin = tmp_path / "p.cubin"
    cubin.write_bytes(res.cubin)
    rep = inspect_cubin(cubin, spec.key(), res.seconds, 0, expect_mma=None, threads=256)
    assert rep.ok, rep.problems
    # 16-byte V rows in, the forward kernel's transpose (prmt), 16-byte V^T chunks out
    assert "ld.global.v4" in res.ptx and "st.global.v4" in res.ptx and "prmt" in res.ptx


@needs_dsl
def test_compile_cli_in_worker_processes(tmp_path):
    # `python -m fa512 compile --jobs 2`: kernels compiled and checked in two spawned workers,
    # each with its cubin, SASS listing and report row
    import json

    from fa512.__main__ import cli

    assert cli(["compile", "--arch", "sm_90a", "--out", str(tmp_path), "--only", "combine", "--jobs", "2"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert sorted(r["key"] for r in report) == ["combine-bf16", "combine-f16"] and all(r["ok"] for r in report)
    for key in ("combine-bf16", "combine-f16"):
        assert (tmp_path / f"{key}.cubin").stat().st_size > 0 and (tmp_path / f"{key}.sass").stat().st_size > 0


# ---------------------------------------------------------------------------------------
# disk cache
# ---------------------------------------------------------------------------------------
_LOAD_SNIPPET = textwrap.dedent(
    """
    import sys, time
    from fa512.backends.compile_cache import KernelSpec, get_kernel  # imports torch (not timed)
    t0 = time.perf_counter()
    fn = get_kernel(KernelSpec("combine", "f16"))
    print(time.perf_counter() - t0, "cutlass" in sys.modules, type(fn).__name__)
    """
)


def _run_python(code: str, cache: Path, timeout: float = 240.0) -> subprocess.CompletedProcess:
    env = dict(os.environ, FA512_CACHE_DIR=str(cache), PYTHONPATH=f"{ROOT / 'python'}{os.pathsep}{ROOT}")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


@needs_dsl
def test_disk_cache_serves_a_new_process_fast(tmp_path):
    first = _run_python(_LOAD_SNIPPET, tmp_path)
    assert first.returncode == 0, first.stderr
    second = _run_python(_LOAD_SNIPPET, tmp_path)
    assert second.returncode == 0, second.stderr
    seconds, imported_dsl, kind = second.stdout.split()
    assert float(seconds) < 1.0, second.stdout  # issue 4: a cached variant in < 1 s
    assert imported_dsl == "False"  # the cached .so loads through tvm-ffi alone
    entries = list(tmp_path.rglob("*.so"))
    assert len(entries) == 1


@needs_dsl
def test_disk_cache_concurrent_builders(tmp_path):
    env = dict(os.environ, FA512_CACHE_DIR=str(tmp_path), PYTHONPATH=f"{ROOT / 'python'}{os.pathsep}{ROOT}")
    procs = [
        subprocess.Popen([sys.executable, "-c", _LOAD_SNIPPET], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert len(list(tmp_path.rglob("*.so"))) == 1
    assert not list(tmp_path.rglob("*.tmp.*"))


@needs_dsl
def test_kernel_libraries_link_the_launch_shim(tmp_path):
    # The host code's launch goes through fa512_shim_launch (objcopy-renamed reference, a local
    # symbol of the library); the exported observer hook hands back the DSL runtime's launch
    # function, which the native call's direct launch replays through (fa512.launch_shim).
    import ctypes
    import shutil

    from fa512.backends import compile_cache, launch_shim

    if not (shutil.which("objcopy") and shutil.which("nm") and shutil.which("gcc")):
        pytest.skip("needs objcopy, nm and gcc")
    result = compile_cache.compile_spec(compile_cache.KernelSpec("combine", "bf16"), "sm_90a")
    so = compile_cache.export_entry(result, tmp_path)
    assert so.suffix == ".so" and launch_shim.linked_with_shim(so)
    meta = json.loads(so.with_suffix(".json").read_text())
    assert meta["launch_shim"] is True
    symbols = subprocess.run(["nm", str(so)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert any(line.endswith(" t " + launch_shim.SHIM_LAUNCH) for line in symbols)  # hidden, defined
    runtime = [ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL) for p in compile_cache._runtime_libraries_no_dsl()]
    assert runtime, "libcute_dsl_runtime.so not found"
    lib = ctypes.CDLL(str(so))
    set_observer = getattr(lib, launch_shim.SET_OBSERVER)
    set_observer.restype = ctypes.c_void_p
    set_observer.argtypes = [ctypes.c_void_p]
    real = ctypes.cast(getattr(runtime[0], launch_shim.RUNTIME_LAUNCH), ctypes.c_void_p).value
    assert set_observer(None) == real


def test_corrupt_entry_is_quarantined(tmp_path, monkeypatch):
    if not HAS_DSL:
        pytest.skip("nvidia-cutlass-dsl not installed")
    from fa512.backends import compile_cache

    monkeypatch.setenv("FA512_CACHE_DIR", str(tmp_path))
    spec = compile_cache.KernelSpec("combine", "bf16")
    entry = compile_cache._entry_dir("sm_90a") / f"{spec.symbol()}.so"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"not an ELF")
    fn = compile_cache._load_or_build(spec, "sm_90a")
    assert fn is not None
    assert entry.with_suffix(".so.bad").exists() and entry.exists()


def test_is_stored_sees_an_entry_without_loading_it(tmp_path, monkeypatch):
    # the fuzz's precompile skips its pool for kernels this finds (a later load is ~0.1 s)
    if not HAS_DSL:
        pytest.skip("nvidia-cutlass-dsl not installed")
    from fa512.backends import compile_cache

    monkeypatch.setenv("FA512_CACHE_DIR", str(tmp_path))
    spec = compile_cache.KernelSpec("combine", "bf16")
    assert not compile_cache.is_stored(spec, "sm_90a")
    entry = compile_cache._entry_dir("sm_90a") / f"{spec.symbol()}.o"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"")
    assert compile_cache.is_stored(spec, "sm_90a") and not compile_cache.is_stored(spec, "sm_100a")
    monkeypatch.setenv("FA512_NO_DISK_CACHE", "1")  # get_kernel would compile it: not stored
    assert not compile_cache.is_stored(spec, "sm_90a")


# ---------------------------------------------------------------------------------------
# GPU: the kernel against the reference
# ---------------------------------------------------------------------------------------
def _is_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_sm90 = pytest.mark.skipif(not (_is_sm90() and HAS_DSL), reason="needs an SM90 GPU and the DSL")

TOL_OUT = {torch.bfloat16: 3e-3, torch.float16: 2e-3}
TOL_LSE = 1e-3


def make_case(*, dtype=torch.bfloat16, kv_dtype=None, hq=32, hkv=4, q_lens=(5,), k_lens=(300,), page_size=0,
              causal=False, window=(-1, -1), descale=False, seed=0):
    """Gaussian q/k/v on the GPU (logit std ~ 3 at softmax_scale 1/sqrt(512)), random page table."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    kv_dtype = kv_dtype or dtype
    dev = "cuda"
    b = len(q_lens)
    total_q = sum(q_lens)
    q = (torch.randn(total_q, hq, 512, generator=g) * 3.0).to(dtype).to(dev)
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    used = torch.tensor(k_lens, dtype=torch.int32, device=dev)
    kw = dict(cu_seqlens_q=cu_q, seqused_k=used, max_seqlen_q=max(q_lens), max_seqlen_k=max(max(k_lens), 1),
              causal=causal, window_left=window[0], window_right=window[1], softmax_scale=1 / math.sqrt(512))
    if page_size:
        pages_per_seq = max(1, -(-max(k_lens) // page_size))
        num_pages = b * pages_per_seq + 3
        k = torch.randn(num_pages, page_size, hkv, 512, generator=g).to(kv_dtype).to(dev)
        v = torch.randn(num_pages, page_size, hkv, 512, generator=g).to(kv_dtype).to(dev)
        kw["page_table"] = torch.randperm(num_pages, generator=g)[: b * pages_per_seq].view(b, pages_per_seq).int().to(dev)
    else:
        total_k = sum(k_lens) + 7
        k = torch.randn(total_k, hkv, 512, generator=g).to(kv_dtype).to(dev)
        v = torch.randn(total_k, hkv, 512, generator=g).to(kv_dtype).to(dev)
        starts = [0]
        for n in k_lens:
            starts.append(starts[-1] + n)
        kw["cu_seqlens_k"] = torch.tensor(starts, dtype=torch.int32, device=dev)
    if descale:
        kw["q_descale"] = (torch.rand(b, hkv, generator=g) + 0.5).to(dev)
        kw["k_descale"] = (torch.rand(hkv, generator=g) + 0.5).to(dev)
        kw["v_descale"] = torch.tensor(1.7, device=dev)
    return q, k, v, kw


def run_mma16(q, k, v, kw, num_splits=1, config=None):
    from fa512.backends.cute import Mma16Backend
    from fa512.planning.dispatch import target_of
    from fa512.call import Call
    from fa512.planning.validate import check
    backend = Mma16Backend()
    problem, args = check(Call(
        q, k, v, None, kw.get("page_table"), kw.get("cu_seqlens_k"), kw["cu_seqlens_q"], kw["max_seqlen_q"],
        kw["seqused_k"], kw["max_seqlen_k"], kw["softmax_scale"], kw["causal"], kw["window_left"],
        kw["window_right"], kw.get("q_descale"), kw.get("k_descale"), kw.get("v_descale"), num_splits, "mma16",
    ))
    target = target_of(q.device)
    why = backend.unavailable() or backend.unsupported(problem, target)
    assert why is None, why
    cfg = config or backend.make_config(problem, target)
    # combine (`Plan.combine`, which launch_state reads): the combine kernel for splits, what
    # make_plan gives a split grid it does not fuse, unless ``config`` asks for fused_combine
    combine = "none" if num_splits <= 1 else "fused" if cfg.fused_combine else "kernel"
    plan = SimpleNamespace(problem=problem, config=cfg, num_splits=num_splits, combine=combine)
    out = torch.empty_like(q)
    lse = backend.launch(plan, args, out, config=config)
    return out, lse


# fp8_mma on these Gaussian inputs (logit std ~3): e4m3 Q and P cost ~5e-2 rel L2 and ~0.5 in
# the lse (fa512.numerics.emulation, design fa512_fp8); its exact numerics are checked against the
# emulation by profiles/gpu_mma16_smoke.py --fp8.
FP8_MMA_TOL = (8e-2, 1.0)


def check_against_reference(q, k, v, kw, out, lse, tol=None, lse_tol=TOL_LSE):
    from fa512.numerics.reference import attention_ref

    ref_out, ref_lse = attention_ref(q, k, v, **kw)
    err = ((out.double() - ref_out).norm() / ref_out.norm().clamp_min(1e-30)).item()
    if tol is None:
        tol = 2e-3 if k.dtype == torch.float8_e4m3fn else TOL_OUT[q.dtype]  # fp8 KV: f16 compute
    assert err <= tol, f"rel L2 {err:.2e}"
    fin = torch.isfinite(ref_lse)
    assert torch.equal(fin, torch.isfinite(lse.double())), "empty rows must give lse = -inf"
    if fin.any():
        lerr = (lse.double()[fin] - ref_lse[fin]).abs().max().item()
        assert lerr <= lse_tol, f"lse err {lerr:.2e}"
    assert torch.isfinite(out).all()


GPU_CASES = {
    "prefill_full": dict(q_lens=(130,), k_lens=(130,)),
    "prefill_causal_gqa": dict(q_lens=(200, 77), k_lens=(200, 77), causal=True),
    "chunked_causal": dict(q_lens=(65,), k_lens=(1000,), causal=True),
    "local": dict(q_lens=(150,), k_lens=(400,), window=(100, 3)),
    "local_left_only": dict(q_lens=(90,), k_lens=(300,), window=(64, -1)),
    "decode_paged": dict(q_lens=(1, 1, 1), k_lens=(1000, 5, 64), page_size=64),
    "paged_causal_p128": dict(q_lens=(70,), k_lens=(700,), page_size=128, causal=True),
    "empty_and_short": dict(q_lens=(3, 0, 4), k_lens=(0, 10, 2)),
    "fp16_descale": dict(dtype=torch.float16, q_lens=(33,), k_lens=(333,), descale=True),
    "q_longer_than_k_causal": dict(q_lens=(100,), k_lens=(40,), causal=True),
    "hq8_hkv1": dict(hq=8, hkv=1, q_lens=(40,), k_lens=(260,), causal=True),
    "fp8_dequant_paged": dict(kv_dtype=torch.float8_e4m3fn, q_lens=(70, 1), k_lens=(700, 333), page_size=64,
                              causal=True, descale=True),
    "fp8_dequant_packed_fp16q": dict(dtype=torch.float16, kv_dtype=torch.float8_e4m3fn, q_lens=(40,),
                                     k_lens=(900,), descale=True),
}


@pytest.mark.gpu
@requires_sm90
@pytest.mark.parametrize("name", sorted(GPU_CASES))
@pytest.mark.parametrize("num_splits", [1, 3])
def test_gpu_matches_reference(name, num_splits):
    q, k, v, kw = make_case(**GPU_CASES[name])
    out, lse = run_mma16(q, k, v, kw, num_splits=num_splits)
    torch.cuda.synchronize()
    check_against_reference(q, k, v, kw, out, lse)


@pytest.mark.gpu
@requires_sm90
def test_gpu_cuda_graph_replay_with_new_lengths():
    q, k, v, kw = make_case(q_lens=(1, 1, 1, 1), k_lens=(2000, 2000, 2000, 2000), page_size=64)
    run_mma16(q, k, v, kw, num_splits=8)  # compile + warm the caches outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = run_mma16(q, k, v, kw, num_splits=8)
    for lens in ([2000, 1500, 3, 0], [64, 1999, 700, 1]):
        kw["seqused_k"].copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(q, k, v, kw, out, lse)


@pytest.mark.gpu
@requires_sm90
@pytest.mark.parametrize("kv_dtype,seqlen_q,kernel", [(torch.bfloat16, 1, "mma16"), (torch.bfloat16, 300, "mma16"),
                                                       (torch.float8_e4m3fn, 300, "fp8_mma"),
                                                       (torch.float8_e4m3fn, 1, "fp8_mma")])
def test_gpu_auto_dispatch_runs_the_routed_kernel(kv_dtype, seqlen_q, kernel):
    import fa512
    from fa512.launch.run import last_launch
    q, k, v, kw = make_case(kv_dtype=kv_dtype, q_lens=(seqlen_q,), k_lens=(1000,), page_size=64, causal=True)
    last_launch.clear()
    out, lse = fa512.attention(q, k, v, **kw)
    torch.cuda.synchronize()
    assert last_launch["kernel"] == kernel
    if kernel == "fp8_mma":
        check_against_reference(q, k, v, kw, out, lse, *FP8_MMA_TOL)
    else:
        check_against_reference(q, k, v, kw, out, lse)
