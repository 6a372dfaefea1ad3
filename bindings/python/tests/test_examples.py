"""The examples run for real: the inference server in a subprocess, the client against it,
then the server stopped with SIGINT (it must exit cleanly)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from conftest import free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_inference_server_and_client() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "inference_server.py"), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"listening on 127.0.0.1:{port}"
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "inference_client.py"), "--server", f"127.0.0.1:{port}",
             "--requests", "200", "--batch", "16"],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert client.returncode == 0, client.stdout + client.stderr
        assert "0 wrong" in client.stdout and client.stdout.strip().endswith("ok")
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0 and out.strip() == "stopped"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_benchmark_runs() -> None:
    """`python -m homa.bench` end to end, tiny (its figures are not checked: speed belongs in
    the benchmark, not in tests)."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "homa.bench", "--rounds", "1", "--calls", "50", "--concurrency", "4", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result["homa"]) == {"p50_us", "p99_us", "calls_per_s"}
    assert result["tcp"]["calls_per_s"] > 0 and result["homa"]["calls_per_s"] > 0
