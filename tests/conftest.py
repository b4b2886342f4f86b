"""Shared paths for the test suite."""

import os
from pathlib import Path

# Triton fixes compiled-vs-interpreter mode when it is first imported: set it before any test module loads it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"
FAMILIES = ("sdar", "llada", "fast_dllm_v2", "dream")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"reference fixtures not found at {FIXTURES} (../shared must sit beside the checkout)")
    return FIXTURES
