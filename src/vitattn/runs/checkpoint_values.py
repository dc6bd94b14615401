"""What a checkpoint's values may be: bounded, typed, and no tensor that claims more memory
than the file holds.

:func:`check_values` runs on every checkpoint vitattn or Lightning reads (through
:func:`vitattn.runs.checkpoints.check_contents`), before anything is built or restored from it,
so each refusal is one line naming the file and the key:

* every tensor, wherever it sits (weights, optimizer state, callbacks' state), is a plain strided
  tensor whose storage holds all its elements: no stride-0 view (``expand``) and no overlapping
  strides, whose first ``+=`` or copy would ask for far more memory than the file has;
* the tensors outside the weights (``state_dict``) and the optimizer's state (generator
  states, a callback's scores) hold at most :data:`MAX_OTHER_TENSOR_BYTES` together, and the
  optimizer's state at most :data:`OPTIMIZER_STATE_FACTOR` times the weights' bytes: a tensor
  of gigabytes under a key of its own (a sparse file holds it in a few kilobytes of disk) would
  be read in whole by a command that loads the file's bytes, and kept by a resume; and the
  storage behind them holds at most 64 MiB more than the tensors show (a view of one element
  of a storage of gigabytes);
* an optimizer state tensor has the shape of one of the checkpoint's weights: a cheap check for
  every command, which needs no config (a sweep continuation reads each ``last.ckpt`` this way);
  a resume checks each parameter's state against the network and optimizer its config builds
  (:mod:`vitattn.runs.training_state`);
* the network's sizes and the LoRA rank are within :mod:`vitattn.utils.sizes`' bounds, and LoRA's
  ``target_modules`` is a list of layer names (never a regular expression from a file);
* Lightning's progress counters (``loops``, ``global_step``, ``epoch``) are counts within
  :data:`MAX_COUNT`, and the state of vitattn's own callbacks and data module has the types and
  sizes they write;
* the state of each Lightning ``ModelCheckpoint`` has the types it writes: its scores numbers
  (or tensors of one number), never NaN, its paths strings, at most :data:`MAX_TOP_K` of them
  in ``best_k_models`` (a score of text trained to the first validation, then failed there).

Each container of the checkpoint is visited once (shared references included).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from vitattn.errors import ConfigError
from vitattn.runs.files import one_line
from vitattn.utils.sizes import MAX_LORA_RANK, bounded, check_network_sizes

MAX_COUNT = 10**12
"""The largest step, batch or epoch count a checkpoint may hold."""

LAYER_NAME = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,15}")
"""A LoRA target from a file: a layer's (dotted) name, no pattern."""
MAX_TARGETS = 1024

RNG_STATE_BYTES = (5056, 16)
"""The sizes of a torch generator's state: CPU (Mersenne Twister) and CUDA (Philox)."""

MAX_OTHER_TENSOR_BYTES = 64 << 20
"""The most bytes a checkpoint's tensors outside its weights and optimizer state may claim
together: vitattn-train's hold a few generator states (5 KB each) and scalar scores."""

OPTIMIZER_STATE_FACTOR = 4
"""The most bytes the optimizer's state may claim, in multiples of the weights': Adam keeps two
moments of each weight and a step count."""


MAX_TOP_K = 10_000
"""The most checkpoints a ``ModelCheckpoint``'s state may list in ``best_k_models``."""

MAX_PATH_TEXT = 4096
"""The longest path a ``ModelCheckpoint``'s state may hold (Linux's ``PATH_MAX``)."""

MODEL_CHECKPOINT_SCORES = ("kth_value", "best_model_score", "current_score")
"""The scores a ``ModelCheckpoint`` writes into its state (``None`` before there is one)."""


class CheckpointValueError(ConfigError):
    """A checkpoint holds a value outside its type or bound: nothing was built from it."""


def leaves(
    content: Any, key: str = "", source: str = "the checkpoint"
) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` for every value under ``content`` that is no dict, list or tuple; each
    container is entered once, however many times it is referred to, and nesting deeper than
    :data:`~vitattn.runs.trust.MAX_CONFIG_DEPTH` is refused."""
    from vitattn.runs.trust import MAX_CONFIG_DEPTH, depth, plain, shown

    seen: set[int] = set()
    pending: list[tuple[Any, Any]] = [((None, key), content)]
    while pending:
        path, value = pending.pop()
        value = plain(value)  # an older checkpoint's OmegaConf container, nothing resolved
        if isinstance(value, Mapping | list | tuple):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if depth(path) > MAX_CONFIG_DEPTH:
                raise CheckpointValueError(
                    f"{source}: {key or 'it'} nests deeper than {MAX_CONFIG_DEPTH} levels; "
                    "nothing was loaded"
                )
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            pending.extend(((path, f".{name}"), item) for name, item in items)
        else:
            yield shown(path).removeprefix("."), value


def tensor_problem(tensor: Any) -> str | None:
    """Why ``tensor`` (read from a file) would ask for more memory than it holds, or ``None``."""
    import torch

    if tensor.layout != torch.strided:
        return f"a {tensor.layout} tensor, not a plain one"
    if any(
        stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    ):
        return f"a stride-0 view claiming shape {tuple(tensor.shape)}"
    claimed = shown_bytes([tensor])
    held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    if claimed > held:
        return f"a view claiming {claimed} bytes over {max(held, 0)} bytes of storage"
    return None


def check_values(checkpoint: dict[str, Any], source: str) -> None:
    """Refuse in one line (:class:`CheckpointValueError`, naming ``source``) a checkpoint whose
    values are outside their types or bounds (see the module's docstring)."""
    import torch

    shapes: set[tuple[int, ...]] = set()
    claimed = {"weights": 0, "optimizer": 0, "other": 0}
    largest_other = ("", -1)
    tensors: list[Any] = []
    for key, value in leaves(checkpoint, source=source):
        if isinstance(value, torch.Tensor):
            problem = tensor_problem(value)
            if problem is not None:
                raise CheckpointValueError(f"{source}: {key} is {problem}; nothing was loaded")
            tensors.append(value)
            size = shown_bytes([value])
            if key.startswith("state_dict."):
                check_weight_dtype(value, key, source)
                shapes.add(tuple(value.shape))
                claimed["weights"] += size
            elif key.startswith("optimizer_states."):
                claimed["optimizer"] += size
            else:
                claimed["other"] += size
                largest_other = max(largest_other, (key, size), key=lambda pair: pair[1])
    check_tensor_bytes(claimed, largest_other, source)
    held = sum(storage_bytes(tensors).values())
    if held > sum(claimed.values()) + MAX_OTHER_TENSOR_BYTES:
        raise CheckpointValueError(
            f"{source}: its tensors are views of {held:,} bytes of storage, more than the "
            f"{sum(claimed.values()):,} they show (a tensor of one element can hold gigabytes "
            "behind it); nothing was loaded"
        )
    check_optimizer_states(checkpoint.get("optimizer_states"), shapes, source)
    check_progress(checkpoint, source)
    check_own_state(checkpoint, source)
    settings = checkpoint.get("hyper_parameters")
    if isinstance(settings, Mapping):
        if isinstance(settings.get("net"), Mapping):
            check_attention_config(settings["net"], source)
            check_network_sizes(settings["net"], f"{source}: hyper_parameters.net")
            classes, net_classes = settings.get("num_classes"), settings["net"].get("num_classes")
            if "num_classes" in settings and net_classes is not None and classes != net_classes:
                # the metrics are sized by one, the network's head by the other: evaluating
                # ended in an unexpected ValueError, once the run was made (red team)
                raise CheckpointValueError(
                    f"{source}: hyper_parameters.num_classes={str(classes)[:80]} is not its "
                    f"network's ({str(net_classes)[:80]}, hyper_parameters.net.num_classes), "
                    "as vitattn writes them; nothing was loaded"
                )
        if isinstance(settings.get("lora"), Mapping):
            check_lora(settings["lora"], source)
        if "label_smoothing" in settings and not is_fraction(settings["label_smoothing"]):
            # refused by the module as if the command line had set it (user audit, 2026-12-02)
            raise CheckpointValueError(
                f"{source}: hyper_parameters.label_smoothing="
                f"{one_line(repr(settings['label_smoothing']))[:80]} is not a number with "
                "0 <= label_smoothing < 1, as vitattn writes it; nothing was loaded"
            )


def is_fraction(value: Any) -> bool:
    """Whether ``value`` is a number ``0 <= value < 1`` (:func:`vitattn.utils.checks.fraction`)."""
    from vitattn.utils.checks import is_number

    return is_number(value) and 0 <= value < 1


def check_weight_dtype(tensor: Any, key: str, source: str) -> None:
    """Refuse a weight (``key``, under ``state_dict``) of a dtype no vitattn network holds: a
    network's parameters and buffers are floating point, but for the ``int64`` index tables an
    attention keeps (BigBird's ``key_blocks``). An integer, boolean or complex weight would be
    cast into a float parameter as it loads (a complex one dropping its imaginary part)."""
    import torch

    if tensor.is_floating_point() or tensor.dtype == torch.int64:
        return
    raise CheckpointValueError(
        f"{source}: {one_line(key)} is a tensor of {str(tensor.dtype).removeprefix('torch.')}; a "
        "network's weights are floating point (float32, float16, bfloat16, float64), or int64 "
        "where an attention keeps an index table; nothing was loaded"
    )


def check_attention_config(net: Mapping[str, Any], source: str) -> None:
    """A stored network's ``attention`` is a config of one (a mapping naming its ``_target_``),
    as vitattn writes it: anything else fails in the network's constructor with a message that
    does not name it."""
    attention = net.get("attention")
    if "attention" in net and not (isinstance(attention, Mapping) and "_target_" in attention):
        simple = attention is None or isinstance(attention, str | int | float)
        held = repr(attention)[:80] if simple else f"a {type(attention).__name__}"
        raise CheckpointValueError(
            f"{source}: hyper_parameters.net.attention={held} is not an "
            "attention's config (a mapping with its _target_, as configs/attention/ writes "
            "it); nothing was loaded"
        )


def shown_bytes(tensors: Iterable[Any]) -> int:
    """The bytes ``tensors`` show (their elements, not the storage behind them), together;
    values that are no tensor (an attention's ``_extra_state`` in a state dict) show none."""
    import torch

    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def storage_bytes(tensors: Iterable[Any]) -> dict[int, int]:
    """The bytes of each storage behind ``tensors``, by its address: a storage shared by several
    tensors (tied weights, views) counted once."""
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return storages


def check_tensor_bytes(
    claimed: Mapping[str, int], largest_other: tuple[str, int], source: str
) -> None:
    """The bytes the tensors of a checkpoint claim, by where they sit (``weights``,
    ``optimizer``, ``other``), within :data:`MAX_OTHER_TENSOR_BYTES` and
    :data:`OPTIMIZER_STATE_FACTOR`; ``largest_other`` is the key and size of the largest
    ``other`` tensor, named in the refusal."""
    if claimed["other"] > MAX_OTHER_TENSOR_BYTES:
        key, size = largest_other
        raise CheckpointValueError(
            f"{source}: its tensors outside the weights and the optimizer's state claim "
            f"{claimed['other']:,} bytes ({key} {size:,}), more than the "
            f"{MAX_OTHER_TENSOR_BYTES:,} a checkpoint of vitattn-train holds; nothing was loaded"
        )
    if claimed["optimizer"] > OPTIMIZER_STATE_FACTOR * claimed["weights"]:
        raise CheckpointValueError(
            f"{source}: its optimizer state claims {claimed['optimizer']:,} bytes, more than "
            f"{OPTIMIZER_STATE_FACTOR} times its weights' {claimed['weights']:,}; nothing was "
            "loaded"
        )


def check_optimizer_states(states: Any, shapes: set[tuple[int, ...]], source: str) -> None:
    """Each optimizer state tensor of more than one element has the shape of a weight."""
    import torch

    for key, value in leaves(states, "optimizer_states", source):
        if (
            isinstance(value, torch.Tensor)
            and value.numel() > 1
            and tuple(value.shape) not in shapes
        ):
            raise CheckpointValueError(
                f"{source}: {key} has shape {tuple(value.shape)}, which no weight of the "
                "checkpoint has; nothing was loaded"
            )


PRECISION_KEY = "vitattn_precision"
"""A checkpoint's record of the precision its run trained and tested at, which ``vitattn-eval``
tests at unless told otherwise: ``{"trainer": <Lightning's trainer.precision>, "matmul": <torch's
float32 matmul precision>}`` (written by ``vitattn.models.module.ViTClassifier``)."""

TRAINER_PRECISIONS = (
    "64-true",
    "32-true",
    "16-true",
    "bf16-true",
    "16-mixed",
    "bf16-mixed",
    "transformer-engine",
    "transformer-engine-float16",
)
"""The ``trainer.precision`` values Lightning's trainer reports (its ``precision`` property)."""

MATMUL_PRECISIONS = ("highest", "high", "medium")
"""The float32 matmul precisions torch has (``torch.get_float32_matmul_precision``)."""

SCHEDULE_KEY = "vitattn_schedule_steps"
"""A checkpoint's record of the steps its run's schedule was planned for (written by
``vitattn.models.module.ViTClassifier``, read when a run resumes)."""


def count(source: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        # an integer past Python's 4,300 digits has no repr: it raised ValueError, not one line
        huge = isinstance(value, int) and value.bit_length() > 64
        shown = f"an integer of {value.bit_length()} bits" if huge else repr(value)
        raise CheckpointValueError(
            f"{source}: {key}={shown} is not a count (an integer 0 <= count <= {MAX_COUNT}); "
            "nothing was loaded"
        )


def check_precision(source: str, recorded: Any) -> None:
    """Refuse a :data:`PRECISION_KEY` that is not the two words vitattn records."""
    words = (("trainer", TRAINER_PRECISIONS), ("matmul", MATMUL_PRECISIONS))
    if not (
        isinstance(recorded, dict)
        and len(recorded) == len(words)
        and all(
            isinstance(recorded.get(key), str) and recorded[key] in valid for key, valid in words
        )
    ):
        shown = ", ".join(f"'{key}': one of {', '.join(valid)}" for key, valid in words)
        raise CheckpointValueError(
            f"{source}: {PRECISION_KEY} is not a precision as vitattn records one ({{{shown}}}); "
            "nothing was loaded"
        )


def check_progress(checkpoint: dict[str, Any], source: str) -> None:
    """Lightning's loop progress and step counters: counts (flags where Lightning writes one)."""
    for key in ("global_step", "epoch"):
        if key in checkpoint:
            count(source, key, checkpoint[key])
    for key, value in leaves(checkpoint.get("loops"), "loops", source):
        if not isinstance(value, bool) and value is not None:
            count(source, key, value)


def check_own_state(checkpoint: dict[str, Any], source: str) -> None:
    """The state vitattn's random-state callback, data module and module write: generator states
    of a generator's size, a batch count, the steps the schedule was planned for, and the
    precision the run trained at."""
    if SCHEDULE_KEY in checkpoint:
        count(source, SCHEDULE_KEY, checkpoint[SCHEDULE_KEY])
    if PRECISION_KEY in checkpoint:
        check_precision(source, checkpoint[PRECISION_KEY])
    callbacks = checkpoint.get("callbacks")
    random_state = callbacks.get("RandomStateInCheckpoint") if isinstance(callbacks, dict) else None
    if isinstance(random_state, dict):
        key = "callbacks.RandomStateInCheckpoint"
        generator_state(source, f"{key}.torch", random_state.get("torch"))
        cuda = random_state.get("cuda", [])
        if not isinstance(cuda, list | tuple) or len(cuda) > 64:
            raise CheckpointValueError(f"{source}: {key}.cuda is not a list of generator states")
        for index, state in enumerate(cuda):
            generator_state(source, f"{key}.cuda[{index}]", state)
    for name, state in callbacks.items() if isinstance(callbacks, dict) else ():
        if name == "ModelCheckpoint" or str(name).startswith("ModelCheckpoint{"):
            check_model_checkpoint_state(state, f"callbacks.{one_line(name)}", source)
    data = checkpoint.get("CIFAR10DataModule")
    if isinstance(data, dict):
        if data.get("augment_generator") is not None:
            generator_state(
                source, "CIFAR10DataModule.augment_generator", data["augment_generator"]
            )
        if "batches_done_in_epoch" in data:
            count(source, "CIFAR10DataModule.batches_done_in_epoch", data["batches_done_in_epoch"])


def is_score(value: Any) -> bool:
    """Whether ``value`` is a score as Lightning's ``ModelCheckpoint`` keeps one: a real number
    or a tensor of one, not NaN (``inf`` is its ``kth_value`` before any checkpoint is kept)."""
    import torch

    if isinstance(value, torch.Tensor):
        real = value.dtype != torch.bool and not value.is_complex()
        return real and value.numel() == 1 and not bool(torch.isnan(value).any())
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not (isinstance(value, float) and math.isnan(value))


def check_score(source: str, key: str, value: Any) -> None:
    """Refuse a ``ModelCheckpoint`` score (``key``) that is not ``None`` or :func:`is_score`."""
    if value is not None and not is_score(value):
        raise CheckpointValueError(
            f"{source}: {key} is {type(value).__name__} {str(value)[:60]!r}, not a score (a "
            "number, or a tensor of one, as ModelCheckpoint writes it); nothing was loaded"
        )


def check_path_text(source: str, key: str, value: Any, optional: bool = False) -> None:
    """Refuse a ``ModelCheckpoint`` path (``key``) that is no string of at most
    :data:`MAX_PATH_TEXT` characters (``None`` allowed where ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, str) or len(value) > MAX_PATH_TEXT:
        raise CheckpointValueError(
            f"{source}: {key} is {type(value).__name__} {str(value)[:60]!r}, not a path (a "
            f"string of at most {MAX_PATH_TEXT} characters, as ModelCheckpoint writes it); "
            "nothing was loaded"
        )


def check_model_checkpoint_state(state: Any, key: str, source: str) -> None:
    """A Lightning ``ModelCheckpoint``'s state (at ``key``) of the types it writes: the keys
    its ``load_state_dict`` requires, scores (:func:`check_score`), paths (:func:`check_path_text`),
    and ``best_k_models`` a mapping of at most :data:`MAX_TOP_K` paths to scores."""
    from vitattn.runs.trust import CHECKPOINT_PATH_KEYS

    if not isinstance(state, Mapping) or not {"best_model_path", "best_model_score"} <= set(state):
        raise CheckpointValueError(
            f"{source}: {key} is not a ModelCheckpoint's state (a mapping with best_model_path "
            "and best_model_score); nothing was loaded"
        )
    for name in MODEL_CHECKPOINT_SCORES:
        check_score(source, f"{key}.{name}", state.get(name))
    for name in CHECKPOINT_PATH_KEYS:
        if name in state:
            check_path_text(source, f"{key}.{name}", state[name])
    check_path_text(source, f"{key}.dirpath", state.get("dirpath"), optional=True)
    monitor = state.get("monitor")
    if monitor is not None and not (isinstance(monitor, str) and len(monitor) <= MAX_PATH_TEXT):
        raise CheckpointValueError(
            f"{source}: {key}.monitor is {type(monitor).__name__}, not a metric's name or None; "
            "nothing was loaded"
        )
    best = state.get("best_k_models", {})
    if not isinstance(best, Mapping) or len(best) > MAX_TOP_K:
        raise CheckpointValueError(
            f"{source}: {key}.best_k_models is not a mapping of at most {MAX_TOP_K} checkpoint "
            "paths to scores; nothing was loaded"
        )
    for path, score in best.items():
        check_path_text(source, f"{key}.best_k_models", path)
        check_score(source, f"{key}.best_k_models[{path[:200]!r}]", score)


def generator_state(source: str, key: str, state: Any) -> None:
    import torch

    if not (
        isinstance(state, torch.Tensor)
        and state.dtype == torch.uint8
        and state.ndim == 1
        and state.numel() in RNG_STATE_BYTES
    ):
        raise CheckpointValueError(
            f"{source}: {key} is not a generator's state (a uint8 tensor of "
            f"{' or '.join(map(str, RNG_STATE_BYTES))} bytes); nothing was loaded"
        )


def check_lora(lora: Mapping[str, Any], source: str) -> None:
    """A LoRA rank within :data:`MAX_LORA_RANK`, and ``target_modules`` a list of layer names:
    a regular expression from a file could take forever to match."""
    where = f"{source}: hyper_parameters.lora"
    if "rank" in lora:
        bounded(where, "rank", lora["rank"], MAX_LORA_RANK, low=0)
    targets = lora.get("target_modules")
    if targets is None:
        return
    if not (
        isinstance(targets, list | tuple)
        and len(targets) <= MAX_TARGETS
        and all(isinstance(t, str) and LAYER_NAME.fullmatch(t) for t in targets)
    ):
        raise CheckpointValueError(
            f"{where}.target_modules={str(targets)[:80]!r} is not a list of layer names "
            "(attn.qkv, blocks.0.mlp.fc1, ...); a checkpoint names layers, never a pattern; "
            "nothing was loaded"
        )
