"""``python -m fa512 sanitize``: compute-sanitizer over a small call of every dispatched SM90 variant.

One case per forward variant of `cute_kernels.variants.variant_list` (the variants CI compiles and
the dispatch selects; `case_for` builds a call whose plan is that variant, and the CPU test
``tests/test_sanitize.py`` checks it for every variant), so the split combine and the V^T prepass
run inside the cases that use them. For each tool (memcheck, racecheck, synccheck, initcheck) one
``compute-sanitizer`` process runs the cases (``--child``); the kernels are compiled (or loaded)
by a warm-up process first, because an in-process compile probes driver entry points
(cuGetProcAddress), which memcheck reports as host API errors. Inputs are fully initialised
(initcheck would otherwise flag the whole-page TMA loads of unused cache slots).

racecheck cannot verify the alternating prefill layout's hand-off (`layout="alternate"`: the
writer ``bar.arrive``s, the reader ``bar.sync``s): it reports the reader's loads as hazards, and
``profiles/racecheck_barrier_probe.py`` shows it reporting the same bare pattern, and nothing when
both sides ``bar.sync``. So racecheck runs the alternating variants in a process of their own,
and their hazards are counted as that known limitation, not as failures.

``--jobs N`` shares each tool's cases out over N compute-sanitizer processes at once (case i to
process i mod N) and adds up their counts: the tools' instrumentation runs on the host, one core
per process, and one process per tool over every variant takes far longer than a GPU session
has (racecheck alone ran past 200 s on 10 variants, H200 2026-12-02).

    python -m fa512 sanitize --list                 # the cases and the variant each runs (any machine)
    python -m fa512 sanitize [--tools memcheck,racecheck] [--only=KEY_SUBSTRING] [--jobs 8]   # H100/H200
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
KNOWN_RACECHECK = "alternate"  # variants whose racecheck hazards are the documented hand-off limitation
D = 512


@dataclass(frozen=True)
class SweepCase:
    """One small call: kernel, dtypes, layout, mask, GQA group, lengths, splits, descales."""

    key: str  # the variant key it plans to
    kernel: str
    kv_dtype: str  # "bf16" | "f16" | "fp8"
    q_dtype: str  # "bf16" | "f16"
    page_size: int  # 0: packed
    group: int
    q_lens: tuple
    k_lens: tuple
    causal: bool
    window_left: int
    num_splits: int
    descale: tuple  # (q, k, v)
    alternate: bool  # the alternating prefill layout (racecheck: the known limitation)
    # The host bound the plan sees (`max_seqlen_k`); 0: the longest k_len. Paged cases with a
    # bound get page-table rows that wide, the entries no key reaches pointing at page 0.
    max_seqlen_k: int = 0
    precision: str = "auto"  # "accurate" for fp8_mma's two-term variants (`fa512.planning.precision`)

    def describe(self) -> str:
        mask = "local" if self.window_left >= 0 else ("causal" if self.causal else "full")
        kv = f"paged{self.page_size}" if self.page_size else "packed"
        bound = f" max_seqlen_k={self.max_seqlen_k}" if self.max_seqlen_k else ""
        return (f"{self.kernel} kv={self.kv_dtype} q={self.q_dtype} {kv} G={self.group} q_lens={list(self.q_lens)} "
                f"k_lens={list(self.k_lens)}{bound} {mask} splits={self.num_splits} "
                f"descale={''.join('1' if d else '0' for d in self.descale)}"
                + (f" precision={self.precision}" if self.precision != "auto" else ""))


def case_for(cfg) -> SweepCase:
    """A small call that the dispatch serves with ``cfg`` (an `Sm90FwdConfig` of `variant_list`)."""
    from cute_kernels.config import TILE_M
    from cute_kernels.variants import PV_PROMOTE_MIN_KEYS, QK_ROWS_MAX_QUERY_ROWS

    g = cfg.qhead_per_kvhead
    if cfg.layout in ("decode", "decode_alt"):  # at most QK_ROWS_MAX_QUERY_ROWS rows of queries
        q_len = max(1, QK_ROWS_MAX_QUERY_ROWS // g) if cfg.mask == "causal" else 1
    elif cfg.layout == "alternate":  # several M tiles
        q_len = 2 * TILE_M // g + 3
    elif cfg.mma_path == "fp8_mma":  # one M tile, more than a decode tile's rows
        q_len = TILE_M // g
    else:
        q_len = max(2, 40 // g)
    # The long-context variants: P.V promoted, or (split-d split) the same 24 / 240 registers.
    # The dispatch picks them from the host bound, so a paged case reads a few blocks under a
    # long bound, as a CUDA graph captured for long contexts does; racecheck ran out of 280 s on
    # the alternating layout's three M tiles over all 16461 keys (H200, 2026-12-02).
    long = cfg.mma_path == "fp8_mma" and (cfg.pv_promote or (cfg.layout == "split_d" and cfg.producer_regs == 24))
    long_keys = PV_PROMOTE_MIN_KEYS + 77
    bound = long_keys if long and cfg.is_paged else 0
    k_lens = (3 * 64 + 37,) if bound else (long_keys,) if long else (3 * 64 + 37, 64 + 5)
    causal = cfg.mask in ("causal", "local")
    # Split variants: the dispatch fuses the combine into grids of at most one CTA per SM whose
    # CTAs merge at most 2 (row, quarter) pieces each (`fa512.planning.splits.fuses`): one
    # sequence and 2 splits per row of the tile; the combine-kernel twin takes more splits than
    # 132 CTAs hold (empty splits included).
    splits = 1
    if cfg.split and cfg.fused_combine:
        k_lens = k_lens[:1]
        splits = max(2, 2 * min(TILE_M, q_len * g))
    elif cfg.split:
        splits = 140
    q_lens = (q_len,) * len(k_lens)
    kv = {"bf16": "bf16", "f16": "f16"}.get(cfg.mma_path, "fp8")
    return SweepCase(
        key=cfg.key(), kernel="fp8_mma" if cfg.mma_path == "fp8_mma" else "mma16", kv_dtype=kv, q_dtype=cfg.q_dtype,
        page_size=cfg.page_size if cfg.is_paged else 0, group=g, q_lens=q_lens, k_lens=k_lens, causal=causal,
        window_left=100 if cfg.mask == "local" else -1, num_splits=splits, descale=tuple(cfg.descale),
        alternate=cfg.layout == "alternate", max_seqlen_k=bound,
        precision="accurate" if cfg.two_term else "auto",
    )


def sweep_cases(only: str = "") -> list:
    """One case per forward variant CI compiles (`variant_list`), filtered by key substring."""
    from cute_kernels.variants import variant_list

    return [case_for(cfg) for cfg in variant_list() if only in cfg.key()]


_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "fp8": torch.float8_e4m3fn}


def make_call(case: SweepCase, device, seed: int = 0):
    """(q, k, v, kwargs of `fa512.attention`) for ``case``: every byte initialised."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    hkv = 1 if case.group > 1 else 2
    hq = hkv * case.group
    b = len(case.q_lens)
    qd, kvd = _DTYPES[case.q_dtype], _DTYPES[case.kv_dtype]
    q = torch.randn(sum(case.q_lens), hq, D, generator=g).to(qd)
    i32 = dict(dtype=torch.int32)
    kw = dict(cu_seqlens_q=torch.tensor([0, *torch.tensor(case.q_lens).cumsum(0).tolist()], **i32),
              seqused_k=torch.tensor(case.k_lens, **i32), max_seqlen_q=max(case.q_lens),
              max_seqlen_k=case.max_seqlen_k or max(case.k_lens),
              softmax_scale=D ** -0.5, causal=case.causal, window_left=case.window_left,
              num_splits=case.num_splits, kernel=case.kernel, precision=case.precision)
    if case.page_size:
        per_seq = [-(-n // case.page_size) for n in case.k_lens]
        pages = sum(per_seq) + 1  # one page no sequence references
        table = torch.zeros(b, max(*per_seq, -(-case.max_seqlen_k // case.page_size)), **i32)
        order = torch.randperm(pages, generator=g)[: sum(per_seq)].int()
        start = 0
        for i, n in enumerate(per_seq):
            table[i, :n] = order[start:start + n]
            start += n
        shape = (pages, case.page_size, hkv, D)
        kw["page_table"] = table
    else:
        shape = (sum(case.k_lens) + 3, hkv, D)
        kw["cu_seqlens_k"] = torch.tensor([0, *torch.tensor(case.k_lens).cumsum(0).tolist()], **i32)
    k = (torch.randn(shape, generator=g) * 0.5).to(kvd)
    v = (torch.randn(shape, generator=g) * 0.5).to(kvd)
    for name, on in zip(("q_descale", "k_descale", "v_descale"), case.descale):
        if on:
            kw[name] = torch.rand(b, hkv, generator=g) + 0.5
    move = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
    return move(q), move(k), move(v), {n: move(t) for n, t in kw.items()}


def planned_key(case: SweepCase, target: str = "sm_90:132") -> str:
    """The variant key the dispatch picks for ``case`` on ``target`` (meta tensors, any machine)."""
    import fa512

    q, k, v, kw = make_call(case, "meta")
    return fa512.plan(q, k, v, **kw, target=target).kernels[0]


# `fa512.attention`'s arguments that choose how a kernel computes; the reference takes the rest
KERNEL_CHOICES = ("kernel", "precision")


def reference_of(q, k, v, kw: dict):
    """`fa512.attention_ref` on a case's call (``kw`` from `make_call`): (out, lse)."""
    import fa512

    return fa512.attention_ref(q, k, v, **{n: t for n, t in kw.items() if n not in KERNEL_CHOICES})


def run_child(cases: list) -> int:
    """Run each case once on the GPU and check it against the reference loosely (the sanitizer
    reports what matters); prints one line per case."""
    import fa512
    from fa512.backends.cute import forward_config
    from fa512.launch.run import last_launch

    bad = 0
    for case in cases:
        q, k, v, kw = make_call(case, "cuda")
        out, lse = fa512.attention(q, k, v, **kw)
        torch.cuda.synchronize()
        ref, _ = reference_of(q, k, v, kw)
        err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-30))
        ran = last_launch.get("config")
        ran_key = ran is not None and forward_config(ran, last_launch["num_splits"], last_launch["combine"]).key()
        ok = ran_key == case.key and err < 0.1
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {case.key}  rel_l2 {err:.1e}  {case.describe()}", flush=True)
    return 1 if bad else 0


def _summary(text: str, tool: str) -> int:
    """Errors (or racecheck hazards) compute-sanitizer counted; -1 when it printed no summary."""
    m = re.search(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)", text)
    return int(m.group(1)) if m else -1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--list", action="store_true", help="print the cases and the variant each plans to, then exit")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma list of {TOOLS}")
    p.add_argument("--only", default="", help="substring filter on variant keys")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--alternate", choices=("yes", "no", "any"), default="any", help=argparse.SUPPRESS)
    p.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=1,
                   help="compute-sanitizer processes at once, each tool's cases shared out over them (default 1)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per compute-sanitizer process")


def child_command(only: str) -> list:
    """The command line of a child process over the cases whose keys contain ``only``. The filter
    goes as ``--only=...``: a key substring may start with "-" ("-s1-none-..."), which argparse
    would read as an option after a separate ``--only``."""
    return [sys.executable, "-m", "fa512.tools.sanitize", f"--only={only}"]


def _select(cases, alternate: str, shard: str = "0/1"):
    """The cases of one child: the alternating ones or the others (or any), then every n-th
    from the i-th (``shard`` "i/n")."""
    i, n = (int(x) for x in shard.split("/"))
    return [c for c in cases if alternate == "any" or c.alternate == (alternate == "yes")][i::n]


@dataclass
class Verdict:
    """One tool's result over one group of cases, added up over the shards that ran it."""

    tool: str
    known: bool  # racecheck over the alternating layout: hazards are the documented limitation
    count: int = 0  # errors or hazards; -1 once a shard printed no summary
    rc: int = 0  # the first nonzero exit status
    tails: tuple = ()

    def add(self, text: str, rc: int) -> None:
        n = _summary(text, self.tool)
        self.count = -1 if n < 0 or self.count < 0 else self.count + n
        self.rc = self.rc or rc
        if n != 0 or rc:
            self.tails += ("\n".join(text.splitlines()[-40:]),)

    def line(self) -> tuple:
        """(verdict, whether it fails the sweep)."""
        if self.count == 0 and not self.rc:
            return "clean", False
        if self.known and self.count > 0:
            return f"{self.count} hazard(s): the named-barrier hand-off racecheck cannot verify", False
        return ("no summary" if self.count < 0 else "FAILED"), True


def sanitizer_jobs(args: argparse.Namespace, cases) -> tuple:
    """([(label, compute-sanitizer command line)], {label: Verdict}): per tool, one group of
    cases (racecheck: the alternating layout's apart, its hazards a known limitation), shared out
    over at most ``args.jobs`` child processes."""
    me = child_command(args.only)
    jobs, verdicts = [], {}
    for tool in args.tools.split(","):
        groups = [("no", False), ("yes", True)] if tool == "racecheck" else [("any", False)]
        for alternate, known in groups:
            selected = _select(cases, alternate)
            if not selected:
                continue
            label = f"{tool}{' (alternating layout)' if alternate == 'yes' else ''}"
            verdicts[label] = Verdict(tool, known)
            cmd = ["compute-sanitizer", "--tool", tool, "--print-limit", "20"]
            cmd += ["--racecheck-report", "all"] if tool == "racecheck" else []
            shards = max(1, min(args.jobs, len(selected)))
            jobs += [(label, cmd + me + ["--child", "--alternate", alternate, "--shard", f"{i}/{shards}"])
                     for i in range(shards)]
    return jobs, verdicts


def main(args: argparse.Namespace) -> int:
    cases = sweep_cases(args.only)
    if args.list:
        for c in cases:
            print(f"{c.key}\n    {c.describe()}  (plans to {'the same' if planned_key(c) == c.key else planned_key(c)})")
        return 0
    if args.child:
        return run_child(_select(cases, args.alternate, args.shard))
    if not torch.cuda.is_available():
        print("fa512 sanitize: needs a CUDA GPU (use --list to see the cases on any machine)", file=sys.stderr)
        return 2
    me = child_command(args.only)
    warm = subprocess.run(me + ["--child"], capture_output=True, text=True, timeout=args.timeout)
    print(warm.stdout, end="")
    if warm.returncode:
        print(f"warm-up run failed (rc {warm.returncode}):\n{warm.stderr[-3000:]}")
        return 1
    jobs, verdicts = sanitizer_jobs(args, cases)

    def run(job):
        label, cmd = job
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=dict(os.environ))
            return label, res.stdout + res.stderr, res.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"") + (e.stderr or b"")
            return label, (out.decode(errors="replace") if isinstance(out, bytes) else out) + \
                f"\n(timed out after {args.timeout} s)", 124

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for label, text, rc in pool.map(run, jobs):
            verdicts[label].add(text, rc)
    failed = 0
    for label, v in verdicts.items():
        verdict, bad = v.line()
        failed += bad
        print(f"{label:34s} {verdict} (rc {v.rc})", flush=True)
        if verdict != "clean":
            print("\n\n".join(v.tails))
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m fa512.tools.sanitize", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
