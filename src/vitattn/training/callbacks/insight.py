"""Looking inside the attention while a model trains: maps, rollout, fidelity and entropy.

At every ``every_n_validations``-th validation, on a fixed set of validation images (the same,
seeded, for every run, so runs compare), :class:`AttentionInsight` captures each layer's q, k, v
and logs:

* ``~attention/layer_<i>`` (an image): the images in the first row; below each, the
  attention of three query tokens (rows: the centre patch, the top-left corner and the pooled
  token: the class token, or for mean pooling the mean over all queries) averaged over heads,
  overlaid on the image, with a colour key at the bottom (:func:`colour_key`: dark, no
  attention; bright, the map's largest weight);
* ``~attention/rollout`` (the images, and below them): attention rollout through all
  layers (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", ACL 2020: the product
  of the layers' head-averaged matrices with the residual added, 0.5 A + 0.5 I) for the pooled
  token;
* ``val/fidelity``: the relative error of the mechanism's output against exact softmax
  attention on the same q, k, v, |out - softmax| / |softmax| (0 for softmax itself), the mean
  over layers: how far each approximation is from the attention it replaces, as it trains;
* ``val/entropy_gap``: how far the attention rows are from uniform, 1 - H / log(n) for the mean
  row entropy H (nats) over n keys: 0 for uniform attention, 1 for attention on one token
  (Shannon's redundancy). Near-uniform rows have an entropy a hair below log(n), which an axis
  showing three digits cannot tell apart; their gap it shows.

With more than one layer, each also comes per layer (``val/fidelity/layer_<i>``,
``val/entropy_gap/layer_<i>``). The images sit in a tag group of their own that sorts after
``val``, so TensorBoard's ``val`` group opens on its curves.

The matrices come from :func:`vitattn.attention.common.probe.implied_matrix` (every mechanism is
linear in V), so no mechanism needs code of its own. The latest maps are also saved as
``<run>/attention/maps.npz`` for the sweep figure of ``scripts/plot_curves.py``.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torchvision.utils import make_grid

from vitattn.attention.common.probe import (
    attention_layers,
    capture_qkv,
    implied_matrix,
    relative_error,
)
from vitattn.runs.files import make_folder, write_with
from vitattn.training.logger import add_png, encode_png, summary_writers
from vitattn.utils import checks, metric_names

log = logging.getLogger(__name__)

QUERIES = ("centre", "corner", "pooled")

DISPLAY_SIZE = 64
"""Pixels per image side in the TensorBoard grids (CIFAR's 32 are scaled up, nearest)."""


def colour_map(name: str = "inferno", levels: int = 256) -> torch.Tensor:
    """``(levels, 3)`` RGB values in [0, 1] of a matplotlib colour map."""
    import matplotlib

    return torch.tensor(matplotlib.colormaps[name](np.linspace(0, 1, levels))[:, :3]).float()


def as_rgb(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``(N, C, H, W)`` images (C = 1 or 3) as float RGB in [0, 1]."""
    rgb = images.float().div(255)
    return rgb.expand(-1, 3, -1, -1) if rgb.shape[1] == 1 else rgb


def overlay(
    images: torch.Tensor, heat: torch.Tensor, lut: torch.Tensor, alpha: float = 0.55
) -> torch.Tensor:
    """``images`` uint8 ``(N, C, H, W)`` with ``heat`` ``(N, H, W)`` in [0, 1] blended on top
    through the colour table ``lut``: float ``(N, 3, H, W)`` in [0, 1]."""
    # Weights gone NaN (a diverging run, before the NaN guard stops it) draw as zero attention.
    index = heat.nan_to_num(0.0).clamp(0, 1).mul(lut.shape[0] - 1).round().long()
    coloured = lut[index].permute(0, 3, 1, 2)  # (N, 3, H, W)
    return (1 - alpha) * as_rgb(images) + alpha * coloured


KEY_HEIGHT = 44
"""Pixels of the colour key under each grid of overlays: TensorBoard's image cards show a grid
of eight images at half its size, and the key's text is drawn large enough to read there."""
KEY_TEXT = ("0", "each map's largest weight")
"""The key's labels, at its two ends: each map is divided by its own largest weight
(:func:`to_grid`), so its brightest colour is that weight, whatever it is."""


@functools.cache
def key_font(size: int) -> Any:
    """Pillow's own font at ``size`` pixels (its small bitmap font where Pillow has no FreeType,
    or is older than 10.1, as an image with it may be)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:
        return ImageFont.load_default()


def colour_key(width: int, lut: torch.Tensor, alpha: float = 0.55) -> torch.Tensor:
    """A strip ``(3, KEY_HEIGHT, width)`` in [0, 1] to put under a grid of overlays: the colour
    table from no attention (left) to each map's largest weight (right), as :func:`overlay`
    blends it over a mid grey, with :data:`KEY_TEXT` below it (smaller where the grid is
    narrow), so that the images in TensorBoard read without this docstring."""
    from PIL import Image, ImageDraw

    margin = 2
    steps = torch.linspace(0, 1, max(width - 2 * margin, 1))
    index = steps.mul(lut.shape[0] - 1).round().long()
    bar = (1 - alpha) * 0.5 + alpha * lut[index]  # (width - 2 margin, 3)
    strip = np.zeros((KEY_HEIGHT, width, 3), dtype=np.uint8)
    strip[margin : margin + 12, margin : width - margin] = (bar * 255).round().numpy()
    picture = Image.fromarray(strip)
    draw = ImageDraw.Draw(picture)
    left, right = KEY_TEXT
    size = 24
    font = key_font(size)
    room = width - 2 * margin - draw.textlength(f"{left}   ", font=font)
    while size > 8 and draw.textlength(right, font=font) > room:
        size -= 2
        font = key_font(size)
    draw.text((margin, 16), left, fill=(255, 255, 255), font=font)
    right_at = max(width - margin - draw.textlength(right, font=font), margin)
    draw.text((right_at, 16), right, fill=(255, 255, 255), font=font)
    return torch.from_numpy(np.asarray(picture).copy()).permute(2, 0, 1).float().div(255)


def to_grid(maps: torch.Tensor, offset: int, size: int) -> torch.Tensor:
    """Attention over tokens ``(..., tokens)`` as images ``(..., size, size)`` in [0, 1]: the
    tokens after ``offset`` (a class token) laid on their square grid, scaled up, and divided
    by their maximum."""
    tokens = maps[..., offset:]
    side = math.isqrt(tokens.shape[-1])
    grid = tokens.reshape(-1, 1, side, side)
    grid = F.interpolate(grid, size=(size, size), mode="nearest")
    grid = grid.reshape(*maps.shape[:-1], size, size)
    peak = grid.flatten(-2).amax(dim=-1).clamp_min(1e-12)
    return grid / peak[..., None, None]


def rollout(matrices: list[torch.Tensor]) -> torch.Tensor:
    """Attention rollout of head-averaged ``(n, n)`` matrices, first layer first."""
    flow = torch.eye(matrices[0].shape[-1], dtype=matrices[0].dtype)
    for matrix in matrices:
        mixed = 0.5 * matrix + 0.5 * torch.eye(matrix.shape[-1], dtype=matrix.dtype)
        flow = (mixed / mixed.sum(dim=-1, keepdim=True)) @ flow
    return flow


def query_rows(matrix: torch.Tensor, offset: int, pool: str) -> torch.Tensor:
    """Rows ``(3, n)`` of a head-averaged ``(n, n)`` matrix for :data:`QUERIES`."""
    side = math.isqrt(matrix.shape[-1] - offset)
    centre = offset + (side // 2) * side + side // 2
    pooled = matrix[0] if pool == "cls" else matrix.mean(dim=0)
    return torch.stack([matrix[centre], matrix[offset], pooled])


IMAGE_GROUP = "~attention"
"""Tag group of the attention images: after ``train`` and ``val``, before ``~summary``."""


def row_entropy(matrix: torch.Tensor) -> float:
    """Mean entropy (nats) of the rows of ``(..., n, n)`` attention weights."""
    weights = matrix.double().clamp_min(0)
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    return float(-(weights * weights.clamp_min(1e-300).log()).sum(dim=-1).mean())


def entropy_gap(matrix: torch.Tensor) -> float:
    """``1 - H / log(n)`` for the mean entropy H of the rows of ``(..., n, n)`` attention weights:
    0 for uniform rows, 1 for one-hot rows."""
    keys = matrix.shape[-1]
    return 1.0 - row_entropy(matrix) / math.log(keys) if keys > 1 else 0.0


def layer_scalars(name: str, values: list[float]) -> dict[str, float]:
    """``val/<name>``, the mean over layers, and with more than one layer each layer's value as
    ``val/<name>/layer_<i>``."""
    if not values:
        return {}
    scalars = {f"val/{name}": float(np.mean(values))}
    if len(values) > 1:
        scalars.update({f"val/{name}/layer_{i}": value for i, value in enumerate(values)})
    return scalars


MAX_IMAGES = 64
"""The most images one look takes: a row of the maps' figure each, and each layer's n x n
matrices for all of them (a recorded 10^9 held gigabytes; red team)."""


class AttentionInsight(L.Callback):
    """Attention maps, rollout, fidelity to softmax and row entropy at validation.

    Args:
        images: how many validation images (the first of a seeded permutation of the
            validation set: the same for every run).
        every_n_validations: how often; 0 turns the callback off.
        seed: seed of the images' selection.
    """

    def __init__(self, images: int = 8, every_n_validations: int = 1, seed: int = 0) -> None:
        self.images = checks.integer("images", images, 0, MAX_IMAGES, hint=" (0: off)")
        every = checks.integer("every_n_validations", every_n_validations, 0, hint=" (0: off)")
        self.every_n_validations = every
        self.seed = checks.integer("seed", seed, 0)
        on = bool(self.images and every)
        self.logged = metric_names.INSIGHT_LOGGED if on else ()
        """The names it logs (:mod:`vitattn.utils.metric_names`): none when off."""
        self.summarized = metric_names.INSIGHT_SUMMARIZED if on else ()
        """The names it adds to ``metrics.json``."""
        self.validations = 0
        self.seconds = 0.0
        self.validation_seconds = 0.0
        self._validation_started: float | None = None
        self._lut: torch.Tensor | None = None
        self._keys: dict[int, torch.Tensor] = {}

    def cost(self) -> dict[str, float]:
        """What looking cost, for ``metrics.json``: its seconds, those of the run's validation
        loops (without it), and the ratio of the two."""
        share = self.seconds / self.validation_seconds if self.validation_seconds else None
        return {
            "insight/seconds": round(self.seconds, 3),
            "insight/validation_seconds": round(self.validation_seconds, 3),
            "insight/share_of_validation": None if share is None else round(share, 4),
        }

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or self.every_n_validations < 1:
            return
        if self._validation_started is not None:
            self.validation_seconds += time.perf_counter() - self._validation_started
        self.validations += 1
        if (self.validations - 1) % self.every_n_validations or self.images < 1:
            return
        started = time.perf_counter()
        figures = self.inspect(trainer, pl_module)
        for name, value in figures["scalars"].items():
            pl_module.log(name, value, on_step=False, on_epoch=True, rank_zero_only=True)
        if trainer.is_global_zero and not trainer.fast_dev_run:
            self.publish(trainer, figures)
        self.seconds += time.perf_counter() - started
        log.debug("attention insight took %.3f s", time.perf_counter() - started)

    def fixed_images(self, trainer: L.Trainer) -> torch.Tensor:
        """The uint8 validation images every run looks at."""
        val_set = trainer.datamodule.val_set
        images = val_set.tensors[0]
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(self.seed))
        return images[order[: self.images]]

    @torch.no_grad()
    def inspect(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        datamodule = trainer.datamodule
        raw = self.fixed_images(trainer).to(pl_module.device)
        images = datamodule.on_after_batch_transfer(raw, 0)  # shift, normalise; never augment
        # the maps are drawn over the images the network saw: a rotated run's, rotated
        shifted = getattr(datamodule, "shifted", None)
        seen = raw if shifted is None else shifted(raw)
        net = pl_module.net
        was_training = net.training
        try:
            layers = capture_qkv(net, images)
            kernels = [layer.kernel for layer in attention_layers(net)]
            fidelity: list[float] = []
            gaps: list[float] = []
            matrices: list[torch.Tensor] = []  # head-averaged, (images, n, n)
            for kernel, (q, k, v) in zip(kernels, layers, strict=True):
                out = kernel(q, k, v)
                exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
                fidelity.append(relative_error(out, exact))
                matrix, _ = implied_matrix(kernel, q, k, v, out)
                if matrix is not None:
                    gaps.append(entropy_gap(matrix))
                    matrices.append(matrix.float().mean(dim=1).cpu())
        finally:
            net.train(was_training)
        scalars = {**layer_scalars("fidelity", fidelity), **layer_scalars("entropy_gap", gaps)}
        return {"scalars": scalars, "matrices": matrices, "raw": seen.cpu()}

    def publish(self, trainer: L.Trainer, figures: dict[str, Any]) -> None:
        """Overlays to TensorBoard (``~attention/...``) and ``attention/maps.npz``."""
        matrices, raw = figures["matrices"], figures["raw"]
        if not matrices or len(matrices) != len(attention_layers(trainer.lightning_module.net)):
            return
        net = trainer.lightning_module.net
        pool = getattr(net, "pool", "mean")
        offset = 1 if pool == "cls" else 0
        size = max(DISPLAY_SIZE, raw.shape[-1])
        shown = F.interpolate(raw.float(), size=(size, size), mode="nearest").to(torch.uint8)
        if self._lut is None:
            self._lut = colour_map()
        grids: dict[str, torch.Tensor] = {}
        layer_maps = []
        for index, matrix in enumerate(matrices):
            rows = torch.stack([query_rows(m, offset, pool) for m in matrix])  # (N, 3, n)
            heat = to_grid(rows, offset, size)  # (N, 3, size, size)
            layer_maps.append(heat[:, 2])
            cells = [
                as_rgb(shown),
                *(overlay(shown, heat[:, j], self._lut) for j in range(len(QUERIES))),
            ]
            # Rows: the images, then the maps of the centre, corner and pooled queries.
            panel = torch.stack(cells, dim=0).flatten(0, 1)
            grids[f"{IMAGE_GROUP}/layer_{index}"] = make_grid(panel, nrow=len(raw))
        per_image = zip(*matrices, strict=True)  # each image's matrices, first layer first
        flows = torch.stack([query_rows(rollout(list(m)), offset, pool)[2] for m in per_image])
        flow_maps = to_grid(flows, offset, size)
        pairs = torch.stack([as_rgb(shown), overlay(shown, flow_maps, self._lut)]).flatten(0, 1)
        grids[f"{IMAGE_GROUP}/rollout"] = make_grid(pairs, nrow=len(raw))
        for tag, grid in grids.items():  # the colour key under each
            width = grid.shape[-1]
            if width not in self._keys:
                self._keys[width] = colour_key(width, self._lut)
            grids[tag] = torch.cat([grid, self._keys[width]], dim=1)
        for writer in summary_writers(trainer.loggers):
            for tag, grid in grids.items():
                pixels = grid.mul(255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0)
                height, width = pixels.shape[:2]
                png = encode_png(pixels.numpy())
                add_png(writer, tag, png, height, width, trainer.global_step)
        self.save(
            Path(trainer.default_root_dir), trainer, shown, flow_maps, torch.stack(layer_maps)
        )

    def save(
        self,
        run_dir: Path,
        trainer: L.Trainer,
        raw: torch.Tensor,
        flow: torch.Tensor,
        layers: torch.Tensor,
    ) -> None:
        """``<run>/attention/maps.npz``: images, rollout and per-layer maps of the pooled token."""
        folder = run_dir / "attention"
        make_folder(folder)
        maps = partial(
            np.savez_compressed,
            images=raw.permute(0, 2, 3, 1).numpy().astype(np.uint8),
            rollout=flow.numpy().astype(np.float32),
            layers=layers.numpy().astype(np.float32),
            step=np.int64(trainer.global_step),
            attention=np.str_(type(attention_layers(trainer.lightning_module.net)[0].kernel).name),
        )
        write_with(folder / "maps.npz", maps)
