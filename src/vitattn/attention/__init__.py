"""Attention mechanisms, one module each, and the registry :data:`ATTENTIONS`.

Every module of this package other than the infrastructure below is imported on import, so a
kernel decorated with :func:`register_attention` is available as soon as its file exists.
"""

import importlib
import pkgutil

from vitattn.attention.base import ATTENTIONS, AttentionKernel, register_attention
from vitattn.attention.multihead import MultiHeadAttention

_INFRASTRUCTURE = {"base", "multihead"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ATTENTIONS", "AttentionKernel", "MultiHeadAttention", "register_attention"]
