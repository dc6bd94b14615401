"""The attention-kernel interface and the registry of mechanisms.

A *kernel* maps ``q, k, v`` of shape ``(batch, heads, tokens, head_dim)`` to an output of the same
shape. It owns no projections: :class:`vitattn.attention.common.multihead.MultiHeadAttention`
does, as in the xformers attention zoo. Adding a mechanism is one module in
``vitattn/attention/`` (a kernel class decorated with :func:`register_attention`) plus one
``configs/attention/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from vitattn.errors import ConfigError

ATTENTIONS: dict[str, type[AttentionKernel]] = {}
"""Name (the ``attention=<name>`` choice) to kernel class, filled by :func:`register_attention`."""

KernelT = TypeVar("KernelT", bound="type[AttentionKernel]")


def register_attention(name: str) -> Callable[[KernelT], KernelT]:
    """Class decorator that adds a kernel to :data:`ATTENTIONS` under ``name``."""

    def decorator(cls: KernelT) -> KernelT:
        if name in ATTENTIONS and ATTENTIONS[name] is not cls:
            raise ValueError(f"attention name {name!r} is registered twice")
        cls.name = name
        ATTENTIONS[name] = cls
        return cls

    return decorator


class AttentionKernel(nn.Module):
    """Base class of every attention mechanism.

    Args:
        seq_len: number of tokens the model feeds in (fixed for a given model).
        heads: number of attention heads.
        head_dim: size of each head's query, key and value vectors.
    """

    name: str = ""
    """The registry name, set by :func:`register_attention`."""

    shared_qk: bool = False
    """``True`` for a kernel that ignores ``k`` (its keys are derived from ``q``): the multi-head
    wrapper then projects no keys."""

    network_calls_before_forward: bool = False
    """Whether the network holding this kernel calls :meth:`before_forward` before each forward
    (:func:`before_forward_of_kernels`), rather than the kernel's own forward: set by a network
    that compiles its forward, since state a compiled graph reads is a guard of the graph."""

    counts_every_forward: bool = False
    """Whether :meth:`before_forward` changes Python state at every training forward
    (Performer's count): a network compiled whole by its user, ``torch.compile(network)``, then
    calls it untraced (:func:`before_forward_of_kernels`), where a traced count is a guard that
    fails at every step."""

    def __init__(self, *, seq_len: int, heads: int, head_dim: int) -> None:
        super().__init__()
        for setting, value in (("seq_len", seq_len), ("heads", heads), ("head_dim", head_dim)):
            if int(value) < 1:
                raise ConfigError(f"attention {setting}={value} must be a positive integer")
        self.seq_len = int(seq_len)
        self.heads = int(heads)
        self.head_dim = int(head_dim)
        self.scale = self.head_dim**-0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attend: ``(batch, heads, tokens, head_dim)`` three times in, the same shape out."""
        raise NotImplementedError

    def before_forward(self, device: torch.device) -> None:
        """The host's work before a forward on ``device``, in Python state (Performer counts its
        training forwards to redraw its features when due); none here. A kernel whose forward
        needs it done calls it at its start unless :attr:`network_calls_before_forward`."""

    def before_own_forward(self, device: torch.device) -> None:
        """What a kernel whose forward needs :meth:`before_forward` calls at its start: nothing
        where the network calls it (:attr:`network_calls_before_forward`), else
        :meth:`before_forward`. A kernel compiled alone and training, ``torch.compile(kernel)``,
        that :attr:`counts_every_forward` runs it untraced: a graph break before its first
        operator, so ``fullgraph=True`` refuses it at its first call; traced, Performer's count
        was a guard that recompiled the kernel at every step, up to Dynamo's limit (8), after
        which it ran eager, or ``fullgraph=True`` failed at the ninth step."""
        if self.network_calls_before_forward:
            return
        if self.counts_every_forward and self.training and torch.compiler.is_compiling():
            _untraced(self.before_forward, device)
        else:
            self.before_forward(device)

    def exact_because(self) -> str | None:
        """Why this kernel, at its ``seq_len`` and knobs, computes exactly what full attention
        computes (its approximation does nothing here), or ``None`` when it approximates.

        A comparison of such a run with softmax compares softmax with itself, at the cost of the
        mechanism: training warns and ``metrics.json`` records the reason as ``degenerate``.
        Mechanisms with a budget that can cover the whole sequence override this.
        """
        return None

    def resolved_knobs(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """``knobs`` (an attention config's knob names and values) with each one left ``None``
        replaced by the value this kernel computed for it from the token count (Nyström's
        landmarks, BigBird's block, Reformer's chunk and buckets): the value the run used.

        Every mechanism keeps a knob as the attribute of its name; a mechanism that computes one
        otherwise overrides this. A knob the kernel keeps no attribute for stays as given.
        """
        return {
            name: getattr(self, name, None) if value is None else value
            for name, value in knobs.items()
        }

    def extra_repr(self) -> str:
        return f"seq_len={self.seq_len}, heads={self.heads}, head_dim={self.head_dim}"


def exact_by_construction(model: nn.Module) -> str | None:
    """Why every attention kernel in ``model`` is exact by construction (the first kernel's
    :meth:`AttentionKernel.exact_because`), or ``None`` if any of them approximates or there is
    none: one reason for a whole model, however many layers."""
    reasons = [m.exact_because() for m in model.modules() if isinstance(m, AttentionKernel)]
    return reasons[0] if reasons and all(reasons) else None


def before_forward_of_kernels(network: nn.Module, device: torch.device) -> None:
    """Every kernel of ``network`` set to have its :meth:`~AttentionKernel.before_forward` called
    by the network, and called: what a network that compiles its forward calls before it on
    ``device``, outside the graph. Python state that a graph reads is a guard of the graph: a
    counter changed at every step (Performer's) recompiled the network at every step until
    Dynamo's limit (8), which then ran it eager for the rest of the run (local attention's
    layout, a cache filled here until it became buffers, recompiled it once).

    Where a user compiles the whole network, ``torch.compile(network)``, this is traced with
    its forward: the host work of a kernel that :attr:`~AttentionKernel.counts_every_forward`
    then runs untraced (a graph break before the network's first operator, once per forward;
    traced, Performer recompiled the network at every step, then ran it eager), and the rest is
    traced."""
    for module in network.modules():
        if isinstance(module, AttentionKernel):
            module.network_calls_before_forward = True
            if module.counts_every_forward:
                _untraced(module.before_forward, device)
            else:
                module.before_forward(device)


@torch.compiler.disable
def _untraced(call: Callable[[torch.device], None], device: torch.device) -> None:
    call(device)
