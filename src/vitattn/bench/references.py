"""What ``mode=train`` times besides our Lightning pipeline: :func:`loop_step`, the one step of
every hand-written loop (``plain_loop``, ``timm``, ``report_style``); where their batches come
from; and the reference networks, timm's ViT and the founding report's explicit-attention ViT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from vitattn.data.augment import normalize
from vitattn.models.flops import sixteen_bit_dtype

Batch = tuple[torch.Tensor, torch.Tensor]


def autocast(device: torch.device, precision: str) -> Any:
    """The autocast context of a Lightning ``precision`` (``bf16-mixed``, ``16-mixed``, ...)."""
    dtype = sixteen_bit_dtype(precision)
    if dtype is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=getattr(torch, dtype))


def loop_step(
    net: nn.Module,
    next_batch: Callable[[], Batch],
    optimizer: torch.optim.Optimizer,
    *,
    device: torch.device,
    precision: str,
    label_smoothing: float = 0.1,
    scheduler: Any = None,
    compile: bool = False,
) -> Callable[[], None]:
    """One training step of ``net`` in a plain loop, as a closure, done as Lightning does it for
    ``precision``: autocast, and for ``16-mixed`` a gradient scaler; with ``compile``, the
    forward pass through ``torch.compile`` (falling back to eager loudly, as ours does)."""
    from vitattn.models.vit import CompiledOrEager

    net.train()
    forward: Callable[[torch.Tensor], torch.Tensor] = net
    if compile:  # its forward method, whose graphs Dynamo counts (a module's it does not)
        forward = CompiledOrEager(net.forward)
        if not hasattr(net, "_compiled_forward"):  # where eager_status looks (ours has one)
            net._compiled_forward = forward
    scaler = torch.amp.GradScaler(device.type) if precision.startswith("16") else None

    def step() -> None:
        images, labels = next_batch()
        with autocast(device, precision):
            loss = F.cross_entropy(forward(images), labels, label_smoothing=label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if scheduler is not None:
            scheduler.step()

    return step


def training_batch(datamodule: Any, images: torch.Tensor, labels: torch.Tensor) -> Batch:
    """A uint8 batch on the device as our data module trains on it: augmented, normalised."""
    images = datamodule.augment(images)
    mean, std = datamodule.mean.to(images.device), datamodule.std.to(images.device)
    return normalize(images, mean, std), labels


def loader_batches(datamodule: Any, device: torch.device) -> Callable[[], Batch]:
    """The data module's training batches, epoch after epoch, as Lightning would feed them."""

    def epochs() -> Iterator[Batch]:
        while True:
            yield from datamodule.train_dataloader()

    batches = epochs()

    def next_batch() -> Batch:
        images, labels = next(batches)
        return training_batch(datamodule, images.to(device), labels.to(device))

    return next_batch


def device_batches(datamodule: Any, batch_size: int, device: torch.device) -> Callable[[], Batch]:
    """Random batches of the training images, all kept on the device (no loader at all)."""
    images, labels = (t.to(device) for t in datamodule.train_set.tensors)
    generator = torch.Generator(device=device).manual_seed(0)

    def next_batch() -> Batch:
        index = torch.randint(0, len(labels), (batch_size,), device=device, generator=generator)
        return training_batch(datamodule, images[index], labels[index])

    return next_batch


class PILImages(Dataset):
    """CIFAR-10 tensors served one PIL image at a time through ``transform``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Any) -> None:
        self.arrays = images.permute(0, 2, 3, 1).numpy()
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.arrays[index])), int(self.labels[index])


def per_image_loader(images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> Iterator:
    """A torchvision-style DataLoader: PIL images, per-image crop/flip/ToTensor/Normalize."""
    # Imported here, not above: the data module's file imports Lightning, which takes seconds.
    from vitattn.data.cifar10 import MEAN, STD

    transform = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    loader = DataLoader(
        PILImages(images, labels, transform), batch_size=batch_size, shuffle=True, drop_last=True
    )
    while True:
        yield from loader


def per_image_batches(
    datamodule: Any, batch_size: int, device: torch.device
) -> Callable[[], Batch]:
    """:func:`per_image_loader`'s batches of the training images, moved to the device."""
    batches = per_image_loader(*datamodule.train_set.tensors, batch_size)

    def next_batch() -> Batch:
        images, labels = next(batches)
        return images.to(device), labels.to(device)

    return next_batch


def timm_vit(
    patch_size: int, embed_dim: int, depth: int, heads: int, mlp_dim: int, num_classes: int
) -> nn.Module:
    """timm's ViT with our sizes, no class token and mean pooling (as ours): the same layers."""
    # timm is the optional [bench] extra: imported only when it is timed.
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=32,
        patch_size=patch_size,
        in_chans=3,
        num_classes=num_classes,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=mlp_dim / embed_dim,
        class_token=False,
        global_pool="avg",
    )


class ExplicitAttentionViT(nn.Module):
    """The founding report's kind of ViT: explicit softmax(Q K^T / sqrt(d)) V in every block."""

    def __init__(
        self, patch_size: int, embed_dim: int, depth: int, heads: int, mlp_dim: int, classes: int
    ) -> None:
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(3, embed_dim, patch_size, patch_size)
        tokens = (32 // patch_size) ** 2
        self.pos = nn.Parameter(torch.randn(1, tokens, embed_dim) * 0.02)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(embed_dim),
                    "qkv": nn.Linear(embed_dim, 3 * embed_dim),
                    "proj": nn.Linear(embed_dim, embed_dim),
                    "norm2": nn.LayerNorm(embed_dim),
                    "mlp": nn.Sequential(
                        nn.Linear(embed_dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, embed_dim)
                    ),
                }
            )
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2) + self.pos
        batch, tokens, dim = x.shape
        for block in self.blocks:
            qkv = block["qkv"](block["norm1"](x)).reshape(batch, tokens, 3, self.heads, -1)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(dim=-1)
            attended = (weights @ v).transpose(1, 2).reshape(batch, tokens, dim)
            x = x + block["proj"](attended)
            x = x + block["mlp"](block["norm2"](x))
        return self.head(self.norm(x).mean(dim=1))
