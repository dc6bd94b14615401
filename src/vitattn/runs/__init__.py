"""The run directory: its files read and written safely, what a file may build, the lock, the
disk reserve, running a task, checkpoints, and continuing sweeps (``docs/architecture.md``)."""
