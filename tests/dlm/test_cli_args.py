"""Commands that take minutes refuse an output they could not write, or a count of nothing, before starting."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from dlm.api.server import build_parser as serve_parser
from dlm.eval import main as eval_main
from voice.cli import main as voice_main
from voice.server import InsecureBindError, add_arguments, check_bind, server_config


@pytest.mark.parametrize("flags", [
    ["--json", "{tmp}/missing/e.json"],  # had failed with a traceback after the whole eval
    ["--failures", "{tmp}"],  # a directory
    ["--limit", "0"],  # had evaluated nothing, exit 0, and written NaN
    ["--device", "tpu"],
    ["--threshold", "2"],  # had been a ValueError traceback once the model had loaded
    ["--factor", "-1"],
])
def test_eval_refuses_before_it_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:  # argparse refuses: the model is never loaded
        eval_main([flag.format(tmp=tmp_path) for flag in flags])
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--out", "--trace"])
def test_voice_run_refuses_an_output_it_could_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        flag: str) -> None:
    clip = tmp_path / "in.wav"
    clip.write_bytes(b"")
    with pytest.raises(SystemExit) as exit_:
        voice_main(["run", str(clip), flag, str(tmp_path / "missing" / "x")])
    assert exit_.value.code == 2 and "there is no directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--port", "99999"],  # had been an OverflowError at bind
    ["--max-concurrent", "0"],  # had started a server that refused every request
    ["--copy-bias", "nan"],  # had started, and garbled every copied reply
])
def test_dlm_serve_refuses_values_it_cannot_use(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Checked on the serve options alone: were they accepted, nothing here starts a server."""
    with pytest.raises(SystemExit) as exit_:
        serve_parser().parse_args(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_dlm_generate_refuses_a_nan_temperature(capsys: pytest.CaptureFixture[str]) -> None:
    """It had reached torch.multinomial."""
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi", "--temperature", "nan"])
    assert exit_.value.code == 2 and "must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--dtype", "bogus"], "invalid choice: 'bogus'"),
    (["--device", "tpu"], "must be auto, cpu, cuda or cuda:N, got 'tpu'"),
])
def test_dlm_generate_names_an_unknown_dtype_or_device(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                       message: str) -> None:  # fmt: skip
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a GPU that is not there")
@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["chat"], ["eval"]])
def test_dlm_commands_refuse_a_gpu_that_is_not_there(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """One line and status 2 before any weight is read, not a CUDA error from deep inside the load."""
    from dlm.cli import main

    argv = [*command, "--device", "cuda:1"]
    if command == ["eval"]:
        with pytest.raises(SystemExit) as exit_:
            eval_main(argv[1:])
        assert exit_.value.code == 2
    else:
        assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: device 'cuda:1': this torch ({torch.__version__}) sees 0 CUDA device(s)"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks where auto lands without a GPU")
def test_the_engine_lands_on_the_cpu_in_float32_by_default_without_a_gpu() -> None:
    from dlm.checkpoint import placement
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine

    assert placement() == (torch.device("cpu"), torch.float32)
    assert placement("cpu", "bfloat16") == (torch.device("cpu"), torch.bfloat16)
    engine = Engine.from_dir(DEMO_CHECKPOINT)
    try:
        assert engine.device == torch.device("cpu") and engine.model.output_weight().dtype == torch.float32
    finally:
        engine.close()


@pytest.mark.parametrize("argv", [["--port", "0"], ["--max-sessions", "0"]])
def test_voice_serve_refuses_values_it_cannot_use(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Checked on the serve options alone: were they accepted, nothing here starts a server."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_a_blank_token_is_no_token() -> None:
    """'   ' had been accepted off loopback, and no client could ever send it (checked without serving)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = server_config(parser.parse_args(["--host", "0.0.0.0", "--token", "   "]))
    assert config.token is None
    with pytest.raises(InsecureBindError, match="without a bearer token"):
        check_bind(config)


@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "hi", "--block-size", "0"],  # had been silently the checkpoint's block size
    ["generate", "--prompt", "hi", "--passes-per-block", "0"],  # had blamed a missing rule
])
def test_dlm_generate_refuses_counts_of_nothing(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_eval_refuses_a_directory_that_is_no_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Had been a CheckpointError traceback; refused now when the arguments are read."""
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[0] == f"error: argument --model: {tmp_path}/config.json: file not found"


def test_eval_refuses_a_checkpoint_without_the_tool_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """Every figure is about tool calls; a checkpoint whose tokenizer has no call tags had been a KeyError."""
    import torch

    from tests.conftest import FIXTURES

    model = FIXTURES / "sdar" / "checkpoint"
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model", str(model), "--threads", str(torch.get_num_threads())])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"error: {model}: its tokenizer has no <tool_call> or </tool_call> token; the evaluation "
                    "measures tool calls and needs a checkpoint trained with the tools")


@pytest.mark.parametrize(("flags", "message"), [
    (["--threshold", "1.5"], "argument --threshold: threshold must be in [0, 1], got 1.5"),
    (["--factor", "0"], "argument --factor: factor must be positive, got 0.0"),
])
def test_dlm_generate_refuses_a_pass_rule_the_decoders_refuse(capsys: pytest.CaptureFixture[str], flags: list[str],
                                                               message: str) -> None:
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi", *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_eval_refuses_a_checkpoint_without_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config.json fit to read, but no weights: found when the model loads, still one line."""
    import shutil

    import torch

    from tests.conftest import FIXTURES

    shutil.copy(FIXTURES / "sdar" / "checkpoint" / "config.json", tmp_path)
    with pytest.raises(SystemExit) as exit_:
        eval_main(["--model", str(tmp_path), "--threads", str(torch.get_num_threads())])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {tmp_path}: no *.safetensors weight file"


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "/nonexistent/model"], "error: /nonexistent/model: not a checkpoint directory"),  # had been status 1
    (["--host", "0.0.0.0"], "error: binding 0.0.0.0 (not loopback) requires an API key"),  # had been status 1
    pytest.param(["--device", "cuda"], "error: device 'cuda': this torch", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="checks the refusal of a GPU that is not there")),
])
def test_dlm_serve_refusals_are_status_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         argv: list[str], message: str) -> None:
    from dlm.api.server import main

    monkeypatch.delenv("DLM_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(message)


def test_dlm_serve_refuses_what_is_no_host(capsys: pytest.CaptureFixture[str]) -> None:
    from dlm.api.server import main

    with pytest.raises(SystemExit) as exit_:
        main(["--host", "not a host", "--api-key", "k"])
    assert exit_.value.code == 2
    assert "error: argument --host: must be an IP address or a host name, got 'not a host'" in capsys.readouterr().err


def test_a_taken_port_is_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Like a bad value, the remedy is another argument (--port); status 1 is left to crashes."""
    from dlm.cli_args import cannot_listen

    exit_ = cannot_listen("127.0.0.1", 8080, OSError(98, "Address already in use"))
    assert exit_.code == 2
    assert capsys.readouterr().err == "error: cannot listen on 127.0.0.1:8080: Address already in use\n"


@pytest.mark.parametrize("text", ["a,b", "", "0", "4,0", "1,,2", "-1"])
def test_at_least_one_each_refuses(text: str) -> None:
    from dlm.cli_args import at_least_one_each

    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated whole numbers, each at least 1"):
        at_least_one_each(text)


def test_at_least_one_each_and_host_accept() -> None:
    from dlm.cli_args import at_least_one_each, host

    assert at_least_one_each("1,4,16") == [1, 4, 16] and at_least_one_each("7") == [7]
    for name in ("localhost", "127.0.0.1", "0.0.0.0", "::", "::1", "fe80::1%eth0", "voice.example.org.", "my_box"):
        assert host(name) == name


def test_output_dir_takes_a_folder_to_make_and_present_device_resolves_auto(tmp_path: Path) -> None:
    from dlm.cli_args import output_dir, present_device

    assert output_dir(str(tmp_path / "runs" / "new")) == tmp_path / "runs" / "new"  # made when the run exports
    assert present_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")  # what torch.device takes


def _argument_refusal(call, argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines on stderr of a parser's refusal of `argv`, having exited 2."""
    with pytest.raises(SystemExit) as exit_:
        call(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.splitlines()


def _cli(module: str):
    import importlib

    return importlib.import_module(module).main


@pytest.mark.parametrize(("module", "argv", "prog", "message"), [
    ("dlm.cli", ["generate", "--prompt", "x", "--threshold", "1.5"], "python -m dlm generate",
     "argument --threshold: threshold must be in [0, 1], got 1.5"),
    ("dlm.cli", [], "python -m dlm", "the following arguments are required: command"),
    ("dlm.cli", ["serve", "--port", "0"], "python -m dlm serve", "argument --port: must be a port, 1 to 65535"),
    ("dlm.train.__main__", ["--config", "x.toml", "--steps", "0"], "python -m dlm.train", "argument --steps"),
    ("dlm.eval", ["--limit", "0"], "python -m dlm.eval", "argument --limit: must be at least 1, got '0'"),
    ("dlm.train.loss_plot", [], "python -m dlm.train.loss_plot", "the following arguments are required"),
    ("dlm.train.copy_probe", ["--dialogues", "0"], "python -m dlm.train.copy_probe", "argument --dialogues"),
])
def test_an_argument_error_is_one_line_and_a_pointer_to_help(module: str, argv: list[str], prog: str, message: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """argparse had printed its whole usage first (11 lines for `dlm generate`), where the README promises one."""
    error, hint = _argument_refusal(_cli(module), argv, capsys)
    assert error.startswith(f"error: {message}") and hint == f"({prog} --help for usage)"
