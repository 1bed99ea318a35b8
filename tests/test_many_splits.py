"""Split-KV past FA3's 32 (issue 22): up to `fa512.MAX_SPLITS` = 256 splits on the SM90 kernels.

CPU: the bounds the op enforces (the cap, CUDA's grid limit on tile heads x splits) and the
planner's reach. GPU: outputs and lse of 2..256 splits against the oracle (the float64 reference
for mma16, the emulation of the variant that ran for fp8_mma) with empty and 1-key sequences in
the batch, through the fused combine (grids of at most 132 CTAs) and the combine kernel; both
against a float64 merge of the same call's partials; CUDA graphs replayed with new lengths; two
fused calls on two streams at once.
"""

from __future__ import annotations

import pytest
import torch

import fa512
from fa512.planning.splits import fuses
from fa512.tools.fuzz import EMULATION_BAR, TOLERANCES, compare

from helpers import make_problem

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (q_lens, k_lens): an empty sequence, a 1-key one, a short and a long one (256 blocks of 64 keys:
# one per split at 256 splits); MTP-shaped (4 queries a sequence) as well.
DECODE = ([1, 1, 1, 1], [0, 1, 3000, 16384])
MTP = ([4, 4, 4], [1, 700, 16384])
MTP1 = ([4], [28672])  # issue 22's MTP case: one sequence, one kv head


def _combine(shape, splits, kernel="fp8_mma"):
    """How the SM90 plan merges ``splits`` partials of ``shape`` (one tile per sequence, 8 heads
    packed): fp8_mma inside the forward for grids of at most 132 CTAs of at most 2 (row,
    quarter) merges each (`fa512.planning.splits.fuses`), else (and mma16) the combine kernel."""
    fused = kernel == "fp8_mma" and fuses(8 * max(shape[0]), splits, len(shape[0]) * splits, 132)
    return "fused" if fused else "kernel"


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


def test_capture_counters_are_the_captures_and_streams_own(monkeypatch):
    # split_counters' keys, the driver query and the allocation faked (no GPU): eager calls share
    # a stream's buffer; a capture gets its own per captured stream; an invalidated capture
    # (no valid id) raises instead of making a buffer it would fail to zero.
    from fa512.backends import cute

    state = {}
    monkeypatch.setattr(cute, "_counters", {})
    monkeypatch.setattr(cute, "_capture_info", lambda stream: state.get(stream, (False, 0)))
    monkeypatch.setattr(cute.torch, "zeros", lambda *a, **kw: object())
    dev = torch.device("cuda", 0)
    eager = cute.split_counters(dev, 5)
    assert cute.split_counters(dev, 5) is eager and cute.split_counters(dev, 6) is not eager
    state.update({5: (True, 41), 6: (True, 41)})  # one capture over two streams
    in_5, in_6 = cute.split_counters(dev, 5), cute.split_counters(dev, 6)
    assert len({id(eager), id(in_5), id(in_6)}) == 3 and cute.split_counters(dev, 5) is in_5
    state[5] = (True, 42)  # the next capture on that stream
    assert cute.split_counters(dev, 5) is not in_5
    state[5] = (False, 0)
    assert cute.split_counters(dev, 5) is eager

    def invalidated(stream):
        raise RuntimeError("invalidated")

    monkeypatch.setattr(cute, "_capture_info", invalidated)
    with pytest.raises(RuntimeError, match="invalidated"):
        cute.split_counters(dev, 5)


def test_no_native_registration_while_capturing(monkeypatch):
    # A registration replaces the signature's native entry and destroys its graphs
    # (cuGraphExecDestroy), which invalidates a capture under way: none happens while capturing.
    from fa512.launch import native

    assert not native._capturing((torch.zeros(1),))  # CPU tensors (the tests' stand-ins) never capture
    registered = []

    class Module:
        def register(self, call, spec):
            registered.append(call)

    monkeypatch.setattr(native, "module", lambda: Module())
    monkeypatch.setattr(native, "launch_spec", lambda *a: None)
    call = (torch.zeros(1),)
    monkeypatch.setattr(native, "_capturing", lambda call: True)
    native.register(call, None, False, {})
    assert registered == []
    monkeypatch.setattr(native, "_capturing", lambda call: False)
    native.register(call, None, False, {})
    assert registered == [call]


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
    assert last_launch["combine"] == _combine(shape, splits, kernel), last_launch
    rows = int(kw["cu_seqlens_q"][-1])
    ref_out, ref_lse = attention_ref(q, k, v, **kw)
    m = compare(out, lse, ref_out, ref_lse, rows)
    assert m["nonfinite_out"] == m["empty_out_nonzero"] == m["empty_lse_not_neg_inf"] == 0, m
    assert m["empty_rows"] > 0 or shape is not DECODE  # the empty sequence's row is in the decode batch
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
@pytest.mark.parametrize("kernel, kv_dtype", [("fp8_mma", torch.float8_e4m3fn), ("mma16", torch.bfloat16)])
def test_gpu_mtp_one_sequence_fuses_its_combine_and_matches_the_oracle(kernel, kv_dtype):
    # 112 splits x 1 tile, 32 rows: 2 (row, quarter) merges per CTA, inside fp8_mma's forward
    # (mma16: the combine kernel)
    assert _combine(MTP1, 112, kernel) == ("fused" if kernel == "fp8_mma" else "kernel")
    _oracle_check(kernel, kv_dtype, MTP1, 112)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, splits, combine",
    [(DECODE, 3, "kernel"), (DECODE, 32, "fused"), (DECODE, 64, "kernel"), (DECODE, 256, "kernel"),
     (MTP1, 112, "fused"), (MTP1, 132, "fused")],
    ids=["decode-3", "decode-32", "decode-64", "decode-256", "mtp1-112", "mtp1-132"],
)
def test_gpu_combine_matches_a_float64_merge_of_its_partials(shape, splits, combine):
    # decode-256: more splits than the combine kernel's threads; mtp1-112: two (row, quarter)
    # pieces on 16 of the fused forward's CTAs; mtp1-132: one piece each on 128 CTAs, 4 CTAs
    # with none, and 20 splits with no keys (448 key blocks, 4 a split).
    # The same call's uncombined partials, merged in float64 on the host side, against the op's
    # output (bf16: one rounding) and lse (fp32): the combine kernel adds nothing of its own.
    from fa512.call import make_call
    from fa512.launch.partials import partials
    from fa512.launch.run import last_launch
    from fa512.numerics.reference import merge_partials

    q, k, v, kw = _problem(shape, torch.float8_e4m3fn, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06)
    out, lse = fa512.attention(q, k, v, **kw, num_splits=splits, kernel="fp8_mma")
    assert last_launch["kernel"] == "fp8_mma" and last_launch["num_splits"] == splits
    assert last_launch["combine"] == _combine(shape, splits) == combine
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
@pytest.mark.parametrize("splits, combine", [(256, "kernel"), (33, "fused")])
def test_gpu_graph_of_a_split_call_replays_with_new_lengths(kernel, splits, combine):
    # The fused combine (33 splits x 4 tiles = 132 CTAs) leaves its arrival counters zeroed
    # after each call: a replay that found them counted would merge partials not yet written
    # (this graph's own counters are zeroed by a captured memset; the next test has two calls).
    from fa512.launch.run import last_launch

    q, k, v, kw = _problem(DECODE, torch.float8_e4m3fn, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06, num_splits=splits, kernel=kernel)
    combine = combine if kernel == "fp8_mma" else "kernel"  # mma16 never fuses
    out = torch.empty_like(q)
    last_launch.clear()
    fa512.attention(q, k, v, **kw, out=out)  # compile and warm outside the capture
    torch.cuda.synchronize()
    assert last_launch["kernel"] == kernel and last_launch["num_splits"] == splits
    assert last_launch["combine"] == combine
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


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fp8_mma"])
def test_gpu_two_fused_calls_in_one_graph_find_their_counters_zeroed(kernel):
    # A capture gets counters of its own, zeroed by a captured memset at its first fused call;
    # the second call of the graph relies on the first one's reset, on every replay.
    from fa512.launch.run import last_launch

    q, k, v, kw = _problem(DECODE, torch.float8_e4m3fn, device="cuda")
    kw = dict(kw, causal=True, softmax_scale=0.06, num_splits=33, kernel=kernel)
    outs = [torch.empty_like(q), torch.empty_like(q)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (and compile) on the stream that captures
        fa512.attention(q, k, v, **kw, out=outs[0])
    torch.cuda.synchronize()
    assert last_launch["combine"] == "fused"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        lses = [fa512.attention(q, k, v, **kw, out=out)[1] for out in outs]
    for lens in ([16384, 0, 1, 9000], [5, 16384, 16000, 64], [0, 1, 3000, 16384]):
        kw["seqused_k"].copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want_out, want_lse = fa512.attention(q, k, v, **kw)
        for out, lse in zip(outs, lses):
            assert torch.equal(out[:4], want_out[:4]) and torch.equal(lse[:, :4], want_lse[:, :4]), lens


@GPU
@pytest.mark.gpu
def test_gpu_fused_combine_on_two_streams_at_once_matches_one_at_a_time():
    # Each stream has its own arrival counters (`fa512.backends.cute.split_counters`): two
    # fused calls in flight together must give what each gives alone.
    from fa512.launch.run import last_launch

    calls = []
    for seed in (1, 2):
        q, k, v, kw = make_problem(*DECODE, hq=8, hkv=1, page_size=64, q_dtype=torch.bfloat16,
                                   kv_dtype=torch.float8_e4m3fn, seed=seed, device="cuda")
        calls.append((q, k, v, dict(kw, causal=True, softmax_scale=0.06, num_splits=32, kernel="fp8_mma")))
    alone = [fa512.attention(q, k, v, **kw) for q, k, v, kw in calls]
    torch.cuda.synchronize()
    assert last_launch["combine"] == "fused"
    streams = [torch.cuda.Stream() for _ in calls]
    together = [None, None]
    for rep in range(20):
        for i, (stream, (q, k, v, kw)) in enumerate(zip(streams, calls)):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                together[i] = fa512.attention(q, k, v, **kw)
        torch.cuda.synchronize()
        for (out, lse), (want, want_lse) in zip(together, alone):
            assert torch.equal(out[:4], want[:4]) and torch.equal(lse[:, :4], want_lse[:, :4]), rep
