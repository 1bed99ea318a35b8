"""Command line: ``python -m fa512 {plan,check,...}``. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module exposing add_arguments(parser) and main(args) -> int, one-line help)
COMMANDS = {
    "plan": ("fa512.tools.plan", "print the dispatch decision for a shape (no GPU needed)"),
    "check": ("fa512.tools.check", "run every kernel available here against the reference"),
    "ab": ("fa512.tools.ab", "accuracy A/B of kernels and FP8 numeric designs vs float64"),
    "bench": ("fa512.tools.bench", "benchmark against ceilings measured in the same run (GPU)"),
    "fuzz": ("fa512.tools.fuzz", "seeded random calls over the whole contract, every kernel vs float64"),
    "compile": ("fa512.tools.compile", "compile every SM90 CuTe DSL variant (no GPU needed) and check its SASS"),
    "sanitize": ("fa512.tools.sanitize", "compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on every SM90 variant"),
    "native": ("fa512.launch.native", "build (or load) the native warm call now and say where it is"),
}


def cli(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fa512", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        mod.add_arguments(sub.add_parser(name, help=help_text, description=mod.__doc__))
    args = parser.parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).main(args)


if __name__ == "__main__":
    sys.exit(cli())
