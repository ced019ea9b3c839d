"""``qwen-swe COMMAND [ARGS]``: pick the subcommand, answer ``--help``, hand the rest of the arguments over."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence

from qwen_swe.cli.commands import COMMANDS, command_help

USAGE = "usage: qwen-swe [-h] [--version] {" + ",".join(COMMANDS) + "} ..."


def overview() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS.values())
    return (
        f"{USAGE}\n\nGRPO training of a coding agent on SWE-bench.\n\ncommands:\n{rows}\n\n"
        "`qwen-swe COMMAND --help` lists the command's flags and every setting it reads, with defaults.\n"
    )


def version() -> str:
    try:
        return importlib.metadata.version("qwen-swe")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was not pip-installed
        return "unknown (not installed: pip install -e .)"


def wants_help(argv: Sequence[str]) -> bool:
    """``-h``/``--help`` for the command itself, not among the arguments after ``--`` (vLLM's, for serve)."""
    head = list(argv[: list(argv).index("--")] if "--" in argv else argv)
    return "-h" in head or "--help" in head


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(overview(), end="")
        return 0 if args else 2
    if args[0] == "--version":
        print(f"qwen-swe {version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"{USAGE}\nqwen-swe: unknown command {args[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if wants_help(args[1:]):
        print(command_help(command, args[1:]), end="")
        return 0
    return command.run(args[1:])


if __name__ == "__main__":
    sys.exit(main())
