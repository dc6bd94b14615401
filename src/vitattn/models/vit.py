"""A Vision Transformer with an injected attention mechanism.

Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image Recognition at
Scale", ICLR 2021; pre-norm blocks as in timm's ``vision_transformer.py``. With ``patch_size=1``
every pixel is a token, the setting of the founding report and of Long Range Arena's Image task.
"""

from __future__ import annotations

import copy
import hashlib
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torchvision.ops import StochasticDepth

from vitattn.attention.common.base import AttentionKernel, before_forward_of_kernels
from vitattn.attention.common.multihead import MultiHeadAttention
from vitattn.errors import ConfigError
from vitattn.utils import checks
from vitattn.utils.recompiles import recompile_limit
from vitattn.utils.sizes import check_attention_sizes, check_network_sizes

POOLS = ("mean", "cls")
POS_EMBED_INITS = ("sincos", "random")
EMBEDDINGS = ("patch", "intensity")


def sincos_2d_position_embedding(grid: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sine-cosine position codes for a ``grid x grid`` patch grid: ``(grid**2, dim)``.

    As in MAE (He et al. 2022) and "Better plain ViT baselines for ImageNet-1k" (Beyer et al.
    2022): a quarter of the channels each for sin and cos of the row and of the column.
    """
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / max(1, quarter - 1))
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    rows = rows.flatten()[:, None] * omega[None, :]
    cols = cols.flatten()[:, None] * omega[None, :]
    codes = torch.cat([cols.sin(), cols.cos(), rows.sin(), rows.cos()], dim=1)
    return torch.nn.functional.pad(codes, (0, dim - 4 * quarter)).float()


class PatchEmbedding(nn.Module):
    """Cut the image into non-overlapping ``patch_size`` squares and embed each linearly.

    The weights are a stride-``patch_size`` ``Conv2d``'s (as in timm, so checkpoints match), but
    the forward cuts the patches out and applies them as one matrix product: the same numbers,
    and on a CPU several times faster than the convolution (docs/results.md).
    """

    def __init__(self, in_channels: int, embed_dim: int, patch_size: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        p = self.patch_size
        batch, channels = images.shape[:2]
        # (batch, channels, rows, cols, p, p) -> (batch, rows * cols, channels * p * p), in the
        # (channel, row, col) order of the flattened convolution kernel.
        patches = images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5)
        weight = self.proj.weight.flatten(1)
        # The data module hands over fp32 images; under trainer.precision=bf16-true or 16-true
        # the weights are half precision, and so must the patches be.
        patches = patches.reshape(batch, -1, channels * p * p).to(weight.dtype)
        return nn.functional.linear(patches, weight, self.proj.bias)  # (batch, tokens, dim)


class IntensityEmbedding(nn.Module):
    """One token per pixel, embedded by a lookup of its 8-bit intensity (Long Range Arena's Image
    task, Tay et al., ICLR 2021): a 256-entry table per channel, the channels' entries summed.

    Takes the raw uint8 (or integer) images, so the data must not be normalised.
    """

    def __init__(self, in_channels: int, embed_dim: int) -> None:
        super().__init__()
        self.table = nn.Embedding(256 * in_channels, embed_dim)
        self.register_buffer("offsets", torch.arange(in_channels) * 256, persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.is_floating_point():
            raise ConfigError(
                "model.embedding=intensity needs the 8-bit pixel values; set data.normalize=false"
            )
        indices = images.long().flatten(2) + self.offsets[None, :, None]  # (batch, channels, n)
        return self.table(indices).sum(dim=1)  # (batch, tokens, embed_dim)


class MLP(nn.Module):
    """Two linear layers with GELU, the transformer's feed-forward part."""

    def __init__(self, dim: int, hidden_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.dropout(self.act(self.fc1(x)))))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(
        self,
        dim: int,
        heads: int,
        mlp_dim: int,
        seq_len: int,
        attention: Callable[..., AttentionKernel],
        dropout: float,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads, seq_len, attention, proj_dropout=dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, mlp_dim, dropout)
        # Stochastic depth (Huang et al. 2016): drop each residual branch per sample.
        self.drop_path = StochasticDepth(drop_path, mode="row") if drop_path else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


COMPILE_CHOICES = (True, False, "auto")
"""``model.compile``: always, never, or ``auto`` (on :data:`COMPILE_AUTO_DEVICES` only)."""

COMPILE_AUTO_DEVICES = ("cuda",)
"""Where ``model.compile=auto`` compiles."""


def with_own_code(function: Callable[..., Any]) -> Callable[..., Any]:
    """A bound method with a code object of its own (any other callable as it is).

    Dynamo keeps its graphs, and counts them against its recompile limit (8), per code object:
    networks of one class compiled in one process (the check's attentions, a Hydra multirun's
    jobs, a sweep's trials) shared one ``_forward`` and its limit, so from the ninth network of
    another structure on, each trained eager without a word. A copy of the code keeps each
    network's graphs, and its limit, to itself."""
    if not isinstance(function, types.MethodType):
        return function
    original = function.__func__
    own = types.FunctionType(
        original.__code__.replace(),
        original.__globals__,
        original.__name__,
        original.__defaults__,
        original.__closure__,
    )
    own.__kwdefaults__ = original.__kwdefaults__
    own.__qualname__ = original.__qualname__
    return types.MethodType(own, function.__self__)


class CompiledOrEager:
    """``torch.compile(function)`` that says so when it cannot compile.

    ``devices`` (``model.compile=auto``: ``("cuda",)``) names the device types on which it
    compiles; called with inputs elsewhere it runs eager, by choice and without a word.
    Compiling happens at the first call. If it fails there (no C++ toolchain, an operation
    dynamo cannot trace), the run goes on eager with one warning naming the error, and
    :attr:`compiled` turns ``False``; if ``torch.compile`` itself is unavailable, the same from
    the start (with ``devices``, from the first call on one of them). Errors of the model itself
    are not caught: they are raised eager too.

    With ``devices``, ``torch.compile`` is called at the first call on one of them, not before:
    it imports Inductor, seconds of a process's start that a CPU run of ``model.compile=auto``
    never uses.
    """

    def __init__(
        self, function: Callable[..., torch.Tensor], devices: tuple[str, ...] | None = None
    ) -> None:
        self.function = with_own_code(function)
        self.devices = devices
        self.compiled: bool = True
        self._compiled_function: Callable[..., torch.Tensor] | None = None
        if devices is None:
            self._compile()

    def _compile(self) -> None:
        try:
            self._compiled_function = torch.compile(self.function)
        except Exception as error:  # an old torch, a platform torch.compile does not support
            self._fall_back("torch.compile is unavailable here", error)

    def _fall_back(self, why: str, error: BaseException) -> None:
        import logging

        self.compiled, self._compiled_function = False, None
        logging.getLogger(__name__).warning(
            "model.compile=%s: %s (%s: %s); this run continues eager, not compiled",
            self.setting,
            why,
            type(error).__name__,
            str(error).strip().splitlines()[0] if str(error).strip() else "",
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledOrEager:
        """A copy that compiles the copied function. ``deepcopy`` copies a function object by
        reference, so without this a copied network's forward would run the original
        network's compiled forward, the original's weights included."""
        twin = CompiledOrEager.__new__(CompiledOrEager)
        twin.function = with_own_code(copy.deepcopy(self.function, memo))
        twin.devices = self.devices
        twin.compiled = self.compiled
        twin._compiled_function = (
            None if self._compiled_function is None else torch.compile(twin.function)
        )
        return twin

    def graphs(self) -> int | None:
        """How many graphs Dynamo holds of the function: 0 where compiling fell back to eager,
        or where every call so far ran eager without a word (Dynamo had skipped the code:
        pytorch/pytorch#190286, a first call under a dispatch mode, before torch 2.14); ``None``
        where this torch does not tell. The graphs are the code's: a bound method's own
        (:func:`with_own_code`), a module's those of its class."""
        if self._compiled_function is None:
            return 0
        try:
            from torch._dynamo.eval_frame import _debug_get_cache_entry_list

            code = getattr(self.function, "__func__", self.function).__code__
            return len(_debug_get_cache_entry_list(code))
        except Exception:  # a private function of Dynamo's: gone or changed in some torch
            return None

    def ran_compiled(self) -> bool | None:
        """Whether Dynamo holds a compiled graph of the function (:meth:`graphs`)."""
        graphs = self.graphs()
        return None if graphs is None else graphs > 0

    def hit_recompile_limit(self) -> bool:
        """Whether Dynamo holds as many graphs of the function as its recompile limit allows:
        past it, every call that fails their guards runs eager. Python state that changes at
        every step, read inside the graph, recompiles it at every step until then."""
        graphs = self.graphs()
        return graphs is not None and graphs >= recompile_limit()

    @property
    def setting(self) -> str:
        """The ``model.compile`` value this was built for (``true``, or ``auto``: ``devices``),
        as the warnings name it."""
        return "true" if self.devices is None else "auto"

    def compiles_on(self, device_type: str) -> bool:
        """Whether it compiles where inputs are on ``device_type`` (see ``devices``)."""
        return self.devices is None or device_type in self.devices

    def __call__(self, *args: Any) -> torch.Tensor:
        if not self.compiled or not self.compiles_on(args[0].device.type):
            return self.function(*args)
        if self._compiled_function is None:
            self._compile()
            if self._compiled_function is None:
                return self.function(*args)
        from torch._dynamo.exc import TorchDynamoException

        try:
            return self._compiled_function(*args)
        except TorchDynamoException as error:
            self._fall_back("torch.compile failed", error)
            return self.function(*args)


class VisionTransformer(nn.Module):
    """ViT classifier whose blocks use the attention kernel built by ``attention``.

    Args:
        attention: kernel factory (the instantiated ``_partial_`` attention config); each
            block calls it with ``seq_len`` (tokens, class token included), ``heads``, ``head_dim``.
        image_size: side of the square input images.
        in_channels: image channels.
        num_classes: number of output logits.
        patch_size: side of a patch; must divide ``image_size``. Tokens = (image_size/patch)^2.
        embed_dim: token width; must be divisible by ``heads``.
        depth: number of blocks.
        heads: attention heads per block.
        mlp_ratio: MLP hidden size as a multiple of ``embed_dim`` (ignored if ``mlp_dim`` is set).
        mlp_dim: MLP hidden size.
        dropout: dropout after the embedding, in the MLPs and after attention projections.
        drop_path: stochastic-depth rate of the last block, rising linearly from 0 in the first
            (as in DeiT and timm); 0 turns it off.
        pool: ``mean`` (average of the tokens) or ``cls`` (a learned class token).
        pos_embed_init: the learned position embedding starts as 2-D sine-cosine codes
            (``sincos``), which gives a short run the image's geometry from the first step, or as
            small random values (``random``, std 0.02, as in the original ViT).
        embedding: ``patch`` (a linear map of each patch, the ViT's) or ``intensity`` (a lookup
            of each pixel's 8-bit value, Long Range Arena's Image task; needs ``patch_size=1``
            and un-normalised data).
        compile: run the forward pass through ``torch.compile`` (:class:`CompiledOrEager`:
            where it cannot compile, the run goes on eager with a warning that says so);
            ``auto``: compiled on a CUDA GPU, where it pays (docs/check.md: 1.0x to 2.3x the
            eager images/s on an H200), eager on a CPU, where Inductor takes about a minute per
            model for little.
            Parameter names, and so checkpoints, are the same either way.
    """

    def __init__(
        self,
        attention: Callable[..., AttentionKernel],
        image_size: int = 32,
        in_channels: int = 3,
        num_classes: int = 10,
        patch_size: int = 4,
        embed_dim: int = 256,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        mlp_dim: int | None = None,
        dropout: float = 0.0,
        pool: str = "mean",
        pos_embed_init: str = "sincos",
        drop_path: float = 0.0,
        embedding: str = "patch",
        compile: bool | str = False,
    ) -> None:
        super().__init__()
        if compile not in COMPILE_CHOICES or not isinstance(compile, (bool, str)):
            raise checks.invalid("model.compile", compile, "true, false or auto")
        sizes = dict(image_size=image_size, patch_size=patch_size, in_channels=in_channels)
        sizes.update(num_classes=num_classes, embed_dim=embed_dim, depth=depth, heads=heads)
        sizes.update(mlp_dim=mlp_dim, mlp_ratio=mlp_ratio)
        check_network_sizes(sizes, upper=True)  # before any weight is allocated
        check_attention_sizes(getattr(attention, "keywords", None) or {}, upper=True)
        # heads, and embed_dim's division by it, are checked by MultiHeadAttention in each block.
        _validate(image_size, patch_size, depth, pool, dropout, pos_embed_init)
        checks.integer("model.in_channels", in_channels)
        checks.integer("model.num_classes", num_classes, low=2, hint=" (a classifier's classes)")
        checks.integer("model.embed_dim", embed_dim)
        checks.fraction("model.drop_path", drop_path)
        checks.one_of("model.embedding", embedding, EMBEDDINGS)
        if embedding == "intensity" and patch_size != 1:
            raise ConfigError(
                f"model.embedding=intensity embeds single pixels; set model.patch_size=1 "
                f"(got {patch_size})"
            )
        self.image_size, self.in_channels, self.num_classes = image_size, in_channels, num_classes
        self.grid = image_size // patch_size
        if mlp_dim is None:  # the MLP's width from the ratio: at least one unit
            if not checks.is_number(mlp_ratio) or embed_dim * mlp_ratio < 1:
                raise checks.invalid(
                    "model.mlp_ratio",
                    mlp_ratio,
                    f"a number >= {checks.rounded_up(1 / embed_dim)}",
                    f" (the MLP's width is model.embed_dim={embed_dim} times it)",
                )
            mlp_dim = round(embed_dim * mlp_ratio)
        mlp_dim = checks.integer("model.mlp_dim", mlp_dim)
        self.pool = pool
        self.num_patches = (image_size // patch_size) ** 2
        self.seq_len = self.num_patches + (1 if pool == "cls" else 0)

        seed = init_seed()
        # What the layers draw as they are built (an attention's projections, features, random
        # blocks) comes from a fork of torch's generator: the run's stream, which the data's
        # augmentation and dropout draw from next, has moved by the one draw above under every
        # attention, whatever its kernel draws.
        with torch.random.fork_rng(devices=[]):
            self.patch_embed = (
                PatchEmbedding(in_channels, embed_dim, patch_size)
                if embedding == "patch"
                else IntensityEmbedding(in_channels, embed_dim)
            )
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if pool == "cls" else None
            self.pos_embed = nn.Parameter(torch.zeros(1, self.seq_len, embed_dim))
            self.embed_dropout = nn.Dropout(dropout)
            drop_rates = [drop_path * i / max(1, depth - 1) for i in range(depth)]
            self.blocks = nn.ModuleList(
                Block(embed_dim, heads, mlp_dim, self.seq_len, attention, dropout, rate)
                for rate in drop_rates
            )
            self.norm = nn.LayerNorm(embed_dim)
            self.head = nn.Linear(embed_dim, num_classes)
        self._init_weights(pos_embed_init, seed)
        # A compiled bound method, not a wrapped module: state_dict names stay unprefixed.
        self._compiled_forward = (
            CompiledOrEager(self._forward, COMPILE_AUTO_DEVICES if compile == "auto" else None)
            if compile
            else None
        )

    def _init_weights(self, pos_embed_init: str, seed: int) -> None:
        """Every weight drawn from a generator of its own, seeded by ``seed`` and the weight's
        name (:func:`named_generator`): a layer every attention has (``blocks.0.mlp.fc1``, the
        head, the query and value rows of ``qkv``) starts alike under every attention at one
        seed, as the sweep summary's pairing by seed assumes. Until 2026-12-02 they were drawn
        in turn from torch's generator, after the kernels' own draws, and under linformer,
        performer, random_feature, bigbird and reformer every weight after the first block's
        kernel differed from softmax's at the same seed (training audit)."""
        if pos_embed_init == "sincos":
            with torch.no_grad():
                self.pos_embed.zero_()  # the class token's position stays at zero
                codes = sincos_2d_position_embedding(self.grid, self.pos_embed.shape[-1])
                self.pos_embed[0, -self.num_patches :] = codes
        else:
            nn.init.trunc_normal_(
                self.pos_embed, std=0.02, generator=named_generator(seed, "pos_embed")
            )
        if self.cls_token is not None:
            nn.init.trunc_normal_(
                self.cls_token, std=0.02, generator=named_generator(seed, "cls_token")
            )
        tied_keys = {
            id(m.qkv): m.kernel.shared_qk
            for m in self.modules()
            if isinstance(m, MultiHeadAttention)
        }
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                for part, rows in _named_rows(name, module, tied_keys.get(id(module))):
                    nn.init.trunc_normal_(rows, std=0.02, generator=named_generator(seed, part))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def no_weight_decay(self) -> set[str]:
        """Parameter names excluded from weight decay (embeddings; norms and biases by shape)."""
        names = {"pos_embed", "cls_token"}
        if isinstance(self.patch_embed, IntensityEmbedding):
            names.add("patch_embed.table.weight")
        return names

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """Tokens after the last block and the final norm: ``(batch, seq_len, embed_dim)``."""
        x = self.patch_embed(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.embed_dropout(x + self.pos_embed)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        before_forward_of_kernels(self, images.device)  # outside the compiled graph: its guards
        if self._compiled_forward is not None:
            return self._compiled_forward(images)
        return self._forward(images)

    def forward_eager(self, images: torch.Tensor) -> torch.Tensor:
        """The forward pass never compiled, whatever ``compile`` says: a compiled graph does not
        call the forward hooks registered after it was traced, which probes rely on."""
        before_forward_of_kernels(self, images.device)
        return self._forward(images)

    def _forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(images)
        pooled = x[:, 0] if self.pool == "cls" else x.mean(dim=1)
        return self.head(pooled)


def _validate(
    image_size: int, patch_size: int, depth: int, pool: str, dropout: float, pos_embed_init: str
) -> None:
    checks.integer("model.image_size", image_size)
    if patch_size < 1 or image_size % patch_size != 0:
        valid = [p for p in range(1, image_size + 1) if image_size % p == 0]
        raise ConfigError(
            f"model.patch_size={patch_size} does not divide model.image_size={image_size}; "
            f"choose one of {valid}"
        )
    checks.integer("model.depth", depth)
    checks.one_of("model.pool", pool, POOLS)
    checks.fraction("model.dropout", dropout)
    checks.one_of("model.pos_embed_init", pos_embed_init, POS_EMBED_INITS)


def init_seed() -> int:
    """The one draw from torch's generator (which the run's ``seed`` fixed) that seeds a
    network's weights (:func:`named_generator`); none on the meta device, where nothing is
    drawn or initialised (a check builds a network there before it builds it for real)."""
    if torch.empty(()).device.type == "meta":
        return 0
    return int(torch.randint(0, 2**62, (1,), device="cpu").item())


def named_generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator seeded by ``seed`` and a weight's ``name``, the same in every process."""
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def _named_rows(
    name: str, linear: nn.Linear, tied_keys: bool | None
) -> list[tuple[str, torch.Tensor]]:
    """The weight of ``linear`` (named ``name``) by the names its rows are drawn under: an
    attention's ``qkv`` (``tied_keys`` not ``None``: whether its kernel ties keys to queries) in
    its query, key and value rows (``...qkv.q``), so that a kernel with tied keys (``reformer``:
    no key rows) draws its query and value rows as every other attention does; any other layer
    whole."""
    if tied_keys is None:
        return [(name, linear.weight)]
    parts = ("q", "v") if tied_keys else ("q", "k", "v")
    rows = linear.weight.chunk(len(parts), dim=0)
    return [(f"{name}.{part}", block) for part, block in zip(parts, rows, strict=True)]
