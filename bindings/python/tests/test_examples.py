"""The examples run for real: the inference server in a subprocess, the client against it,
then the server stopped with SIGINT (it must exit cleanly)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
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
             "--requests", "200", "--batch", "16", "--clients", "4"],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert client.returncode == 0, client.stdout + client.stderr
        assert "0 wrong" in client.stdout and client.stdout.strip().endswith("ok")
        assert "latency p50" in client.stdout, client.stdout
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0 and out.strip() == "stopped"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_16_mib_tensor_between_two_processes() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "big_tensor.py"), "--serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"listening on 127.0.0.1:{port}"
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "big_tensor.py"), "--server", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert client.returncode == 0, client.stdout + client.stderr
        assert client.stdout.startswith("16,777,") and client.stdout.strip().endswith("ok")
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0 and out.strip() == "stopped"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize(
    ("readme", "printed"),
    [(EXAMPLES.parents[2] / "README.md", "b'HELLO'"), (EXAMPLES.parent / "README.md", "b'ping'")],
    ids=["repository", "package"],
)
def test_the_readme_example_runs(readme: Path, printed: str) -> None:
    """The first Python block of each README, as a newcomer would paste it (on a free port)."""
    text = readme.read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("4000", str(free_port()))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == printed


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
