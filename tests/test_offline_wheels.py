"""``scripts/offline_wheels.sh``: its arguments, and what it asks pip for, with a stand-in pip
(no network in tests): the pins ``pip install --dry-run --report`` resolves, torch's wheels left
out on request, the build backend for the editable install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vitattn.utils.config import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "offline_wheels.sh"

FAKE_PIP = """
import json, pathlib, sys
arguments = sys.argv[1:]
log = pathlib.Path(__import__("os").environ["FAKE_PIP_LOG"])
calls = json.loads(log.read_text()) if log.exists() else []
calls.append(arguments)
log.write_text(json.dumps(calls))
if arguments[0] == "install":
    report = arguments[arguments.index("--report") + 1]
    names = ["vitattn", "torch", "torchvision", "triton", "nvidia-cublas-cu12", "hydra-core",
             "omegaconf", "antlr4-python3-runtime"]
    items = [{"metadata": {"name": n, "version": "1.0"}} for n in names]
    pathlib.Path(report).write_text(json.dumps({"install": items}))
elif arguments[0] == "download":
    dest = pathlib.Path(arguments[arguments.index("--dest") + 1])
    if "-r" in arguments:
        wanted = pathlib.Path(arguments[arguments.index("-r") + 1]).read_text().split()
    else:
        wanted = [a for a in arguments[arguments.index("--dest") + 2:]]
    for pin in wanted:
        name = pin.split("=")[0].split(">")[0].replace("-", "_")
        (dest / f"{name}-1.0-py3-none-any.whl").write_text("")
"""


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    fake = tmp_path / "fake_pip.py"
    fake.write_text(FAKE_PIP)
    log = tmp_path / "calls.json"
    env = {**os.environ, "VITATTN_PIP": f"{sys.executable} {fake}", "FAKE_PIP_LOG": str(log)}
    env["PYTHON"] = sys.executable
    result = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60
    )
    calls = json.loads(log.read_text()) if log.exists() else []
    return result, calls


def test_all_wheels_of_the_dev_install(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    result, calls = run(tmp_path, str(wheels))
    assert result.returncode == 0, result.stderr
    install, download, backend = calls
    assert install[:4] == ["install", "--dry-run", "--ignore-installed", "--quiet"]
    assert install[-1] == f"{PROJECT_ROOT}[dev]"
    assert "--no-deps" in download and "-r" in download
    assert backend[-2:] == ["setuptools>=77", "wheel"]
    names = sorted(p.name.split("-")[0] for p in wheels.iterdir())
    assert "torch" in names and "nvidia_cublas_cu12" in names and "hydra_core" in names
    assert "vitattn" not in names  # the project is installed from the repository
    assert "pip install --no-index --find-links" in result.stdout


def test_without_torch_leaves_out_torch_and_cuda(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    result, _ = run(tmp_path, "--without-torch", "--extras", "", str(wheels))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name.split("-")[0] for p in wheels.iterdir())
    assert names == [
        "antlr4_python3_runtime",
        "hydra_core",
        "omegaconf",
        "setuptools",
        "wheel",
    ]
    assert "torch left out" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "DIR is missing"),
        (["a", "b"], "one DIR only (got a and b)"),
        (["--torch", "a"], "unknown option --torch"),
        (["--extras"], "--extras needs a value"),
    ],
)
def test_bad_arguments_are_one_line_and_download_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result, calls = run(tmp_path, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith(f"offline_wheels.sh: error: {message}")
    assert calls == []


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    in_the_way = tmp_path / "wheels"
    in_the_way.write_text("")
    result, calls = run(tmp_path, str(in_the_way))
    assert result.returncode == 2 and "is not a directory" in result.stderr and calls == []


def test_help(tmp_path: Path) -> None:
    result, calls = run(tmp_path, "--help")
    assert result.returncode == 0 and "usage: scripts/offline_wheels.sh" in result.stderr
    assert calls == []
