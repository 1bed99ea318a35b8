"""Split-KV past FA3's 32 (issue 22): up to `fa512.MAX_SPLITS` = 256 splits on the SM90 kernels.

CPU: the bounds the op enforces (the cap, CUDA's grid limit on tile heads x splits) and the
planner's reach. GPU: outputs and lse of 2..256 splits against the oracle (the float64 reference
for mma16, the emulation of the variant that ran for fp8_mma) with empty and 1-key sequences in
the batch; the combine kernel against a float64 merge of the same call's partials; a CUDA graph
captured at 256 splits replayed with new lengths.
"""

from __future__ import annotations

import pytest
import torch

import fa512
from fa512.tools.fuzz import EMULATION_BAR, TOLERANCES, compare

from helpers import make_problem

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (q_lens, k_lens): an empty sequence, a 1-key one, a short and a long one (256 blocks of 64 keys:
# one per split at 256 splits); MTP-shaped (4 queries a sequence) as well.
DECODE = ([1, 1, 1, 1], [0, 1, 3000, 16384])
MTP = ([4, 4, 4], [1, 700, 16384])


def _problem(shape, kv_dtype, device="cpu"):
    q_lens, k_lens = shape
    return make_problem(q_lens, k_lens, hq=8, hkv=1, page_size=64, q_dtype=torch.bfloat16, kv_dtype=kv_dtype,
                        seed=22, device=device)


def test_num_splits_is_bounded_by_max_splits():
    q, k, v, kw = _problem(DECODE, torch.bfloat16)
    assert fa512.MAX_SPLITS == 256
    plan = fa512.plan(q, k, v, **kw, causal=True, num_splits=256, kernel="mma16", target="sm_90:132")
    assert plan.num_splits == 256 and plan.ctas == 4 * 256  # 4 sequences, 1 tile each (8 packed heads)
    with pytest.raises(ValueError, match="num_splits"):
        fa512.plan(q, k, v, **kw, causal=True, num_splits=257, kernel="mma16", target="sm_90:132")


def test_tile_heads_times_splits_must_fit_the_grid():
    # 300 query heads of their own kv head: 300 tiles x 256 splits > 65535 rows of grid y
    q, k, v, kw = _wide()
    with pytest.raises(ValueError, match="grid limit 65535"):
        fa512.plan(q, k, v, **kw, num_splits=256, kernel="mma16", target="sm_90:132")
    plan = fa512.plan(q, k, v, **kw, kernel="mma16", target="sm_90:132")  # planned: capped, not refused
    assert plan.num_splits * 300 <= 65535


def _wide():
    hq = 300
    pages = 4096 // 64
    cache = torch.zeros(pages, 64, hq, 512, dtype=torch.bfloat16, device="meta")
    q = torch.zeros(1, hq, 512, dtype=torch.bfloat16, device="meta")
    meta = dict(dtype=torch.int32, device="meta")  # plan reads shapes only: no 1.3 GB cache
    kw = dict(cu_seqlens_q=torch.empty(2, **meta), seqused_k=torch.empty(1, **meta),
              page_table=torch.empty(1, pages, **meta), max_seqlen_q=1, max_seqlen_k=4096)
    return q, cache, cache, kw


@pytest.mark.parametrize("kernel, most", [("fp8_mma", 256), ("mma16", 256), ("triton", 32)])
def test_planner_reach_follows_the_kernels_combine(kernel, most):
    # One kv head, MTP q=4 over 28672 keys: one M tile, so only splits can spread it over the GPU.
    # The SM90 planner goes past 32 (its combine merges 256); Triton's combine stops at 32.
    from test_splits import _call

    plan = fa512.plan(**_call(1, 4, 28672, 8, 1), kernel=kernel, target="sm_90:132")
    assert plan.num_splits <= most
    assert (plan.num_splits > 32) == (most > 32), plan.reason


def _oracle_check(kernel, kv_dtype, shape, splits):
    from fa512.launch.run import last_launch
    from fa512.numerics.emulation import emulate_attention, fp8_mma_design
    from fa512.numerics.reference import attention_ref

    q, k, v, kw = _problem(shape, kv_dtype, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06)
    last_launch.clear()
    out, lse = fa512.attention(q, k, v, **kw, num_splits=splits, kernel=kernel)
    torch.cuda.synchronize()
    assert last_launch["kernel"] == kernel and last_launch["num_splits"] == splits
    rows = int(kw["cu_seqlens_q"][-1])
    ref_out, ref_lse = attention_ref(q, k, v, **kw)
    m = compare(out, lse, ref_out, ref_lse, rows)
    assert m["nonfinite_out"] == m["empty_out_nonzero"] == m["empty_lse_not_neg_inf"] == 0, m
    assert m["empty_rows"] > 0 or shape is MTP  # the empty sequence's row is in the decode batch
    dt = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8"}[kv_dtype]
    bars = TOLERANCES[(kernel, dt, "bf16")]
    assert m["rel_l2"] <= bars.rel_l2 and m["row_rel"] <= bars.row and m["lse_err"] <= bars.lse, m
    if kernel == "fp8_mma":
        design = fp8_mma_design(last_launch["config"].with_split(splits > 1))
        emu_out, emu_lse = emulate_attention(q, k, v, **kw, num_splits=splits, design=design)
        e = compare(out, lse, emu_out, emu_lse, rows)
        assert e["rel_l2"] <= EMULATION_BAR and e["lse_err"] <= 1e-3, e
    return out, lse, (q, k, v, kw)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("splits", [2, 33, 128, 256])
@pytest.mark.parametrize("kernel, kv_dtype", [("fp8_mma", torch.float8_e4m3fn), ("mma16", torch.bfloat16),
                                              ("mma16", torch.float8_e4m3fn)])
@pytest.mark.parametrize("shape", [DECODE, MTP], ids=["decode", "mtp"])
def test_gpu_many_splits_match_the_oracle(kernel, kv_dtype, shape, splits):
    _oracle_check(kernel, kv_dtype, shape, splits)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("splits", [3, 64, 256])
def test_gpu_combine_matches_a_float64_merge_of_its_partials(splits):
    # The same call's uncombined partials, merged in float64 on the host side, against the op's
    # output (bf16: one rounding) and lse (fp32): the combine kernel adds nothing of its own.
    from fa512.call import make_call
    from fa512.launch.partials import partials
    from fa512.launch.run import last_launch
    from fa512.numerics.reference import merge_partials

    q, k, v, kw = _problem(DECODE, torch.float8_e4m3fn, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06)
    out, lse = fa512.attention(q, k, v, **kw, num_splits=splits, kernel="fp8_mma")
    assert last_launch["kernel"] == "fp8_mma" and last_launch["num_splits"] == splits
    o_parts, lse_parts = partials(make_call(q, k, v, **kw, num_splits=splits, kernel="fp8_mma"))
    assert o_parts.shape[0] == splits
    want, want_lse = merge_partials(o_parts.double(), lse_parts.double().transpose(1, 2))  # (total_q, Hq, ...)
    want_lse = want_lse.t()  # (Hq, total_q), as the op's lse
    rows = int(kw["cu_seqlens_q"][-1])
    assert torch.equal(torch.isfinite(lse[:, :rows]), torch.isfinite(want_lse[:, :rows]))
    fin = torch.isfinite(want_lse[:, :rows])
    assert float((lse[:, :rows].double() - want_lse[:, :rows])[fin].abs().max()) < 1e-5
    err = (out[:rows].double() - want[:rows]).abs()
    assert float((err / want[:rows].abs().clamp_min(1e-3)).max()) <= 2 ** -8  # bf16: half an ulp + fp32 sums


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fp8_mma", "mma16"])
def test_gpu_graph_at_256_splits_replays_with_new_lengths(kernel):
    from fa512.launch.run import last_launch

    q, k, v, kw = _problem(DECODE, torch.float8_e4m3fn, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06, num_splits=256, kernel=kernel)
    out = torch.empty_like(q)
    last_launch.clear()
    fa512.attention(q, k, v, **kw, out=out)  # compile and warm outside the capture
    torch.cuda.synchronize()
    assert last_launch["kernel"] == kernel and last_launch["num_splits"] == 256
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = fa512.attention(q, k, v, **kw, out=out)
    for lens in ([16384, 0, 1, 9000], [5, 16384, 16000, 64], [0, 1, 3000, 16384]):
        kw["seqused_k"].copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want_out, want_lse = fa512.attention(q, k, v, **kw)
        assert torch.equal(out[:4], want_out[:4]), lens
        assert torch.equal(lse[:, :4], want_lse[:, :4]), lens
