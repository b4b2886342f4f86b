"""``python -m dlm generate`` prints streamed text, or one JSON object with the timing fields."""

import argparse
import json
import socket
import subprocess
import sys

import pytest
import torch

from dlm.cli import build_parser, main


def test_generate_json(fixtures_dir, capsys):
    code = main(["generate", "--model", str(fixtures_dir / "fast_dllm_v2" / "checkpoint"), "--raw", "Hello",
                 "--max-tokens", "6", "--threshold", "0.5", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"text", "token_ids", "tokens", "first_block_ms", "total_ms", "forward_passes",
            "tokens_per_forward"} <= set(out)
    assert 0 < len(out["token_ids"]) <= 6 and len(out["tokens"]) == len(out["token_ids"])
    assert out["tokens_per_forward"] == pytest.approx(len(out["token_ids"]) / out["forward_passes"])


def test_generate_streams_text(fixtures_dir, capsys):
    code = main(["generate", "--model", str(fixtures_dir / "sdar" / "checkpoint"), "--prompt", "Hi",
                 "--max-tokens", "8", "--effort", "high"])
    text = capsys.readouterr().out
    assert code == 0 and text.endswith("\n") and len(text) > 1


def test_prompt_and_raw_are_exclusive_and_knobs_too():
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--model", "x", "--prompt", "a", "--raw", "b"])
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--model", "x", "--raw", "b", "--threshold", "0.5", "--passes-per-block", "2"])


def test_bad_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path), "--raw", "x"]) == 2
    assert "config.json: file not found" in capsys.readouterr().err


def test_module_entry_point(fixtures_dir):
    proc = subprocess.run([sys.executable, "-m", "dlm", "generate", "--model",
                           str(fixtures_dir / "sdar" / "checkpoint"), "--raw", "ab", "--max-tokens", "4", "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert len(json.loads(proc.stdout)["token_ids"]) == 4


def _option_help(parser, option: str) -> str:
    """The help line argparse prints for `option`, its %(default)s expanded."""
    (action,) = [a for a in parser._actions if option in a.option_strings]
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _subparser(parser, name: str):
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


@pytest.mark.parametrize(("option", "default"), [
    ("--effort", "medium"), ("--block-size", "the checkpoint's"), ("--passes-per-block", None),
    ("--max-tokens", "128"), ("--temperature", "0.0"), ("--top-p", "1.0"), ("--seed", None),
])
def test_generate_help_says_what_each_option_is(option: str, default: str | None) -> None:
    """Each had been its bare name in `python -m dlm generate --help`."""
    text = _option_help(_subparser(build_parser(), "generate"), option)
    assert len(text) > 20
    assert default is None or ("default" in text and default in text)


def test_chat_help_says_what_effort_is_and_its_default() -> None:
    text = _option_help(_subparser(build_parser(), "chat"), "--effort")
    assert "default" in text and "medium" in text


@pytest.mark.parametrize(("option", "default"), [
    ("--host", "127.0.0.1"), ("--port", "8000"), ("--max-concurrent", None), ("--max-prompt-tokens", None),
])
def test_serve_help_says_what_each_option_is_and_its_default(option: str, default: str | None) -> None:
    from dlm.api.limits import ApiLimits
    from dlm.api.server import build_parser as serve_parser

    default = default or str(getattr(ApiLimits, option.removeprefix("--").replace("-", "_")))
    text = _option_help(serve_parser(), option)
    assert len(text) > 20 and f"default {default}" in text


def test_voice_serve_help_gives_max_sessions_default() -> None:
    from voice.cli import build_parser as voice_parser

    assert "(default 4)" in _option_help(_subparser(voice_parser(["serve"]), "serve"), "--max-sessions")


def test_eval_dtype_help_gives_its_default_once(capsys) -> None:
    """It had read "auto: bfloat16 on a GPU, float32 on the CPU; default float32"."""
    from dlm.eval import main as eval_main

    with pytest.raises(SystemExit):
        eval_main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    options = help_text[help_text.index("options:"):]
    dtype = options[options.index("--dtype {"):options.index("--json")]
    assert dtype.count("default") == 1 and "(default float32" in dtype
    assert dtype.index("default") < dtype.index("auto:")  # auto is a choice explained, not what it had read as


def test_serve_prints_its_address_only_once_it_listens(fixtures_dir) -> None:
    """`serving ... on http://...` had come before a taken port's refusal."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "dlm", "serve", "--model", str(fixtures_dir / "sdar" / "checkpoint"),
                               "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert "serving" not in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks --layer-steps thin where auto picks torch")
def test_thin_layer_steps_off_the_triton_path_names_the_options_typed(capsys) -> None:
    """It had said "the thin product and PDL run on the Triton path, not 'torch'", torch never typed."""
    assert main(["generate", "--prompt", "x", "--layer-steps", "thin"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("error: --layer-steps thin needs --kernels triton on a CUDA GPU; --kernels auto chose torch "
                    "here")
    assert main(["generate", "--prompt", "x", "--layer-steps", "thin", "--kernels", "torch"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "error: --layer-steps thin needs --kernels triton on a CUDA GPU, not --kernels torch"
