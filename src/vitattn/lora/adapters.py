"""LoRA adapters on a :class:`~vitattn.models.vit.VisionTransformer`, through the PEFT library.

Low-rank adaptation (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR
2022) freezes a weight ``W`` (``out x in``) and learns ``W + (alpha / r) B A`` with ``A``
(``r x in``) and ``B`` (``out x r``), ``B`` starting at zero so that training starts from the
base model. A targeted linear layer gains ``r * (in + out)`` parameters; merging folds ``B A``
into ``W`` and leaves a plain network of the original shape.

PEFT (``peft.LoraConfig`` + ``peft.get_peft_model``) builds and merges the adapters; this module
resolves which layers to target, with one-line errors, and counts parameters. ``peft`` is
imported only when adapters are built (it pulls in ``transformers``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitattn.errors import ConfigError, MissingDependencyError
from vitattn.runs.files import one_line
from vitattn.utils import checks
from vitattn.utils.sizes import MAX_LORA_RANK

DEFAULT_TARGETS = ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
"""The attention projections and both MLP layers of every block."""
ADAPTABLE = (nn.Linear, nn.Conv2d, nn.Embedding)
"""Layer types PEFT's LoRA can adapt (of those a VisionTransformer has)."""
HEAD = "head"


@dataclass
class LoRASettings:
    """The ``lora`` node of ``configs/finetune.yaml``.

    Args:
        rank: ``r``, the rank of the update; 0 means full fine-tuning (no adapters, every
            parameter trains).
        alpha: the update is scaled by ``alpha / rank``. As in the LoRA paper, ``alpha`` stays
            fixed while the rank varies, so the learning rate need not be retuned per rank.
        dropout: dropout on the input of the adapters.
        target_modules: layers that get adapters: a list of names, each matching a layer whose
            full name equals it or ends with ``.<name>`` (PEFT's rule), or one regular
            expression that must match a full name (e.g. ``blocks\\.[23]\\..*``).
        train_head: also train the classifier head fully (it is small: ``(embed_dim + 1) x
            classes``), as PEFT's image-classification recipe does with ``modules_to_save``.
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Sequence[str] | str = field(default_factory=lambda: list(DEFAULT_TARGETS))
    train_head: bool = True

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any] | None, prefix: str = "lora") -> LoRASettings:
        """Build from a config mapping, rejecting unknown keys and invalid values; a refusal
        names each setting as ``<prefix>.<key>`` (``hyper_parameters.lora`` for a checkpoint's),
        escaped."""
        settings = dict(settings or {})
        settings.pop("merge", None)  # acted on by vitattn-finetune, not by the adapters
        known = list(cls.__dataclass_fields__)
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ConfigError(
                f"{prefix}.{one_line(unknown[0])[:80]} is not a setting; choose among "
                f"{prefix}.{f', {prefix}.'.join(known)}, {prefix}.merge"
            )
        if isinstance(settings.get("target_modules"), Sequence) and not isinstance(
            settings["target_modules"], str
        ):
            settings["target_modules"] = [str(t) for t in settings["target_modules"]]
        result = cls(**settings)
        result.validate(prefix)
        return result

    def validate(self, prefix: str = "lora") -> None:
        """Refuse in one line a setting out of its type or range, named ``<prefix>.<key>``."""
        rank = f"{prefix}.rank"
        checks.of_type(rank, self.rank, int)  # not 2.0, which checks.integer would take
        checks.integer(
            rank, self.rank, 0, MAX_LORA_RANK, hint=" (0 = full fine-tuning)"
        )  # 10**12 allocated 128 TB in the run (red team): a checkpoint's rank is so bounded
        checks.positive(f"{prefix}.alpha", self.alpha)
        checks.fraction(f"{prefix}.dropout", self.dropout)
        checks.flag(f"{prefix}.train_head", self.train_head)
        if not self.target_modules and self.rank > 0:  # rank 0 has none (:meth:`in_effect`)
            raise ConfigError(
                f"{prefix}.target_modules is empty; name layers such as "
                f"[{', '.join(DEFAULT_TARGETS)}]"
            )

    def check_choices(self, prefix: str = "lora") -> None:
        """Refuse in one line settings that contradict each other, as a command line gives them:
        ``rank=0`` (full fine-tuning, every weight trains, the head's too) with
        ``train_head=false``. Until 2026-12-02 that run trained the head all the same and its
        ``metrics.json`` said ``lora/train_head: false``. Not part of :meth:`validate`: a
        checkpoint such a run wrote stores it, and still loads (:meth:`in_effect`)."""
        if self.rank == 0 and self.train_head is False:
            raise ConfigError(
                f"{prefix}.train_head=false is not valid with {prefix}.rank=0, which trains "
                f"every weight, the head's too; choose {prefix}.train_head=true, or a "
                f"{prefix}.rank of 1 or more to train adapters without the head"
            )

    def in_effect(self) -> LoRASettings:
        """The settings as they act: at ``rank=0`` no layer gets an adapter and every weight
        trains, so no ``target_modules`` (nor ``dropout``, the adapters' input's) and
        ``train_head=true``, whatever was given; at any other rank, these. What a fine-tune
        stores and records (:class:`~vitattn.lora.module.LoRAClassifier`, ``metrics.json``):
        until 2026-12-02 a rank-0 run recorded the targets it never adapted."""
        if self.rank > 0:
            return self
        return dataclasses.replace(self, target_modules=[], dropout=0.0, train_head=True)

    def recorded(self) -> dict[str, Any]:
        """The settings as a run records them (``metrics.json``, the HPARAMS view): those
        :meth:`in_effect`, with no ``alpha`` at ``rank=0``, where there is no update to scale
        (the HPARAMS view showed the 16 given until 2026-12-02)."""
        acting = self.in_effect().as_dict()
        if self.rank == 0:
            acting["alpha"] = None
        return acting

    def as_dict(self) -> dict[str, Any]:
        targets = self.target_modules
        return {
            "rank": self.rank,
            "alpha": self.alpha,
            "dropout": self.dropout,
            "target_modules": targets if isinstance(targets, str) else list(targets),
            "train_head": self.train_head,
        }


def require_peft(*, only_installed: bool = False) -> None:
    """Fail in one line, naming the extra to install, where PEFT cannot be imported; with
    ``only_installed``, where it is not installed (found without importing it and the
    transformers it imports, which takes seconds: a command checks that first and imports it
    after its cheaper checks)."""
    import importlib.util

    try:
        if only_installed:
            if importlib.util.find_spec("peft") is None:
                raise ModuleNotFoundError("No module named 'peft'", name="peft")
        else:
            import peft  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            f"LoRA adapters need the peft package, which cannot be imported ({error}); "
            'pip install -e ".[lora]" (or pip install peft)'
        ) from error


def adaptable_layers(net: nn.Module) -> dict[str, nn.Module]:
    """Full names of the layers LoRA can adapt, in model order."""
    return {name: m for name, m in net.named_modules() if name and isinstance(m, ADAPTABLE)}


def layer_choices(net: nn.Module) -> list[str]:
    """Short names that target layers: ``blocks.<i>.`` dropped (``attn.qkv``, ``head``, ...)."""
    short = (re.sub(r"^blocks\.\d+\.", "", name) for name in adaptable_layers(net))
    return list(dict.fromkeys(short))


def resolve_targets(
    net: nn.Module, targets: Sequence[str] | str, prefix: str = "lora"
) -> list[str]:
    """The full names of the layers ``targets`` selects (PEFT's matching rules).

    Raises :class:`ConfigError` naming ``<prefix>.target_modules`` and the valid names when an
    entry matches no adaptable layer.
    """
    layers = list(adaptable_layers(net))
    choices = ", ".join(layer_choices(net))
    if isinstance(targets, str):
        try:
            pattern = re.compile(targets)
        except re.error as error:
            raise ConfigError(
                f"lora.target_modules={targets!r} is not a valid regular expression ({error})"
            ) from error
        matched = [name for name in layers if pattern.fullmatch(name)]
        if not matched:
            raise ConfigError(
                f"lora.target_modules={targets!r} matches no layer; "
                f"layers are named blocks.<i>.<name> with <name> one of: {choices}"
            )
        return matched
    matched: list[str] = []
    for target in targets:
        hits = [name for name in layers if name == target or name.endswith(f".{target}")]
        if not hits:
            raise ConfigError(
                f"{prefix}.target_modules: {target[:80]!r} matches no layer; choose among: "
                f"{choices}"
            )
        matched += [name for name in hits if name not in matched]
    return [name for name in layers if name in matched]  # model order


def check_stored_settings(settings: Any, net: nn.Module, source: str) -> None:
    """Refuse in one line (:class:`ConfigError`) the LoRA settings a checkpoint stores
    (``hyper_parameters.lora`` of the file ``source``) that :class:`LoRASettings` refuses, or
    whose ``target_modules`` select no layer of ``net`` (its base network, on the meta device):
    the line names the file and ``hyper_parameters.lora.<key>``, which no command line sets."""
    prefix = "hyper_parameters.lora"
    try:
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{prefix} is a {type(settings).__name__}, not a mapping")
        stored = LoRASettings.from_mapping(settings, prefix)
        if stored.rank > 0:
            resolve_targets(net, stored.target_modules, prefix)
    except (ConfigError, TypeError) as error:
        raise ConfigError(f"{source}: {one_line(error)}; nothing was loaded") from None


def apply_lora(net: nn.Module, settings: LoRASettings) -> nn.Module:
    """Freeze ``net`` and add LoRA adapters; ``rank=0`` leaves it as is, every parameter trainable.

    Returns the ``peft.PeftModel`` wrapping ``net`` (its forward is ``net``'s); the adapters are
    trainable, and the head too if ``settings.train_head``.
    """
    settings.validate()
    if settings.rank == 0:
        for param in net.parameters():
            param.requires_grad_(True)
        return net
    targets = resolve_targets(net, settings.target_modules)
    head_targeted = any(name == HEAD or name.startswith(f"{HEAD}.") for name in targets)
    if settings.train_head and head_targeted:
        raise ConfigError(
            "lora.train_head=true trains the head fully; remove head from lora.target_modules "
            "or set lora.train_head=false"
        )
    require_peft()
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,  # exact full names: resolved (and checked) above
        bias="none",
    )
    model = get_peft_model(net, config)  # freezes every base parameter
    if settings.train_head:
        head = getattr(net, HEAD, None)
        if head is None:
            raise ConfigError("lora.train_head=true but the network has no `head` layer")
        for param in head.parameters():
            param.requires_grad_(True)
    return model


def is_lora_parameter(name: str) -> bool:
    """Whether a parameter name (of a PEFT-wrapped network) belongs to an adapter."""
    return ".lora_" in name or name.startswith("lora_")


def base_network(net: nn.Module) -> nn.Module:
    """The network inside a ``PeftModel`` (with its LoRA layers), or ``net`` itself."""
    get_base = getattr(net, "get_base_model", None)
    return get_base() if callable(get_base) else net


def load_plain_weights(net: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load a plain network's weights (as ``vitattn-train`` saved them) into ``net``.

    Works whether or not ``net`` carries adapters: the weights of an adapted layer live under
    ``<layer>.base_layer.`` there. The adapters keep their initial values (``B = 0``).
    """
    target = base_network(net)
    names = set(target.state_dict())
    remapped: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key not in names:
            layer, _, leaf = key.rpartition(".")
            key = f"{layer}.base_layer.{leaf}"
        remapped[key] = value
    missing, unexpected = target.load_state_dict(remapped, strict=False)
    missing = [name for name in missing if not is_lora_parameter(name)]
    if missing or unexpected:
        raise ConfigError(
            "the checkpoint's network does not match the model built from its config "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def merge(net: nn.Module) -> nn.Module:
    """The plain network with every adapter folded into its layer's weight (``W + s B A``)."""
    merge_and_unload = getattr(net, "merge_and_unload", None)
    return merge_and_unload() if callable(merge_and_unload) else net


@dataclass(frozen=True)
class ParameterCounts:
    """``total`` (the plain network's), ``trainable``, and ``lora`` (the adapters')."""

    total: int
    trainable: int
    lora: int


def count_parameters(net: nn.Module) -> ParameterCounts:
    """Parameter counts of a network with or without adapters; ``total`` excludes adapters."""
    lora = trainable = total = 0
    for name, param in net.named_parameters():
        if is_lora_parameter(name):
            lora += param.numel()
        else:
            total += param.numel()
        if param.requires_grad:
            trainable += param.numel()
    return ParameterCounts(total=total, trainable=trainable, lora=lora)
