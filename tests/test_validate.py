"""Every bad input raises ValueError/TypeError naming the argument, what was seen and expected."""

import pytest
import torch

import fa512
from helpers import make_problem


def _base(paged=True):
    q, k, v, kw = make_problem([2, 3], [10, 20], hq=4, hkv=2, page_size=16, paged=paged, seed=7)
    return dict(q=q, k=k, v=v, **kw)


def _without(d, *names):
    return {n: t for n, t in d.items() if n not in names}


def _call(args):
    args = dict(args)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return fa512.attention(q, k, v, **args)


def _bad_cases():
    p = _base(paged=True)
    c = _base(paged=False)
    q, k = p["q"], p["k"]
    yield "head_dim", dict(p, q=q[..., :256].contiguous()), ValueError, ["q", "head_dim 256", "512"]
    yield "kv head_dim", dict(p, k=k[..., :256], v=p["v"][..., :256]), ValueError, ["k", "head_dim 256"]
    yield "q float64", dict(p, q=q.double()), TypeError, ["q", "float64", "bfloat16", "float32"]
    yield "16-bit kv with float32 q", dict(p, q=q.float()), TypeError, ["k", "float16 with q torch.float32", "q's dtype"]
    yield "kv e5m2", dict(p, k=k.to(torch.float8_e5m2), v=p["v"].to(torch.float8_e5m2)), TypeError, ["k", "float8_e5m2"]
    yield "k/v dtype mismatch", dict(p, v=p["v"].to(torch.float8_e4m3fn)), TypeError, ["v", "float8_e4m3fn", "k's dtype"]
    yield "16-bit kv != q dtype", dict(p, k=k.bfloat16(), v=p["v"].bfloat16()), TypeError, ["k", "bfloat16", "q's dtype"]
    yield "q rank", dict(p, q=q[0]), ValueError, ["q", "(total_q, Hq, 512)"]
    yield "k rank", dict(p, k=k[0, 0], v=p["v"][0, 0]), ValueError, ["k", "(num_pages, page_size, Hkv, 512)"]
    yield "k/v shape", dict(p, v=p["v"][:-1]), ValueError, ["v", "k's shape"]
    yield "Hq % Hkv", dict(p, q=torch.randn(5, 3, 512).half(), cu_seqlens_q=p["cu_seqlens_q"]), ValueError, ["Hq=3", "Hkv=2"]
    yield "int64 cu_seqlens_q", dict(p, cu_seqlens_q=p["cu_seqlens_q"].long()), TypeError, ["cu_seqlens_q", "int64", "int32"]
    yield "int64 seqused_k", dict(p, seqused_k=p["seqused_k"].long()), TypeError, ["seqused_k", "int64"]
    yield "int64 page_table", dict(p, page_table=p["page_table"].long()), TypeError, ["page_table", "int64"]
    yield "int64 cu_seqlens_k", dict(c, cu_seqlens_k=c["cu_seqlens_k"].long()), TypeError, ["cu_seqlens_k", "int64"]
    yield "seqused_k shape", dict(p, seqused_k=p["seqused_k"][:1]), ValueError, ["seqused_k", "(1,)", "(2,)"]
    yield "cu_seqlens_q rank", dict(p, cu_seqlens_q=p["cu_seqlens_q"][None]), ValueError, ["cu_seqlens_q", "(B+1,)"]
    yield "page_table rows", dict(p, page_table=p["page_table"][:1]), ValueError, ["page_table", "(B=2"]
    yield "page_table 1-D", dict(p, page_table=p["page_table"][0]), ValueError, ["page_table"]
    yield "page_table missing", _without(p, "page_table"), ValueError, ["page_table", "paged"]
    yield "paged + cu_seqlens_k", dict(p, cu_seqlens_k=c["cu_seqlens_k"]), ValueError, ["cu_seqlens_k", "not both"]
    yield "packed + page_table", dict(c, page_table=p["page_table"]), ValueError, ["page_table", "packed"]
    yield "packed without cu_seqlens_k", dict(_without(c, "cu_seqlens_k")), ValueError, ["cu_seqlens_k"]
    yield "paged without seqused_k", _without(p, "seqused_k"), ValueError, ["seqused_k", "paged"]
    yield "q last dim strided", dict(p, q=q.transpose(0, 2).contiguous().transpose(0, 2)), ValueError, ["q", "last-dim stride 1"]
    yield "k last dim strided", dict(p, k=k.transpose(1, 3).contiguous().transpose(1, 3), v=p["v"].transpose(1, 3).contiguous().transpose(1, 3)), ValueError, ["k", "last-dim stride 1"]
    yield "out shape", dict(p, out=torch.empty(5, 4, 256).half()), ValueError, ["out", "(5, 4, 256)"]
    yield "out dtype", dict(p, out=torch.empty(5, 4, 512).bfloat16()), TypeError, ["out", "bfloat16"]
    yield "out aliases q", dict(p, out=q), ValueError, ["out", "overlapping q"]
    yield "out strided", dict(p, out=torch.empty(512, 4, 5).half().permute(2, 1, 0)), ValueError, ["out", "last-dim stride 1"]
    yield "window_left < -1", dict(p, window_left=-2), ValueError, ["window_left", "-2", ">= -1"]
    yield "window_right < -1", dict(p, window_right=-5), ValueError, ["window_right", "-5"]
    yield "causal + window_right", dict(p, causal=True, window_right=3), ValueError, ["window_right", "causal"]
    yield "window float", dict(p, window_left=2.5), TypeError, ["window_left", "float"]
    yield "causal int", dict(p, causal=1), TypeError, ["causal", "int"]
    yield "num_splits < 0", dict(p, num_splits=-1), ValueError, ["num_splits", "-1"]
    yield "num_splits > max", dict(p, num_splits=fa512.MAX_SPLITS + 1), ValueError, ["num_splits", "257", "256"]
    yield "unknown kernel", dict(p, kernel="flash"), ValueError, ["kernel", "'flash'", "'auto'"]
    yield "softmax_scale 0", dict(p, softmax_scale=0.0), ValueError, ["softmax_scale", "0.0"]
    yield "softmax_scale nan", dict(p, softmax_scale=float("nan")), ValueError, ["softmax_scale", "nan"]
    yield "max_seqlen_q negative", dict(p, max_seqlen_q=-3), ValueError, ["max_seqlen_q", "-3"]
    yield "max_seqlen_k tensor", dict(p, max_seqlen_k=torch.tensor(20)), TypeError, ["max_seqlen_k", "Tensor"]
    yield "descale dtype", dict(p, k_descale=torch.tensor(1.0, dtype=torch.float64)), TypeError, ["k_descale", "float64", "float32"]
    yield "descale shape", dict(p, v_descale=torch.ones(3)), ValueError, ["v_descale", "(3,)", "(Hkv,)=(2,)"]
    yield "descale not tensor", dict(p, q_descale=1.0), TypeError, ["q_descale", "float"]
    yield "device mismatch", dict(p, k=k.to("meta"), v=p["v"].to("meta")), ValueError, ["k", "device meta"]
    yield "metadata device", dict(p, seqused_k=p["seqused_k"].to("meta")), ValueError, ["seqused_k", "device meta"]


CASES = list(_bad_cases())


@pytest.mark.parametrize("name,args,exc,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_named(name, args, exc, fragments):
    with pytest.raises(exc) as info:
        _call(args)
    msg = str(info.value)
    assert msg.startswith("fa512: "), msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"


def test_good_inputs_pass():
    for paged in (True, False):
        out, lse = _call(_base(paged))
        assert out.shape == (5, 4, 512) and lse.shape == (4, 5)


def test_float32_is_served_by_the_reference_only():
    """float32 q/K/V (a float32 model's attention) runs on the reference; the GPU kernels refuse it."""
    args = _base(paged=False)
    args.update(q=args["q"].float(), k=args["k"].float(), v=args["v"].float())
    out, lse = _call(args)
    assert out.dtype == torch.float32 and fa512.launch.run.last_launch["kernel"] == "reference"
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    ref, ref_lse = fa512.attention_ref(q, k, v, **args)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6
    for target, kernels in (("sm_90", ("mma16", "triton")), ("sm_120", ("triton",))):
        with pytest.raises(fa512.KernelUnavailableError) as info:
            fa512.plan(q, k, v, target=target, **args)
        for name in kernels:
            assert f"{name}: q in torch.float32: only the reference kernel" in str(info.value)


def test_descales_are_views_not_copies():
    from fa512.planning.descales import normalize_descale

    base = torch.rand(6, 4)
    strided = base[::2, ::2]  # (3, 2), non-contiguous
    d = normalize_descale("k_descale", strided, 3, 2, base.device)
    assert d.mode == "per_batch_head" and d.view.data_ptr() == strided.data_ptr()
    s = torch.tensor(2.0)
    d = normalize_descale("k_descale", s, 3, 2, s.device)
    assert d.view.shape == (3, 2) and d.view.stride() == (0, 0) and d.view.data_ptr() == s.data_ptr()
    h = torch.rand(4)[::2]
    d = normalize_descale("k_descale", h, 3, 2, h.device)
    assert d.mode == "per_head" and d.view.stride() == (0, 2)


@pytest.mark.parametrize(
    "mutate,fragments",
    [
        (lambda a: a["page_table"].__setitem__((0, 0), 999), ["page_table[0, 0]", "999"]),
        (lambda a: a["page_table"].__setitem__((1, 1), -1), ["page_table[1, 1]", "-1"]),
        (lambda a: a["seqused_k"].__setitem__(1, 40), ["max_seqlen_k"]),
        (lambda a: a["cu_seqlens_q"].__setitem__(1, 4), ["max_seqlen_q"]),
        (lambda a: a["cu_seqlens_q"].__setitem__(1, 9), ["cu_seqlens_q", "non-decreasing"]),
    ],
)
def test_debug_checks_need_fa512_debug(monkeypatch, mutate, fragments):
    args = _base(paged=True)
    args["max_seqlen_q"], args["max_seqlen_k"] = 3, 20
    mutate(args)
    monkeypatch.setenv("FA512_DEBUG", "1")
    with pytest.raises(ValueError) as info:
        _call(args)
    for frag in fragments:
        assert frag in str(info.value)


def test_debug_checks_packed_lengths(monkeypatch):
    args = _base(paged=False)
    args["seqused_k"] = torch.tensor([10, 21], dtype=torch.int32)
    args["max_seqlen_k"] = 30
    monkeypatch.setenv("FA512_DEBUG", "1")
    with pytest.raises(ValueError, match="seqused_k"):
        _call(args)
