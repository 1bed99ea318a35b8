"""Every kernel change waiting in profiles/wip still applies to this tree.

A patch that no longer applies is lost work found only on the GPU machine: session 18's
triton_plain_args.patch stopped applying after a docstring edit in fuzz.py, and its tree failed
to build there. Also what the GPU scripts must keep: every GPU-marked module in a half of the
suite, and the DSL's PYTHONPATH.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "profiles" / "wip").glob("*.patch"))


def applies_after(text: str) -> list:
    """The patches a patch is written on top of, in order: its header's ``Applies after: a b``
    line (before the first ``diff --git``); none for a patch of this tree itself."""
    header = text.split("\ndiff --git ", 1)[0]
    m = re.search(r"^Applies after:(.*)$", header, re.M)
    return m.group(1).split() if m else []


def test_applies_after_reads_the_header_only():
    assert applies_after("x (issue 1)\nApplies after: a b\ndiff --git a/f b/f\n") == ["a", "b"]
    assert applies_after("x\ndiff --git a/f b/f\n+Applies after: c\n") == []


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_wip_patch_applies(patch, tmp_path):
    # A stacked patch (`applies_after`) is checked on a copy of the tracked tree with the
    # patches under it applied, as profiles/wip_trees.sh build_set applies them on the GPU.
    below = applies_after(patch.read_text())
    cwd = ROOT
    if below:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for rel in filter(None, files.decode().split("\0")):
            src = ROOT / rel
            if src.is_file():
                (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, tmp_path / rel)
        for name in below:
            under = ROOT / "profiles" / "wip" / f"{name}.patch"
            assert under in PATCHES, f"{patch.name} applies after {name}, which is not in profiles/wip"
            res = subprocess.run(["git", "apply", str(under)], cwd=tmp_path, capture_output=True, text=True)
            assert res.returncode == 0, f"{under.name} (under {patch.name}) does not apply\n{res.stderr}"
        cwd = tmp_path
    res = subprocess.run(["git", "apply", "--check", str(patch)], cwd=cwd, capture_output=True, text=True)
    assert res.returncode == 0, f"{patch.name} no longer applies: rebase it on this tree\n{res.stderr}"


def _listed_gpu_modules() -> set:
    """The test modules profiles/wip_trees.sh runs as the GPU suite's halves."""
    text = (ROOT / "profiles" / "wip_trees.sh").read_text()
    listed = set()
    for name in ("KERNEL_HALF", "TOOLS_FUZZ", "TOOLS_REST"):
        m = re.search(rf'^{name}="([^"]*)"', text, re.M)
        assert m, f"profiles/wip_trees.sh lost {name}"
        listed |= set(m.group(1).split())
    return listed


def test_every_gpu_module_is_in_a_suite_half():
    # A GPU-marked module in neither half would never run in a GPU session's "whole suite".
    listed = _listed_gpu_modules()
    gpu = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py") if _marks_gpu(p.read_text())}
    assert {"tests/test_cute_compile.py", "tests/test_fp8_operands.py", "tests/test_fuzz.py"} <= gpu  # the marker search finds them
    assert gpu - listed == set(), "add them to KERNEL_HALF or TOOLS_REST in profiles/wip_trees.sh"
    # and each module a waiting patch adds
    for patch in PATCHES:
        for new_file, body in _added_files(patch.read_text()):
            if new_file.startswith("tests/test_") and _marks_gpu(body):
                assert new_file in listed, f"{patch.name} adds {new_file}: list it in profiles/wip_trees.sh"


def _added_files(diff: str):
    """(path, added text) of each file a unified diff creates."""
    for block in diff.split("diff --git ")[1:]:
        if "\nnew file mode" in block.split("@@", 1)[0]:
            path = block.split(" b/", 1)[1].split("\n", 1)[0]
            yield path, "\n".join(line[1:] for line in block.splitlines() if line.startswith("+"))


def _marks_gpu(source: str) -> bool:
    # a decorator, a module mark, or a decorator helper applying it (tests/test_fp8_operands.py)
    return re.search(r"^\s*(@pytest\.mark\.gpu\b|pytestmark\s*=.*\bpytest\.mark\.gpu\b|return pytest\.mark\.gpu\()",
                     source, re.M) is not None


def _pythonpath_overrides(text: str) -> list:
    """Lines of a shell script that set PYTHONPATH without keeping the value it had."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        for m in re.finditer(r"PYTHONPATH=(\S*)", code):
            if "$PYTHONPATH" not in m.group(1) and "${PYTHONPATH" not in m.group(1):
                out.append(f"{n}: {line.strip()}")
    return out


def test_pythonpath_overrides_are_found():
    assert _pythonpath_overrides("PYTHONPATH=python:. python3 x.py\n# PYTHONPATH=python:. in a comment\n") == [
        "1: PYTHONPATH=python:. python3 x.py"]
    assert _pythonpath_overrides("export PYTHONPATH=python:.:${PYTHONPATH:-}\n") == []


@pytest.mark.parametrize("script", sorted((ROOT / "profiles").glob("*.sh")), ids=lambda p: p.name)
def test_gpu_scripts_keep_the_dsl_path(script):
    # The DSL lives on the PYTHONPATH that /root/device-env.sh sets on the GPU machine: a script
    # that sets PYTHONPATH=python:. over it runs without the CuTe kernels (sessions 16 and 34/35:
    # "nvidia-cutlass-dsl is not installed", the timeline and the sweep lost).
    assert _pythonpath_overrides(script.read_text()) == []
