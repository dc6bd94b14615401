"""Learning-rate schedules stepped once per optimizer step."""

from __future__ import annotations

import logging
import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from vitattn.errors import ConfigError
from vitattn.utils import checks

log = logging.getLogger(__name__)


def cosine_with_warmup(
    optimizer: Optimizer,
    total_steps: int,
    warmup_steps: int | None = None,
    warmup_fraction: float = 0.0,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warm-up from 0, then cosine annealing to ``min_lr_ratio`` times the base rate.

    Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017 (one
    cycle, no restart); the warm-up follows Goyal et al. 2017. ``warmup_steps`` wins over
    ``warmup_fraction`` (a share of ``total_steps``) when both are given.
    """
    total_steps = int(total_steps)
    if total_steps < 1:
        raise ConfigError(f"the schedule needs at least one training step, got {total_steps}")
    for setting, value in (
        ("scheduler.warmup_fraction", warmup_fraction),
        ("scheduler.min_lr_ratio", min_lr_ratio),
    ):
        if not checks.is_number(value) or not 0.0 <= value <= 1.0:
            raise checks.invalid(setting, value, f"0 <= {setting} <= 1")
    if warmup_steps is None:
        warmup_steps = round(warmup_fraction * total_steps)
    asked = checks.integer("scheduler.warmup_steps", warmup_steps, low=0)
    warmup_steps = min(asked, total_steps)
    if asked >= total_steps:  # a preset's warm-up (experiment=lra_image: 175) on a shorter run
        log.warning(
            "scheduler.warmup_steps=%d is not fewer than the run's %d steps: the whole run warms "
            "up, and the rate never reaches its base value or anneals; give fewer warm-up steps "
            "(scheduler.warmup_steps=N, or null for scheduler.warmup_fraction) to anneal",
            asked,
            total_steps,
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
