"""fa512.distributed: shard bookkeeping, mask decomposition, the exchange choice, and 2 ranks
(gloo, reference kernel) against one process holding the whole cache.

The 2-rank cases run in one start of two gloo processes (module fixture ``two_ranks``, ~3 s on
the 2-core dev VM): each rank builds its shard of the same seeded global cache, runs
`fa512.distributed.attention` with ``out`` in float64 and saves what it got; the tests compare
in the parent. Why float64: `fa512.attention` on CPU (the reference kernel) computes in float32
and returns q's 16-bit dtype, but the partials `fa512.distributed` merges come from the
reference kernel's partial launch in float64 (`fa512.launch.partials`), so the whole path
(shard bookkeeping, masks, merge, collective) is held to the float64 reference of the whole
cache at rel L2 <= 1e-6 (it lands at ~1e-16).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
import torch

import fa512
from fa512 import distributed as cp
from fa512.launch.partials import partials
from fa512.call import make_call
from helpers import load_profile, rel_l2

D = 512
WORLD = 2


# -- bookkeeping ----------------------------------------------------------------------------


PLACEMENTS = [("interleaved", 1), ("interleaved", 3), ("contiguous", 5), ("contiguous", 16)]


@pytest.mark.parametrize("kind,block", PLACEMENTS)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_local_count_and_positions_match_ownership(kind, block, world):
    n = 50
    owners = [cp.Placement(kind, world, 0, block).owner(t) for t in range(n)]
    for rank in range(world):
        pl = cp.Placement(kind, world, rank, block)
        pos = pl.positions(n).tolist()
        assert pos == [t for t in range(n) if owners[t] == rank]
        counts = [sum(1 for t in pos if t < x) for x in range(n + 1)]
        assert [pl.local_count(x) for x in range(n + 1)] == counts  # host ints
        x = torch.arange(-3, n + 1, dtype=torch.int32)
        assert pl.local_count(x).tolist() == [0, 0, 0] + counts  # device form, negatives clamp
        for w in range(1, 12):  # the bound on any window of w consecutive positions
            assert max(sum(1 for t in pos if a <= t < a + w) for a in range(n - w + 1)) <= pl.max_in_window(w)
    assert sorted(sum((cp.Placement(kind, world, r, block).positions(n).tolist() for r in range(world)), [])) \
        == list(range(n))


@pytest.mark.parametrize("bad", [dict(kind="striped"), dict(world=0), dict(rank=2), dict(block=0), dict(rank=True)])
def test_placement_rejects_bad_fields(bad):
    fields = dict(kind="interleaved", world=2, rank=0, block=1) | bad
    with pytest.raises(ValueError, match="placement"):
        cp.Placement(**fields)


def _meta(q_lens, k_lens, page_size=4, pages=40):
    cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    return dict(cu_seqlens_q=cu_q, seqlens_k=torch.tensor(k_lens, dtype=torch.int32), max_seqlen_q=max(q_lens),
                max_seqlen_k=max(k_lens), page_table=torch.arange(len(q_lens) * pages, dtype=torch.int32)
                .view(len(q_lens), pages), page_size=page_size)


@pytest.mark.parametrize("mask,q_lens,mode", [
    (dict(), [4, 2], "one_call"),
    (dict(causal=True), [1, 1], "one_call"),  # decode: the query sits at the last key
    (dict(window_right=3), [4, 2], "one_call"),  # window_right >= max_seqlen_q - 1 sees everything
    (dict(causal=True), [4, 2], "tail"),
    (dict(window_right=1), [4, 2], "tail"),
])
def test_plan_modes(mask, q_lens, mode):
    pl = cp.Placement("interleaved", 2, 0)
    assert cp.plan(pl, **_meta(q_lens, [30, 9]), **mask).mode == mode
    if mode == "tail":
        assert cp.plan(pl, **_meta(q_lens, [30, 9]), **mask, new_kv=True).mode == "fresh"


def test_plan_refuses_what_a_shard_cannot_serve():
    pl = cp.Placement("interleaved", 2, 1)
    with pytest.raises(NotImplementedError, match="window_left"):
        cp.plan(pl, **_meta([1], [30]), causal=True, window_left=8)
    meta = _meta([4], [30])
    del meta["page_table"], meta["page_size"]
    meta["cu_seqlens_k"] = torch.tensor([0, 15], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="new_k/new_v"):
        cp.plan(pl, **meta, causal=True)
    assert cp.plan(pl, **meta, causal=True, new_kv=True).mode == "fresh"
    assert cp.plan(pl, **meta).mode == "one_call"
    with pytest.raises(ValueError, match="exactly one"):
        cp.plan(pl, **meta, page_table=torch.zeros(1, 4, dtype=torch.int32), page_size=4)
    with pytest.raises(TypeError, match="seqlens_k"):
        cp.plan(pl, **(meta | dict(seqlens_k=torch.tensor([30]))))


@pytest.mark.parametrize("kind,block", PLACEMENTS)
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("window_right", [0, 2])
def test_tail_plan_gives_each_query_its_visible_keys(kind, block, page_size, window_right):
    """Per query: keys of the first call + keys of its tail slot == this rank's keys at global
    positions <= p + window_right, and the slot's pages are the rank's pages from the tail's start."""
    q_lens, k_lens = [4, 0, 5, 1], [23, 3, 9, 1]
    meta = _meta(q_lens, k_lens, page_size)
    for rank in range(2):
        pl = cp.Placement(kind, 2, rank, block)
        sp = cp.plan(pl, **meta, window_right=window_right)
        assert sp.mode == "tail"
        bulk, tail = sp.calls
        m = max(q_lens)
        assert tail.repeat == m and tail.max_seqlen_q == 1 and not tail.causal
        cu = tail.cu_seqlens_q.tolist()
        assert cu[-1] == sum(q_lens) and len(cu) == len(q_lens) * m + 1
        for b, (lq, lk) in enumerate(zip(q_lens, k_lens)):
            start = int(bulk.seqused_k[b])
            assert start % page_size == 0 and start <= pl.local_count(lk - lq)
            for i in range(m):
                slot = b * m + i
                rows = cu[slot + 1] - cu[slot]
                assert rows == (1 if i < lq else 0)
                if not rows:
                    assert int(tail.seqused_k[slot]) == 0
                    continue
                assert cu[slot] == int(meta["cu_seqlens_q"][b]) + i
                visible = min(lk, lk - lq + i + window_right + 1)
                n_tail = int(tail.seqused_k[slot])
                assert start + n_tail == pl.local_count(visible)
                assert n_tail <= tail.max_seqlen_k
                pages = tail.page_table[slot, : -(-n_tail // page_size)].tolist()
                first = start // page_size
                assert pages == meta["page_table"][b, first : first + len(pages)].tolist()


def test_exchange_choice_and_bytes():
    # decode step of Gemma-4 31B over 2 ranks: B=4 rows, Hq=32, fp32
    ag = cp.exchange_bytes("all_gather", 2, 4, 32)
    rs = cp.exchange_bytes("reduce_scatter", 2, 4, 32)
    assert ag == 4 * 32 * 513 * 4 and rs == 4 * 32 * 4 + 4 * 16 * 512 * 4
    for world in (2, 3, 4, 8):
        for rows in (1, 4, 2048):
            assert cp.exchange_bytes("reduce_scatter", world, rows, 32) < cp.exchange_bytes("all_gather", world, rows, 32)
            assert cp.choose_exchange("all", world, rows, 32) == "all_gather"
            expect = "reduce_scatter" if 32 % world == 0 else None
            if expect:
                assert cp.choose_exchange("local", world, rows, 32) == expect
            else:
                with pytest.raises(ValueError, match="divisible"):
                    cp.choose_exchange("local", world, rows, 32)
    with pytest.raises(ValueError, match="heads"):
        cp.choose_exchange("some", 2, 4, 32)


class _Loopback:
    """A communicator of one rank (`TorchCollectives`' interface) that counts its calls."""

    world, rank = 1, 0

    def __init__(self):
        self.calls = []

    def all_gather(self, out, x):
        self.calls.append("all_gather")
        out[0].copy_(x)

    def reduce_scatter(self, out, x):
        self.calls.append("reduce_scatter")
        out.copy_(x[0])


@pytest.mark.parametrize("heads", ["all", "local"])
def test_one_rank_with_an_engine_communicator(heads):
    """world = 1 through a communicator object: the step equals the one-process call; one
    all-gather ([O | lse]), which at one rank moves as few bytes (0) as the reduce-scatter."""
    from helpers import make_problem

    q, k, v, kw = make_problem([4, 1], [30, 9], page_size=4)
    pl = cp.Placement("interleaved", 1, 0)
    sp = cp.plan(pl, cu_seqlens_q=kw["cu_seqlens_q"], seqlens_k=kw["seqused_k"], max_seqlen_q=4,
                 max_seqlen_k=30, page_table=kw["page_table"], page_size=4, causal=True)
    comm = _Loopback()
    out, lse = cp.attention(q, k, v, sp, group=comm, heads=heads, softmax_scale=0.05, kernel="reference",
                            out=torch.empty(5, 4, D, dtype=torch.float64))
    assert comm.calls == ["all_gather"]
    ref_out, ref_lse = fa512.attention_ref(q, k, v, **kw, causal=True, softmax_scale=0.05)
    assert rel_l2(out, ref_out) <= 1e-12
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-12)
    out16, _ = cp.attention(q, k, v, sp, group=comm, heads=heads, softmax_scale=0.05)  # kernel auto, q's dtype
    assert out16.dtype == q.dtype and rel_l2(out16, ref_out) <= 2e-3
    with pytest.raises(ValueError, match="the plan's placement"):
        cp.attention(q, k, v, cp.plan(cp.Placement("interleaved", 2, 0), **_meta([1], [3])), group=comm)


# -- the 2-rank cases ------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    q_lens: tuple
    k_lens: tuple  # global keys, the step's own included
    kind: str = "interleaved"
    block: int = 1
    causal: bool = False
    window_right: int = -1
    cache: str = "paged"  # "paged" (page 4, pages shuffled) or "packed"
    fresh: bool = False  # the step's keys from new_k/new_v
    heads: str = "all"
    fp8: bool = False  # e4m3 cache with (B, Hkv) descales
    pad_rows: int = 0  # query rows past cu_seqlens_q[B]
    expect_mode: str = "one_call"
    extra: dict = field(default_factory=dict, hash=False, compare=False)


CASES = [
    # decode: one query per sequence; sequence 1 has a single key, so rank 1 holds none of it
    Case("decode_interleaved", (1, 1, 1), (37, 1, 64), causal=True),
    Case("decode_contiguous_empty_shard", (1, 1, 1), (37, 5, 64), "contiguous", 32, causal=True),
    Case("decode_noncausal_packed_block4", (1, 1), (29, 3), block=4, cache="packed"),
    Case("decode_local_heads", (1, 1, 1), (37, 1, 64), causal=True, heads="local"),
    Case("decode_fp8_descales", (1, 1), (40, 2), causal=True, fp8=True, pad_rows=3),
    # MTP verification: 4 queries per sequence
    Case("mtp_tail_interleaved", (4, 4), (41, 6), causal=True, expect_mode="tail"),
    Case("mtp_fresh_interleaved_packed", (4, 4), (41, 6), causal=True, cache="packed", fresh=True,
         expect_mode="fresh"),
    Case("mtp_tail_contiguous_straddle", (4, 4, 4), (34, 30, 5), "contiguous", 32, causal=True, expect_mode="tail"),
    Case("mtp_fresh_contiguous_straddle", (4, 4, 4), (34, 30, 5), "contiguous", 32, causal=True, fresh=True,
         expect_mode="fresh"),
    Case("mtp_noncausal", (4, 4), (41, 6), block=2),
    Case("mtp_window_right", (4, 1), (41, 9), window_right=1, expect_mode="tail"),
    Case("mtp_fp8_tail_local_heads", (4, 0, 4), (41, 7, 6), block=3, causal=True, fp8=True, heads="local",
         pad_rows=2, expect_mode="tail"),
    Case("mtp_fp8_fresh", (4, 4), (41, 6), causal=True, fp8=True, fresh=True, expect_mode="fresh"),
    # chunked prefill: a chunk of new tokens over a cached context
    Case("chunk_tail_interleaved_block4", (24, 3), (80, 3), block=4, causal=True, expect_mode="tail"),
    Case("chunk_fresh_contiguous", (20, 6), (50, 46), "contiguous", 40, causal=True, fresh=True,
         expect_mode="fresh"),
    Case("chunk_tail_contiguous", (20, 6), (50, 46), "contiguous", 40, causal=True, expect_mode="tail"),
    Case("chunk_noncausal_packed_contiguous", (20, 6), (50, 46), "contiguous", 40, cache="packed"),
]


def _global_problem(case: Case):
    """Seeded global cache (packed per sequence) and queries, the same in every process."""
    g = torch.Generator().manual_seed(sum(map(ord, case.name)))
    hq, hkv, b = 4, 2, len(case.q_lens)
    total_q = sum(case.q_lens) + case.pad_rows
    q = torch.randn(total_q, hq, D, generator=g).half()
    cu_q = torch.tensor([0] + torch.tensor(case.q_lens).cumsum(0).tolist(), dtype=torch.int32)
    keys = [torch.randn(n, hkv, D, generator=g) for n in case.k_lens]
    vals = [torch.randn(n, hkv, D, generator=g) for n in case.k_lens]
    desc = {}
    if case.fp8:
        desc = {name: torch.rand(b, hkv, generator=g) * 0.5 + 0.75 for name in ("q_descale", "k_descale", "v_descale")}
        keys = [x.to(torch.float8_e4m3fn) for x in keys]
        vals = [x.to(torch.float8_e4m3fn) for x in vals]
    else:
        keys, vals = [x.half() for x in keys], [x.half() for x in vals]
    return q, cu_q, keys, vals, desc


def _shard_cache(case: Case, pl: cp.Placement, keys, vals, page_size=4, seed=0):
    """This rank's cache: its keys of each sequence in position order, paged (shuffled pages) or packed."""
    mine = [(k[pl.positions(k.shape[0])], v[pl.positions(v.shape[0])]) for k, v in zip(keys, vals)]
    if case.cache == "packed":
        lens = [k.shape[0] for k, _ in mine]
        cu_k = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
        return torch.cat([k for k, _ in mine]), torch.cat([v for _, v in mine]), dict(cu_seqlens_k=cu_k)
    n_pages = [max(1, -(-k.shape[0] // page_size)) for k, _ in mine]
    total = sum(n_pages) + 2
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed + pl.rank)).int()
    hkv, dtype = keys[0].shape[1], keys[0].dtype
    kc = torch.zeros(total, page_size, hkv, D).to(dtype)
    vc = torch.zeros(total, page_size, hkv, D).to(dtype)
    table = torch.zeros(len(mine), max(n_pages) + 1, dtype=torch.int32)
    nxt = 0
    for b, (k, v) in enumerate(mine):
        for j in range(n_pages[b]):
            page = int(order[nxt])
            nxt += 1
            table[b, j] = page
            rows = slice(j * page_size, min((j + 1) * page_size, k.shape[0]))
            kc[page, : rows.stop - rows.start] = k[rows]
            vc[page, : rows.stop - rows.start] = v[rows]
    return kc, vc, dict(page_table=table, page_size=page_size)


def _run_case(case: Case, rank: int) -> dict:
    q, cu_q, keys, vals, desc = _global_problem(case)
    pl = cp.Placement(case.kind, WORLD, rank, case.block)
    kc, vc, cache = _shard_cache(case, pl, keys, vals)
    sp = cp.plan(pl, cu_seqlens_q=cu_q, seqlens_k=torch.tensor(case.k_lens, dtype=torch.int32),
                 max_seqlen_q=max(case.q_lens), max_seqlen_k=max(case.k_lens), causal=case.causal,
                 window_right=case.window_right, new_kv=case.fresh, **cache)
    new = {}
    if case.fresh:
        new = dict(new_k=torch.cat([k[k.shape[0] - lq:] for k, lq in zip(keys, case.q_lens)]),
                   new_v=torch.cat([v[v.shape[0] - lq:] for v, lq in zip(vals, case.q_lens)]))
        pad = torch.zeros(case.pad_rows, *new["new_k"].shape[1:]).to(new["new_k"].dtype)
        new = {n: torch.cat([t, pad]) for n, t in new.items()}
    hq = q.shape[1] // (WORLD if case.heads == "local" else 1)
    out = torch.full((q.shape[0], hq, D), 7.0, dtype=torch.float64)
    out, lse = cp.attention(q, kc, vc, sp, **new, **desc, out=out, heads=case.heads, softmax_scale=0.05,
                            kernel="reference")
    return dict(mode=sp.mode, out=out, lse=lse)


def _worker(rank: int, path: str, names: list) -> None:
    import torch.distributed as dist

    # One intra-op thread each: two ranks' OpenMP pools on a 2-core VM spin against each other
    # (the cases took 19 s with the default threads, 0.7 s with one, 2026-12-01).
    torch.set_num_threads(1)
    # A failing case raises in its process; mp.spawn then ends the other and re-raises here.
    dist.init_process_group("gloo", init_method=f"file://{path}.init", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=120))
    try:
        by_name = {c.name: c for c in CASES}
        results = {name: _run_case(by_name[name], rank) for name in names}
        # profiles/cp_decode.py --check's steps on CPU (the GPU test's code, reference kernel)
        results["profile_check"] = load_profile("cp_decode").check_rank(
            rank, WORLD, keys=384, batch=2, splits_per_rank=2, device="cpu", kernel="reference")
        torch.save(results, f"{path}.rank{rank}")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks():
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cp")
        # fork: the children inherit the imported torch and fa512 (spawn re-imports them, ~14 s of
        # this VM's 2 loaded cores); each runs one intra-op thread, so no OpenMP pool is reused
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        mp.start_processes(_worker, args=(path, [c.name for c in CASES]), nprocs=WORLD, start_method=method)
        yield [torch.load(f"{path}.rank{r}") for r in range(WORLD)]


def _single_process(case: Case):
    """The float64 reference over the whole cache (packed), with the same arguments."""
    q, cu_q, keys, vals, desc = _global_problem(case)
    lens = torch.tensor(case.k_lens, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens.cumsum(0).tolist(), dtype=torch.int32)
    return fa512.attention_ref(q, torch.cat(keys), torch.cat(vals), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                               seqused_k=lens, softmax_scale=0.05, causal=case.causal,
                               window_right=case.window_right, **desc)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_two_ranks_equal_one_process(two_ranks, case):
    got = [r[case.name] for r in two_ranks]
    for r in got:
        assert r["mode"] == case.expect_mode
    ref_out, ref_lse = _single_process(case)
    rows = sum(case.q_lens)
    if case.heads == "local":
        out = torch.cat([r["out"] for r in got], dim=1)
        lse = torch.cat([r["lse"] for r in got], dim=0)
    else:
        out, lse = got[0]["out"], got[0]["lse"]
        for r in got[1:]:  # every rank holds the same result
            torch.testing.assert_close(r["out"], out, rtol=0, atol=0)
    assert rel_l2(out[:rows], ref_out[:rows]) <= 1e-6
    finite = torch.isfinite(ref_lse[:, :rows])
    assert torch.equal(torch.isfinite(lse[:, :rows]), finite)
    torch.testing.assert_close(lse[:, :rows][finite], ref_lse[:, :rows][finite], rtol=0, atol=1e-9)
    if case.pad_rows:  # rows past cu_seqlens_q[B] are not written
        assert (out[rows:] == 7.0).all() and torch.isneginf(lse[:, rows:]).all()


def test_profile_check_steps_on_cpu(two_ranks):
    """profiles/cp_decode.py --check on gloo with the reference kernel: its shards, rank-ordered
    cache and MTP step agree with the reference to bf16 output rounding."""
    report = two_ranks[0]["profile_check"]
    assert set(report) == {"decode_interleaved", "decode_contiguous", "mtp_fresh_interleaved"}
    for name, row in report.items():
        assert row["kernel"] == "reference", name
        assert row["vs_ref"] <= 4e-3 and row["one_gpu_vs_ref"] <= 4e-3, (name, row)
        if name.startswith("decode_"):
            assert row["vs_one_gpu_same_blocks"] <= 4e-3, (name, row)


# -- the partial launch ------------------------------------------------------------------------


def test_reference_partials_are_float64_and_merge_to_the_reference():
    from helpers import make_problem

    q, k, v, kw = make_problem([3, 1], [100, 7], paged=True)
    o, lse = partials(make_call(q, k, v, **kw, num_splits=3, kernel="reference"))
    assert o.dtype == torch.float64 and o.shape == (1, 4, 4, D) and lse.shape == (1, 4, 4)
    ref_out, ref_lse = fa512.attention_ref(q, k, v, **kw)
    assert rel_l2(o[0], ref_out) <= 1e-12
    torch.testing.assert_close(lse[0], ref_lse, rtol=0, atol=1e-12)


# -- GPU: fp8_mma over 2 ranks (NCCL) ------------------------------------------------------------


def _gpu_worker(rank: int, path: str) -> None:
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{path}.init", rank=rank, world_size=WORLD)
    try:
        torch.save(load_profile("cp_decode").check_rank(rank, WORLD), f"{path}.rank{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_fp8_mma_two_ranks_equal_one_gpu():
    """decode B=4 x 32k, Gemma-4 31B heads (profiles/cp_decode.py --check): fp8_mma over 2 ranks
    (interleaved and contiguous) against fp8_mma on one GPU holding the whole cache in rank order
    with the ranks' split boundaries (the same key blocks per partial: rel L2 <= 5e-4, the
    emulation's tolerance); against the float64 reference at the one-GPU kernel's own accuracy
    (decode, and an MTP step from new_k/new_v); a CUDA graph of plan + attention replayed with
    other lengths equals the eager call."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cp")
        mp.spawn(_gpu_worker, args=(path,), nprocs=WORLD, join=True)
        report = torch.load(f"{path}.rank0")
    for name, row in report.items():
        print(name, row)
        assert row["kernel"] == "fp8_mma", name
        if name.startswith("decode_"):
            assert row["vs_one_gpu_same_blocks"] <= 5e-4, name
        if "vs_ref" in row:
            assert row["vs_ref"] <= 1.25 * row["one_gpu_vs_ref"] + 1e-3, name
    assert report["graph_replay_new_lengths"]["vs_eager"] <= 1e-6
