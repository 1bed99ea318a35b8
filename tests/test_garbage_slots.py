"""Memory a call does not own (cache slots past seqused_k, packed slack rows) contributes nothing.

CPU: the 16-bit kernel's tail-block zeroing (`cute_kernels.mma_paths.zero_half_tile_rows`)
writes exactly the V rows past seqused_k of its warpgroup's d half, each 16-byte unit once
(an index model of the kernel's loop on Python ints). GPU: the H200 regression (mma16 returned
NaN rows on a paged bf16 cache with NaN past seqused_k, 2026-12-01) and its packed form, for
every kernel that serves the call, with NaN, +-Inf and e4m3 NaN bytes.
"""

from __future__ import annotations

import pytest
import torch

import fa512
from cute_kernels.dsl_utils import sw128_unit
from cute_kernels.mma_paths import convert_slot

HEAD_DIM = 512


def _zeroed_units(rows: int, rows_valid: int) -> list:
    """The 16-byte units `zero_half_tile_rows` stores to, over both warpgroups' 128 threads."""
    seen = []
    for wg in range(2):
        for t in range(128):
            row0, chunk = convert_slot(t, 0)
            for i in range(rows // 8):
                if row0 + 8 * i >= rows_valid:
                    seen += [sw128_unit(row0, 32 * wg + 2 * chunk + j, rows) + 8 * 8 * i for j in range(2)]
    return seen


@pytest.mark.parametrize("rows, rows_valid", [(32, 1), (32, 5), (32, 31), (64, 1), (64, 5), (64, 32), (64, 63)])
def test_tail_zeroing_covers_exactly_the_rows_past_seqused_k(rows, rows_valid):
    units_per_row = HEAD_DIM * 2 // 16
    want = sorted(sw128_unit(r, u, rows) for r in range(rows_valid, rows) for u in range(units_per_row))
    got = _zeroed_units(rows, rows_valid)
    assert sorted(got) == want  # every unit of those rows, once, and nothing of the valid rows
    assert len(set(got)) == len(got)


def _case(layout: str, kv_dtype, garbage: str, device="cuda"):
    """The H200 regression: Hq=8 / Hkv=1, page 64, B=3, keys 70 / 130 / 1, causal; every K/V byte
    the call does not own (slots past seqused_k, unreferenced pages, packed slack rows) holds
    ``garbage`` (e4m3: the NaN byte 0x7f, or +-448 for an infinity, which e4m3fn lacks).
    Returns (q, k, v, the oracle's k and v with those bytes zero, kwargs)."""
    g = torch.Generator(device="cpu").manual_seed(11)
    keys, hq, hkv, page = [70, 130, 1], 8, 1, 64
    q = torch.randn(8, hq, HEAD_DIM, generator=g).to(torch.bfloat16)
    i32 = dict(dtype=torch.int32)
    kw = dict(cu_seqlens_q=torch.tensor([0, 4, 7, 8], **i32), seqused_k=torch.tensor(keys, **i32),
              max_seqlen_q=4, max_seqlen_k=max(keys), softmax_scale=HEAD_DIM ** -0.5, causal=True)
    if layout == "paged":
        per_seq = [-(-n // page) for n in keys]
        order = torch.randperm(sum(per_seq) + 2, generator=g).int()  # two pages no sequence references
        kw["page_table"] = torch.zeros(3, max(per_seq), **i32)
        owned = torch.zeros(sum(per_seq) + 2, page, dtype=torch.bool)
        start = 0
        for b, n in enumerate(keys):
            kw["page_table"][b, :per_seq[b]] = order[start:start + per_seq[b]]
            start += per_seq[b]
            for j in range(n):
                owned[kw["page_table"][b, j // page], j % page] = True
    else:  # packed, with 9 slack rows after each sequence
        starts = [0, 79, 218]
        kw["cu_seqlens_k"] = torch.tensor(starts + [228], **i32)
        owned = torch.zeros(228, dtype=torch.bool)
        for s0, n in zip(starts, keys):
            owned[s0:s0 + n] = True
    shape = tuple(owned.shape) + (hkv, HEAD_DIM)
    value = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[garbage]
    if kv_dtype == torch.float8_e4m3fn:
        value = {"nan": float("nan"), "inf": 448.0, "-inf": -448.0}[garbage]
    kv, oracle = [], []
    for _ in range(2):
        t = (torch.randn(shape, generator=g) * 0.5).to(kv_dtype)
        clean = t.clone()
        bits = clean.view(torch.uint8) if kv_dtype == torch.float8_e4m3fn else clean
        bits[~owned] = 0
        dirty = t.clone()
        if kv_dtype == torch.float8_e4m3fn:  # bytes: torch 2.11 has no fp8 masked_fill / index_put
            byte = 0x7F if garbage == "nan" else torch.tensor(value).to(kv_dtype).view(torch.uint8).item()
            dirty.view(torch.uint8)[~owned] = byte
        else:
            dirty[~owned] = torch.tensor(value).to(kv_dtype)
        kv.append(dirty)
        oracle.append(clean)
    move = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
    return (move(q), *map(move, kv), *map(move, oracle), {n: move(t) for n, t in kw.items()})


def test_the_cases_put_garbage_exactly_where_the_call_does_not_own_memory():
    for layout in ("paged", "packed"):
        for kv_dtype in (torch.bfloat16, torch.float8_e4m3fn):
            q, k, v, ok, ov, kw = _case(layout, kv_dtype, "nan", device="cpu")
            assert torch.isnan(k.float()).any() and not torch.isnan(ok.float()).any()
            ref_dirty_free = fa512.attention_ref(q, ok, ov, **kw)[0]
            assert torch.isfinite(ref_dirty_free).all()
            got = fa512.attention(q, k, v, **kw, kernel="reference")[0]  # it gathers only owned keys
            assert torch.allclose(got.double(), ref_dirty_free, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["paged", "packed"])
@pytest.mark.parametrize("kernel, kv_dtype", [("mma16", torch.bfloat16), ("triton", torch.bfloat16),
                                              ("mma16", torch.float8_e4m3fn), ("fp8_mma", torch.float8_e4m3fn),
                                              ("triton", torch.float8_e4m3fn)])
@pytest.mark.parametrize("garbage", ["nan", "inf", "-inf"])
def test_gpu_garbage_past_seqused_k_never_reaches_the_output(layout, kernel, kv_dtype, garbage):
    from fa512.launch.run import last_launch

    q, k, v, ref_k, ref_v, kw = _case(layout, kv_dtype, garbage)
    out, lse = fa512.attention(q, k, v, **kw, kernel=kernel)
    assert last_launch["kernel"] == kernel
    ref, _ = fa512.attention_ref(q, ref_k, ref_v, **kw)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    bar = 0.25 if kernel == "fp8_mma" else 1e-2  # fp8_mma: e4m3 Q and P (README, "Accuracy")
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < bar, err
