"""Plant one defect at a time in an attention mechanism's math and check that a test fails.

Each defect is a one-line change to a mechanism's source, chosen to look plausible (a wrong
axis, a missing factor, a sum for a mean, a defect shared by a mechanism's chunked and autograd
implementations). For each, the script copies ``src/`` and ``tests/`` into a temporary folder,
plants the defect there (the working tree is never touched), runs ``pytest -x`` on the attention
tests with that copy first on the import path, and reports the first failing test, or MISSED.

    python scripts/plant_defects.py                   # every defect: up to ~2 minutes each
    python scripts/plant_defects.py --only bigbird sparse
    python scripts/plant_defects.py --list

Exit status 1 if a defect was missed (other than those marked equivalent: changes that compute
the same function on every input the tests can draw).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = "src/vitattn/attention/"


@dataclass(frozen=True)
class Defect:
    name: str
    path: str
    old: str
    new: str
    equivalent: bool = False  # the same function on continuous inputs: a miss is expected


DEFECTS = [
    Defect("linear: relu+1 for elu+1", "linear.py", "F.elu(x) + 1.0", "F.relu(x) + 1.0"),
    Defect(
        "linear: key mean for key sum",
        "linear.py",
        "with_column(v.float(), 1.0)",
        "with_column(v.float(), 1.0 / k.shape[-2])",
    ),
    Defect(
        "efficient: keys normalised over features",
        "efficient.py",
        "keys = k.softmax(dim=-2)",
        "keys = k.softmax(dim=-1)",
    ),
    Defect(
        "taylor: mean of values for their sum",
        "taylor.py",
        "numerator = values.sum(dim=-2, keepdim=True)",
        "numerator = values.mean(dim=-2, keepdim=True)",
    ),
    Defect(
        "linformer: F replaced by E",
        "linformer.py",
        "values = value_projection.to(v.dtype) @ v",
        "values = self.key_projection.to(v.dtype) @ v",
    ),
    Defect(
        "nystrom: third kernel from key landmarks",
        "nystrom.py",
        "kernel_3 = (query_landmarks @ keys",
        "kernel_3 = (key_landmarks @ keys",
    ),
    Defect(
        "nystrom: uneven segments shifted",
        "nystrom.py",
        "segment_of_token = torch.arange(tokens, device=x.device) * segments // tokens",
        "segment_of_token = (torch.arange(tokens, device=x.device) * segments + 1) // tokens",
    ),
    Defect(
        "local: window off centre",
        "local.py",
        "return (positions - window // 2).clamp(0, length - window)",
        "return (positions - window // 2 + 1).clamp(0, length - window)",
    ),
    Defect(
        "local (flex): global keys left out of the mask",
        "local.py",
        "return (q_idx < g) | (kv_idx < g) | in_window(q_idx, kv_idx)",
        "return (q_idx < g) | in_window(q_idx, kv_idx)",
    ),
    Defect(
        "bigbird: window one block wider",
        "bigbird.py",
        "radius = min(window_blocks // 2, blocks - 1)",
        "radius = min(window_blocks // 2 + 1, blocks - 1)",
    ),
    Defect(
        "sparse: summaries one position early",
        "sparse.py",
        "end = stride - index * summary\n",
        "end = stride - index * summary - 1\n",
    ),
    Defect(
        "reformer: rounds averaged, not weighted by their log-sum-exp",
        "reformer.py",
        "out = (out * lse.softmax(dim=0).unsqueeze(-1)).sum(dim=0)",
        "out = out.mean(dim=0)",
    ),
    Defect(
        "reformer: LSH ties go to the low half",
        "reformer.py",
        "torch.where(high >= -low, high_index, low_index + half)",
        "torch.where(high > -low, high_index, low_index + half)",
        equivalent=True,
    ),
    Defect(
        "softmax: explicit matrix 10% hotter",
        "softmax.py",
        "((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)",
        "((q * self.scale * 1.1) @ k.transpose(-2, -1)).softmax(dim=-1)",
    ),
    Defect(
        "performer: projection rows of unit length (both implementations)",
        "feature_maps/favor.py",
        "    return directions * lengths.unsqueeze(1)",
        "    return directions",
    ),
    Defect(
        "random_feature: frequencies 1.2 x their std (both implementations)",
        "random_feature.py",
        "dtype=torch.float32) * self.frequency_std",
        "dtype=torch.float32) * self.frequency_std * 1.2",
    ),
]


def plant(defect: Defect, into: Path) -> None:
    """Copy the sources and tests into ``into`` and change the defect's line there."""
    for part in ("src", "tests", "configs", "pyproject.toml"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, into / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, into / part)
    path = into / ATTENTION / defect.path
    text = path.read_text()
    if text.count(defect.old) != 1:
        raise SystemExit(f"{defect.name}: the line to change is not once in {defect.path}")
    path.write_text(text.replace(defect.old, defect.new))


def first_failure(defect: Defect, pytest_args: list[str]) -> tuple[str | None, float]:
    """The first failing test with ``defect`` planted (None if every test passed), and seconds."""
    with tempfile.TemporaryDirectory(prefix="vitattn-defect-") as folder:
        copy = Path(folder)
        plant(defect, copy)
        environment = {**os.environ, "PYTHONPATH": str(copy / "src")}
        start = time.perf_counter()
        # -n 0: one process, so that -x stops at the first failure (pyproject asks for workers)
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
        result = subprocess.run(
            [*command, *pytest_args],
            cwd=copy,
            env=environment,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    if result.returncode == 0:
        return None, seconds
    return (failed[0].removeprefix("FAILED ") if failed else f"exit {result.returncode}"), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[], help="defects whose name contains one")
    parser.add_argument("--list", action="store_true", help="list the defects and stop")
    parser.add_argument(
        "--tests", nargs="+", default=["tests/attention"], help="what pytest runs (%(default)s)"
    )
    args = parser.parse_args(argv)
    chosen = [d for d in DEFECTS if not args.only or any(o in d.name for o in args.only)]
    if not chosen:
        parser.error(f"no defect matches {args.only}; --list shows them")
    if args.list:
        for defect in chosen:
            print(f"{defect.name}  ({defect.path})")
        return 0
    missed = 0
    print("| defect | first failing test | seconds |\n|---|---|---|", flush=True)
    for defect in chosen:
        failure, seconds = first_failure(defect, args.tests)
        if failure is None:
            missed += not defect.equivalent
            failure = "MISSED" + (" (equivalent: expected)" if defect.equivalent else "")
        print(f"| {defect.name} | {failure} | {seconds:.0f} |", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
