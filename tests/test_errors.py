"""The one-line errors (:mod:`vitattn.errors`): a failed sweep job's line crosses processes."""

from __future__ import annotations

import pickle

from hydra.errors import CompactHydraException

from vitattn.errors import FailedJob


def test_a_failed_jobs_line_survives_the_trip_from_a_launchers_process() -> None:
    """joblib and submitit send a job's exception back pickled; Hydra prints a compact one as
    its text alone (no traceback), so the text must arrive whole."""
    sent = FailedJob("vitattn-train", "train/loss became NaN or infinite by step 4; ...")
    received = pickle.loads(pickle.dumps(sent))
    assert isinstance(received, CompactHydraException)
    assert str(received) == "vitattn-train: error: train/loss became NaN or infinite by step 4; ..."
    assert received.message == sent.message
