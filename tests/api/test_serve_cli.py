"""`python -m dlm serve` starts the API on loopback with the options it is given."""

import json
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import FIXTURES, ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_subcommand_serves_models_endpoint():
    port = _free_port()
    cmd = [sys.executable, "-m", "dlm", "serve", "--model", str(FIXTURES / "sdar" / "checkpoint"), "--port", str(port),
           "--copy-bias", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    body = json.load(r)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "server did not come up within 60 s"
                time.sleep(0.3)
        assert body["object"] == "list" and body["data"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_taken_port_is_a_one_line_error_not_a_traceback():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cmd = [sys.executable, "-m", "dlm", "serve", "--model", str(FIXTURES / "sdar" / "checkpoint"),
               "--port", str(port)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2  # as for any argument this machine cannot use (had been 1)
    assert done.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in done.stderr
