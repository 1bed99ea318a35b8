"""The torch custom op: schema checks (opcheck), torch.compile, in-place out, and routing."""

import pytest
import torch

import fa512
from fa512.launch.run import last_launch
from fa512.planning.dispatch import Target
from helpers import make_problem, op_args, rel_l2


@pytest.mark.parametrize("paged", [True, False])
def test_opcheck(paged):
    q, k, v, kw = make_problem([2, 3], [9, 17], paged=paged, seed=11)
    out = torch.empty_like(q)
    torch.library.opcheck(torch.ops.fa512.fwd.default, op_args(q, k, v, out, kw))


def test_out_written_in_place_and_matches_reference():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=12, kv_dtype=torch.float8_e4m3fn)
    out = torch.full_like(q, float("nan"))
    ret, lse = fa512.attention(q, k, v, **kw, out=out, causal=True, k_descale=torch.tensor([0.5, 2.0]))
    assert ret is out and not torch.isnan(out).any()
    ref, ref_lse = fa512.attention_ref(q, k, v, **kw, causal=True, k_descale=torch.tensor([0.5, 2.0]))
    assert rel_l2(out, ref) < 1e-3  # fp16 rounding of the output only
    assert (lse.double() - ref_lse).abs().max() < 1e-5
    assert lse.dtype == torch.float32 and lse.shape == (4, 5)
    assert last_launch["kernel"] == "reference"


def test_torch_compile_fullgraph():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=13)

    def step(q, k, v):
        out, lse = fa512.attention(q, k, v, **kw, causal=True)
        return out.float().sum(-1) + lse.t(), out

    compiled = torch.compile(step, fullgraph=True, backend="inductor")
    got, _ = compiled(q, k, v)
    want, _ = step(q, k, v)
    torch.testing.assert_close(got, want)


def test_torch_compile_with_caller_out_buffer():
    q, k, v, kw = make_problem([1, 4], [5, 30], seed=14)
    buf = torch.zeros_like(q)

    def step(q, k, v, buf):
        _, lse = fa512.attention(q, k, v, **kw, out=buf)
        return lse

    lse = torch.compile(step, fullgraph=True)(q, k, v, buf)
    ref, ref_lse = fa512.attention_ref(q, k, v, **kw)
    assert rel_l2(buf, ref) < 1e-3 and (lse.double() - ref_lse).abs().max() < 1e-5


# -- routing ------------------------------------------------------------------------------

def _plan(kv_dtype=torch.float8_e4m3fn, target="cpu", kernel="auto", **extra):
    q, k, v, kw = make_problem([1, 1], [100, 200], hq=32, hkv=4, kv_dtype=kv_dtype, seed=15)
    return fa512.plan(q, k, v, **kw, kernel=kernel, target=target, **extra)


def test_cpu_routes_to_reference():
    p = _plan(target="cpu")
    assert p.kernel == "reference" and p.route == "CPU" and p.num_splits == 1
    assert "reference" in p.describe()


def test_plan_reads_only_shapes():
    q, k, v, kw = make_problem([1, 2], [10, 20], seed=16)
    meta = {n: (t.to("meta") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    p = fa512.plan(q.to("meta"), k.to("meta"), v.to("meta"), **meta, target="sm_86:84")
    assert p.route == "other CUDA GPU"


@pytest.mark.parametrize(
    "kv_dtype,seqlen_q,route,kernel",
    [
        (torch.float8_e4m3fn, 1, "SM90 + fp8 KV, decode-like", "fp8_mma"),
        (torch.float8_e4m3fn, 512, "SM90 + fp8 KV", "fp8_mma"),
        (torch.float16, 1, "SM90 + bf16/fp16 KV", "mma16"),
    ],
)
def test_sm90_routes(kv_dtype, seqlen_q, route, kernel):
    q, k, v, kw = make_problem([seqlen_q, 1], [600, 200], hq=32, hkv=4, page_size=64, kv_dtype=kv_dtype, seed=15)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132")
    assert (p.route, p.kernel) == (route, kernel)
    assert "passed over" not in p.reason
    if kernel == "fp8_mma":
        assert p.config.mma_path == "fp8_mma" and (p.config.tile_n, p.config.kv_stages) == (64, 2)
        assert (p.config.layout == "decode_alt") == (seqlen_q == 1)  # the transposed decode tile
        assert not p.config.pv_promote  # 600 keys: below the long-context guard's threshold


def test_decode_causal_runs_the_unmasked_sm90_variant():
    """One query per sequence, bottom-right causal: that query sees every key, so the SM90
    kernels run their unmasked variant."""
    q, k, v, kw = make_problem([1, 1], [600, 200], hq=32, hkv=4, page_size=64, kv_dtype=torch.float8_e4m3fn, seed=15)
    assert fa512.plan(q, k, v, **{**kw, "causal": True}, target="sm_90:132").config.mask == "none"
    q, k, v, kw = make_problem([2, 1], [600, 200], hq=32, hkv=4, page_size=64, kv_dtype=torch.float8_e4m3fn, seed=15)
    assert fa512.plan(q, k, v, **{**kw, "causal": True}, target="sm_90:132").config.mask == "causal"


@pytest.mark.parametrize("seqlen_q", [1, 8, 9, 512])
def test_dequant_control_converts_in_the_producer_and_holds_q_in_registers(seqlen_q):
    """mma16 on fp8 KV: converter warps in the producer warpgroup, and 8 of QK's 16 k-steps of Q
    from registers, decode and prefill alike."""
    q, k, v, kw = make_problem([seqlen_q, 1], [600, 200], hq=32, hkv=4, page_size=64, kv_dtype=torch.float8_e4m3fn,
                               seed=15)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132", kernel="mma16")
    assert p.kernel == "mma16" and p.config.mma_path == "fp8_dequant"
    assert p.config.cvt_warps and p.config.q_reg_steps == 8 and p.config.key().endswith("-split_d-r72-216")


@pytest.mark.parametrize("seqlen_q, alternate", [(1, False), (8, False), (9, True), (127, True), (512, True)])
def test_fp8_mma_alternates_for_multi_tile_sequences(seqlen_q, alternate):
    """fp8_mma: once a sequence's G x queries rows span several 64-row tiles (prefill, chunked
    prefill), V^T comes from the prepass and the warpgroups take the key blocks in turn; one-tile
    (decode) calls run split-d, tiles of at most 8 rows transposed ("decode_alt": S^T = K Q^T with
    each k-step a product of its own, the warpgroups taking the key blocks in turn)."""
    q, k, v, kw = make_problem([seqlen_q, 1], [600, 200], hq=32, hkv=4, page_size=64, kv_dtype=torch.float8_e4m3fn,
                               seed=15)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132", num_splits=1)
    decode_tile = seqlen_q * 8 <= 8  # one query x G=8 heads: the transposed tile
    layout = "alternate" if alternate else "decode_alt" if decode_tile else "split_d"
    assert p.kernel == "fp8_mma" and p.config.layout == layout and p.config.vt_prepass is alternate
    assert p.config.qk_rows is decode_tile and p.config.pv_transposed is decode_tile
    assert p.config.key().endswith("-alternate-r24-240" if alternate else
                                   "-decode_alt-r40-232" if decode_tile else "-split_d-r40-232")
    # the prepass's V^T scratch (B=2, Hkv=4, 512, 600 keys -> 640) is the plan's workspace
    assert p.workspace_bytes == (2 * 4 * 512 * 640 if alternate else 0)


def test_fp8_mma_guards_long_sequences_only():
    from cute_kernels.variants import PV_PROMOTE_MIN_KEYS

    for max_k, promote in ((PV_PROMOTE_MIN_KEYS - 64, False), (PV_PROMOTE_MIN_KEYS, True)):
        # (max_seqlen_k is clamped to the cache's capacity, so the cache holds that many keys)
        q, k, v, kw = make_problem([4], [max_k], hq=32, hkv=4, page_size=64, kv_dtype=torch.float8_e4m3fn, seed=15)
        p = fa512.plan(q, k, v, **{**kw, "max_seqlen_k": max_k}, target="sm_90:132", num_splits=1)
        assert p.kernel == "fp8_mma" and p.config.pv_promote is promote
        assert (p.config.producer_regs, p.config.consumer_regs) == ((24, 240) if promote else (40, 232))


@pytest.mark.parametrize("seqlen_q, kernel", [(1, "triton"), (512, "triton")])
def test_sm90_fp8_falls_back_with_reason(seqlen_q, kernel):
    # page_size 16: no TMA block of 32 or 64 keys per page, so neither SM90 kernel can serve it
    q, k, v, kw = make_problem([seqlen_q, 1], [600, 200], hq=32, hkv=4, page_size=16,
                               kv_dtype=torch.float8_e4m3fn, seed=15)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132")
    assert p.kernel == kernel and "passed over fp8_mma" in p.reason
    # the explicit request is refused, not silently served by another kernel
    with pytest.raises(fa512.KernelUnavailableError, match="kernel='fp8_mma' cannot serve"):
        fa512.plan(q, k, v, **kw, target="sm_90:132", kernel="fp8_mma")


def test_sm90_unsupported_page_size_falls_to_triton_with_reason():
    q, k, v, kw = make_problem([1, 1], [100, 200], hq=32, hkv=4, page_size=16, kv_dtype=torch.float16, seed=15)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132")
    assert p.kernel == "triton" and "mma16:" in p.reason
    with pytest.raises(fa512.KernelUnavailableError, match="kernel='mma16' cannot serve"):
        fa512.plan(q, k, v, **kw, target="sm_90:132", kernel="mma16")


def test_sm90_grid_limit_on_sequences_is_refused_with_the_reason():
    # the SM90 forward's grid is (m blocks, tile heads x splits, sequences): z stops at 65535
    from fa512.backends.base import grid_refusal

    assert grid_refusal(65535) is None
    n = 65536  # one-token sequences over one-key packed KV: cheap to plan on the CPU
    q = torch.zeros(n, 1, fa512.HEAD_DIM, dtype=torch.float16)
    k = torch.zeros(n + 5, 1, fa512.HEAD_DIM, dtype=torch.float16)
    cu = torch.arange(n + 1, dtype=torch.int32)
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, seqused_k=torch.ones(n, dtype=torch.int32), max_seqlen_q=1,
              max_seqlen_k=1, target="sm_90:132")
    with pytest.raises(fa512.KernelUnavailableError, match="65536 sequences exceed CUDA's grid limit 65535"):
        fa512.plan(q, k, k, **kw, kernel="mma16")
    with pytest.raises(fa512.KernelUnavailableError, match="no kernel can serve"):  # Triton refuses it too
        fa512.plan(q, k, k, **kw)


def test_other_gpus_route_to_triton():
    p = _plan(target="sm_120:188")
    assert (p.route, p.kernel) == ("other CUDA GPU", "triton")


def test_explicit_kernel_never_falls_back():
    with pytest.raises(fa512.KernelUnavailableError, match="needs an fp8 e4m3 KV cache"):
        _plan(kv_dtype=torch.float16, kernel="fp8_mma", target="sm_90:132")
    with pytest.raises(fa512.KernelUnavailableError, match="kernel='fp8_mma' cannot serve.*SM90"):
        _plan(kernel="fp8_mma", target="sm_120:188")
    with pytest.raises(fa512.KernelUnavailableError, match="kernel='mma16'"):
        _plan(kernel="mma16", target="cpu")


def test_explicit_reference_and_splits_honoured():
    p = _plan(kernel="reference", target="sm_90:132", num_splits=5)
    assert p.kernel == "reference" and p.num_splits == 5


def test_target_parse():
    assert Target.parse("sm_90a:132") == Target("cuda", (9, 0), 132)
    assert Target.parse("sm120").capability == (12, 0)
    with pytest.raises(ValueError, match="target"):
        Target.parse("hopper")


def test_plan_is_cached():
    a = _plan()
    b = _plan()
    assert a is b
