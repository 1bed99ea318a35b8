"""Tests of the Triton forward (fa512.triton_fwd) against the float64 reference.

On a machine without CUDA the kernels run on CPU tensors through the Triton interpreter. Triton
decides interpreted vs compiled when a kernel is decorated, so this module imports (or
reloads) fa512.triton_fwd with TRITON_INTERPRET=1 and then restores the variable: other test
modules keep seeing a CPU machine without the interpreter, and an autouse fixture sets it only
while these tests run (the op's dispatch reads it). The interpreter computes bf16 wrongly
(docs/toolchain.md), so CPU tests use fp16 Q with fp8 or fp16 K/V; the bf16-Q path's fp16 row
normalisation (`q_to_fp16`) is exercised on fp16 Q by forcing the config. bf16 and CUDA graphs
are covered by the `gpu` tests. d is always 512; shapes are tiny because the interpreter runs
each program in NumPy.
"""

import dataclasses
import importlib
import math

import pytest
import torch

import fa512
from fa512.call import default_bounds
from fa512.planning.dispatch import Target, make_plan
from fa512.call import Call
from fa512.planning.validate import check as validate_check
from helpers import interpreted_triton_fwd

D = 512
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRET = DEVICE == "cpu"


triton_fwd = interpreted_triton_fwd() if INTERPRET else importlib.import_module("fa512.backends.triton_fwd")


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


# Relative L2 error of out; lse absolute error. fp16 PV rounds P and out to 11 bits.
TOL_OUT = {torch.float16: 2e-3, torch.bfloat16: 3e-3}
TOL_LSE = 1e-3


# ---------------------------------------------------------------------------------------------
# Problem builders
# ---------------------------------------------------------------------------------------------


def _kv_values(shape, dtype, gen):
    x = torch.randn(shape, generator=gen)
    if dtype == torch.float8_e4m3fn:
        return (x * 2.0).to(dtype)  # spread over e4m3's range, subnormals included
    return x.to(dtype)


def make_case(
    q_lens,
    k_lens,
    hq=4,
    hkv=1,
    q_dtype=torch.float16,
    kv_dtype=torch.float16,
    page_size=None,
    seed=0,
    pad_q=0,
    pad_pages=3,
):
    """Random inputs; paged (shuffled pages, spare pages) when page_size is given, else packed."""
    gen = torch.Generator().manual_seed(seed)
    b = len(q_lens)
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32)
    total_q = int(cu_q[-1]) + pad_q
    q = (torch.randn(total_q, hq, D, generator=gen) * 0.5).to(q_dtype)
    used = torch.tensor(k_lens, dtype=torch.int32)
    kw = dict(cu_seqlens_q=cu_q, seqused_k=used, max_seqlen_q=max(max(q_lens), 1), max_seqlen_k=max(max(k_lens), 1))
    if page_size is None:
        cu_k = torch.tensor([0] + list(torch.tensor(k_lens).cumsum(0).tolist()), dtype=torch.int32)
        k = _kv_values((int(cu_k[-1]) + 5, hkv, D), kv_dtype, gen)
        v = _kv_values((int(cu_k[-1]) + 5, hkv, D), kv_dtype, gen)
        kw["cu_seqlens_k"] = cu_k
    else:
        max_pages = max(1, max(-(-n // page_size) for n in k_lens))
        num_pages = b * max_pages + pad_pages
        k = _kv_values((num_pages, page_size, hkv, D), kv_dtype, gen)
        v = _kv_values((num_pages, page_size, hkv, D), kv_dtype, gen)
        kw["page_table"] = torch.randperm(num_pages, generator=gen)[: b * max_pages].view(b, max_pages).to(torch.int32)
        kw["max_seqlen_k"] = max_pages * page_size
    kw = {name: (t.to(DEVICE) if isinstance(t, torch.Tensor) else t) for name, t in kw.items()}
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), kw


def run_and_check(q, k, v, kw, tol=None, **extra):
    """Run kernel="triton" into a NaN-poisoned out and compare every written row with the reference."""
    out = torch.full_like(q, float("nan"))
    o, lse = fa512.attention(q, k, v, out=out, kernel="triton", **kw, **extra)
    assert fa512.launch.run.last_launch["kernel"] == "triton"
    ref_kw = {n: x for n, x in {**kw, **extra}.items() if n not in ("num_splits",)}
    ro, rl = fa512.attention_ref(q, k, v, **ref_kw)
    check(o, lse, ro, rl, kw["cu_seqlens_q"], q.dtype if tol is None else tol)
    return o, lse


def check(o, lse, ro, rl, cu_q, tol):
    valid = int(cu_q[-1])
    tol_out = TOL_OUT[tol] if isinstance(tol, torch.dtype) else tol
    got, want = o[:valid].double().cpu(), ro[:valid].cpu()
    assert not torch.isnan(got).any(), "a valid row was not written (NaN poison survived)"
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err <= tol_out, f"rel L2 {err:.2e} > {tol_out:.1e}"
    assert torch.isnan(o[valid:]).all(), "rows past cu_seqlens_q[B] must not be written"
    lse, rl = lse.double().cpu(), rl.cpu()
    assert torch.equal(torch.isinf(lse), torch.isinf(rl)), "empty rows must give lse = -inf exactly"
    assert not torch.isnan(lse).any()
    fin = torch.isfinite(rl)
    if fin.any():
        lse_err = (lse[fin] - rl[fin]).abs().max().item()
        assert lse_err <= TOL_LSE, f"lse abs err {lse_err:.2e}"
    # Rows with no visible key: exactly 0 out.
    empty_rows = torch.isinf(rl[:, :valid]).T  # (valid, Hq)
    assert (got[empty_rows] == 0).all()


# ---------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [16, 32, 64, 128])
def test_paged_page_sizes_fp8(page_size):
    q, k, v, kw = make_case([1, 2, 1], [70, 33, 150], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn,
                            page_size=page_size, seed=page_size)
    kd = torch.tensor([[0.7], [1.3], [0.9]], device=DEVICE)
    run_and_check(q, k, v, kw, softmax_scale=0.06, k_descale=kd, v_descale=torch.tensor(1.7, device=DEVICE))


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("mask", ["none", "causal", "local"])
def test_packed_gqa_masks(group, mask):
    hkv = 2 if group == 1 else 1
    q, k, v, kw = make_case([3, 1, 5], [40, 17, 90], hq=group * hkv, hkv=hkv, seed=group)
    extra = {"causal": mask == "causal"}
    if mask == "local":
        extra.update(window_left=20, window_right=3)
    run_and_check(q, k, v, kw, **extra)


@pytest.mark.parametrize(
    "window", [(-1, 0), (0, 0), (10, -1), (15, 4), (-1, 5)], ids=["causal-wr0", "diag", "left", "both", "right"]
)
def test_windows_chunked_prefill_tile(window):
    """A 64-row prefill tile (G=4: 16 queries per m-block), q_len > and < k_len, bottom-right."""
    q, k, v, kw = make_case([24, 40], [60, 30], hq=4, hkv=1, page_size=16, seed=7)
    wl, wr = window
    plan = fa512.plan(q, k, v, kernel="triton", window_left=wl, window_right=wr, **kw)
    assert plan.config.block_m == 64 and plan.config.variant == "prefill"
    run_and_check(q, k, v, kw, window_left=wl, window_right=wr, softmax_scale=0.08)


def test_causal_more_queries_than_keys():
    """Bottom-right alignment: the first q_len - k_len rows see no key (out 0, lse -inf)."""
    q, k, v, kw = make_case([6, 3], [4, 3], hq=2, hkv=1, seed=3)
    _, lse = run_and_check(q, k, v, kw, causal=True)
    assert torch.isinf(lse[:, :2]).all() and torch.isfinite(lse[:, 2:6]).all()


@pytest.mark.parametrize("shape", ["none", "scalar0d", "scalar1", "per_head", "per_batch_head", "strided"])
def test_descale_shapes(shape):
    q, k, v, kw = make_case([2, 1], [45, 20], hq=4, hkv=2, kv_dtype=torch.float8_e4m3fn, page_size=32, seed=11)
    b, hkv = 2, 2
    make = {
        "none": lambda s: None,
        "scalar0d": lambda s: torch.tensor(s),
        "scalar1": lambda s: torch.tensor([s]),
        "per_head": lambda s: torch.tensor([s, 2 * s]),
        "per_batch_head": lambda s: torch.tensor([[s, 2 * s], [0.5 * s, s]]),
        # A (B, Hkv) view with non-unit strides: column 1 of a (Hkv, B, 2) buffer, transposed.
        "strided": lambda s: torch.tensor([[s, 0.0], [2 * s, 0.0], [0.5 * s, 0.0], [s, 0.0]]).view(hkv, b, 2)[..., 0].T,
    }[shape]
    descales = {n: (None if t is None else t.to(DEVICE)) for n, t in
                (("q_descale", make(0.8)), ("k_descale", make(1.1)), ("v_descale", make(1.5)))}
    run_and_check(q, k, v, kw, softmax_scale=0.05, **descales)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4, 5])
def test_splits(num_splits):
    """Explicit splits, including empty ones (seq 1 has 1 key block) and an empty sequence."""
    q, k, v, kw = make_case([1, 1, 2, 1], [200, 20, 130, 0], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn,
                            page_size=64, seed=num_splits)
    o, lse = run_and_check(q, k, v, kw, num_splits=num_splits, softmax_scale=0.05,
                           k_descale=torch.tensor([0.9], device=DEVICE))
    assert fa512.launch.run.last_launch["num_splits"] == num_splits
    assert torch.isinf(lse[:, 4]).all() and (o[4] == 0).all()


@pytest.mark.parametrize("num_splits", [1, 3])
def test_partials_merge_to_the_reference(num_splits):
    """The split path without the combine (`fa512.launch.partials`): fp32 partials, one per split
    even at 1 split, whose `fa512.merge_partials` is the output (empty splits included)."""
    from fa512.call import make_call
    from fa512.launch.partials import last_launch, partials

    q, k, v, kw = make_case([1, 1, 2, 1], [200, 20, 130, 0], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn,
                            page_size=64, seed=3, pad_q=2)
    o, lse = partials(make_call(q, k, v, **kw, num_splits=num_splits, softmax_scale=0.05, kernel="triton"))
    assert last_launch["kernel"] == "triton"
    assert o.dtype == torch.float32 and o.shape == (num_splits, 7, 4, D) and lse.shape == (num_splits, 4, 7)
    out, merged = fa512.merge_partials(o[:, :5], lse[:, :, :5].transpose(1, 2))
    ro, rl = fa512.attention_ref(q, k, v, softmax_scale=0.05, **kw)
    assert ((out.double().cpu() - ro[:5]).norm() / ro[:5].norm()).item() <= TOL_OUT[torch.float16]
    fin = torch.isfinite(rl[:, :5].T)
    assert torch.equal(torch.isfinite(merged.cpu()), fin) and (out[4] == 0).all()
    assert (merged.double().cpu()[fin] - rl[:, :5].T[fin]).abs().max().item() <= TOL_LSE


def test_standalone_combine_equals_merge_partials():
    """`triton_fwd.combine` (what fa512.distributed merges ranks with on GPUs) on partials laid out
    as an all-gather leaves them, [O | lse] per rank: a free S stride, empty partials holding NaN
    (never read), rows past cu_seqlens_q[B] left alone."""
    gen = torch.Generator().manual_seed(4)
    s, t, h = 3, 5, 4
    cu_q = torch.tensor([0, 1, 4], dtype=torch.int32, device=DEVICE)  # rows 4.. belong to no sequence
    n_o = t * h * D
    buf = torch.randn(s, n_o + h * t + 7, generator=gen).to(DEVICE)  # 7: a stride that is not n_o + h*t
    o, lse = buf[:, :n_o].view(s, t, h, D), buf[:, n_o : n_o + h * t].view(s, h, t)
    lse.mul_(3.0)
    lse[1, :, 2] = float("-inf")
    o[1, 2] = float("nan")  # an empty partial's O is never read
    lse[:, 0, 3] = float("-inf")  # a row with no key in any partial
    out = torch.full((t, h, D), 7.0, device=DEVICE)
    merged = torch.empty(h, t, device=DEVICE)
    triton_fwd.combine(o, lse, out, merged, cu_q)
    ro, rl = fa512.merge_partials(o.double(), lse.double().transpose(1, 2))
    torch.testing.assert_close(out[:4].double(), ro[:4], rtol=0, atol=1e-5)
    torch.testing.assert_close(merged[:, :4].double(), rl[:4].T, rtol=0, atol=1e-5)
    assert (out[3, 0] == 0).all() and torch.isneginf(merged[0, 3])
    assert (out[4:] == 7.0).all() and torch.isneginf(merged[:, 4:]).all()


def test_splits_local_window_causal():
    q, k, v, kw = make_case([5, 3], [150, 64], hq=8, hkv=1, seed=21)
    run_and_check(q, k, v, kw, num_splits=3, window_left=70, causal=True)


def test_empty_sequences_and_padding():
    """q_len 0, seqused_k 0, and rows past cu_seqlens_q[B] (lse -inf, out untouched)."""
    q, k, v, kw = make_case([0, 2, 3, 0], [10, 0, 25, 0], hq=4, hkv=1, page_size=16, pad_q=3, seed=5)
    for splits in (1, 2):
        _, lse = run_and_check(q, k, v, kw, num_splits=splits)
        assert torch.isinf(lse[:, 0:2]).all() and torch.isinf(lse[:, 5:]).all()


def test_all_sequences_empty():
    q, k, v, kw = make_case([0, 0], [0, 5], hq=2, hkv=1, pad_q=2, seed=6)
    kw["max_seqlen_q"] = 0
    out = torch.full_like(q, float("nan"))
    _, lse = fa512.attention(q, k, v, out=out, kernel="triton", **kw)
    assert torch.isinf(lse).all() and torch.isnan(out).all()


def test_spec_decode_fp16_kv_many_tokens():
    """Several query tokens per sequence (verification step), causal, 4 rows x G=4 per tile."""
    q, k, v, kw = make_case([4, 4, 4], [100, 37, 64], hq=4, hkv=1, page_size=32, seed=9)
    plan = fa512.plan(q, k, v, kernel="triton", causal=True, **kw)
    assert plan.config.block_m == 16 and plan.config.variant == "decode"
    run_and_check(q, k, v, kw, causal=True)


def test_strided_views():
    """q, k, v, out as views of larger buffers (only the last dim is contiguous)."""
    gen = torch.Generator().manual_seed(13)
    big_q = torch.randn(5, 6, D, generator=gen).half()
    q = big_q[:, 1:5]  # (5, 4, 512), head stride 512, token stride 6*512
    cache = (torch.randn(6, 16, 3, 2, D, generator=gen) * 2).to(torch.float8_e4m3fn)
    k, v = cache[:, :, :2, 0], cache[:, :, :2, 1]  # (6, 16, 2, 512) views into one cache
    pt = torch.tensor([[5, 0, 3], [1, 4, 2]], dtype=torch.int32)
    kw = dict(cu_seqlens_q=torch.tensor([0, 3, 5], dtype=torch.int32), seqused_k=torch.tensor([40, 18], dtype=torch.int32),
              page_table=pt, max_seqlen_q=3, max_seqlen_k=48)
    q, k, v = q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)
    kw = {n: (t.to(DEVICE) if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    out_buf = torch.full((5, 8, D), float("nan"), dtype=torch.float16, device=DEVICE)
    out = out_buf[:, ::2]
    o, lse = fa512.attention(q, k, v, out=out, kernel="triton", softmax_scale=0.05, **kw)
    ro, rl = fa512.attention_ref(q, k, v, softmax_scale=0.05, **kw)
    check(o, lse, ro, rl, kw["cu_seqlens_q"], torch.float16)
    assert torch.isnan(out_buf[:, 1::2]).all()


def _direct_launch(q, k, v, kw, config_changes, **extra):
    """Run triton_fwd.launch with a modified config (a path the heuristic picks only on GPUs)."""
    kw = {**kw, **extra}
    msq, msk, scale = default_bounds(q, k, kw.get("page_table"), kw.get("max_seqlen_q"),
                                     kw.get("max_seqlen_k"), kw.pop("softmax_scale", None))
    problem, args = validate_check(Call(
        q, k, v, None, kw.get("page_table"), kw.get("cu_seqlens_k"), kw["cu_seqlens_q"], msq, kw["seqused_k"], msk,
        scale, kw.get("causal", False), kw.get("window_left", -1), kw.get("window_right", -1),
        kw.get("q_descale"), kw.get("k_descale"), kw.get("v_descale"), kw.get("num_splits", 0), "triton",
    ))
    plan = make_plan(problem, fa512.planning.dispatch.target_of(q.device), "triton", kw.get("num_splits", 0))
    plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, **config_changes))
    out = torch.full_like(q, float("nan"))
    lse = triton_fwd.launch(plan, args, out)
    return out, lse


@pytest.mark.parametrize("scale_q", [1.0, 3e3, 1e-3])
def test_q_row_normalisation_to_fp16(scale_q):
    """`q_to_fp16` (used for bf16 Q with fp8 K): rows scaled by 2^-k into fp16 must not change results."""
    q, k, v, kw = make_case([2, 1], [50, 90], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn, page_size=16, seed=17)
    q = (q.float() * scale_q).half()
    extra = dict(softmax_scale=0.05 / scale_q, q_descale=torch.tensor([1.2, 0.8], device=DEVICE).view(2, 1))
    o, lse = _direct_launch(q, k, v, kw, {"q_to_fp16": True}, **extra)
    ro, rl = fa512.attention_ref(q, k, v, **kw, **extra)
    check(o, lse, ro, rl, kw["cu_seqlens_q"], torch.float16)


@pytest.mark.parametrize("lazy", [False, True])
def test_lazy_rescale(lazy):
    """Both rescaling schemes, on logits whose row max keeps growing (keys scaled up along the sequence)."""
    q, k, v, kw = make_case([3, 1], [120, 70], hq=4, hkv=1, page_size=16, seed=29)
    growth = torch.linspace(0.2, 3.0, k.shape[0] * k.shape[1]).view(k.shape[0], k.shape[1], 1, 1)
    k = (k.float().cpu() * growth).half().to(DEVICE)
    o, lse = _direct_launch(q, k, v, kw, {"lazy_rescale": lazy, "block_n": 16}, num_splits=2, softmax_scale=0.2)
    ro, rl = fa512.attention_ref(q, k, v, **kw, softmax_scale=0.2)
    check(o, lse, ro, rl, kw["cu_seqlens_q"], torch.float16)


def test_prefill_tile_with_splits_and_small_blocks():
    """A prefill-sized tile with splits and 16-key blocks (smaller than a page)."""
    q, k, v, kw = make_case([20, 7], [50, 70], hq=4, hkv=1, page_size=32, seed=23)
    o, lse = _direct_launch(q, k, v, kw, {"block_n": 16}, num_splits=3, causal=True)
    ro, rl = fa512.attention_ref(q, k, v, **kw, causal=True)
    check(o, lse, ro, rl, kw["cu_seqlens_q"], torch.float16)


# ---------------------------------------------------------------------------------------------
# Plumbing: which kernel ran, configs, refusals
# ---------------------------------------------------------------------------------------------


class _Spy:
    """Stands in for a @triton.jit function: counts `kernel[grid](...)` launches, then forwards."""

    def __init__(self, fn):
        self.fn, self.grids = fn, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.fn[grid]


def test_spy_kernel_and_combine_ran(monkeypatch):
    fwd_spy, combine_spy = _Spy(triton_fwd._fwd_kernel), _Spy(triton_fwd._combine_kernel)
    monkeypatch.setattr(triton_fwd, "_fwd_kernel", fwd_spy)
    monkeypatch.setattr(triton_fwd, "_combine_kernel", combine_spy)
    q, k, v, kw = make_case([1, 1], [80, 30], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn, page_size=16, seed=2)

    run_and_check(q, k, v, kw, num_splits=1)
    assert fa512.launch.run.last_launch["kernel"] == "triton"
    assert len(fwd_spy.grids) == 1 and combine_spy.grids == []

    run_and_check(q, k, v, kw, num_splits=3)
    assert fa512.launch.run.last_launch == {**fa512.launch.run.last_launch, "kernel": "triton", "num_splits": 3}
    assert len(fwd_spy.grids) == 2 and len(combine_spy.grids) == 1
    assert fwd_spy.grids[1][1] == 1 * 3  # Hkv * splits programs on grid axis 1


class _PointerSpy(_Spy):
    """A `_Spy` that also records the address of the launch's first argument (q)."""

    def __init__(self, fn):
        super().__init__(fn)
        self.q_addresses = []

    def __getitem__(self, grid):
        launch = super().__getitem__(grid)

        def record(*args, **kwargs):
            self.q_addresses.append(args[0].data_ptr())
            return launch(*args, **kwargs)

        return record


def test_misaligned_q_is_copied_to_an_aligned_one(monkeypatch):
    """A q view 2 bytes past a 16-byte boundary: right results, and the kernel is handed an aligned
    copy, so it runs the aligned specialisation (Triton compiles one per pointer alignment)."""
    spy = _PointerSpy(triton_fwd._fwd_kernel)
    monkeypatch.setattr(triton_fwd, "_fwd_kernel", spy)
    q, k, v, kw = make_case([3, 2], [70, 33], hq=4, hkv=1, kv_dtype=torch.float8_e4m3fn, page_size=16, seed=4)
    base = torch.empty(q.numel() + 8, dtype=q.dtype, device=q.device)
    odd = base[1 : 1 + q.numel()].view(q.shape)
    odd.copy_(q)
    assert odd.data_ptr() % 16 == 2
    run_and_check(odd, k, v, kw)
    run_and_check(q, k, v, kw)
    assert [a % 16 for a in spy.q_addresses] == [0, 0]
    assert spy.q_addresses[0] != odd.data_ptr() and spy.q_addresses[1] == q.data_ptr()


def test_configs_and_split_planning():
    """Tile choice per target and shape; the planner gets block_m/block_n/ctas_per_sm."""
    q = torch.empty(64, 32, D, dtype=torch.bfloat16, device="meta")
    k = torch.empty(4096, 64, 4, D, dtype=torch.float8_e4m3fn, device="meta")
    common = dict(cu_seqlens_q=torch.empty(65, dtype=torch.int32, device="meta"),
                  seqused_k=torch.empty(64, dtype=torch.int32, device="meta"),
                  page_table=torch.empty(64, 128, dtype=torch.int32, device="meta"), max_seqlen_q=1, max_seqlen_k=8192)
    plan = fa512.plan(q, k, k, kernel="triton", target="sm_90:132", **common)
    cfg = plan.config
    assert cfg.variant == "decode" and cfg.block_m == 16 and cfg.q_to_fp16
    assert 1 <= plan.num_splits <= fa512.MAX_SPLITS
    k16 = torch.empty(4096, 64, 4, D, dtype=torch.bfloat16, device="meta")
    for target in ("sm_80:108", "sm_89:128", "sm_90:132", "sm_100:148", "sm_120:188"):
        for kv in (k, k16):
            if kv is k and target == "sm_80:108":
                continue  # fp8 needs sm_89+ (test_unsupported_reasons)
            for msq in (1, 64):
                c = fa512.plan(q, kv, kv, kernel="triton", target=target, **{**common, "max_seqlen_q": msq}).config
                smem = triton_fwd._smem_per_block(Target.parse(target))
                est = triton_fwd._smem_estimate(c.block_m, c.block_n, c.num_stages, kv.dtype.itemsize)
                assert est <= smem, (target, c)
                assert c.q_to_fp16 == (kv is k)


def test_unsupported_reasons():
    q = torch.empty(4, 8, D, dtype=torch.float16, device="meta")
    k = torch.empty(16, 16, 1, D, dtype=torch.float8_e4m3fn, device="meta")
    common = dict(cu_seqlens_q=torch.empty(3, dtype=torch.int32, device="meta"),
                  seqused_k=torch.empty(2, dtype=torch.int32, device="meta"),
                  page_table=torch.empty(2, 8, dtype=torch.int32, device="meta"))
    with pytest.raises(fa512.KernelUnavailableError, match="sm_89"):
        fa512.plan(q, k, k, kernel="triton", target="sm_80:108", **common)
    with pytest.raises(fa512.KernelUnavailableError, match="sm_80"):
        fa512.plan(q, k.half(), k.half(), kernel="triton", target="sm_75:40", **common)
    assert fa512.plan(q, k, k, kernel="triton", target="sm_120:188", **common).kernel == "triton"


# ---------------------------------------------------------------------------------------------
# GPU: bf16 on Gemma-4 head shapes, CUDA graphs
# ---------------------------------------------------------------------------------------------

GEMMA_HEADS = [(32, 4), (16, 2), (8, 1)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("hq,hkv", GEMMA_HEADS)
@pytest.mark.parametrize("kv", ["fp8", "bf16"])
@pytest.mark.parametrize("mode", ["decode", "prefill_causal", "chunked_local"])
def test_gpu_bf16_gemma_shapes(hq, hkv, kv, mode):
    kv_dtype = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    if mode == "decode":
        q_lens, k_lens, extra = [1] * 6, [1000, 3000, 1, 0, 2047, 513], {}
    elif mode == "prefill_causal":
        q_lens, k_lens, extra = [700, 300], [700, 300], {"causal": True}
    else:
        q_lens, k_lens, extra = [256, 100], [1500, 900], {"causal": True, "window_left": 511}
    q, k, v, kw = make_case(q_lens, k_lens, hq=hq, hkv=hkv, q_dtype=torch.bfloat16, kv_dtype=kv_dtype,
                            page_size=64, seed=hq + len(mode))
    if kv == "fp8":
        extra.update(k_descale=torch.rand(len(q_lens), hkv, device=DEVICE) + 0.5,
                     v_descale=torch.rand(hkv, device=DEVICE) + 0.5)
    run_and_check(q, k, v, kw, softmax_scale=1.0 / 16, **extra)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("num_splits", [1, 4])
def test_gpu_cuda_graph_replay_new_lengths(num_splits):
    """Capture one decode step, replay with other seqused_k (<= max_seqlen_k): same grid, right answers."""
    q, k, v, kw = make_case([1] * 4, [512, 512, 512, 512], hq=8, hkv=1, q_dtype=torch.bfloat16,
                            kv_dtype=torch.float8_e4m3fn, page_size=32, seed=31)
    kw["max_seqlen_k"] = 1024
    k_descale = torch.full((4, 1), 0.75, device=DEVICE)
    out = torch.empty_like(q)
    call = dict(out=out, kernel="triton", num_splits=num_splits, k_descale=k_descale, **kw)
    fa512.attention(q, k, v, **call)  # warm-up: compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = fa512.attention(q, k, v, **call)
    for lens in ([512, 1, 0, 300], [100, 512, 257, 64], [0, 0, 0, 0]):
        kw["seqused_k"].copy_(torch.tensor(lens, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ro, rl = fa512.attention_ref(q, k, v, k_descale=k_descale, **kw)
        check(out, lse, ro, rl, kw["cu_seqlens_q"], torch.bfloat16)
        for i, n in enumerate(lens):
            assert math.isinf(lse[:, i].max().item()) == (n == 0)
