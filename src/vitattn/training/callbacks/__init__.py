"""The Lightning callbacks the configs name (``configs/callbacks/*.yaml``): throughput, the
interruption and preemption guards, the model summary, the attention maps, the confusion report
and an Optuna search's pruning."""

from vitattn.training.callbacks.confusion import ConfusionReport
from vitattn.training.callbacks.insight import AttentionInsight
from vitattn.training.callbacks.interruption import CheckpointOnInterrupt, RandomStateInCheckpoint
from vitattn.training.callbacks.preemption import RequeueOnPreemption
from vitattn.training.callbacks.progress import ProgressBar
from vitattn.training.callbacks.pruning import OptunaPruning, pruned_at
from vitattn.training.callbacks.stopping import CheckpointWithoutValidation, NanGuard, ValidateAtEnd
from vitattn.training.callbacks.summary import ModelSummary
from vitattn.training.callbacks.throughput import ImagesPerSecond

__all__ = [
    "AttentionInsight",
    "CheckpointOnInterrupt",
    "CheckpointWithoutValidation",
    "ConfusionReport",
    "ImagesPerSecond",
    "ModelSummary",
    "NanGuard",
    "OptunaPruning",
    "ProgressBar",
    "RandomStateInCheckpoint",
    "RequeueOnPreemption",
    "ValidateAtEnd",
    "pruned_at",
]
