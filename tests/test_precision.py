"""``precision``: the argument's path (API, op, plan, memo key) and what each value plans."""

import pytest
import torch

import fa512
from fa512.planning.precision import ACCURATE_IS_FREE
from helpers import make_problem, op_args, rel_l2

needs_dsl = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("cutlass", "tvm_ffi")),
    reason="nvidia-cutlass-dsl / apache-tvm-ffi not installed (the SM90 backends' plans need them)",
)


def _fp8_problem(seqlen_q, page_size=64, keys=(600, 200)):
    return make_problem([seqlen_q] * len(keys), list(keys), hq=32, hkv=4, page_size=page_size,
                        kv_dtype=torch.float8_e4m3fn, seed=15)


@pytest.mark.parametrize("bad", ["Accurate", "exact", "", None, 1])
def test_a_bad_precision_is_named(bad):
    q, k, v, kw = make_problem([3], [40], hq=8, hkv=1, page_size=16, seed=1)
    with pytest.raises(ValueError, match="precision"):
        fa512.attention(q, k, v, **kw, precision=bad)
    with pytest.raises(ValueError, match="precision"):
        fa512.plan(q, k, v, **kw, precision=bad)


@needs_dsl
def test_accurate_decode_plans_the_two_term_tile():
    q, k, v, kw = _fp8_problem(1)
    fast = fa512.plan(q, k, v, **kw, target="sm_90:132")
    acc = fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate")
    assert fast.kernel == acc.kernel == "fp8_mma" and fast.precision == "fast" and acc.precision == "accurate"
    assert not fast.config.two_term and acc.config == fast.config.with_(layout="decode", two_term=True, kv_stages=2)
    assert acc.num_splits == fast.num_splits  # the same grid: the second terms cost MMAs, not CTAs
    assert "precision='accurate' requested" in acc.reason and "precision : accurate" in acc.describe()


@needs_dsl
def test_auto_precision_is_fast_until_an_accurate_variant_measures_free():
    assert ACCURATE_IS_FREE == ()  # the module docstring's A/B: the two-term decode tile is 7-18% slower
    for seqlen_q in (1, 512):
        q, k, v, kw = _fp8_problem(seqlen_q)
        p = fa512.plan(q, k, v, **kw, target="sm_90:132")
        assert p.precision == "fast" and not p.config.two_term and "precision auto -> fast" in p.reason
        assert fa512.plan(q, k, v, **kw, target="sm_90:132", precision="fast").config == p.config


@pytest.fixture
def every_shape_measured_free(monkeypatch):
    """`ACCURATE_IS_FREE` as if an A/B had found the accurate mode free for every shape."""
    from fa512.planning import dispatch, precision

    monkeypatch.setattr(precision, "ACCURATE_IS_FREE", (lambda problem: True,))
    dispatch.make_plan.cache_clear()  # plans are memoised on their arguments, not on the table
    yield
    dispatch.make_plan.cache_clear()


@needs_dsl
def test_auto_takes_accurate_only_where_fp8_mma_has_the_variant(every_shape_measured_free):
    q, k, v, kw = _fp8_problem(1)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132")
    acc = fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate")
    assert p.kernel == "fp8_mma" and p.precision == "accurate" and p.config == acc.config and p.config.two_term
    assert "precision auto -> accurate: measured free" in p.reason
    # prefill tiles and page size 32 have no two-term variant: auto stays on fast fp8_mma, a
    # named fp8_mma too (precision="accurate" would pass over it or refuse it)
    for seqlen_q, page_size in ((512, 64), (1, 32)):
        q, k, v, kw = _fp8_problem(seqlen_q, page_size)
        for kernel in ("auto", "fp8_mma"):
            p = fa512.plan(q, k, v, **kw, target="sm_90:132", kernel=kernel)
            assert p.kernel == "fp8_mma" and p.precision == "fast" and not p.config.two_term, (seqlen_q, kernel)
            assert "precision auto -> fast: no accurate fp8_mma variant here (precision='accurate' is built" in p.reason


@needs_dsl
@pytest.mark.parametrize("seqlen_q, page_size, kernel", [(512, 64, "mma16"), (9, 64, "mma16"), (2, 64, "triton"),
                                                         (8, 64, "triton"), (1, 32, "triton")])
def test_accurate_passes_over_fp8_mma_where_it_has_no_two_term_tile(seqlen_q, page_size, kernel):
    # prefill tiles, and decode at tile_n=32 (page size 32): the next kernel of the row, which is
    # accurate by construction; a named fp8_mma is refused, never run fast
    q, k, v, kw = _fp8_problem(seqlen_q, page_size)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate")
    assert p.kernel == kernel and p.precision == "accurate"
    assert "passed over fp8_mma: precision='accurate' is built for decode tiles only" in p.reason
    with pytest.raises(fa512.KernelUnavailableError, match="precision='accurate'"):
        fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate", kernel="fp8_mma")


@needs_dsl
def test_plans_report_the_numerics_of_what_runs():
    q, k, v, kw = _fp8_problem(1)
    assert fa512.plan(q, k, v, **kw, target="sm_90:132", precision="fast").precision == "fast"  # fp8_mma
    # a dequantising kernel is accurate whatever was asked; a 16-bit cache's plan leaves the clause out
    assert fa512.plan(q, k, v, **kw, target="sm_90:132", kernel="mma16", precision="fast").precision == "accurate"
    q16, k16, v16, kw16 = make_problem([1], [600], hq=32, hkv=4, page_size=64, q_dtype=torch.bfloat16,
                                       kv_dtype=torch.bfloat16, seed=15)
    p16 = fa512.plan(q16, k16, v16, **kw16, target="sm_90:132")
    assert p16.kernel == "mma16" and p16.precision == "accurate" and "precision" not in p16.reason


def test_make_plan_names_a_bad_precision():
    from fa512.call import make_call
    from fa512.planning.dispatch import make_plan, target_of
    from fa512.planning.validate import check

    q, k, v, kw = make_problem([1], [40], hq=8, hkv=1, page_size=16, seed=1)
    problem, _ = check(make_call(q, k, v, **kw))
    with pytest.raises(ValueError, match="precision"):
        make_plan(problem, target_of(q.device), "auto", 0, "Accurate")


@needs_dsl
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float16])
def test_16_bit_caches_accept_every_precision(kv_dtype):
    q, k, v, kw = make_problem([1, 1], [600, 200], hq=32, hkv=4, page_size=64, q_dtype=kv_dtype, kv_dtype=kv_dtype,
                               seed=15)
    plans = [fa512.plan(q, k, v, **kw, target="sm_90:132", precision=p) for p in fa512.PRECISIONS]
    assert {p.kernel for p in plans} == {"mma16"} and len({p.config for p in plans}) == 1


def test_the_reference_ignores_precision_and_the_op_defaults_it():
    q, k, v, kw = make_problem([2, 1], [50, 20], hq=8, hkv=1, page_size=16, kv_dtype=torch.float8_e4m3fn, seed=4)
    outs = [fa512.attention(q, k, v, **kw, precision=p)[0] for p in fa512.PRECISIONS]
    assert all(torch.equal(o, outs[0]) for o in outs[1:])
    # the raw op: 20 arguments, or 19 with precision's schema default
    out = torch.empty_like(q)
    call = op_args(q, k, v, out, kw, causal=False, k_descale=None, v_descale=None)
    assert len(call) == 20 and call.precision == "auto"
    lse = torch.ops.fa512.fwd(*call[:19])
    assert torch.isfinite(out).all()
    out2 = torch.empty_like(q)
    lse2 = torch.ops.fa512.fwd(*call._replace(out=out2, precision="accurate"))
    assert torch.equal(out2, out) and torch.equal(lse2, lse)
    with pytest.raises(ValueError, match="precision"):
        torch.ops.fa512.fwd(*call._replace(precision="fastest"))


@pytest.mark.parametrize("path", ["memo", "partials"])
def test_the_launch_paths_plan_with_the_calls_precision(path):
    # what `fa512.attention` (memo) and the split partials (`fa512.launch.partials`, the
    # distributed path) plan with: the call's precision, resolved
    from fa512.call import with_out
    from fa512.launch import memo, partials

    q, k, v, kw = make_problem([2], [30], hq=8, hkv=1, page_size=16, kv_dtype=torch.float8_e4m3fn, seed=2)
    call = with_out(op_args(q, k, v, None, kw, k_descale=None, v_descale=None))
    build = memo.build if path == "memo" else partials.build
    for precision, numerics in (("accurate", "accurate"), ("fast", "fast"), ("auto", "fast")):
        assert build(call._replace(precision=precision)).plan.problem.precision == numerics


def test_distributed_partials_pass_the_precision_on(monkeypatch):
    import fa512.distributed as dist

    seen = []
    monkeypatch.setattr(dist, "partials", lambda call: seen.append(call.precision) or (None, None))
    q, k, v, kw = make_problem([1], [4], hq=8, hkv=1, page_size=16, seed=3)
    shard = type("ShardPlan", (), {})()
    shard.batch, shard.calls = 1, [type("C", (), dict(
        fresh=False, repeat=1, cu_seqlens_q=kw["cu_seqlens_q"], seqused_k=kw["seqused_k"], page_table=kw["page_table"],
        cu_seqlens_k=None, max_seqlen_q=1, max_seqlen_k=4, causal=True, window_right=-1))()]
    dist.step_partials(q, k, v, shard, precision="accurate")
    assert seen == ["accurate"]


def test_precision_is_part_of_the_warm_call_signature():
    from fa512.call import with_out
    from fa512.launch.memo import signature

    q, k, v, kw = make_problem([2], [30], hq=8, hkv=1, page_size=16, seed=2)
    call = with_out(op_args(q, k, v, None, kw))
    keys = {signature(call._replace(precision=p)) for p in fa512.PRECISIONS}
    assert None not in keys and len(keys) == 3


@pytest.mark.gpu
def test_gpu_accurate_decode_matches_its_emulation_and_the_dequant_control():
    # The two-term decode tile on the H200: its output within 5e-4 (rel L2) of the emulation of
    # its design (issue 24), its lse within 1e-4, and as close to float64 as the dequant control
    # within 2x, where the fast tile is ~10x further.
    from fa512.launch.run import last_launch
    from fa512.numerics.emulation import emulate_attention, fp8_mma_design
    from fa512.numerics.reference import attention_ref
    from fa512.tools.ab import error_metrics
    from fa512.tools.inputs import make_case

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an SM90 GPU")
    case = make_case("retrieval", heads="31B", mode="decode", batch=2, seqlen_k=6000, logit_std=2.0, seed=0).to("cuda")
    kw = case.kwargs()
    ref, ref_lse = attention_ref(case.q, case.k, case.v, **kw)
    err = {}
    for name, extra in (("accurate", dict(kernel="fp8_mma", precision="accurate")),
                        ("fast", dict(kernel="fp8_mma", precision="fast")), ("dequant", dict(kernel="mma16"))):
        out, lse = fa512.attention(case.q, case.k, case.v, **kw, num_splits=4, **extra)
        assert last_launch["kernel"] == extra["kernel"] and last_launch["num_splits"] == 4
        if name == "accurate":
            config = last_launch["config"]
            assert config.two_term and config.layout == "decode"
            design = fp8_mma_design(config.with_split(True))
            assert design.two_term_q and design.two_term_p
            want, want_lse = emulate_attention(case.q, case.k, case.v, **kw, design=design, num_splits=4)
            fin = torch.isfinite(want_lse)
            assert torch.equal(fin, torch.isfinite(lse))
            assert rel_l2(out.float(), want.float()) <= 5e-4
            assert float((lse - want_lse)[fin].abs().max()) < 1e-4
        err[name] = error_metrics(out, lse, ref, ref_lse, case.valid_rows)["rel_l2"]
    assert err["accurate"] <= 2 * err["dequant"] and err["fast"] > 4 * err["accurate"], err
