"""Every kernel change waiting in profiles/wip still applies to this tree.

A patch that no longer applies is lost work found only on the GPU machine: session 18's
triton_plain_args.patch stopped applying after a docstring edit in fuzz.py, and its tree failed
to build there.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "profiles" / "wip").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_wip_patch_applies(patch):
    res = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, f"{patch.name} no longer applies: rebase it on this tree\n{res.stderr}"
