"""Checkpoints of a run: reading one safely and cheaply, checking it fits a model, testing the
best one.

A checkpoint is a pickle, and unpickling can run any code its author put in it. Every checkpoint
is therefore read with torch's ``weights_only`` unpickler, which builds tensors, plain
containers and numbers and nothing else; Lightning's own loading (``trainer.fit(ckpt_path=...)``,
``load_from_checkpoint``) uses the same unpickler by default. Checkpoints of earlier vitattn
versions hold their hyper-parameters as OmegaConf containers: exactly those types
(:func:`config_types`) are allowed too, process-wide, so Lightning reads them as well.

What such a file *says* is data too: the configs it stores (the network's, the data module's)
are checked against what vitattn itself builds (:func:`check_contents`, :mod:`vitattn.runs.trust`)
as soon as it is read, before anything is built from them.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vitattn.errors import ConfigError, VitattnError
from vitattn.runs.checkpoint_values import check_values, shown_bytes
from vitattn.runs.files import one_line, open_regular
from vitattn.runs.training_state import check_training_state
from vitattn.runs.trust import check_data_settings, check_stored_config, module_targets
from vitattn.utils.config import flatten

log = logging.getLogger(__name__)


class UnsafeCheckpointError(ConfigError):
    """A checkpoint needs more than tensors and plain containers to load: it was not loaded."""


MODULE_SETTINGS_KEYS = ("hyper_parameters", "hparams", "module_arguments")
"""Where a checkpoint stores the LightningModule's arguments: Lightning's key, and the legacy
keys it still merges into them (``lightning.pytorch.core.saving.CHECKPOINT_PAST_HPARAMS_KEYS``)."""

DATA_SETTINGS_KEY = "datamodule_hyper_parameters"
"""Where a checkpoint stores the data module's arguments (``LightningDataModule``'s key)."""


def data_settings_of(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The data module's hyperparameters in a checkpoint already read (and checked, by
    :func:`read_checkpoint`); ``{}`` if it has none (a checkpoint written by something other
    than a Lightning Trainer with our data module)."""
    return dict(checkpoint.get(DATA_SETTINGS_KEY) or {})


def precision_of(checkpoint: Mapping[str, Any]) -> dict[str, str] | None:
    """The precision a checkpoint already read (and checked) records its run trained at
    (:data:`~vitattn.runs.checkpoint_values.PRECISION_KEY`); ``None`` where it records none
    (written before 2026-12-02, or by something other than a Lightning Trainer)."""
    from vitattn.runs.checkpoint_values import PRECISION_KEY

    recorded = checkpoint.get(PRECISION_KEY)
    return dict(recorded) if isinstance(recorded, Mapping) else None


def config_types() -> list[Any]:
    """What an OmegaConf container is pickled as: its classes, nodes and metadata, and the plain
    types its metadata names (``object_type=dict``, ``key_type=typing.Any``). None of them runs
    code when unpickled."""
    import collections
    import typing

    from omegaconf import DictConfig, ListConfig, base, nodes

    node_types = [
        nodes.AnyNode,
        nodes.StringNode,
        nodes.IntegerNode,
        nodes.FloatNode,
        nodes.BooleanNode,
        nodes.BytesNode,
        nodes.PathNode,
    ]
    return [
        DictConfig,
        ListConfig,
        base.ContainerMetadata,
        base.Metadata,
        *node_types,
        typing.Any,
        dict,
        list,
        int,
        float,
        str,
        bool,
        collections.defaultdict,
    ]


@functools.cache
def allow_config_types() -> None:
    """Let torch's ``weights_only`` unpickler build :func:`config_types` (once per process)."""
    import torch

    torch.serialization.add_safe_globals(config_types())


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dictionary at ``path`` on the CPU, its tensors memory-mapped (not read in
    until used), so looking up its hyperparameters costs little even for a large checkpoint.
    Read with the ``weights_only`` unpickler: a file that needs anything else raises
    :class:`UnsafeCheckpointError` and runs none of its code."""
    import torch

    allow_config_types()
    path = Path(path).expanduser()
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(unsafe_reason(path, error)) from None
    except (OSError, RuntimeError, ValueError, EOFError, MemoryError, RecursionError) as error:
        raise ConfigError(unreadable_reason(path, error)) from None
    return check_contents(checkpoint, path)


def read_checkpoint_bytes(path: str | Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes of the checkpoint at ``path`` and what they hold, read once and checked as
    :func:`read_checkpoint` checks: what is built from them afterwards is what was checked, even
    if the file changes in the meantime."""
    import io

    import torch

    path = Path(path).expanduser()
    checked = read_checkpoint(path)  # memory-mapped: what it holds, checked before it is read in
    check_weights_fit_their_network(checked, path)
    data = read_at_most(path, bytes_taken(checked))
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(unsafe_reason(path, error)) from None
    except (OSError, RuntimeError, ValueError, EOFError, MemoryError, RecursionError) as error:
        raise ConfigError(unreadable_reason(path, error)) from None
    return data, check_contents(checkpoint, path)


def check_weights_fit_their_network(checkpoint: dict[str, Any], path: Path) -> Any:
    """The weights of ``checkpoint`` are those of the network its config builds (on the meta
    device), none more: a tensor of gigabytes among them is refused before a command reads the
    file in. A checkpoint with LoRA adapters (whose weights its base network lacks) holds at
    most :data:`LORA_WEIGHTS_FACTOR` times that network's bytes (its adapters' settings are
    checked against that network by :func:`vitattn.loading.check_adapters`, a room above); one
    whose network does not build on the meta device is left to Lightning's strict load. The
    network built, or ``None``."""
    settings = checkpoint.get("hyper_parameters")
    if not isinstance(settings, Mapping):
        return None
    try:
        network = network_settings(settings["net"])
    except Exception:  # no network config: Lightning's load says so
        return None
    net = meta_network(network, f"{path}: hyper_parameters.net")
    if net is None:
        return None
    if "lora" not in settings:
        check_weight_shapes(checkpoint.get("state_dict"), net, str(path))
        return net
    base = shown_bytes(net.state_dict().values())
    weights = checkpoint.get("state_dict")
    held = shown_bytes(weights.values() if isinstance(weights, Mapping) else ())
    if held > LORA_WEIGHTS_FACTOR * base:
        raise ConfigError(
            f"{path}: its weights claim {held:,} bytes, more than {LORA_WEIGHTS_FACTOR} times "
            f"the {base:,} of the network its config builds (its adapters add a fraction); "
            "nothing was loaded"
        )
    return net


LORA_WEIGHTS_FACTOR = 2
"""The most bytes a LoRA checkpoint's weights may claim, in multiples of its base network's:
adapters of a rank the bounds allow add far less."""

MAX_SETTINGS_BYTES = 16 << 20
"""The most bytes a checkpoint file may hold besides its tensors' storage: the pickle of its
settings and counters (12 KB for vitattn-train's) and the archive's records (about 350 bytes a
tensor, counted apart)."""
RECORD_BYTES = 1024


def bytes_taken(checkpoint: dict[str, Any]) -> int:
    """The most bytes a file holding ``checkpoint`` (as read, memory-mapped) takes as torch
    writes it: its tensors' storages, each once, with a record each, and
    :data:`MAX_SETTINGS_BYTES`."""
    import torch

    from vitattn.runs.checkpoint_values import leaves, storage_bytes

    storages = storage_bytes(v for _, v in leaves(checkpoint) if isinstance(v, torch.Tensor))
    return sum(storages.values()) + RECORD_BYTES * len(storages) + MAX_SETTINGS_BYTES


def read_at_most(path: Path, bound: int) -> bytes:
    """The bytes of the file at ``path``, refused in one line where it holds more than
    ``bound`` (an archive member that none of its tensors uses, a file grown since it was
    checked): a command that reads them in whole keeps to what was checked."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(bound + 1) if size <= bound else b""
    if size > bound or len(data) > bound:
        raise ConfigError(
            f"{path} holds {max(size, len(data)):,} bytes, more than the {bound:,} its tensors "
            "and settings take; it is not as vitattn-train writes a checkpoint, and nothing was "
            "loaded"
        )
    return data


def check_contents(checkpoint: Any, path: str | Path) -> dict[str, Any]:
    """``checkpoint`` once the configs it stores build only what vitattn builds itself: the
    module's settings (``hyper_parameters`` and Lightning's legacy keys) name only allowed
    targets and resolvers, and the data module's settings are plain values; one line naming the
    file, the key and what it asks for otherwise. Its values are then typed and bounded
    (:func:`vitattn.runs.checkpoint_values.check_values`)."""
    if not isinstance(checkpoint, dict):
        raise ConfigError(
            f"{path} is not a vitattn-train checkpoint: it holds a "
            f"{type(checkpoint).__name__}, not a checkpoint dictionary"
        )
    for key in MODULE_SETTINGS_KEYS:
        if key in checkpoint:
            check_stored_config(checkpoint[key], str(path), key, module_targets())
    if DATA_SETTINGS_KEY in checkpoint:
        check_data_settings(checkpoint[DATA_SETTINGS_KEY], str(path), DATA_SETTINGS_KEY)
    check_values(checkpoint, str(path))
    return checkpoint


ZIP_MAGIC = b"PK\x03\x04"
"""How a file begins that ``torch.save`` wrote: a zip archive's first local header."""


def file_start(path: Path) -> bytes | None:
    """The first bytes of the file at ``path`` (as many as :data:`ZIP_MAGIC`), or ``None`` where
    it cannot be read as a regular file."""
    try:
        with open_regular(path, follow_links=True, max_bytes=None) as handle:
            return handle.read(len(ZIP_MAGIC))
    except (OSError, VitattnError):
        return None


def unreadable_reason(path: Path, error: BaseException) -> str:
    """One line: the file is not a whole checkpoint: not a torch file at all (an empty file,
    ``metrics.json``: torch's own words then advise saving it again, which is beside the point),
    or one cut short."""
    start = file_start(path)
    if start == b"":
        return f"{path} is empty, not a torch checkpoint; pass a .ckpt saved by vitattn-train"
    if start is not None and start != ZIP_MAGIC:
        return (
            f"{path} is not a torch checkpoint (not a zip archive, as torch.save writes one); "
            "pass a .ckpt saved by vitattn-train"
        )
    reason = next(iter(str(error).splitlines()), "")[:200]
    return (
        f"{path} is not a readable checkpoint ({type(error).__name__}: {reason}); it may be cut "
        "short or not a vitattn-train checkpoint"
    )


def unsafe_reason(path: Path, error: BaseException) -> str:
    """One line: what the file wanted to build, and that it was not loaded."""
    wanted = re.search(r"GLOBAL ([\w.]+)", str(error))
    what = f"it asks to run {wanted.group(1)}" if wanted else "it holds more than weights"
    return (
        f"{path} was not loaded: {what}, so it may carry code; vitattn reads only checkpoints "
        "of tensors and plain settings (as vitattn-train writes them)"
    )


def stored_network(ckpt_path: str) -> tuple[dict[str, Any], Any]:
    """The checkpoint a run continues from (:func:`read_checkpoint`) and the network config it
    stores; a file that is none, or holds none, is one line (:class:`ConfigError`)."""
    try:
        checkpoint = read_checkpoint(ckpt_path)
        return checkpoint, checkpoint["hyper_parameters"]["net"]
    except VitattnError:  # a file that carries code, or configs vitattn does not build
        raise
    except FileNotFoundError as error:
        raise ConfigError(f"ckpt_path={ckpt_path} is not a file") from error
    except Exception as error:
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a vitattn-train checkpoint ({type(error).__name__})"
        ) from error


def check_checkpoint_matches(
    ckpt_path: str, network: Any, training: Mapping[str, Any] | None = None
) -> None:
    """Refuse, in one line, a checkpoint whose network config differs from ``network`` (the
    configured ``module.hparams.net``), or whose weights do not have its shapes. With
    ``training`` (the configured ``optimizer`` and ``scheduler``, the latter ``None`` for a
    constant rate), the training state a resume restores is checked against what they write
    (:func:`vitattn.runs.training_state.check_training_state`)."""
    checkpoint, stored = stored_network(ckpt_path)
    configured = network_settings(network)
    try:
        stored = network_settings(stored)
    except Exception as error:  # an interpolation to nothing, a value OmegaConf cannot hold
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a vitattn-train checkpoint: its network config does "
            f"not resolve ({type(error).__name__})"
        ) from error
    if stored == configured:
        net = meta_network(stored)
        if net is None:  # a network that cannot be built on the meta device: Lightning checks
            return
        check_weight_shapes(checkpoint.get("state_dict"), net, ckpt_path)
        if training is not None:
            check_training_state(
                checkpoint, net, training["optimizer"], training.get("scheduler"), ckpt_path
            )
        return
    stored_flat, configured_flat = flatten(stored, "."), flatten(configured, ".")
    differ = sorted(
        key
        for key in set(stored_flat) | set(configured_flat)
        if stored_flat.get(key) != configured_flat.get(key)
    )
    shown = ", ".join(
        f"model.{k}={stored_flat.get(k)} (here {configured_flat.get(k)})" for k in differ[:3]
    )
    raise ConfigError(
        f"ckpt_path={ckpt_path} was trained with another network: {shown}; "
        "resume without model/attention overrides, or start a new run"
    )


def network_settings(network: Any) -> dict[str, Any]:
    """A network's config (configured, or stored in a checkpoint) as plain values, resolved,
    without ``compile``: compiling or not does not change the weights."""
    settings = OmegaConf.to_container(OmegaConf.create(dict(network)), resolve=True)
    settings.pop("compile", None)
    return settings


def meta_network(network: dict[str, Any], where: str | None = None) -> Any:
    """The network ``network`` configures, built on the meta device (no memory); ``None`` if it
    does not build there. With ``where`` (``<file>: hyper_parameters.net``), a setting the
    network's own checks refuse is one line naming it and why (:func:`build_failure`)."""
    import hydra
    import torch

    try:
        with torch.device("meta"):
            return hydra.utils.instantiate(network)
    except Exception as error:
        cause = root_cause(error)
        if where is not None and isinstance(cause, VitattnError):
            raise ConfigError(
                f"{where} does not build a network ({build_failure(error)}); nothing was loaded"
            ) from None
        return None


def root_cause(error: BaseException) -> BaseException:
    """The innermost cause of ``error`` (Hydra wraps what a target raised in its own
    ``InstantiationException``, whose first line names only the target)."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def build_failure(error: BaseException) -> str:
    """Why building from a stored config failed, on one line, escaped and cut: the innermost
    cause's type and message (``ConfigError: model.pool='bogus' is not valid; ...``)."""
    cause = root_cause(error)
    text = one_line(" ".join(str(cause).split()))
    return f"{type(cause).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def check_weight_shapes(weights: Any, net: Any, source: str) -> None:
    """Refuse in one line a checkpoint whose weights are not those of ``net``, the network its
    config builds (on the meta device: :func:`meta_network`): the same names (``net.<name>``),
    none missing and none more (Lightning's strict load would fail with a traceback), each of
    the same shape."""
    expected = {f"net.{name}": tensor for name, tensor in net.state_dict().items()}
    if not isinstance(weights, Mapping):
        raise ConfigError(f"{source}: it holds no state_dict of weights; nothing was loaded")
    names = {str(name) for name in weights}
    missing, extra = sorted(set(expected) - names), sorted(names - set(expected))
    if missing or extra:
        differing = missing or extra
        first = one_line(differing[0])
        more = f" (and {len(differing) - 1} more)" if len(differing) > 1 else ""
        problem = (
            f"lacks {first}{more}, which the network its config builds has"
            if missing
            else f"holds {first}{more}, which no weight of the network its config builds has"
        )
        raise ConfigError(f"{source}: state_dict {problem}; nothing was loaded")
    for name, tensor in weights.items():
        shape = getattr(expected.get(str(name)), "shape", None)
        if shape is not None and getattr(tensor, "shape", None) != shape:
            raise ConfigError(
                f"{source}: state_dict.{name} has shape {tuple(tensor.shape)}, but the network "
                f"its config builds has {tuple(shape)} there; nothing was loaded"
            )


def best_checkpoint(trainer: Any) -> str | None:
    """The best checkpoint by the monitored metric, else the latest one saved, else ``None``."""
    callbacks = trainer.checkpoint_callbacks
    monitored = [c.best_model_path for c in callbacks if c.monitor and c.best_model_path]
    latest = [c.best_model_path or c.last_model_path for c in callbacks if not c.monitor]
    return next((path for path in monitored + latest if path), None)


def run_test_on_best(trainer: Any, module: Any, datamodule: Any) -> tuple[str | None, dict]:
    """Test the best checkpoint (:func:`best_checkpoint`; the weights in memory if none was
    saved). Returns the checkpoint tested and the ``test/`` metrics."""
    ckpt_path = best_checkpoint(trainer)
    if ckpt_path is None and trainer.limit_val_batches == 0:
        log.info(
            "no validation (trainer.limit_val_batches=0), so no best checkpoint: testing "
            "the final weights"
        )
    elif ckpt_path is None:
        log.warning("no checkpoint was saved: testing the weights in memory")
    trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path, verbose=False)
    metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
    return ckpt_path, metrics
