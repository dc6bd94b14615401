"""What this process may use of the machine it runs on."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, which SLURM's ``--cpus-per-task``,
    ``taskset`` and a container's cpuset narrow, not the node's count ``os.cpu_count()`` gives
    (a job given 8 of a node's 128 CPUs was allowed 128 DataLoader workers). Python 3.13 names
    this ``os.process_cpu_count``."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
