"""The ``qwen-swe`` subcommands: each a thin front over a ``python -m`` entry point, which it calls with the same
arguments, so the command and the module (and ``examples/qwen_swe/*.sh``) behave alike.

A command's ``--help`` is its entry point's own flags (with their defaults) and, where the entry point reads the
run settings, every setting with its env var, default, embedded value and choices. The entry points are imported
only by the command that runs them: ``qwen-swe --help`` should not wait for torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qwen_swe.config.settings import PRECEDENCE, build_parser


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    module: str  # the entry point it fronts, named in its help
    run: Callable[[list[str]], int]
    own_help: Callable[[list[str]], str]  # the entry point's own flags, for these arguments
    settings: bool  # reads the run settings (env vars, flags, --config): --help lists them all


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's ArgumentDefaultsHelpFormatter without the noise: no default shown for an unset (None) or
    switched-off (False) option, nor where the help already states one."""

    def _get_help_string(self, action: argparse.Action) -> str:  # the hook argparse's own defaults formatter uses
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if unset or "default" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def parser_help(parser: argparse.ArgumentParser, prog: str) -> str:
    """An entry point's parser's help under the command's name, each option with its default."""
    parser.prog, parser.formatter_class = prog, DefaultsFormatter
    for action in parser._actions:  # argparse prints nothing, default included, for an option without help
        if action.help is None and action.option_strings:
            action.help = action.dest.replace("_", " ")
    return parser.format_help()


def captured_help(main: Callable[[list[str]], int], argv: list[str]) -> str:
    """What an entry point prints for ``--help`` when its parser is built inside its main."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def settings_help() -> str:
    """Every run setting, grouped by section, each with its env var, default, embedded value and choices."""
    parser = build_parser(add_help=False)
    parser.usage, parser.description = (
        argparse.SUPPRESS,
        (f"Run settings: each is a flag, an env var (in capitals) or a key of the --config file; {PRECEDENCE}."),
    )
    return parser.format_help()


# --- the commands: each imports its entry point only when it runs ------------------------------------------------


def _train(argv: list[str]) -> int:
    from qwen_swe.run import main  # late: the run's imports (torch, docker) only for the command that runs it

    return main(argv)


def _train_help(argv: list[str]) -> str:
    return (
        "usage: qwen-swe train [--config FILE] [--print-config] [--SETTING VALUE ...]\n\n"
        "GRPO training run (python -m qwen_swe.run; bash examples/qwen_swe/run_grpo.sh). Re-running with the\n"
        "same OUTPUT_DIR resumes from its latest checkpoint with its settings.json.\n\n"
        "options:\n  -h, --help      show this help message and exit\n"
        "  --print-config  print the resolved settings, each with where it came from (flag, env, file, resume,\n"
        "                  profile, default), as YAML that --config reads back; start nothing\n"
        "  --eval          evaluate instead of training (the same as `qwen-swe eval`)\n"
    )


def _eval(argv: list[str]) -> int:
    from qwen_swe.evaluate.__main__ import main  # late: heavy imports only for the command that runs

    return main(argv if "--predictions" in argv or "--agent" in argv else ["--agent", *argv])


def _eval_help(argv: list[str]) -> str:
    from qwen_swe.evaluate.__main__ import parser  # late: heavy imports only for the command that runs

    return parser_help(parser(), "qwen-swe eval") + "\nWithout --predictions, --agent is implied.\n"


def _view(argv: list[str]) -> int:
    from qwen_swe.viewer.__main__ import main  # late: only for the command that runs

    return main(argv)


def _view_help(argv: list[str]) -> str:
    from qwen_swe.viewer.__main__ import __doc__ as doc  # late: only for the command that runs

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument(
        "folder",
        metavar="FOLDER",
        help="a run folder (metrics.jsonl, rollouts/) or an evaluation "
        "folder (report.json, rollouts.jsonl or results.jsonl)",
    )
    return parser_help(parser, "qwen-swe view")


def _plan(argv: list[str]) -> int:
    from qwen_swe.plan.__main__ import main  # late: only for the command that runs

    return main(argv)


def _plan_help(argv: list[str]) -> str:
    from qwen_swe.plan.__main__ import parser  # late: only for the command that runs

    return parser_help(parser(), "qwen-swe plan") + (
        "\nplan's --config is the model; give a run's settings file with --run-config FILE.\n"
    )


def _generate(argv: list[str]) -> int:
    from qwen_swe.data.generate.__main__ import main  # late: heavy imports only for the command that runs

    return main(argv)


def _generate_help(argv: list[str]) -> str:
    from qwen_swe.data.generate.__main__ import parser  # late: heavy imports only for the command that runs

    return parser_help(parser(), "qwen-swe generate")


def _warmstart(argv: list[str]) -> int:
    from qwen_swe.warmstart.__main__ import main  # late: heavy imports only for the command that runs

    return main(argv)


def _warmstart_help(argv: list[str]) -> str:
    sub = [a for a in argv if a in ("collect", "build")][:1]
    return captured_help(_warmstart, sub).replace("python -m qwen_swe.warmstart", "qwen-swe warmstart")


def _serve(argv: list[str]) -> int:
    from qwen_swe.inference.launcher import main  # late: only for the command that runs

    return main(argv)


def _serve_help(argv: list[str]) -> str:
    from qwen_swe.inference.launcher import build_arg_parser  # late: only for the command that runs

    return parser_help(build_arg_parser(), "qwen-swe serve") + (
        "\nThe server also reads these run settings from the environment: MODEL, SERVED_MODEL_NAME, TP,\n"
        "MAX_MODEL_LEN, LORA_RANK, WEIGHT_SYNC, INFERENCE_GPUS (`qwen-swe train --help` describes them).\n"
    )


def _check(argv: list[str]) -> int:
    from qwen_swe.data.taskpack.__main__ import main  # late: heavy imports only for the command that runs

    return main(["check", *argv])


def _check_help(argv: list[str]) -> str:
    return captured_help(_check, []).replace("python -m qwen_swe.data.taskpack check", "qwen-swe check")


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "train",
            "GRPO training run (or a resume); --config FILE, --print-config",
            "qwen_swe.run",
            _train,
            _train_help,
            settings=True,
        ),
        Command(
            "eval",
            "evaluate a model without training, or grade a predictions file",
            "qwen_swe.evaluate",
            _eval,
            _eval_help,
            settings=True,
        ),
        Command(
            "view",
            "write the HTML viewer of a run or evaluation folder",
            "qwen_swe.viewer",
            _view,
            _view_help,
            settings=False,
        ),
        Command(
            "plan",
            "per-GPU memory of a training configuration, and whether it fits",
            "qwen_swe.plan",
            _plan,
            _plan_help,
            settings=True,
        ),
        Command(
            "generate",
            "generate bug-injection tasks (and their images) from repositories",
            "qwen_swe.data.generate",
            _generate,
            _generate_help,
            settings=False,
        ),
        Command(
            "warmstart",
            "expert demonstrations and the cached warm start (collect | build)",
            "qwen_swe.warmstart",
            _warmstart,
            _warmstart_help,
            settings=True,
        ),
        Command(
            "serve",
            "start a vLLM server for the policy (the same as examples/qwen_swe/start_vllm.py)",
            "qwen_swe.inference.launcher",
            _serve,
            _serve_help,
            settings=False,
        ),
        Command(
            "check",
            "prove the shipped task pack's tasks in containers",
            "qwen_swe.data.taskpack check",
            _check,
            _check_help,
            settings=False,
        ),
    )
}


def command_help(command: Command, argv: Sequence[str]) -> str:
    """The command's own help, then every run setting where it reads them (not ``warmstart build``'s)."""
    text = command.own_help(list(argv))
    if command.settings and not (command.name == "warmstart" and "collect" not in argv):
        text += "\n" + settings_help()
    return text + f"\n(the same as python -m {command.module})\n"
