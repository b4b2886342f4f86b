import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transports"))

from live_server import new_pipeline, question, question_wav, resources, serve  # noqa: E402, F401  (fixtures)
