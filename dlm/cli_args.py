"""Argparse types that check a value when the arguments are read, not when it is first used.

An eval or a voice run takes minutes; a --json, --out or --trace path in a missing directory had failed with a
traceback only after all of that work, losing it, and `--limit 0` had evaluated nothing and written NaN.

What only shows later (a checkpoint's weights, an address to listen on) is refused the same way, by
:func:`refusal`: one line on stderr and exit status 2, argparse's status for arguments that cannot be used.
Every project command parses with :class:`ArgumentParser`, whose own refusals are that line too.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class ShowsDefaults(argparse.HelpFormatter):
    """A help formatter that ends an option's help with ``(default X)`` where its text does not already speak
    of its default, and the default is a value to show (not None, a flag's False, or an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text.lower() or default is None
                or default is argparse.SUPPRESS or isinstance(default, bool) or default in ("", [], ())):
            return action.help
        return f"{text} (default %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser for every project command (its subcommands' parsers are of this class too).

    A refusal is ``error: <message>`` and a line saying where the usage is, exit status 2 (argparse printed the
    whole usage first, 11 lines for ``dlm generate``, where the README promises one line), and --help gives
    each option's default (:class:`ShowsDefaults`) beside the help the formatter it is given writes."""

    def __init__(self, *args: Any, formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
                 **kwargs: Any) -> None:
        if not issubclass(formatter_class, ShowsDefaults):
            formatter_class = type(f"{formatter_class.__name__}ShowingDefaults", (ShowsDefaults, formatter_class), {})
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n({self.prog} --help for usage)\n")


def output_path(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file to write")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: there is no directory {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text} cannot be written")
    return path


def output_dir(text: str) -> Path:
    """A directory to write into, made when it is written if missing: what of it exists must be a directory
    this process may write in (a training run had found out only when it exported, after all its steps)."""
    path = Path(text)
    existing = next(folder for folder in (path, *path.parents) if folder.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} cannot be written")
    return path


def _checked(text: str, convert: Callable[[str], T], ok: Callable[[T], bool], wanted: str) -> T:
    """`text` converted, if it converts and the value is `ok`; else argparse's error saying what was wanted."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def at_least_one(text: str) -> int:
    return _checked(text, int, lambda value: value >= 1, "at least 1")


def at_least_zero(text: str) -> int:
    return _checked(text, int, lambda value: value >= 0, "at least 0")


def port(text: str) -> int:
    return _checked(text, int, lambda value: 1 <= value <= 65535, "a port, 1 to 65535")


def finite_float(text: str) -> float:
    return _checked(text, float, math.isfinite, "a finite number")


def threshold(text: str) -> float:
    """A confidence threshold the decoders take (`dlm.decoding.confidence.check_pass_rule`)."""
    from dlm.decoding.confidence import check_pass_rule  # torch: only for the commands that decode

    value = finite_float(text)
    _as_argument_error(check_pass_rule, value, None)
    return value


def factor(text: str) -> float:
    """A factor of the factor rule the decoders take (`dlm.decoding.confidence.check_pass_rule`)."""
    from dlm.decoding.confidence import check_pass_rule  # torch: only for the commands that decode

    value = finite_float(text)
    _as_argument_error(check_pass_rule, None, value)
    return value


def _as_argument_error(check: Callable[..., T], *args: object) -> T:
    """``check(*args)``, its ValueError (a CheckpointError too) raised as argparse's error for the argument: the
    project's own checks, run when the arguments are read."""
    try:
        return check(*args)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def at_least_one_each(text: str) -> list[int]:
    """Comma-separated counts, each at least 1 (concurrency levels, prompt lengths): `1,4,16`."""
    return _checked(text, lambda t: [int(part) for part in t.split(",")], lambda values: min(values) >= 1,
                    "comma-separated whole numbers, each at least 1")


_HOST_NAME = re.compile(r"(?=.{1,253}\.?$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                        r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")


def host(text: str) -> str:
    """An IP address or a host name as DNS spells them (not looked up: a name that does not resolve is refused
    when the server binds, by :func:`cannot_listen`)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        if not _HOST_NAME.fullmatch(text):
            raise argparse.ArgumentTypeError(f"must be an IP address or a host name, got {text!r}") from None
    return text


def device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (whether that GPU is there is checked when the model loads)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N, got {text!r}")
    return text


def present_device(text: str) -> str:
    """A device as :func:`device` spells it that this torch can run on, resolved (auto: cuda or cpu), for a command
    that places tensors itself rather than through ``dlm.checkpoint.placement``."""
    from dlm.checkpoint import placement  # torch: only for the commands that run a model

    where, _ = _as_argument_error(placement, device(text))
    return str(where)


def add_placement(p: argparse.ArgumentParser, dtype: str = "auto") -> None:
    """``--device`` and ``--dtype`` for a command that loads the LM (resolved by ``dlm.checkpoint.placement``);
    ``dtype``: the default, for a command whose figures were measured in one."""
    p.add_argument("--device", type=device, default="auto",
                   help="where the LM runs: auto (the default: a CUDA GPU when torch sees one, else the CPU), cpu, "
                        "cuda or cuda:N")
    auto = "auto: bfloat16 on a GPU, float32 on the CPU"
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default=dtype,
                   help=f"the weights' type ({auto}; the default)" if dtype == "auto" else
                        f"the weights' type (default %(default)s, the one the docs' figures were measured in; {auto})")


def checkpoint(text: str) -> str:
    """A checkpoint directory whose config.json describes a model this engine runs (the weights and the
    tokenizer are checked when they are loaded; catch :class:`dlm.config.CheckpointError` there too)."""
    from dlm.checkpoint import load_config  # torch: only for the commands that load a model

    _as_argument_error(load_config, text)
    return text


def refusal(message: str) -> SystemExit:
    """Print `error: <message>` as the one line on stderr, and return the exit (status 2) to raise.

    For what cannot be checked while the arguments are read: a checkpoint whose weights are unfit, an address
    that is not loopback given no token, a port already taken."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    return SystemExit(2)


def refused(exit_: SystemExit) -> int:
    """Status 2 for a SystemExit raised with a message (a server's or a benchmark's own refusal, "error: ..." or
    bare), printed as the one line by :func:`refusal`; one that carries a status instead (argparse's, which
    printed its own) goes on up."""
    if not isinstance(exit_.code, str):
        raise exit_
    refusal(exit_.code.removeprefix("error: "))
    return 2


def cannot_listen(host: str, port_number: int, err: OSError) -> SystemExit:
    """The one-line exit for a server whose address is taken or not this machine's, instead of a traceback.

    Status 2, as for any other argument this machine cannot use: the remedy is the same, another --port or
    --host (1 stays what it is for Python, a crash with a traceback)."""
    return refusal(f"cannot listen on {host}:{port_number}: {err.strerror or err}")
