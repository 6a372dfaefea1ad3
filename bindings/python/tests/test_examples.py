"""The examples run for real: the inference server in a subprocess, the client against it,
then the server stopped with SIGINT (it must exit cleanly)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@contextlib.contextmanager
def example_server(script: str, *args: str) -> Iterator[str]:
    """Runs example `script` as a server on a free port and yields its address; at the end
    stops it with SIGINT, as a user would, and checks that it exits cleanly."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"listening on 127.0.0.1:{port}"
        yield f"127.0.0.1:{port}"
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0 and out.strip() == "stopped"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def run_example(script: str, *args: str) -> str:
    """Runs example `script` to the end; returns its output, failing if it did."""
    client = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert client.returncode == 0, client.stdout + client.stderr
    return client.stdout


def test_inference_server_and_client() -> None:
    with example_server("inference_server.py") as addr:
        args = ["--server", addr, "--requests", "200", "--batch", "16", "--clients", "4"]
        out = run_example("inference_client.py", *args)
        assert "0 wrong" in out and out.strip().endswith("ok")
        assert "latency p50" in out, out


def test_a_16_mib_tensor_between_two_processes() -> None:
    with example_server("big_tensor.py", "--serve") as addr:
        out = run_example("big_tensor.py", "--server", addr)
        assert out.startswith("16,777,216 bytes") and out.strip().endswith("ok")


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
