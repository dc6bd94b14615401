"""Images per second of whole training steps: ours against the implementations users reach for.

``vitattn-bench level=train`` times, on the same data and model size:

- ``vitattn``: our pipeline as ``vitattn-train`` runs it (a Lightning Trainer, uint8 data on the
  device, batched augmentation, our ViT with the configured attention, AdamW), with any
  ``model``/``attention``/``precision``/``compile`` setting;
- ``timm``: timm's ``VisionTransformer`` of the same embedding size, depth, heads, MLP size and
  patch size, in a plain loop over the same on-device batches and augmentation;
- ``report_style``: the founding report's style, a plain PyTorch ViT with explicit (non-fused)
  softmax attention, fed by a torchvision ``DataLoader`` with per-image PIL transforms.

A step is everything between two consecutive optimizer steps: fetching and augmenting the batch,
forward, backward and the update. The first ``warmup`` steps are not counted; the rate is the
median over ``repeats`` windows of ``steps`` steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

IMPLEMENTATIONS = ("vitattn", "timm", "report_style")


@dataclass
class TrainSpeed:
    """One implementation's measurement."""

    implementation: str
    model: str
    attention: str
    batch_size: int
    precision: str
    compile: bool
    device: str
    params: int
    images_per_sec: float | None
    spread: float | None  # (max - min) / median over the repeats
    step_ms: float | None
    status: str = "ok"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(
    step: Callable[[], None], device: torch.device, warmup: int, steps: int, repeats: int
) -> list[float]:
    """Seconds per step of each of ``repeats`` windows of ``steps`` calls, after ``warmup``."""
    for _ in range(warmup):
        step()
    _sync(device)
    windows = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        windows.append((time.perf_counter() - start) / steps)
    return windows


def summarize(seconds: list[float], batch_size: int) -> tuple[float, float, float]:
    median = statistics.median(seconds)
    rates = [batch_size / s for s in seconds]
    rate = batch_size / median
    return rate, (max(rates) - min(rates)) / rate, 1000 * median


# --- timm and report-style references -----------------------------------------------------------


def autocast(device: torch.device, precision: str) -> Any:
    if precision.startswith("bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision.startswith("16"):
        return torch.autocast(device.type, dtype=torch.float16)
    return torch.autocast(device.type, enabled=False)


def timm_vit(
    patch_size: int, embed_dim: int, depth: int, heads: int, mlp_dim: int, num_classes: int
) -> nn.Module:
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


def per_image_loader(images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> Iterator:
    """A torchvision-style DataLoader: PIL images, per-image crop/flip/ToTensor/Normalize."""
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms

    from vitattn.data.cifar10 import MEAN, STD

    transform = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )

    class PILCifar(Dataset):
        def __init__(self) -> None:
            self.arrays = images.permute(0, 2, 3, 1).numpy()

        def __len__(self) -> int:
            return len(labels)

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            from PIL import Image

            return transform(Image.fromarray(self.arrays[index])), int(labels[index])

    loader = DataLoader(PILCifar(), batch_size=batch_size, shuffle=True, drop_last=True)
    while True:
        yield from loader


def reference_step(
    implementation: str,
    net: nn.Module,
    datamodule: Any,
    batch_size: int,
    device: torch.device,
    precision: str,
) -> Callable[[], None]:
    """One training step of a reference implementation, as a closure."""
    net.to(device).train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    images, labels = datamodule.train_set.tensors
    if implementation == "report_style":
        batches = per_image_loader(images, labels, batch_size)

        def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
            x, y = next(batches)
            return x.to(device), y.to(device)

    else:  # timm: the same device-side pipeline as ours
        on_device = images.to(device), labels.to(device)
        generator = torch.Generator(device=device).manual_seed(0)
        mean, std = datamodule.mean.to(device), datamodule.std.to(device)

        def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
            from vitattn.data.augment import normalize

            index = torch.randint(
                0, len(on_device[1]), (batch_size,), device=device, generator=generator
            )
            x = datamodule.augment(on_device[0][index])
            return normalize(x, mean, std), on_device[1][index]

    def step() -> None:
        x, y = next_batch()
        with autocast(device, precision):
            loss = F.cross_entropy(net(x), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


# --- ours, through Lightning ----------------------------------------------------------------------


class _StepClock:
    """Times between consecutive ends of training steps (everything a step costs)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ends: list[float] = []

    def tick(self) -> None:
        _sync(self.device)
        self.ends.append(time.perf_counter())


def vitattn_speed(
    overrides: list[str],
    device: torch.device,
    warmup: int,
    steps: int,
    repeats: int,
) -> tuple[list[float], int, Any]:
    """Seconds per step of ``repeats`` windows of our real training (a Lightning Trainer)."""
    import hydra
    import lightning as L
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from vitattn.utils.config import CONFIG_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=False)
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = hydra.utils.instantiate(cfg.module)
    clock = _StepClock(device)

    class Clock(L.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            clock.tick()

    total = warmup + steps * repeats + 1
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=cfg.trainer.precision,
        max_steps=total,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=[Clock()],
    )
    trainer.fit(module, datamodule=datamodule)
    ends = clock.ends[warmup:]
    windows = [
        (ends[(i + 1) * steps] - ends[i * steps]) / steps
        for i in range(repeats)
        if (i + 1) * steps < len(ends)
    ]
    params = sum(p.numel() for p in module.parameters())
    return windows, params, (cfg, datamodule)


def measure_train_speed(
    *,
    implementations: list[str],
    model: str,
    attention: str,
    batch_size: int,
    precision: str,
    compile: bool,
    device: torch.device,
    warmup: int,
    steps: int,
    repeats: int,
    overrides: list[str],
) -> list[TrainSpeed]:
    """Measure each implementation on the same model size, data and batch size."""
    ours = [
        f"model={model}",
        f"attention={attention}",
        f"data.batch_size={batch_size}",
        f"trainer.precision={precision}",
        f"model.compile={str(compile).lower()}",
        *overrides,
    ]
    seconds, params, (cfg, datamodule) = vitattn_speed(ours, device, warmup, steps, repeats)
    results = [
        _result(
            "vitattn", model, attention, batch_size, precision, compile, device, params, seconds
        )
    ]
    net = cfg.model
    mlp_dim = net.mlp_dim if net.mlp_dim is not None else round(net.embed_dim * net.mlp_ratio)
    sizes = (net.patch_size, net.embed_dim, net.depth, net.heads, mlp_dim, net.num_classes)
    for implementation in implementations:
        if implementation == "vitattn":
            continue
        torch.manual_seed(0)
        reference = timm_vit(*sizes) if implementation == "timm" else ExplicitAttentionViT(*sizes)
        step = reference_step(implementation, reference, datamodule, batch_size, device, precision)
        windows = time_steps(step, device, warmup, steps, repeats)
        attention_name = (
            "softmax (timm fused)" if implementation == "timm" else "softmax (explicit)"
        )
        results.append(
            _result(
                implementation,
                model,
                attention_name,
                batch_size,
                precision,
                False,
                device,
                sum(p.numel() for p in reference.parameters()),
                windows,
            )
        )
    return results


def _result(
    implementation: str,
    model: str,
    attention: str,
    batch_size: int,
    precision: str,
    compile: bool,
    device: torch.device,
    params: int,
    seconds: list[float],
) -> TrainSpeed:
    rate = spread = step_ms = None
    if seconds:
        rate, spread, step_ms = summarize(seconds, batch_size)
    return TrainSpeed(
        implementation,
        model,
        attention,
        batch_size,
        precision,
        compile,
        str(device),
        params,
        rate,
        spread,
        step_ms,
        status="ok" if seconds else "no measurement",
    )


def ratios(results: list[TrainSpeed]) -> dict[str, float]:
    """Our images/s over each reference's (``vitattn/timm``, ``vitattn/report_style``)."""
    ours = next((r for r in results if r.implementation == "vitattn"), None)
    if ours is None or ours.images_per_sec is None:
        return {}
    return {
        f"vitattn/{r.implementation}": ours.images_per_sec / r.images_per_sec
        for r in results
        if r.implementation != "vitattn" and r.images_per_sec
    }


def run_train(cfg: Any, output_dir: Any) -> dict[str, Any]:
    """``vitattn-bench level=train``: train_speed.csv/json and a printed table with ratios."""
    from pathlib import Path

    from vitattn.bench import report
    from vitattn.bench.app import environment, parse_device, positive_int
    from vitattn.utils.errors import ConfigError
    from vitattn.utils.lightning_output import tidy_lightning_output

    tidy_lightning_output()
    settings = cfg.train
    implementations = list(settings.implementations)
    unknown = [i for i in implementations if i not in IMPLEMENTATIONS]
    if unknown or not implementations:
        raise ConfigError(
            f"train.implementations={implementations} is not valid; choose from "
            f"{', '.join(IMPLEMENTATIONS)}"
        )
    if "timm" in implementations:
        try:
            import timm  # noqa: F401
        except ImportError as error:
            raise ConfigError(
                "train.implementations includes timm, which is not installed; "
                'pip install -e ".[bench]" or drop timm from the list'
            ) from error
    device = parse_device(cfg.device)
    output_dir = Path(output_dir)
    results = measure_train_speed(
        implementations=["vitattn", *[i for i in implementations if i != "vitattn"]],
        model=str(settings.model),
        attention=str(settings.attention),
        batch_size=positive_int("train.batch_size", settings.batch_size),
        precision=str(settings.precision),
        compile=bool(settings.compile),
        device=device,
        warmup=positive_int("train.warmup", settings.warmup, minimum=0),
        steps=positive_int("train.steps", settings.steps),
        repeats=positive_int("train.repeats", settings.repeats),
        overrides=[str(o) for o in settings.overrides],
    )
    rows = [r.as_dict() for r in results]
    speedups = ratios(results)
    output_dir.mkdir(parents=True, exist_ok=True)
    report.write_csv(output_dir / "train_speed.csv", rows)
    report.write_json(
        output_dir / "train_speed.json",
        {"environment": environment(device), "results": rows, "ratios": speedups},
    )
    lines = [
        f"{r.implementation:>13}  {r.attention:<22} {r.params:>9} params  "
        f"{(r.images_per_sec or 0):8.1f} img/s  (spread {(r.spread or 0):.0%})  "
        f"{(r.step_ms or 0):8.1f} ms/step"
        for r in results
    ]
    lines += [f"{name}: {value:.2f}x" for name, value in speedups.items()]
    text = "\n".join(lines)
    (output_dir / "train_speed.md").write_text(text + "\n")
    print(text, flush=True)
    return {"results": rows, "ratios": speedups}
