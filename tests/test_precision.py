"""``precision``: the argument's path (API, op, plan, memo key) and what each value plans."""

import importlib

import pytest
import torch

import fa512
from fa512.planning.precision import ACCURATE_IS_FREE
from helpers import make_problem, op_args

needs_dsl = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("cutlass", "tvm_ffi")),
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
def test_auto_precision_is_fast_until_an_accurate_variant_measures_free():
    assert ACCURATE_IS_FREE == ()  # the module docstring's A/B: the two-term decode tile is 7-18% slower
    for seqlen_q in (1, 512):
        q, k, v, kw = _fp8_problem(seqlen_q)
        p = fa512.plan(q, k, v, **kw, target="sm_90:132")
        assert p.kernel == "fp8_mma" and p.precision == "fast" and "precision auto -> fast" in p.reason
        assert "precision : fast" in p.describe()
        assert fa512.plan(q, k, v, **kw, target="sm_90:132", precision="fast").config == p.config


@needs_dsl
@pytest.mark.parametrize("seqlen_q, page_size, kernel", [(1, 64, "triton"), (1, 32, "triton"), (9, 64, "mma16"),
                                                         (512, 64, "mma16")])
def test_accurate_passes_over_fp8_mma_to_an_accurate_kernel(seqlen_q, page_size, kernel):
    # fp8_mma has no accurate variant on main: the next kernel of the row serves the call (each
    # dequantises), and a named fp8_mma is refused, never run fast
    q, k, v, kw = _fp8_problem(seqlen_q, page_size)
    p = fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate")
    assert p.kernel == kernel and p.precision == "accurate" and "precision='accurate' requested" in p.reason
    assert "passed over fp8_mma: precision='accurate' has no fp8_mma variant" in p.reason
    with pytest.raises(fa512.KernelUnavailableError, match="precision='accurate'"):
        fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate", kernel="fp8_mma")
    named = fa512.plan(q, k, v, **kw, target="sm_90:132", precision="accurate", kernel=kernel)
    assert named.config == p.config  # the kernels that need no mode build the same variant


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


def test_precision_is_part_of_the_warm_call_signature():
    from fa512.call import with_out
    from fa512.launch.memo import signature

    q, k, v, kw = make_problem([2], [30], hq=8, hkv=1, page_size=16, seed=2)
    call = with_out(op_args(q, k, v, None, kw))
    keys = {signature(call._replace(precision=p)) for p in fa512.PRECISIONS}
    assert None not in keys and len(keys) == 3
