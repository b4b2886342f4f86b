import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transports"))

from live_server import serve  # noqa: E402, F401  (the fixture)
