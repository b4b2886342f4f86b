"""``python -m dlm``: ``generate`` text with a checkpoint, ``serve`` the OpenAI-compatible API, ``chat``.

Subcommands register themselves in :data:`COMMANDS` (name -> (add_arguments, run)), so adding one is a
function pair and one line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from dlm.cli_args import ArgumentParser, add_placement, at_least_one, factor, finite_float, threshold

DEMO_CHECKPOINT = Path(__file__).resolve().parent / "assets" / "demo"
EFFORTS = ("low", "medium", "high")  # dlm.effort.EFFORTS, which imports torch
EFFORT_HELP = ("how much compute each block gets (default medium): low commits many tokens a pass, fastest; medium "
               "fewer; high one token a pass, slowest and most exact")


def _default_model() -> str | None:
    return str(DEMO_CHECKPOINT) if (DEMO_CHECKPOINT / "config.json").exists() else None


def _add_generate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=_default_model(), help="checkpoint directory (default: the embedded demo)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="a user message; the checkpoint's chat template is applied")
    src.add_argument("--raw", help="text fed to the model as it is")
    p.add_argument("--effort", choices=EFFORTS, default=None,
                   help=f"{EFFORT_HELP}. --block-size, --first-block-size, --passes-per-block, --threshold and "
                        "--factor override what it picks")
    p.add_argument("--block-size", type=at_least_one, default=None,
                   help="tokens decoded together in each block (default: the checkpoint's block size)")
    p.add_argument("--first-block-size", type=at_least_one, default=None, help="a smaller first block (block schedule)")
    knob = p.add_mutually_exclusive_group()
    knob.add_argument("--passes-per-block", type=at_least_one, default=None,
                      help="denoising passes a block gets, each committing an equal share of its tokens (default: "
                           "the effort's rule)")
    knob.add_argument("--threshold", type=threshold, default=None, help="commit every position above this confidence")
    knob.add_argument("--factor", type=factor, default=None,
                      help="commit by the factor rule: the n most confident while (n+1)(1-confidence) < factor")
    p.add_argument("--max-tokens", type=at_least_one, default=128,
                   help="most tokens to generate (default %(default)s)")
    p.add_argument("--temperature", type=finite_float, default=0.0,
                   help="sampling temperature; 0 picks the most likely token (default %(default)s: greedy)")
    p.add_argument("--top-p", type=finite_float, default=1.0,
                   help="sample from the smallest set of tokens whose probability reaches this, in (0, 1] "
                        "(default %(default)s: all of them)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the sampling, for a repeatable run when --temperature is over 0 (default: none, "
                        "a different draw each run)")
    add_placement(p)
    p.add_argument("--kernels", choices=("auto", "torch", "triton"), default="auto",
                   help="token selection on the Triton kernels or in torch (default auto: Triton on CUDA)")
    p.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                   help="replay denoising passes as CUDA graphs (default auto: on CUDA; on: static shapes anywhere)")
    p.add_argument("--layer-steps", choices=("auto", "fused", "thin"), default="auto",
                   help="how graphed passes launch a layer: fused steps with cuBLAS products, the thin Triton "
                        "products (5 launches a layer), or auto, the default: on CUDA, the faster of the two in a "
                        "checked trial")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")


def _run_generate(args: argparse.Namespace) -> int:
    from dlm.config import CheckpointError
    from dlm.engine import Engine

    if args.model is None:
        print("error: no --model given and the demo checkpoint dlm/assets/demo is not there", file=sys.stderr)
        return 2
    problem = _thin_layer_steps_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        engine = Engine.from_dir(args.model, dtype=args.dtype, device=args.device, kernels=args.kernels,
                                 cuda_graphs=args.cuda_graphs, layer_steps=args.layer_steps)  # fmt: skip
    except (CheckpointError, RuntimeError, ValueError) as exc:  # ValueError: a GPU that is not there
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompt = [{"role": "user", "content": args.prompt}] if args.prompt is not None else args.raw
    opts = dict(effort=args.effort, block_size=args.block_size, first_block_size=args.first_block_size,
                passes_per_block=args.passes_per_block, threshold=args.threshold, factor=args.factor,
                max_new_tokens=args.max_tokens,
                temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    on_piece = None if args.json else _print_piece
    try:
        result = engine.generate(prompt, on_piece=on_piece, **opts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.close()
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print()
    return 0


def _thin_layer_steps_problem(args: argparse.Namespace) -> str | None:
    """Why --layer-steps thin cannot run with the kernel path the engine would take, in the options typed (the
    engine's own refusal, dlm.fused_layers.LayerSteps, names only the path: "not 'torch'", torch never typed)."""
    if args.layer_steps != "thin":
        return None
    from dlm.checkpoint import placement
    from kernels.dispatch import kernel_path

    try:  # resolved as the engine resolves them (Engine._start)
        path = kernel_path(args.kernels, placement(args.device, args.dtype)[0])
    except (RuntimeError, ValueError):  # a GPU or Triton that is not there: the engine's load says so
        return None
    if path == "triton":
        return None
    if args.kernels == "auto":
        return f"--layer-steps thin needs --kernels triton on a CUDA GPU; --kernels auto chose {path} here"
    return f"--layer-steps thin needs --kernels triton on a CUDA GPU, not --kernels {args.kernels}"


def _print_piece(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def _add_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of the API server (see its --help)")


def _run_serve(args: argparse.Namespace) -> int:
    try:
        server = importlib.import_module("dlm.api.server")
    except ModuleNotFoundError as exc:
        if exc.name not in ("dlm.api", "dlm.api.server"):
            raise
        print("error: the API server (dlm.api.server) is not installed in this build", file=sys.stderr)
        return 2
    return int(server.main(args.rest) or 0)


def _add_chat(p: argparse.ArgumentParser) -> None:
    from dlm.chat import add_arguments

    add_arguments(p, _default_model())
    # dlm.chat gives --effort no help of its own
    next(action for action in p._actions if "--effort" in action.option_strings).help = EFFORT_HELP


def _run_chat(args: argparse.Namespace) -> int:
    from dlm.chat import run

    return run(args)


COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "generate": (_add_generate, _run_generate, "generate text with a checkpoint"),
    "serve": (_add_serve, _run_serve, "serve the OpenAI-compatible API"),
    "chat": (_add_chat, _run_chat, "chat in the terminal, with the tools, blocks shown as they commit"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m dlm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # the server parses its own options, --help included
        return _run_serve(argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command][1](args)
