"""Rebuilding a trained classifier from a checkpoint of ``vitattn-train`` or ``vitattn-finetune``.

A checkpoint carries its network's config, so the model comes back exactly as it was trained.
``vitattn-eval``, ``vitattn-finetune`` and ``vitattn-bench`` (``ckpt_path=``) load through here,
with one-line errors for files that are not such checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitattn.errors import ConfigError, VitattnError


def existing_checkpoint(ckpt_path: Any, program: str = "vitattn-eval") -> Path:
    """The checkpoint file ``ckpt_path`` names, or one line saying it is missing or not a file."""
    if ckpt_path in (None, "", "???"):
        raise ConfigError(f"ckpt_path is required: {program} ckpt_path=<run>/checkpoints/last.ckpt")
    path = Path(str(ckpt_path)).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a file; pass a .ckpt saved by vitattn-train"
        )
    return path


def checked_checkpoint(
    ckpt_path: Any,
    program: str = "vitattn-eval",
    batches: Mapping[str, int] | None = None,
    trainer: Any = None,
) -> dict[str, Any]:
    """The checkpoint :func:`existing_checkpoint` finds, read (memory-mapped) as
    :func:`~vitattn.runs.checkpoints.read_checkpoint` reads it, and refused in one line when it
    holds code or configs vitattn does not build, or weights its network has not
    (:func:`~vitattn.runs.checkpoints.check_weights_fit_their_network`), or when its network's
    forward over a batch of ``batches`` (each setting the command runs it with, and its size)
    builds a tensor larger than the memory the process can use where the command's
    ``trainer`` settings run it (their accelerator and precision; none given: the CPU; an
    accelerator other than the CPU or CUDA: not checked;
    :func:`~vitattn.models.forward_memory.check_forward_fits`): the check of a command before
    its run directory exists, and before it imports Lightning."""
    from vitattn.models.forward_memory import check_forward_fits
    from vitattn.runs.checkpoints import check_weights_fit_their_network, read_checkpoint

    path = existing_checkpoint(ckpt_path, program)
    checkpoint = read_checkpoint(path)
    net = check_weights_fit_their_network(checkpoint, path)
    check_adapters(checkpoint, path, net)
    trainer = trainer if trainer is not None else {"accelerator": "cpu"}
    device = run_device(trainer)
    if batches and device is not None:
        where = f"{path}: hyper_parameters.net"
        check_forward_fits(net, batches, where, device, trainer.get("precision"))
    return checkpoint


def run_device(trainer: Any) -> str | None:
    """Where a command's trainer settings (``trainer.accelerator``) run the network: ``cpu``,
    ``cuda`` (``gpu``, ``cuda``, or ``auto`` where a CUDA device is), or ``None`` for another
    accelerator."""
    accelerator = str(getattr(trainer, "get", lambda *_: None)("accelerator") or "auto").lower()
    if accelerator == "cpu":
        return "cpu"
    if accelerator in ("gpu", "cuda", "auto"):
        import torch

        if torch.cuda.is_available():
            return "cuda"
        return "cpu" if accelerator == "auto" else None
    return None


def check_adapters(checkpoint: dict[str, Any], path: Path, net: Any = None) -> None:
    """Refuse in one line a checkpoint of ``vitattn-finetune`` whose stored LoRA settings
    :class:`~vitattn.lora.adapters.LoRASettings` refuses, or whose ``target_modules`` select no
    layer of its base network (``net``, built on the meta device where not given), naming the
    file and ``hyper_parameters.lora.<key>`` (:func:`~vitattn.lora.adapters.check_stored_settings`).
    A checkpoint without adapters, or whose network does not build there, passes."""
    from vitattn.lora.adapters import check_stored_settings
    from vitattn.runs.checkpoints import meta_network, network_settings

    if not holds_adapters(checkpoint):
        return
    settings = checkpoint["hyper_parameters"]
    if net is None:
        try:
            net = meta_network(network_settings(settings["net"]))
        except Exception:  # no network config: Lightning's load says so
            return
    if net is not None:
        check_stored_settings(settings["lora"], net, str(path))


@dataclass(frozen=True)
class Trained:
    """What a command reuses of a checkpoint, read from the same bytes: the classifier, and the
    data settings it was trained with (:func:`~vitattn.runs.checkpoints.data_settings_of`)."""

    module: Any
    data_settings: dict[str, Any]
    precision: dict[str, str] | None = None
    """The precision the checkpoint's run trained at, where it records one
    (:func:`~vitattn.runs.checkpoints.precision_of`)."""


def load_classifier(ckpt_path: str | Path) -> Any:
    """Rebuild the :class:`~vitattn.models.module.ViTClassifier` stored in a checkpoint: one of
    ``vitattn-train``, or of ``vitattn-finetune`` (a
    :class:`~vitattn.lora.module.LoRAClassifier`, whose network carries LoRA adapters)."""
    return load_trained(ckpt_path).module


def load_trained(ckpt_path: str | Path) -> Trained:
    """:func:`load_classifier`, with the data settings of the bytes it was built from."""
    import io

    from vitattn.models.module import ViTClassifier
    from vitattn.runs.checkpoints import (
        build_failure,
        data_settings_of,
        precision_of,
        read_checkpoint_bytes,
    )

    path = existing_checkpoint(ckpt_path)
    # Lightning builds the module from the very bytes that were checked.
    data, checkpoint = read_checkpoint_bytes(path)
    check_adapters(checkpoint, path)
    try:
        if holds_adapters(checkpoint):
            from vitattn.lora.module import LoRAClassifier

            module = LoRAClassifier.load_from_checkpoint(io.BytesIO(data), map_location="cpu")
        else:
            module = ViTClassifier.load_from_checkpoint(io.BytesIO(data), map_location="cpu")
    except VitattnError:
        raise
    except Exception as error:
        # The innermost cause, on one line: Hydra's first line names only the target, and a
        # state_dict mismatch lists every key.
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a vitattn-train checkpoint ({build_failure(error)})"
        ) from error
    return Trained(module, data_settings_of(checkpoint), precision_of(checkpoint))


def holds_adapters(checkpoint: dict[str, Any]) -> bool:
    """Whether a checkpoint was written by ``vitattn-finetune`` with LoRA adapters (its module
    hyperparameters have ``lora``)."""
    settings = checkpoint.get("hyper_parameters")
    return isinstance(settings, dict) and "lora" in settings
