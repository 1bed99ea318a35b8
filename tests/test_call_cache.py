"""The warm-call fast path returns what full validation would, and redoes the per-call checks."""

import pytest
import torch

import fa512
from fa512 import call_cache
from fa512.validate import validate
from helpers import make_problem, op_args


@pytest.fixture(autouse=True)
def _fresh_cache():
    call_cache.clear()
    yield
    call_cache.clear()


def test_hit_equals_full_validation_with_new_tensors():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=21)
    call_cache.validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw))
    # Same metadata, new tensors and descale values: a cache hit.
    q2, k2, v2, _ = make_problem([2, 3], [9, 17], seed=22)
    call = op_args(q2, k2, v2, torch.empty_like(q2), kw, k_descale=torch.tensor([3.0, 4.0]))
    problem, args, plan = call_cache.validate_and_plan(call)
    want_problem, want_args = validate(*call)
    assert problem == want_problem and args.q is q2 and args.k is k2
    assert torch.equal(args.k_descale, want_args.k_descale) and args.k_descale[1, 0] == 3.0
    assert plan.kernel == "reference" and len(call_cache._cache) == 1


def test_scalar_change_misses():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=23)
    out = torch.empty_like(q)
    p1, _, _ = call_cache.validate_and_plan(op_args(q, k, v, out, kw))
    p2, _, _ = call_cache.validate_and_plan(op_args(q, k, v, out, kw, causal=False, window_left=4))
    assert (p1.window_right, p2.window_left) == (0, 4) and len(call_cache._cache) == 2


def test_alias_is_checked_on_every_hit():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=24)
    call_cache.validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw))
    with pytest.raises(ValueError, match="overlapping q"):
        call_cache.validate_and_plan(op_args(q, k, v, q, kw))  # same signature as a fresh out


def test_failures_are_not_cached():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=25)
    for _ in range(2):
        with pytest.raises(ValueError, match="window_left"):
            call_cache.validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, window_left=-3))
    assert not call_cache._cache


def test_triton_interpreter_switch_is_part_of_the_key(monkeypatch):
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=26)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _, _, plan = call_cache.validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, kernel="triton"))
    assert plan.kernel == "triton"
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(fa512.KernelUnavailableError, match="TRITON_INTERPRET"):
        call_cache.validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, kernel="triton"))


def test_attention_results_identical_cold_and_warm():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=27)
    cold = fa512.attention(q, k, v, **kw, causal=True)
    warm = fa512.attention(q, k, v, **kw, causal=True)
    assert torch.equal(cold[0], warm[0]) and torch.equal(cold[1], warm[1])
