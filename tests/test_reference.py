"""The golden reference against a naive per-row loop, and its algebraic properties."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fa512
from fa512.numerics import reference
from fa512.call import Call
from fa512.planning.validate import check
from helpers import make_problem, naive_attention

D = 512


def _ref(q, k, v, kw, **extra):
    return fa512.attention_ref(q, k, v, **kw, **extra)


def _gathered(k, kw, b):
    """Sequence b's keys (K, Hkv, D) from paged or packed storage, independent of the reference."""
    n = int(kw["seqused_k"][b])
    if "page_table" in kw:
        ps = k.shape[1]
        rows = [k[int(kw["page_table"][b, j // ps]), j % ps] for j in range(n)]
        return torch.stack(rows) if rows else k.new_zeros(0, *k.shape[2:])
    s = int(kw["cu_seqlens_k"][b])
    return k[s : s + n]


@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize(
    "mask", [dict(), dict(causal=True), dict(window_left=5, window_right=2), dict(causal=True, window_left=7)]
)
def test_reference_matches_naive_loop(paged, mask):
    q, k, v, kw = make_problem([3, 1, 4], [20, 9, 33], hq=4, hkv=2, page_size=8, paged=paged, seed=1)
    qd = torch.tensor([[0.5, 2.0], [1.5, 0.25], [1.0, 3.0]])
    kd = torch.tensor([0.75, 1.25])
    vd = torch.tensor(2.0)
    scale = 0.03
    out, lse = _ref(q, k, v, kw, softmax_scale=scale, q_descale=qd, k_descale=kd, v_descale=vd, **mask)
    cu = kw["cu_seqlens_q"].tolist()
    for b in range(3):
        keys, vals = _gathered(k, kw, b), _gathered(v, kw, b)
        for h in range(4):
            kvh = h // 2
            o_n, l_n = naive_attention(
                q[cu[b] : cu[b + 1], h], keys[:, kvh], vals[:, kvh], scale,
                causal=mask.get("causal", False), window_left=mask.get("window_left", -1),
                window_right=mask.get("window_right", -1),
                qd=float(qd[b, kvh]), kd=float(kd[kvh]), vd=float(vd),
            )
            torch.testing.assert_close(out[cu[b] : cu[b + 1], h], o_n, rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(lse[h, cu[b] : cu[b + 1]], l_n, rtol=1e-9, atol=1e-9)


def test_empty_rows_and_sequences():
    # seq 0: 4 queries but only 2 keys, causal -> first 2 rows see nothing; seq 1: no keys;
    # seq 2: no queries.
    q, k, v, kw = make_problem([4, 2, 0], [2, 0, 5], seed=2)
    out, lse = _ref(q, k, v, kw, causal=True)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(out[:2], torch.zeros_like(out[:2]))
    assert torch.isinf(lse[:, :2]).all() and (lse[:, :2] < 0).all()
    assert torch.isfinite(lse[:, 2:4]).all()
    assert (out[4:6] == 0).all() and torch.isneginf(lse[:, 4:6]).all()


def test_chunking_is_invisible(monkeypatch):
    q, k, v, kw = make_problem([9, 5], [30, 12], seed=3)
    full = _ref(q, k, v, kw, causal=True)
    monkeypatch.setattr(reference, "_CHUNK_ELEMS", 64)  # forces one or two rows per chunk
    chunked = _ref(q, k, v, kw, causal=True)
    torch.testing.assert_close(chunked[0], full[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=1e-12)


def test_merge_partials_handles_all_empty():
    o = torch.randn(3, 2, 5, 8, dtype=torch.float64)
    lse = torch.full((3, 2, 5), -math.inf, dtype=torch.float64)
    lse[1, 0, :2] = torch.tensor([0.5, -1.0], dtype=torch.float64)
    out, merged = reference.merge_partials(o, lse)
    torch.testing.assert_close(out[0, :2], o[1, 0, :2])
    assert (out[1] == 0).all() and (out[0, 2:] == 0).all()
    assert torch.isneginf(merged[1]).all()


def test_merge_ignores_the_o_of_empty_partials():
    """A kernel may leave an empty split's O unwritten: NaN there must not reach the merge, and
    merge_weights are the weights the merge applies."""
    o = torch.randn(3, 4, 8, dtype=torch.float64)
    lse = torch.randn(3, 4, dtype=torch.float64)
    lse[1, 2] = -math.inf
    o[1, 2] = math.nan
    out, merged = reference.merge_partials(o, lse)
    weights, merged_w = reference.merge_weights(lse)
    assert torch.isfinite(out).all() and torch.equal(merged, merged_w) and weights[1, 2] == 0
    torch.testing.assert_close(weights.sum(0), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(merged, torch.logsumexp(lse, dim=0))
    keep = [0, 2]
    torch.testing.assert_close(out[2], (weights[keep, 2, None] * o[keep, 2]).sum(0))


def test_split_key_ranges_cover_exactly():
    for n in (0, 1, 63, 64, 65, 1000):
        for s in (1, 2, 3, 7, 32):
            ranges = reference.split_key_ranges(n, s, 64)
            assert len(ranges) == s
            covered = [j for lo, hi in ranges for j in range(lo, hi)]
            assert covered == list(range(n))
            assert all(lo % 64 == 0 for lo, hi in ranges if hi > lo)


# -- property tests -------------------------------------------------------------------------

_settings = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
lens = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40)), min_size=1, max_size=3)
masks = st.sampled_from([dict(), dict(causal=True), dict(window_left=6), dict(window_left=3, window_right=4)])


@_settings
@given(lens=lens, mask=masks, page_size=st.sampled_from([1, 4, 16, 64]), seed=st.integers(0, 2**16))
def test_paged_equals_packed(lens, mask, page_size, seed):
    q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, kw = make_problem(q_lens, k_lens, page_size=page_size, seed=seed)
    paged = _ref(q, k, v, kw, **mask)
    # Pack the same keys contiguously.
    ks = [_gathered(k, kw, b) for b in range(len(lens))]
    vs = [_gathered(v, kw, b) for b in range(len(lens))]
    kp, vp = torch.cat(ks), torch.cat(vs)
    cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32)
    kw2 = {n: t for n, t in kw.items() if n != "page_table"}
    kw2["max_seqlen_k"] = max(1, kp.shape[0])
    packed = fa512.attention_ref(q, kp, vp, cu_seqlens_k=cu_k, **kw2, **mask)
    torch.testing.assert_close(paged[0], packed[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(paged[1], packed[1], rtol=1e-12, atol=1e-12)


@_settings
@given(lens=lens, mask=masks, seed=st.integers(0, 2**16))
def test_permuted_page_table_equals_identity(lens, mask, seed):
    q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, kw = make_problem(q_lens, k_lens, page_size=4, seed=seed, shuffle_pages=False, extra_pages=0)
    base = _ref(q, k, v, kw, **mask)
    perm = torch.randperm(k.shape[0], generator=torch.Generator().manual_seed(seed))
    inv = torch.argsort(perm)
    kw2 = dict(kw, page_table=inv[kw["page_table"].long()].int())
    moved = _ref(q, k[perm], v[perm], kw2, **mask)
    torch.testing.assert_close(moved[0], base[0], rtol=0, atol=0)
    torch.testing.assert_close(moved[1], base[1], rtol=0, atol=0)


@_settings
@given(lens=lens, mask=masks, group=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_gqa_equals_repeated_kv_heads(lens, mask, group, seed):
    q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, kw = make_problem(q_lens, k_lens, hq=2 * group, hkv=2, seed=seed, paged=False)
    gqa = _ref(q, k, v, kw, **mask)
    mha = _ref(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), kw, **mask)
    # Equal up to float64 rounding: the two layouts are matmuls of different shapes, which the
    # CPU BLAS may sum in different orders (4e-16 apart on a 2-core dev VM, 2026-12-01).
    torch.testing.assert_close(gqa[0], mha[0], rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(gqa[1], mha[1], rtol=1e-13, atol=1e-15)


@_settings
@given(lens=lens, mask=masks, splits=st.integers(2, 9), block=st.sampled_from([4, 16, 64]), seed=st.integers(0, 2**16))
def test_split_merge_equals_unsplit(lens, mask, splits, block, seed):
    q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, kw = make_problem(q_lens, k_lens, seed=seed)
    whole = _ref(q, k, v, kw, **mask)
    split = _ref(q, k, v, kw, num_splits=splits, split_block_n=block, **mask)
    torch.testing.assert_close(split[0], whole[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(split[1], whole[1], rtol=1e-10, atol=1e-12)


@_settings
@given(lens=lens, mask=masks, seed=st.integers(0, 2**16), mode=st.sampled_from(["scalar", "per_head", "per_batch_head"]))
def test_descale_folding_equals_prescaled_inputs(lens, mask, seed, mode):
    q_lens, k_lens = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, kw = make_problem(q_lens, k_lens, hq=4, hkv=2, seed=seed, paged=False)
    b = len(lens)
    g = torch.Generator().manual_seed(seed + 1)
    shape = {"scalar": (), "per_head": (2,), "per_batch_head": (b, 2)}[mode]
    qd, kd, vd = (torch.rand(shape, generator=g) * 2 + 0.25 for _ in range(3))
    folded = _ref(q, k, v, kw, q_descale=qd, k_descale=kd, v_descale=vd, **mask)
    # Pre-scale the inputs instead: per (batch, kv head) factors applied to rows of each sequence.
    qd2, kd2, vd2 = (t.expand(b, 2) for t in (qd, kd, vd))
    cu_q, cu_k = kw["cu_seqlens_q"].tolist(), kw["cu_seqlens_k"].tolist()
    qs, ks, vs = q.double().clone(), k.double().clone(), v.double().clone()
    for i in range(b):
        qs[cu_q[i] : cu_q[i + 1]] *= qd2[i].double().repeat_interleave(2)[None, :, None]
        ks[cu_k[i] : cu_k[i + 1]] *= kd2[i].double()[None, :, None]
        vs[cu_k[i] : cu_k[i + 1]] *= vd2[i].double()[None, :, None]
    problem, args = check(Call(
        q, k, v, None, None, kw["cu_seqlens_k"], kw["cu_seqlens_q"], kw["max_seqlen_q"], kw["seqused_k"],
        kw["max_seqlen_k"], fa512.DEFAULT_SOFTMAX_SCALE, mask.get("causal", False), mask.get("window_left", -1),
        mask.get("window_right", -1), None, None, None, 0, "reference",
    ))
    pre = reference.reference_forward(problem, args._replace(q=qs, k=ks, v=vs))
    torch.testing.assert_close(folded[0], pre[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(folded[1], pre[1], rtol=1e-10, atol=1e-12)
