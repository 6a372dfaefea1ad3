"""`homa incast --contenders homa/python`: this package as a contender in the incast lab
(network namespaces, a shaped bottleneck), clients and server in Python processes. Only
functional facts: every request of every workload answered, Homa's priority classes used.

Needs root and the `homa` binary (HOMA_BIN; scripts/test passes the one it built)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOMA_BIN = os.environ.get("HOMA_BIN")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not HOMA_BIN,
    reason="needs root (network namespaces) and HOMA_BIN, the homa binary",
)


def test_python_contender_answers_every_request(tmp_path: Path) -> None:
    report_path = tmp_path / "incast.json"
    assert HOMA_BIN is not None
    run = subprocess.run(
        [HOMA_BIN, "incast", "--clients", "2", "--duration", "0.5", "--contenders",
         "homa/python", "--python", sys.executable, "-q", "--json", str(report_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(report_path.read_text())
    (python,) = report["contenders"]
    assert python["name"] == "homa/python"
    assert len(python["runs"]) == 4  # mixed at 50 % and 80 %, burst, barrier
    for r in python["runs"]:
        requests = r["requests"]
        assert requests["finished"] > 0 and requests["failed"] == 0, r
        assert requests["unfinished"] == 0, r
    assert python["probe"]["count"] > 0 and python["barrier"]["count"] > 0
    assert python["cpu_s"] > 0, "the Python processes' CPU time is counted"
    per_class = python["per_class_packets"]
    assert per_class[7] > 0 and sum(per_class[:4]) > 0, per_class
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in left for ns in report["namespaces"]), left
