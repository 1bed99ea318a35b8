"""fa512.tools.sanitize: its cases reach every variant CI compiles (CPU), and run them (GPU)."""

from __future__ import annotations

import argparse

import pytest
import torch

from cute_kernels.variants import variant_list
from fa512.call import make_call as call_of
from fa512.planning.validate import check
from fa512.tools import sanitize


def test_every_compiled_variant_has_a_case_that_plans_to_it():
    """A variant in `variant_list` that no call can reach would be compiled and checked for
    nothing (a dead variant); the sweep's call for it must plan to it on an H200."""
    missed = {c.key: sanitize.planned_key(c) for c in sanitize.sweep_cases() if sanitize.planned_key(c) != c.key}
    assert not missed, missed
    assert len(sanitize.sweep_cases()) == len(variant_list())


def test_cases_are_valid_calls_with_every_byte_initialised():
    for case in sanitize.sweep_cases()[:12] + sanitize.sweep_cases()[-4:]:
        q, k, v, kw = sanitize.make_call(case, "cpu")
        problem, _ = check(call_of(q, k, v, **kw))
        assert problem.group_size == case.group and problem.max_seqlen_q == max(case.q_lens)
        assert all(torch.isfinite(t.float()).all() for t in (q, k, v))
        assert (problem.page_size or 0) == case.page_size


def test_the_reference_takes_every_kind_of_case():
    """`run_child` checks each GPU output against the reference on the same call; a call argument
    the reference does not take (session 22: ``precision``) failed the whole sweep on the GPU."""
    cases = sanitize.sweep_cases()
    kinds = {}
    for c in cases:  # one case per (kernel, precision)
        kinds.setdefault((c.kernel, c.precision), c)
    assert ("fp8_mma", "accurate") in kinds
    for case in kinds.values():
        q, k, v, kw = sanitize.make_call(case, "cpu")
        out, lse = sanitize.reference_of(q, k, v, kw)
        assert out.shape == q.shape and torch.isfinite(out).all()


def test_list_needs_no_gpu(capsys):
    p = argparse.ArgumentParser()
    sanitize.add_arguments(p)
    assert sanitize.main(p.parse_args(["--list", "--only", "fp8_mma-qbf16-n64-s2-none-paged64"])) == 0
    out = capsys.readouterr().out
    assert "fp8_mma" in out and "plans to the same" in out and "plans to sm90" not in out


def test_the_child_gets_a_filter_that_starts_with_a_dash():
    """A key substring such as "-s1-none-paged64-g8-split-" reaches the child as the filter, not as
    an unknown option (H200 2026-12-04: the child exited with "--only: expected one argument")."""
    p = argparse.ArgumentParser()
    sanitize.add_arguments(p)
    only = "-s1-none-paged64-g8-split-"
    args = p.parse_args([f"--only={only}", "--jobs", "2"])
    cases = sanitize.sweep_cases(args.only)
    assert cases and all(only in c.key for c in cases)
    jobs, verdicts = sanitize.sanitizer_jobs(args, cases)
    assert {label for label, _ in jobs} == set(verdicts) == {"memcheck", "racecheck", "synccheck", "initcheck"}
    for _, cmd in jobs:  # what each child process parses: the sweep's own filter and cases
        child = cmd[cmd.index("fa512.tools.sanitize") + 1:]
        parsed = p.parse_args(child)
        assert parsed.child and parsed.only == only
        assert sanitize._select(sanitize.sweep_cases(parsed.only), parsed.alternate, parsed.shard)


def test_shards_split_each_group_of_cases_between_them():
    cases = sanitize.sweep_cases()
    for alternate in ("no", "yes", "any"):
        whole = sanitize._select(cases, alternate)
        shards = [sanitize._select(cases, alternate, f"{i}/3") for i in range(3)]
        assert sorted(c.key for s in shards for c in s) == sorted(c.key for c in whole)
        assert all(abs(len(s) - len(whole) / 3) < 1 for s in shards)
    assert all(c.alternate for c in sanitize._select(cases, "yes")) and not any(c.alternate for c in sanitize._select(cases, "no"))


def test_shard_verdicts_add_up():
    clean = "========= ERROR SUMMARY: 0 errors"
    v = sanitize.Verdict("memcheck", known=False)
    v.add(clean, 0)
    v.add(clean, 0)
    assert v.line() == ("clean", False)
    v.add("========= ERROR SUMMARY: 2 errors", 1)
    assert v.count == 2 and v.line() == ("FAILED", True) and len(v.tails) == 1
    race = sanitize.Verdict("racecheck", known=True)
    race.add("========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)", 1)
    race.add("========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)", 1)
    assert race.count == 4 and not race.line()[1] and "cannot verify" in race.line()[0]
    lost = sanitize.Verdict("synccheck", known=False)
    lost.add(clean, 0)
    lost.add("(timed out after 900 s)", 124)  # a shard with no summary spoils the count
    assert lost.count == -1 and lost.line() == ("no summary", True)
    crashed = sanitize.Verdict("initcheck", known=False)
    crashed.add(clean, 3)  # a summary of 0 but a failing exit status
    assert crashed.line() == ("FAILED", True)


def test_sanitizer_summaries_are_read():
    assert sanitize._summary("========= ERROR SUMMARY: 0 errors", "memcheck") == 0
    assert sanitize._summary("========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)", "racecheck") == 3
    assert sanitize._summary("Segmentation fault", "memcheck") == -1


@pytest.mark.gpu
def test_gpu_every_case_runs_its_variant():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an SM90 GPU")
    assert sanitize.run_child(sanitize.sweep_cases()) == 0
