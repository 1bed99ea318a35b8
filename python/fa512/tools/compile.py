"""``python -m fa512 compile``: build every CuTe DSL variant for a GPU arch on any machine, check it.

For each variant of `cute_kernels.variants.variant_list` (the d512 forwards), the split-KV
combine kernels and the V^T prepass kernels of the ``vt_prepass`` variants, writes
``<out>/<key>.cubin`` and ``<out>/<key>.sass`` and checks:

* warpgroup MMA is present in the forward kernels: ``HGMMA`` (16-bit) for mma16, and for
  fp8_mma ``QGMMA ... E4M3.E4M3`` twice over: with A from shared memory (QK^T) and with A from
  registers (P.V), so both products really run on FP8 tensor cores;
* no local-memory spills: no ``STL``/``LDL`` in the SASS and ``LOCAL``/``STACK`` 0;
* shared memory (the kernel's dynamic allocation + the static section) <= 227 KB;
* the ``USETMAXREG`` budgets fit the CTA's register pool, ``REG`` x threads (168 x 384 = 64512 for
  the forward): ``setmaxnreg.inc`` waits until the pool can serve it, so a budget that does not
  fit hangs every launch (the 2026-11-29 H200 hang: 32 + 2 x 240 = 512 x 128 > 64512).

Also reports registers at launch (``REG``), the ``USETMAXREG`` budgets of the warpgroups, HGMMA
shapes and counts, compile seconds and a hash of each kernel's instructions (`sass_hash`), in a
table and in ``<out>/report.json``; ``--compare <earlier report.json>`` lists the kernels whose
SASS changed (the check that a tidy left the dispatched kernels alone). Exit status 1 if any
check fails. SASS comes from the first cuobjdump that can produce it (`dump_sass`); a SASS tool
that fails is reported as such, never read as a kernel without MMA. No GPU is needed (fake
tensors, ``--arch sm_90a``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

SMEM_LIMIT = 232_448


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default="sm_90a", help="GPU arch to compile for (sm_90a: wgmma/setmaxnreg need the 'a')")
    p.add_argument("--out", default="out/cute_sm90", help="directory for .cubin/.sass files and report.json")
    p.add_argument("--short", action="store_true", help="only the short variant list (CPU test subset)")
    p.add_argument("--only", default=None, help="substring filter on variant keys")
    p.add_argument("--jobs", type=int, default=0,
                   help="compiler processes (default: one per CPU core; each DSL compile is single-threaded)")
    p.add_argument("--fill-cache", action="store_true",
                   help="instead: build every kernel into the disk cache (FA512_CACHE_DIR) that launches load from, "
                        "as a server warms it before serving; no SASS checks")
    p.add_argument("--compare", default=None, metavar="REPORT_JSON",
                   help="an earlier run's report.json: list the kernels whose SASS hash changed, appeared or went")


@dataclass
class SassReport:
    key: str
    compile_s: float
    reg: int = 0
    stack: int = 0
    local: int = 0
    static_smem: int = 0
    dynamic_smem: int = 0
    setmaxnreg: list = field(default_factory=list)
    hgmma: dict = field(default_factory=dict)  # "<GMMA shape>/<A source: SS|RS>" -> count
    spill_instructions: int = 0
    sass_hash: str = ""  # `sass_hash`: equal hashes, identical instruction streams
    problems: list = field(default_factory=list)

    @property
    def smem(self) -> int:
        return self.static_smem + self.dynamic_smem

    @property
    def ok(self) -> bool:
        return not self.problems


def tool_candidates(name: str) -> list[str]:
    """Every cuobjdump/nvdisasm here, in the order tried: PATH, the nvidia-cuda-* wheels, Triton's
    bundled copy (which ships both tools)."""
    import importlib.util

    found = [shutil.which(name)]
    for pkg, sub in (("nvidia", "cu13/bin"), ("nvidia", "cuda_cuobjdump/bin"), ("nvidia", "cuda_nvdisasm/bin"),
                     ("triton", "backends/nvidia/bin")):
        spec = importlib.util.find_spec(pkg)
        for base in (spec.submodule_search_locations or []) if spec else []:
            cand = Path(base) / sub / name
            if cand.exists():
                found.append(str(cand))
    out = []
    for path in found:
        if path and path not in out:
            out.append(path)
    return out


class SassToolError(RuntimeError):
    """No cuobjdump here could dump SASS; the message says what each one answered."""


def dump_sass(cubin_path: Path) -> tuple[str, str, str]:
    """(SASS, resource usage, the cuobjdump that produced them) for one cubin.

    Tries each cuobjdump of `tool_candidates` until one succeeds; a cuobjdump without its
    nvdisasm (the nvidia-cuda-cuobjdump wheel alone) exits 1 with "Could not find executable file
    'nvdisasm'", so an nvdisasm found elsewhere is offered through NVDISASM_PATH, and a tool that
    still fails is reported and the next one tried (a failed dump once read as "no QGMMA").
    """
    env = dict(os.environ)
    nvdisasm = tool_candidates("nvdisasm")
    if nvdisasm and "NVDISASM_PATH" not in env:
        env["NVDISASM_PATH"] = str(Path(nvdisasm[0]).parent)
    failures = []
    for tool in tool_candidates("cuobjdump"):
        sass = subprocess.run([tool, "-sass", str(cubin_path)], capture_output=True, text=True, env=env)
        usage = subprocess.run([tool, "--dump-resource-usage", str(cubin_path)], capture_output=True, text=True,
                               env=env)
        if sass.returncode == 0 and usage.returncode == 0 and "Function" in sass.stdout:
            return sass.stdout, usage.stdout, tool
        answer = (sass.stderr or usage.stderr or sass.stdout).strip().splitlines()
        failures.append(f"{tool}: exit {sass.returncode or usage.returncode}: {answer[0] if answer else 'no SASS'}")
    if not failures:
        raise SassToolError("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    raise SassToolError("no cuobjdump could dump SASS: " + "; ".join(failures))


def inspect_cubin(cubin_path: Path, key: str, compile_s: float, dynamic_smem: int, expect_mma: Optional[str],
                  threads: int = 384) -> SassReport:
    """Dump SASS next to the cubin and check warpgroup MMA / spills / smem / the register pool.

    ``expect_mma``: None, "hgmma" (16-bit) or "qgmma" (e4m3 QK^T from smem and P.V from registers).
    ``threads``: CTA size; with setmaxnreg, warpgroup 0 deallocates and the others allocate.
    """
    rep = SassReport(key=key, compile_s=compile_s, dynamic_smem=dynamic_smem)
    try:
        sass, usage, _ = dump_sass(cubin_path)
    except SassToolError as exc:
        rep.problems.append(f"SASS tool failed: {exc}")
        return rep
    cubin_path.with_suffix(".sass").write_text(sass)
    rep.sass_hash = sass_hash(sass)
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    if m:
        rep.reg, rep.stack, rep.static_smem, rep.local = (int(x) for x in m.groups())
    else:
        rep.problems.append("no resource usage line from cuobjdump")
    rep.hgmma = gmma_counts(sass)
    rep.setmaxnreg = [
        f"{kind}:{int(val, 16)}" for kind, val in re.findall(r"USETMAXREG\.(\S+?)\s.*?(0x[0-9a-f]+)\s*;", sass)
    ]
    rep.spill_instructions = len(re.findall(r"\b(?:STL|LDL)(?:\.\S+)?\s", sass))
    problem = mma_problem(rep.hgmma, expect_mma)
    if problem:
        rep.problems.append(problem)
    if rep.spill_instructions or rep.local or rep.stack:
        rep.problems.append(f"local memory: {rep.spill_instructions} STL/LDL, LOCAL={rep.local}, STACK={rep.stack}")
    if rep.smem > SMEM_LIMIT:
        rep.problems.append(f"shared memory {rep.smem} B > {SMEM_LIMIT} B")
    problem = register_pool_problem(rep.setmaxnreg, rep.reg, threads)
    if problem:
        rep.problems.append(problem)
    return rep


def sass_hash(sass: str) -> str:
    """A hash of a SASS listing's instructions and encodings, without its ``Function :`` lines
    (the mangled kernel symbol names the Python module and class, which a refactor may move):
    what "the SASS is unchanged" compares (``--compare``)."""
    lines = [line.strip() for line in sass.splitlines() if line.strip() and "Function :" not in line]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def compare_reports(old: list, new: list) -> list:
    """Lines naming every kernel key whose SASS hash differs between two report.json row lists,
    or that only one of them has."""
    before = {r["key"]: r.get("sass_hash", "") for r in old}
    after = {r.key: r.sass_hash for r in new}
    lines = [f"changed  {k}" for k in sorted(before.keys() & after.keys()) if before[k] != after[k]]
    lines += [f"removed  {k}" for k in sorted(before.keys() - after.keys())]
    lines += [f"new      {k}" for k in sorted(after.keys() - before.keys())]
    return lines


def gmma_counts(sass: str) -> dict:
    """"HGMMA.64x64x16.F32.BF16/SS"-style keys -> count. SS: A from a shared-memory descriptor;
    RS: A from registers (the operand after the destination is a register, not ``gdesc``)."""
    counts: dict = {}
    for op, shape, a in re.findall(r"\b([HQ]GMMA)\.(\S+)\s+R\w+,\s*(\S+?),", sass):
        k = f"{op}.{shape}/{'SS' if a.startswith('gdesc') else 'RS'}"
        counts[k] = counts.get(k, 0) + 1
    return counts


def mma_problem(counts: dict, expect: Optional[str]) -> Optional[str]:
    if expect is None:
        return None
    if expect == "hgmma":
        return None if any(k.startswith("HGMMA.") for k in counts) else "no HGMMA instruction in the SASS"
    e4m3 = [k for k in counts if k.startswith("QGMMA.") and ".E4M3.E4M3/" in k]
    missing = [src for src in ("SS", "RS") if not any(k.endswith("/" + src) for k in e4m3)]
    if missing:
        what = {"SS": "QK^T (A from smem)", "RS": "P.V (A from registers)"}
        return "no e4m3 QGMMA for " + " and ".join(what[m] for m in missing) + f" (GMMA seen: {counts or 'none'})"
    if any(k.startswith("HGMMA.") for k in counts):
        return f"16-bit HGMMA in an fp8_mma kernel: {counts}"
    return None


def register_pool_problem(setmaxnreg: list, reg: int, threads: int) -> Optional[str]:
    """None if the setmaxnreg budgets fit the CTA pool (launch REG x threads), else the reason.

    Warpgroup 0 runs the DEALLOC, every other warpgroup the (TRY_)ALLOC; the pool holds exactly
    what the launch allocated, so the budgets must satisfy (dealloc + (wgs - 1) x alloc) x 128
    <= REG x threads, or the allocating warpgroups spin in USETMAXREG.TRY_ALLOC forever.
    """
    dealloc = [int(x.split(":")[1]) for x in setmaxnreg if x.startswith("DEALLOC")]
    alloc = [int(x.split(":")[1]) for x in setmaxnreg if "ALLOC" in x and not x.startswith("DEALLOC")]
    if not dealloc or not alloc or not reg:
        return None
    wgs = threads // 128
    need = (max(dealloc) + (wgs - 1) * max(alloc)) * 128
    pool = reg * threads
    if need > pool:
        return (f"setmaxnreg budgets need ({max(dealloc)} + {wgs - 1} x {max(alloc)}) x 128 = {need} registers "
                f"> CTA pool REG {reg} x {threads} = {pool}: setmaxnreg.inc would wait forever (hang)")
    return None


def _specs(short: bool, only: Optional[str]):
    from cute_kernels.variants import variant_list

    from ..backends.compile_cache import KernelSpec

    variants = variant_list(full=not short)
    specs = [KernelSpec("fwd", cfg) for cfg in variants]
    specs += [KernelSpec("combine", dt) for dt in ("bf16", "f16")]
    # the V^T prepass of each V layout a vt_prepass variant reads (page size; 0: packed)
    specs += [KernelSpec("vt_prepass", ps) for ps in sorted({cfg.page_size for cfg in variants if cfg.vt_prepass})]
    if only:
        specs = [s for s in specs if only in s.key()]
    return specs


def _expected_mma(spec) -> Optional[str]:
    if spec.kind != "fwd":
        return None
    return "qgmma" if spec.config.mma_path == "fp8_mma" else "hgmma"


def _compile_and_inspect(spec, arch: str, out: Path) -> "SassReport":
    """One spec: compile, write its cubin (and SASS) under ``out``, check it. Runs in a worker."""
    from ..backends.compile_cache import compile_spec

    try:
        res = compile_spec(spec, arch)
    except Exception as exc:  # report and continue: one broken variant must not hide the others
        return SassReport(key=spec.key(), compile_s=0.0, problems=[f"compile failed: {type(exc).__name__}: {exc}"])
    cubin = out / f"{spec.key()}.cubin"
    cubin.write_bytes(res.cubin)
    return inspect_cubin(cubin, spec.key(), res.seconds, res.smem_struct_bytes or 0, expect_mma=_expected_mma(spec))


def _fill_cache_entry(spec, arch: str) -> tuple:
    """One spec into the disk cache (a worker): (key, seconds, problem or "")."""
    import time

    from ..backends.compile_cache import get_kernel

    t0 = time.perf_counter()
    try:
        get_kernel(spec, arch)
    except Exception as exc:  # report and continue
        return spec.key(), time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
    return spec.key(), time.perf_counter() - t0, ""


def main(args: argparse.Namespace) -> int:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = _specs(args.short, args.only)
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(specs)))
    if args.fill_cache:
        from ..backends.compile_cache import cache_dir

        print(f"building {len(specs)} kernels into {cache_dir()} in {jobs} process(es) ...", flush=True)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(_fill_cache_entry, specs, [args.arch] * len(specs)))
        for key, seconds, problem in done:
            print(f"{key:<86} {seconds:6.1f} s  {problem or 'cached'}")
        return 1 if any(p for _, _, p in done) else 0
    print(f"compiling {len(specs)} kernels for {args.arch} in {jobs} process(es) ...", flush=True)
    if jobs == 1:
        reports = []
        for spec in specs:
            print(f"compiling {spec.key()} ...", flush=True)
            reports.append(_compile_and_inspect(spec, args.arch, out))
    else:  # fresh interpreters ("spawn"): the DSL's compiler state is not fork-safe
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            reports = list(pool.map(_compile_and_inspect, specs, [args.arch] * len(specs), [out] * len(specs)))
    print(format_table(reports))
    (out / "report.json").write_text(
        json.dumps([dict(asdict(r), smem=r.smem, ok=r.ok) for r in reports], indent=1)
    )
    if args.compare:
        changes = compare_reports(json.loads(Path(args.compare).read_text()), reports)
        print(f"SASS against {args.compare}: " + (f"{len(changes)} difference(s)" if changes else "every kernel identical"))
        for line in changes:
            print("  " + line)
    bad = [r for r in reports if not r.ok]
    for r in bad:
        print(f"FAIL {r.key}: {'; '.join(r.problems)}", file=sys.stderr)
    return 1 if bad else 0


def format_table(reports) -> str:
    head = f"{'variant':<86} {'REG':>4} {'setmaxnreg':<26} {'smem':>7} {'spill':>5} {'GMMA (count)':<60} {'s':>5}  ok"
    lines = [head, "-" * len(head)]
    for r in reports:
        hg = ",".join(f"{k.replace('.F32', '')}:{v}" for k, v in sorted(r.hgmma.items())) or "-"
        regs = "/".join(x.split(":")[1] for x in r.setmaxnreg) or "-"
        lines.append(
            f"{r.key:<86} {r.reg:>4} {regs:<26} {r.smem:>7} {r.spill_instructions:>5} {hg:<60} "
            f"{r.compile_s:>5.1f}  {'yes' if r.ok else 'NO'}"
        )
    return "\n".join(lines)


def cli(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fa512.tools.compile", description=__doc__)
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
