"""The warm-call memo (fa512.launch.memo): a hit returns what full validation and planning
would, re-validates nothing, and redoes the per-call checks."""

import pytest
import torch

import fa512
from fa512.launch import memo, run
from fa512.planning.validate import check
from helpers import make_problem, op_args


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.clear()
    yield
    memo.clear()


def lookup(call):
    """(launcher, the launch tensors it derives for ``call``)."""
    launcher = memo.launcher_for(call)
    return launcher, launcher.args(call)


def validate_and_plan(call):
    launcher, args = lookup(call)
    return launcher.problem, args, launcher.plan


def test_hit_equals_full_validation_with_new_tensors():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=21)
    validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw))
    # Same metadata, new tensors and descale values: a cache hit.
    q2, k2, v2, _ = make_problem([2, 3], [9, 17], seed=22)
    call = op_args(q2, k2, v2, torch.empty_like(q2), kw, k_descale=torch.tensor([3.0, 4.0]))
    problem, args, plan = validate_and_plan(call)
    want_problem, want_args = check(call)
    assert problem == want_problem and args.q is q2 and args.k is k2
    assert torch.equal(args.k_descale, want_args.k_descale) and args.k_descale[1, 0] == 3.0
    assert plan.kernel == "reference" and memo.size() == 1


def test_scalar_change_misses():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=23)
    out = torch.empty_like(q)
    p1, _, _ = validate_and_plan(op_args(q, k, v, out, kw))
    p2, _, _ = validate_and_plan(op_args(q, k, v, out, kw, causal=False, window_left=4))
    assert (p1.window_right, p2.window_left) == (0, 4) and memo.size() == 2


def test_alias_is_checked_on_every_hit():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=24)
    validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw))
    with pytest.raises(ValueError, match="overlapping q"):
        validate_and_plan(op_args(q, k, v, q, kw))  # same signature as a fresh out


def test_failures_are_not_cached():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=25)
    for _ in range(2):
        with pytest.raises(ValueError, match="window_left"):
            validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, window_left=-3))
    assert not memo.size()


def test_triton_interpreter_switch_is_part_of_the_key(monkeypatch):
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=26)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _, _, plan = validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, kernel="triton"))
    assert plan.kernel == "triton"
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(fa512.KernelUnavailableError, match="TRITON_INTERPRET"):
        validate_and_plan(op_args(q, k, v, torch.empty_like(q), kw, kernel="triton"))


def test_attention_results_identical_cold_and_warm():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=27)
    cold = fa512.attention(q, k, v, **kw, causal=True)
    warm = fa512.attention(q, k, v, **kw, causal=True)
    assert torch.equal(cold[0], warm[0]) and torch.equal(cold[1], warm[1])


def test_one_launcher_per_signature_and_new_tensors_each_call():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=28)
    l1, a1 = lookup(op_args(q, k, v, torch.empty_like(q), kw))
    q2, k2, v2, _ = make_problem([2, 3], [9, 17], seed=29)
    l2, a2 = lookup(op_args(q2, k2, v2, torch.empty_like(q2), kw))
    assert l2 is l1 and (a2.q, a2.k, a2.v) == (q2, k2, v2) and a1.q is q


@pytest.mark.parametrize(
    "change",
    [
        lambda q, k, v: (q.transpose(0, 1).contiguous().transpose(0, 1), k, v),  # same shape, new strides
        lambda q, k, v: (q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)),
        lambda q, k, v: (q, k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)),
    ],
    ids=["q_strides", "dtype", "kv_dtype"],
)
def test_changed_stride_or_dtype_gets_its_own_launcher(change):
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=30)
    l1, _ = lookup(op_args(q, k, v, torch.empty_like(q), kw))
    q2, k2, v2 = change(q, k, v)
    l2, _ = lookup(op_args(q2, k2, v2, torch.empty_like(q2), kw))
    assert l2 is not l1 and memo.size() == 2
    assert l2.problem == check(op_args(q2, k2, v2, torch.empty_like(q2), kw))[0]


def test_bool_where_an_int_belongs_is_not_a_hit():
    q, k, v, kw = make_problem([1, 1], [9, 17], seed=31)
    lookup(op_args(q, k, v, torch.empty_like(q), kw, num_splits=1))
    with pytest.raises(TypeError, match="num_splits"):  # True == 1 and hash(True) == hash(1)
        lookup(op_args(q, k, v, torch.empty_like(q), kw, num_splits=True))


def test_descale_views_are_memoised_per_tensor_and_track_it():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=32)
    kd = torch.tensor([0.5, 2.0])
    out = torch.empty_like(q)
    lookup(op_args(q, k, v, out, kw, k_descale=kd))
    _, a1 = lookup(op_args(q, k, v, out, kw, k_descale=kd))
    _, a2 = lookup(op_args(q, k, v, out, kw, k_descale=kd))
    assert a2.k_descale is a1.k_descale and a1.k_descale.shape == (2, 2)
    kd.mul_(3)  # in-place value change: the view shares kd's memory
    assert a2.k_descale[1, 0] == 1.5
    kd.set_(torch.tensor([7.0, 8.0]))  # re-pointed: a new view
    _, a3 = lookup(op_args(q, k, v, out, kw, k_descale=kd))
    assert a3.k_descale is not a1.k_descale and a3.k_descale[0, 1] == 8.0
    kd2 = torch.tensor([1.0, 9.0])  # another tensor, same signature: its own view
    _, a4 = lookup(op_args(q, k, v, out, kw, k_descale=kd2))
    assert a4.k_descale[0, 1] == 9.0 and a4.k_descale.data_ptr() == kd2.data_ptr()


def test_last_launch_is_set_on_every_warm_call():
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=33)
    fa512.attention(q, k, v, **kw)
    run.last_launch.clear()
    fa512.attention(q, k, v, **kw)
    assert run.last_launch["kernel"] == "reference" and run.last_launch["num_splits"] == 1
    fa512.attention(q, k, v, **kw, kernel="reference", num_splits=2)
    assert run.last_launch["num_splits"] == 2


def test_fa512_debug_bypasses_a_warm_launcher(monkeypatch):
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=34)
    fa512.attention(q, k, v, **kw)  # caches the signature
    kw["page_table"][0, 0] = 999  # only a device-memory check can see this
    monkeypatch.setenv("FA512_DEBUG", "1")
    with pytest.raises(ValueError, match="page_table"):
        fa512.attention(q, k, v, **kw)


def test_a_hit_neither_validates_nor_plans(monkeypatch):
    q, k, v, kw = make_problem([2, 3], [9, 17], seed=35)
    out = torch.empty_like(q)
    first = memo.launcher_for(op_args(q, k, v, out, kw))

    def must_not_run(*args, **kwargs):
        raise AssertionError("a warm call re-validated or re-planned")

    monkeypatch.setattr(memo, "check", must_not_run)
    monkeypatch.setattr(memo, "make_plan", must_not_run)
    q2, k2, v2, _ = make_problem([2, 3], [9, 17], seed=36)
    assert memo.launcher_for(op_args(q2, k2, v2, out, kw)) is first
    got, lse = run.run(op_args(q2, k2, v2, out, kw))
    want, want_lse = fa512.attention_ref(q2, k2, v2, **kw, softmax_scale=0.05, causal=True,
                                         k_descale=torch.tensor([0.5, 2.0]), v_descale=torch.tensor(1.5))
    assert got is out and torch.allclose(got.double(), want, atol=2e-3) and torch.allclose(lse.double(), want_lse, atol=1e-4)
    with pytest.raises(AssertionError, match="re-validated"):  # a new signature does reach them
        memo.launcher_for(op_args(q2, k2, v2, torch.empty_like(q2, dtype=torch.bfloat16), kw))
