"""Lightning's console output as our commands print it: each message once, no adverts."""

from __future__ import annotations

import logging
import warnings


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip:" not in str(record.msg)


def tidy_lightning_output() -> None:
    """One copy of each Lightning message, and no warnings that do not apply here."""
    import lightning  # noqa: F401  (it adds its own console handler on import)

    # Hydra's root handlers already print (and file) Lightning's records: without this, every
    # Lightning message is printed twice.
    if logging.getLogger().handlers:
        logging.getLogger("lightning").handlers.clear()
    # Lightning advertises optional cloud packages ("💡 Tip: ... litlogger") at every start.
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropTips) for f in rank_zero.filters):
        rank_zero.addFilter(_DropTips())
    # Batches are slices of in-memory tensors: worker processes would only slow them down.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    # Raised inside Lightning's own pytree helper for the installed torch; nothing to act on.
    warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # Our data module resumes mid-epoch itself (it skips the batches already trained).
    warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch.*")
