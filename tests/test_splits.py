"""Split planning: a deterministic pure function of host ints, bounded, sensible at the extremes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fa512 import MAX_SPLITS
from fa512.planning.splits import (
    MAX_FUSED_MERGES, fa3_num_splits, fused_merges, fuses, key_blocks, plan_num_splits, split_model, workspace_bytes,
)


def plan(**over):
    a = dict(batch=4, num_kv_heads=4, group_size=8, max_seqlen_q=1, max_seqlen_k=32768, window_left=-1,
             window_right=-1, num_sms=132, block_m=64, block_n=64, kv_elem_bytes=1)
    a.update(over)
    return plan_num_splits(**a)


@settings(max_examples=200, deadline=None)
@given(
    batch=st.integers(1, 256), hkv=st.sampled_from([1, 2, 4, 8]), group=st.sampled_from([1, 2, 8]),
    sq=st.integers(0, 9000), sk=st.integers(0, 200_000), wl=st.integers(-1, 5000),
    sms=st.sampled_from([1, 84, 132, 188]), bn=st.sampled_from([32, 64, 128]),
)
def test_bounded_and_deterministic(batch, hkv, group, sq, sk, wl, sms, bn):
    kw = dict(batch=batch, num_kv_heads=hkv, group_size=group, max_seqlen_q=sq, max_seqlen_k=sk,
              window_left=wl, window_right=-1, num_sms=sms, block_n=bn)
    d = plan(**kw)
    assert 1 <= d.num_splits <= MAX_SPLITS
    assert d.num_splits <= max(1, d.n_blocks)
    assert plan(**kw) == d


def test_prefill_is_never_split():
    # 8192 causal prefill, Gemma-4 31B heads: 4 * 8192*8/64 m-blocks >> 132 SMs.
    assert plan(batch=1, max_seqlen_q=8192, max_seqlen_k=8192).num_splits == 1
    assert plan(batch=64, max_seqlen_k=8192).num_splits == 1  # B=64 decode fills 256 CTAs


def test_long_decode_is_split():
    d = plan(batch=4, max_seqlen_k=32768)
    assert 4 <= d.num_splits <= 32, d
    d1 = plan(batch=1, max_seqlen_k=32768)
    assert d1.num_splits > d.num_splits  # fewer m-blocks -> more splits


def test_short_context_is_not_split():
    assert plan(batch=4, max_seqlen_k=128).num_splits <= 2


def test_local_window_limits_the_work():
    assert key_blocks(1, 100_000, 1023, 0, 64) == 17
    full = plan(batch=1, max_seqlen_k=100_000)
    local = plan(batch=1, max_seqlen_k=100_000, window_left=1023, window_right=0)
    assert local.n_blocks < full.n_blocks and local.num_splits <= full.num_splits


def test_workspace_sizes():
    assert workspace_bytes(1, 100, 32) == 0
    assert workspace_bytes(8, 4, 32) == 8 * 4 * 32 * 513 * 4


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16, 64])
@pytest.mark.parametrize("seqlen_k", [2048, 32768])
def test_choice_is_within_5_percent_of_the_models_best(batch, seqlen_k):
    # The chosen count must be (near) the argmin of the model over 1..cap, so it is never
    # modelled worse than FA3's pick (capped); a broken search or tie rule fails this.
    kw = dict(batch=batch, num_kv_heads=4, group_size=8, max_seqlen_q=1, max_seqlen_k=seqlen_k, window_left=-1,
              window_right=-1, num_sms=132, block_m=64, block_n=64, kv_elem_bytes=1)
    d = plan_num_splits(**kw)
    model = split_model(**kw)
    best = min(model.time(s) for s in range(1, MAX_SPLITS + 1))
    assert model.time(d.num_splits) <= best * 1.05
    fa3 = min(fa3_num_splits(d.mblocks, d.n_blocks, 132), MAX_SPLITS)
    assert model.time(d.num_splits) <= model.time(fa3) * 1.05
    # And it is the smallest such count.
    assert all(model.time(s) > best * 1.05 for s in range(1, d.num_splits))


# -- plan.ctas: the forward's grid as each kernel tiles it -----------------------------------------


def _call(batch, q, k, hq, hkv, page=64):
    import torch

    pages = -(-k // page)
    cache = torch.zeros(batch * pages, page, hkv, 512, dtype=torch.float8_e4m3fn)
    return dict(q=torch.zeros(batch * q, hq, 512, dtype=torch.bfloat16), k=cache, v=cache,
                cu_seqlens_q=torch.arange(0, batch * q + 1, q, dtype=torch.int32),
                seqused_k=torch.full((batch,), k, dtype=torch.int32),
                page_table=torch.arange(batch * pages, dtype=torch.int32).view(batch, pages),
                max_seqlen_q=q, max_seqlen_k=k, causal=True)


@pytest.mark.parametrize("kernel", ["fp8_mma", "mma16", "triton"])
@pytest.mark.parametrize(
    "batch, q, k, hq, hkv, tiles",
    [
        (1, 1, 8192, 32, 4, 4),  # decode: one tile per kv head (8 packed heads <= 64 rows)
        (1, 4, 28672, 8, 1, 1),  # MTP q=4: 32 rows, one tile
        (8, 1, 8192, 8, 1, 8),
        (1, 8192, 8192, 32, 4, 4 * 1024),  # prefill: 8192 x 8 rows / 64 per kv head
        (2, 1, 4096, 12, 2, None),  # G=6: SM90 packs 1 head per tile (64 % 6 != 0), Triton all 6
    ],
)
def test_plan_ctas_is_the_forward_grid(kernel, batch, q, k, hq, hkv, tiles):
    import fa512

    p = fa512.plan(**_call(batch, q, k, hq, hkv), kernel=kernel, target="sm_90:132")
    if tiles is None:  # the unpacked SM90 case: Hq tiles per sequence; Triton packs the group
        tiles = batch * (hq if kernel != "triton" else hkv)
    assert p.ctas == tiles * p.num_splits
    assert p.launches == 1 + (p.combine == "kernel") + bool(getattr(p.config, "vt_prepass", False))
    assert f"ctas      : {p.ctas} (132 SMs)" in p.describe()
    # the combine: none unsplit; inside the forward for SM90 grids that fit the GPU at once
    rows = min(64, q * (hq // hkv if 64 % (hq // hkv) == 0 else 1))
    fused = getattr(p.config, "mma_path", None) == "fp8_mma" and fuses(rows, p.num_splits, p.ctas, 132)
    assert p.combine == ("none" if p.num_splits == 1 else "fused" if fused else "kernel")
    assert f"(combine: {p.combine})" in p.describe()


@pytest.mark.parametrize(
    "kernel, batch, q, k, hq, hkv, window, splits, combine",
    [
        ("fp8_mma", 1, 1, 8192, 32, 4, -1, 0, "fused"),  # decode B=1: 128 CTAs
        ("fp8_mma", 1, 4, 28672, 8, 1, -1, 0, "fused"),  # MTP q=4: one tile, many splits
        ("mma16", 1, 1, 8192, 32, 4, -1, 0, "kernel"),  # the dequant control: fused lost its A/B
        ("fp8_mma", 1, 1, 8192, 32, 4, -1, 40, "kernel"),  # 160 CTAs: not resident at once
        ("fp8_mma", 1, 1, 8192, 32, 4, 1000, 0, "kernel"),  # local windows: no fused variant
        ("fp8_mma", 64, 1, 8192, 32, 4, -1, 0, "none"),  # 256 tiles: no splits
        ("fp8_mma", 32, 4, 28672, 8, 1, -1, 0, "kernel"),  # MTP B=32: 4 splits, 32 merges a CTA
        ("fp8_mma", 4, 1, 32768, 32, 4, -1, 0, "kernel"),  # B=4 x 32k: 8 splits, 4 merges a CTA
        ("triton", 1, 1, 8192, 32, 4, -1, 0, "kernel"),  # Triton's own combine kernel
    ],
)
def test_plan_fuses_the_combine_where_the_grid_is_resident(kernel, batch, q, k, hq, hkv, window, splits, combine):
    import fa512

    kw = _call(batch, q, k, hq, hkv)
    kw.update(window_left=window, num_splits=splits)
    p = fa512.plan(**kw, kernel=kernel, target="sm_90:132")
    assert p.combine == combine, (p.num_splits, p.ctas)
    if kernel == "triton":
        assert p.kernels == () and "kernels   :" not in p.describe()
        return
    # `Plan.kernels` (printed by `fa512 plan`) names what runs: the split or fused forward variant
    # (not the base config's unsplit key), then the combine kernel where there is one
    forward, *rest = p.kernels
    assert forward.endswith("-fused") == (combine == "fused")
    assert ("-split-" in forward) == (combine != "none") and ("-nosplit-" in forward) == (combine == "none")
    assert rest == (["combine-bf16"] if combine == "kernel" else [])
    assert f"kernels   : {', '.join(p.kernels)}" in p.describe()


def test_split_model_counts_the_tiles_the_kernel_launches():
    # G=6 on SM90: 12 query-head tiles per sequence, not 2 packed ones; the model must see 24 CTAs
    import fa512

    p = fa512.plan(**_call(2, 1, 4096, 12, 2), kernel="fp8_mma", target="sm_90:132")
    assert p.config.qhead_per_kvhead == 1 and p.ctas == 24 * p.num_splits
    assert "24 m-blocks" in p.reason


def test_reference_launches_no_grid():
    import fa512

    p = fa512.plan(**_call(1, 1, 256, 8, 1), target="cpu")
    assert (p.kernel, p.ctas, p.launches) == ("reference", 0, 0)


# -- the planner's choices on issue 22's shapes (H200: sm_90 with 132 SMs) ------------------------
# A table, so that a change of the model or of a kernel's max_splits shows as a diff here. The MTP
# row: 448 key blocks of 64 keys over one M tile; 112 splits give every CTA 4 blocks, and no count
# up to 132 CTAs gives fewer (3 blocks need 150 CTAs, a second wave). 128 splits read the same
# 4 blocks on the busiest CTA (16 splits are empty) and give each CTA one of the fused merge's 128
# (row, quarter) pieces instead of two on 16 CTAs, so fp8_mma takes 128 (issue 22: plan.ctas >= 128).
PLANNER_TABLE = [
    # kernel, (batch, q, keys, Hq, Hkv), kv dtype -> (num_splits, ctas)
    ("fp8_mma", (1, 1, 8192, 32, 4), "fp8", (32, 128)),
    ("fp8_mma", (1, 4, 28672, 8, 1), "fp8", (128, 128)),
    ("fp8_mma", (8, 1, 8192, 8, 1), "fp8", (16, 128)),
    ("fp8_mma", (4, 1, 32768, 32, 4), "fp8", (8, 128)),
    ("fp8_mma", (32, 4, 28672, 8, 1), "fp8", (4, 128)),
    ("fp8_mma", (64, 1, 8192, 32, 4), "fp8", (1, 256)),
    ("fp8_mma", (1, 1, 64, 32, 4), "fp8", (1, 4)),
    ("mma16", (1, 1, 8192, 32, 4), "bf16", (22, 88)),
    ("mma16", (1, 4, 28672, 8, 1), "bf16", (90, 90)),
    ("mma16", (8, 1, 8192, 8, 1), "bf16", (11, 88)),
    ("triton", (1, 1, 8192, 32, 4), "fp8", (32, 128)),
    ("triton", (1, 4, 28672, 8, 1), "fp8", (31, 31)),  # Triton's combine stops at 32 splits
]


@pytest.mark.parametrize("kernel, shape, kv, want", PLANNER_TABLE)
def test_planner_table(kernel, shape, kv, want):
    import torch

    import fa512

    kw = _call(*shape)
    if kv == "bf16":
        kw["k"] = kw["v"] = torch.zeros(kw["k"].shape, dtype=torch.bfloat16)
    p = fa512.plan(**kw, kernel=kernel, target="sm_90:132")
    assert (p.num_splits, p.ctas) == want, p.reason


def test_fused_merge_rule():
    # (row, quarter) pieces of the busiest CTA; fused only for resident grids of <= 2 pieces a CTA
    assert fused_merges(32, 112) == 2 and fused_merges(32, 128) == 1 and fused_merges(8, 16) == 2
    assert fuses(32, 112, 112, 132) and fuses(32, 128, 128, 132)
    assert not fuses(32, 4, 128, 132)  # MTP B=32: 32 pieces a CTA
    assert not fuses(8, 40, 160, 132)  # not resident at once
    assert not fuses(0, 16, 16, 132) and not fuses(32, 1, 1, 132)  # no fused twin; unsplit
    assert fused_merges(8, 16) <= MAX_FUSED_MERGES < fused_merges(8, 8)


def test_split_model_gives_empty_splits_no_bandwidth():
    # 448 blocks: at 112 and 128 splits the busiest CTA reads 4 blocks, and 112 CTAs read keys
    # in both (the kernels' ranges leave splits 112..127 empty), so with the combine kernel the two
    # differ only by the 16 extra partials; fused, 128 saves the second merge piece of 16 CTAs.
    from fa512.planning.splits import DEVICE_BW, FUSED_MERGE_S

    kw = dict(batch=1, num_kv_heads=1, group_size=8, max_seqlen_q=4, max_seqlen_k=28672, window_left=-1,
              window_right=-1, num_sms=132, block_m=64, block_n=64, kv_elem_bytes=1)
    kernel, fused = split_model(**kw), split_model(**kw, fused_rows=32)
    assert kernel.time(128) - kernel.time(112) == pytest.approx(16 * kernel.partial / DEVICE_BW, rel=1e-6)
    assert fused.time(112) - fused.time(128) == pytest.approx(FUSED_MERGE_S - 16 * fused.partial / DEVICE_BW, rel=1e-6)


def test_the_planner_counts_the_merge_pieces_the_kernels_deal():
    # fa512.planning cannot import the DSL, so it keeps its own copy of the pieces per row
    combine = pytest.importorskip("cute_kernels.combine")
    from fa512.planning.splits import COL_CHUNKS

    assert COL_CHUNKS == combine.COL_CHUNKS
