"""``python -m fa512 compile``'s SASS tooling (fa512.tools.compile) without compiling anything:
which cuobjdump it uses, what it reports when none works, and the SASS hash comparison."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fa512.tools import compile as compile_tool

SASS = """
	code for sm_90a
		Function : kernel_cutlass_kernel_cute_kernelsfwd_sm90FlashFwdSm90_object_at_x
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT ;
        /*0010*/                   QGMMA.64x256x32.F32.E4M3.E4M3 R88, R8, gdesc[UR8], R88 ;
"""
USAGE = "Function kernel: REG:168 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:1234\n"


def _tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _lone_cuobjdump(directory: Path) -> Path:
    """What the nvidia-cuda-cuobjdump wheel alone does: exit 1 without its nvdisasm."""
    directory.mkdir()
    return _tool(directory, "cuobjdump", "echo \"cuobjdump fatal   : Could not find executable file 'nvdisasm'\" >&2\nexit 1\n")


def _working_cuobjdump(directory: Path) -> Path:
    directory.mkdir()
    (directory / "sass.txt").write_text(SASS)
    (directory / "usage.txt").write_text(USAGE)
    return _tool(directory, "cuobjdump",
                 f'case "$1" in -sass) cat "{directory}/sass.txt";; *) cat "{directory}/usage.txt";; esac\n')


def test_a_failing_cuobjdump_is_skipped_for_the_next(tmp_path, monkeypatch):
    broken, good = _lone_cuobjdump(tmp_path / "a"), _working_cuobjdump(tmp_path / "b")
    monkeypatch.setattr(compile_tool, "tool_candidates",
                        lambda name: [str(broken), str(good)] if name == "cuobjdump" else [])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    sass, usage, tool = compile_tool.dump_sass(cubin)
    assert tool == str(good) and "QGMMA" in sass and "REG:168" in usage
    rep = compile_tool.inspect_cubin(cubin, "k", 0.0, 1024, expect_mma="qgmma")
    assert rep.ok, rep.problems
    assert rep.hgmma == {"QGMMA.64x64x32.F32.E4M3.E4M3/SS": 1, "QGMMA.64x256x32.F32.E4M3.E4M3/RS": 1}


def test_a_tool_failure_is_reported_as_such(tmp_path, monkeypatch):
    broken = _lone_cuobjdump(tmp_path / "a")
    monkeypatch.setattr(compile_tool, "tool_candidates", lambda name: [str(broken)] if name == "cuobjdump" else [])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    rep = compile_tool.inspect_cubin(cubin, "k", 0.0, 1024, expect_mma="qgmma")
    assert not rep.ok
    (problem,) = rep.problems
    assert problem.startswith("SASS tool failed") and "nvdisasm" in problem and str(broken) in problem
    assert "QGMMA" not in problem  # never read as a kernel without MMA
    monkeypatch.setattr(compile_tool, "tool_candidates", lambda name: [])
    with pytest.raises(compile_tool.SassToolError, match="not found"):
        compile_tool.dump_sass(cubin)


def test_an_nvdisasm_elsewhere_is_offered_to_cuobjdump(tmp_path, monkeypatch):
    (tmp_path / "c").mkdir()
    seen = tmp_path / "nvdisasm_path.txt"
    tool = _tool(tmp_path / "c", "cuobjdump",
                 f'echo "$NVDISASM_PATH" > "{seen}"\ncase "$1" in -sass) printf "%s" "{SASS}";; *) echo "{USAGE}";; esac\n')
    monkeypatch.delenv("NVDISASM_PATH", raising=False)
    monkeypatch.setattr(compile_tool, "tool_candidates",
                        lambda name: [str(tool)] if name == "cuobjdump" else ["/opt/elsewhere/bin/nvdisasm"])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\0")
    compile_tool.dump_sass(cubin)
    assert seen.read_text().strip() == "/opt/elsewhere/bin"


def test_the_real_tools_here_are_found():
    for name in ("cuobjdump", "nvdisasm"):
        assert all(os.access(p, os.X_OK) for p in compile_tool.tool_candidates(name))


def test_sass_hash_ignores_the_symbol_and_compare_names_changes():
    moved = SASS.replace("cute_kernelsfwd_sm90FlashFwdSm90", "cute_kernelsentryFlashFwdSm90")
    assert compile_tool.sass_hash(moved) == compile_tool.sass_hash(SASS)
    edited = SASS.replace("R88, R8", "R88, R12")
    assert compile_tool.sass_hash(edited) != compile_tool.sass_hash(SASS)
    rep = lambda key, text: compile_tool.SassReport(key=key, compile_s=0.0, sass_hash=compile_tool.sass_hash(text))  # noqa: E731
    old = [{"key": "a", "sass_hash": compile_tool.sass_hash(SASS)}, {"key": "b", "sass_hash": "x"},
           {"key": "gone", "sass_hash": "y"}]
    assert compile_tool.compare_reports(old, [rep("a", moved), rep("b", SASS), rep("fresh", SASS)]) == [
        "changed  b", "removed  gone", "new      fresh"]
