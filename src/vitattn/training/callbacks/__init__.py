"""The Lightning callbacks the configs name (``configs/callbacks/*.yaml``): throughput, the
interruption and preemption guards, the attention maps and the confusion report."""

from vitattn.training.callbacks.confusion import ConfusionReport
from vitattn.training.callbacks.insight import AttentionInsight
from vitattn.training.callbacks.interruption import CheckpointOnInterrupt, RandomStateInCheckpoint
from vitattn.training.callbacks.preemption import RequeueOnPreemption
from vitattn.training.callbacks.progress import ProgressBar
from vitattn.training.callbacks.stopping import NanGuard, ValidateAtEnd
from vitattn.training.callbacks.throughput import ImagesPerSecond

__all__ = [
    "AttentionInsight",
    "CheckpointOnInterrupt",
    "ConfusionReport",
    "ImagesPerSecond",
    "NanGuard",
    "ProgressBar",
    "RandomStateInCheckpoint",
    "RequeueOnPreemption",
    "ValidateAtEnd",
]
