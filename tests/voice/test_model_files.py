import shutil

import pytest

from voice.models import (
    PIPER_JOE,
    WHISPER_TINY_EN,
    ModelIntegrityError,
    ModelNotInstalledError,
    ModelSpec,
    piper_voice_files,
    verify_directory,
    whisper_model_dir,
)


def test_bundled_models_verify() -> None:
    directory = whisper_model_dir()
    assert (directory / "model.bin").is_file()
    onnx, config = piper_voice_files()
    assert onnx.name == "en_US-joe-medium.onnx" and config.name == "en_US-joe-medium.onnx.json"


@pytest.fixture()
def config_copy(tmp_path):
    """A copy of the shipped whisper config.json, with its pin."""
    shutil.copy(WHISPER_TINY_EN.directory() / "config.json", tmp_path / "config.json")
    return tmp_path, {"config.json": WHISPER_TINY_EN.files["config.json"]}


def test_an_intact_copy_verifies(config_copy) -> None:
    directory, pins = config_copy
    assert verify_directory(directory, pins) == directory


def test_an_altered_copy_is_rejected(config_copy) -> None:
    directory, pins = config_copy
    path = directory / "config.json"
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01  # one bit, same size
    path.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError, match=r"config\.json is altered or truncated"):
        verify_directory(directory, pins, "tiny.en")


def test_a_verified_file_changed_later_is_rejected(config_copy) -> None:
    directory, pins = config_copy
    verify_directory(directory, pins)
    path = directory / "config.json"
    path.write_bytes(path.read_bytes()[:-5])  # truncated
    with pytest.raises(ModelIntegrityError, match="altered or truncated"):
        verify_directory(directory, pins)


def test_a_missing_file_is_named(tmp_path) -> None:
    with pytest.raises(ModelIntegrityError, match=r"en_US-joe-medium\.onnx is missing"):
        verify_directory(tmp_path, PIPER_JOE.files, PIPER_JOE.name)


def test_a_missing_package_says_what_to_install() -> None:
    spec = ModelSpec("demo", "no_such_model_package", "no-such-model-package==1.0", "get_path", {})
    with pytest.raises(ModelNotInstalledError, match=r"pip install no-such-model-package==1\.0"):
        spec.directory()
