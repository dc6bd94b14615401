"""Time and peak memory of a sweep's summary over runs with long curves (docs/runs.md, "Event
files"): a benchmark that prints its figures, never a test.

It writes a sweep of ``--settings`` x ``--seeds`` jobs into a temporary folder, each a run
directory with one event file of ``--records`` scalars spread over ``--tags`` (one event file
is written, then copied into every job), summarizes it in place in a process of its own, and
prints the summary's seconds and that process's peak resident memory.

    python scripts/bench_summary_reading.py      # 2 settings x 2 seeds of 300,000 records
    python scripts/bench_summary_reading.py --settings 1 --records 2000000 --tags train/loss
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ATTENTIONS = ("softmax", "linear", "performer", "linformer")


def write_events(folder: Path, records: int, tags: list[str]) -> Path:
    """One event file in ``folder`` of ``records`` scalars, the ``tags`` in turn at each step."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for step in range(records // len(tags)):
        for tag in tags:
            value = Summary.Value(tag=tag, simple_value=1.0 / (1 + step))
            writer.add_event(Event(step=step, wall_time=1.0 + step, summary=Summary(value=[value])))
    writer.close()
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def write_job(job: Path, attention: str, seed: int, events: Path) -> None:
    """A completed run directory of ``attention`` and ``seed`` holding a copy of ``events``."""
    (job / ".hydra").mkdir(parents=True)
    config = {"seed": seed, "attention": {"_target_": f"vitattn.attention.{attention}.Kernel"}}
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    overrides = [f"attention={attention}", f"seed={seed}"]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    metrics = {"status": "completed", "test/acc": 0.5, "attention": attention, "seconds": 1.0}
    (job / "metrics.json").write_text(json.dumps(metrics))
    shutil.copy(events, job / events.name)


def summarize_measured(sweep: Path) -> None:
    """Summarize ``sweep`` in place (this process is a child of its own) and print the figures."""
    from vitattn.analysis.summary import summarize

    start = time.perf_counter()
    summary = summarize([sweep])
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(summary.runs)} runs, {len(summary.seed_runs)} TensorBoard runs of seed means: "
        f"{seconds:.1f} s, peak resident memory {peak:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=int, default=2, choices=range(1, len(ATTENTIONS) + 1))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--tags", default="train/loss,train/lr,train/acc,val/acc")
    parser.add_argument("--summarize", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summarize is not None:
        summarize_measured(args.summarize)
        return
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        events = write_events(Path(scratch), args.records, args.tags.split(","))
        sweep = Path(scratch) / "sweep"
        for attention in ATTENTIONS[: args.settings]:
            for seed in range(1, args.seeds + 1):
                write_job(sweep / f"attention={attention},seed={seed}", attention, seed, events)
        size = events.stat().st_size / 1e6
        print(
            f"{args.settings * args.seeds} jobs of {args.records:,} records ({size:.0f} MB each), "
            f"written in {time.perf_counter() - start:.0f} s"
        )
        subprocess.run([sys.executable, __file__, "--summarize", str(sweep)], check=True)


if __name__ == "__main__":
    main()
