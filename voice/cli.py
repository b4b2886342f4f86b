"""``python -m voice``: run files through the pipeline, serve it, or talk to it on this machine.

``run`` is implemented here; ``serve`` and ``desktop`` belong to their transports and are imported only
when asked for, so running files needs neither aiohttp nor an audio device.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dlm.cli_args import ArgumentParser, finite_float, host, output_path, refusal, refused
from voice.config import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from voice.file_mode import FileModeOptions, FileModeResult

_TRANSPORTS = {
    "serve": ("voice.server", "serve the browser page, the Realtime websocket and the phone bridge"),
    "desktop": ("voice.transports.desktop", "talk through this machine's microphone and speaker"),
}


class CliError(RuntimeError):
    """A failure to report as one line and exit status 2."""


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="speak recordings into the pipeline; write what the caller heard")
    run.add_argument("inputs", nargs="+", type=Path, metavar="INPUT",
                     help="recordings in any format FFmpeg reads (WAV of any sample width, rate or channel count, "
                          "FLAC, MP3, Ogg), spoken as successive turns of one conversation")
    run.add_argument("--out", type=output_path, help="WAV file for the assistant's audio, time-aligned with the input")
    run.add_argument("--trace", type=output_path, help="append one JSON line per turn to this file")
    run.add_argument("--fast", action="store_true",
                     help="do not wait for the clock: compute time takes no room on the timeline")
    run.add_argument("--barge-in-at", type=finite_float, metavar="SECONDS",
                     help="speak each next input this far into the assistant's previous answer")
    _add_config(run)


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="default",
                        help="a voice profile in configs/ by name, or a TOML path; a name that is not one lists the "
                             "profiles (default: default)")


def _transport_module(command: str) -> object:
    module_name = _TRANSPORTS[command][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            raise CliError(f"`{command}` is not available: {module_name} is not installed in this checkout") from None
        raise CliError(f"`{command}` needs a missing package: {err.name} (pip install it)") from None


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser; a transport's own options are added only when its subcommand is the one asked for."""
    parser = ArgumentParser(prog="python -m voice", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    for command, (_, help_text) in _TRANSPORTS.items():
        sp = sub.add_parser(command, help=help_text)
        _add_config(sp)
        if argv and argv[0] == command:
            add_arguments = getattr(_transport_module(command), "add_arguments", None)
            if add_arguments is not None:
                add_arguments(sp)
    return parser


def _run(args: argparse.Namespace) -> int:
    from voice.file_mode import FileModeError, FileModeOptions, format_turn_table, load_input

    try:
        clips = [load_input(path) for path in args.inputs]
    except FileModeError as err:
        raise CliError(str(err)) from None
    if args.barge_in_at is not None and args.barge_in_at < 0:
        raise CliError("--barge-in-at must be >= 0 seconds")
    options = FileModeOptions(fast=args.fast, barge_in_at=args.barge_in_at)
    result = asyncio.run(_run_files(args, clips, options))
    if args.out is not None:
        from voice.audio import write_wav

        write_wav(args.out, result.output, result.output_rate)
    from voice.events import PipelineError

    for event in result.events:
        if isinstance(event, PipelineError):
            print(f"pipeline error ({event.code}): {event.message}", file=sys.stderr)
    print(format_turn_table(result.traces))
    from voice.trace import format_summary, summarize

    if result.traces:
        print()
        print(format_summary(summarize(result.traces)))
    return 0


async def _run_files(args: argparse.Namespace, clips: list[np.ndarray], options: FileModeOptions) -> FileModeResult:
    from voice.config import load_config
    from voice.file_mode import run_files
    from voice.pipeline import VoicePipeline
    from voice.resources import Resources
    from voice.trace import TraceWriter

    config = load_config(args.config)
    resources = await Resources.load(config)
    writer = TraceWriter(args.trace) if args.trace is not None else None
    pipeline = VoicePipeline(resources, on_trace=writer.write if writer else None)
    try:
        return await run_files(pipeline, clips, options)
    finally:
        await pipeline.close()
        resources.close()
        if writer is not None:
            writer.close()


def main(argv: Sequence[str] | None = None) -> int:
    """A bad config, path or value is one line on stderr and exit status 2, before any model is loaded; so is a
    transport's own refusal (a SystemExit with a message: no token off loopback, an address it cannot bind)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
        if getattr(args, "host", None) is not None:  # `serve`'s --host, checked before its models load
            try:
                host(args.host)
            except argparse.ArgumentTypeError as err:
                raise CliError(f"argument --host: {err}") from None
        if args.command == "run":
            return _run(args)
        return int(_transport_module(args.command).main(args) or 0)
    except (CliError, ConfigError) as err:
        refusal(str(err))
        return 2
    except SystemExit as exit_:
        return refused(exit_)
