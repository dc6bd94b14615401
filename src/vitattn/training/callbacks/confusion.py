"""What a test says beyond its accuracy: which classes are confused, and the worst mistakes.

:class:`ConfusionReport` watches the test batches and, at the end of the test, writes

* the confusion matrix (torchmetrics' ``MulticlassConfusionMatrix``, summed over processes)
  and the accuracy of each class: ``confusion_matrix.png`` in the run directory, a TensorBoard
  image ``~summary/confusion_matrix``, and the numbers, which ``metrics.json`` carries as
  ``test/confusion_matrix`` and ``test/acc_per_class``;
* the test images the model got wrong with the highest confidence, each titled with its true
  and predicted class: ``most_confident_errors.png`` and ``~summary/most_confident_errors``.

Each figure is drawn and encoded once: the PNG and the TensorBoard image are the same bytes
(every run ends with this report, so what it costs, every run costs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torchmetrics.classification import MulticlassConfusionMatrix

from vitattn.runs.files import write_bytes
from vitattn.training.logger import SUMMARY_GROUP, add_png, encode_png, summary_writers
from vitattn.utils import checks

MAX_ERRORS = 256
"""The most mistakes one figure shows (a recorded 10^9 held gigabytes of images; red team)."""


class ConfusionReport(L.Callback):
    """Confusion matrix, per-class accuracy and the most confident mistakes of a test.

    Args:
        errors: how many of the most confidently wrong images to show.
    """

    def __init__(self, errors: int = 16) -> None:
        self.errors = checks.integer("errors", errors, 0, MAX_ERRORS)
        self.report: dict[str, Any] = {}
        self._matrix: MulticlassConfusionMatrix | None = None
        self._worst: list[tuple[float, torch.Tensor, int, int]] = []

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        classes = int(pl_module.hparams.get("num_classes", 10))
        self._matrix = MulticlassConfusionMatrix(classes).to(pl_module.device)
        self._worst = []
        self.report = {}

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._matrix is None or not isinstance(outputs, torch.Tensor):
            return
        images, labels = batch
        self._matrix.update(outputs, labels)
        confidence, predicted = outputs.detach().float().softmax(dim=-1).max(dim=-1)
        wrong = (predicted != labels).nonzero().flatten()
        if not len(wrong) or self.errors < 1:
            return
        worst = wrong[confidence[wrong].argsort(descending=True)[: self.errors]]
        shown = displayable(images[worst], trainer.datamodule)
        for i, index in enumerate(worst.tolist()):
            entry = (float(confidence[index]), shown[i], int(labels[index]), int(predicted[index]))
            self._worst.append(entry)
        self._worst = sorted(self._worst, key=lambda e: -e[0])[: self.errors]

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._matrix is None:
            return
        matrix = self._matrix.compute().cpu()
        names = list(getattr(trainer.datamodule, "classes", range(matrix.shape[0])))
        totals = matrix.sum(dim=1).clamp_min(1)
        per_class = (matrix.diagonal() / totals).tolist()
        self.report = {
            "test/confusion_matrix": matrix.tolist(),
            "test/acc_per_class": {
                str(n): round(a, 4) for n, a in zip(names, per_class, strict=True)
            },
        }
        if not trainer.is_global_zero or trainer.fast_dev_run:
            return
        run_dir = Path(trainer.default_root_dir)
        figures = {
            "confusion_matrix": confusion_figure(matrix, names),
            "most_confident_errors": errors_figure(self._worst, names),
        }
        for name, figure in figures.items():
            if figure is None:
                continue
            pixels = drawn(figure, dpi=120)
            png, (height, width) = encode_png(pixels), pixels.shape[:2]
            write_bytes(run_dir / f"{name}.png", png)
            for writer in summary_writers(trainer.loggers):
                add_png(writer, f"{SUMMARY_GROUP}/{name}", png, height, width, trainer.global_step)


def drawn(figure: Any, dpi: int) -> Any:
    """``figure`` drawn once at ``dpi`` by matplotlib's Agg canvas, as ``(H, W, 3)`` uint8 pixels
    (what TensorBoard's ``add_figure`` draws, without a second drawing for the file); the figure
    is closed."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure.set_dpi(dpi)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    plt.close(figure)
    return pixels


def displayable(images: torch.Tensor, datamodule: Any) -> torch.Tensor:
    """A batch as the model saw it, back to uint8 ``(N, C, H, W)`` on the CPU for display. The
    data module's ``normalize`` setting says whether to undo its normalisation: the pixel values
    cannot (normalised CIFAR-10 reaches 2.1, raw intensities may all be below 2)."""
    images = images.detach().float().cpu()
    if not getattr(datamodule, "hparams", {}).get("normalize", True):
        return images.round().clamp(0, 255).to(torch.uint8)  # raw intensities
    mean = datamodule.mean.view(1, -1, 1, 1).cpu()
    std = datamodule.std.view(1, -1, 1, 1).cpu()
    return (images * std + mean).mul(255).round().clamp(0, 255).to(torch.uint8)


CARD_WIDTH = 350
"""Pixels of width at which TensorBoard's IMAGES tab shows an image by default (its card, in
TensorBoard 2.21 and a 1600 px window): each figure here is drawn to be read at that width."""
TEXT_PX = 10
"""Height in pixels, on a card :data:`CARD_WIDTH` wide, of the figures' labels and titles."""
SMALLEST_TEXT_PX = 9
"""The smallest text on a card, the confusion matrix's counts, which ten to a row must fit."""
FIGURE_INCHES = 5.8
"""Width of each figure: at ``dpi=120``, about twice :data:`CARD_WIDTH` (sharp where the card
is wider, or at "Show actual image size")."""

COLUMNS = 4
"""Mistakes to a row: a quarter of a card holds a two-line title such as ``automobile →``,
``airplane 100%``."""


def points(pixels: float, inches: float = FIGURE_INCHES) -> float:
    """The font size, in points, that a figure ``inches`` wide shows at ``pixels`` high on a card
    :data:`CARD_WIDTH` wide, whatever its dpi."""
    return pixels * 72 * inches / CARD_WIDTH


def confusion_figure(matrix: torch.Tensor, names: list[Any]) -> Any:
    """The confusion matrix as a figure: rows true classes, columns predictions, counts shown,
    each row's accuracy at its right, every text readable on a TensorBoard card."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = matrix.shape[0]
    rows = matrix.sum(dim=1).clamp_min(1)
    text, counts = points(TEXT_PX), points(SMALLEST_TEXT_PX)
    figure, axes = plt.subplots(figsize=(FIGURE_INCHES, FIGURE_INCHES * 1.02))
    axes.imshow((matrix / rows[:, None]).numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    for i in range(classes):
        for j in range(classes):
            count = int(matrix[i, j])
            colour = "white" if matrix[i, j] / rows[i] > 0.5 else "black"
            axes.text(j, i, str(count), ha="center", va="center", fontsize=counts, color=colour)
    accuracy = (matrix.diagonal() / rows).tolist()
    axes.set_xticks(range(classes), [str(n) for n in names], rotation=90, fontsize=text)
    axes.set_yticks(range(classes), [str(n) for n in names], fontsize=text)
    axes.tick_params(length=2, pad=2)
    right = axes.secondary_yaxis("right")
    right.set_yticks(range(classes), [f"{a:.0%}" for a in accuracy], fontsize=text)
    right.tick_params(length=0, pad=2)
    axes.text(classes - 0.5, -0.6, " acc", ha="left", va="bottom", fontsize=text)
    axes.set_xlabel("predicted", fontsize=text, labelpad=2)
    axes.set_ylabel("true", fontsize=text, labelpad=2)
    total = float(matrix.diagonal().sum() / matrix.sum().clamp_min(1))
    axes.set_title(f"Test confusion matrix (accuracy {total:.1%})", fontsize=text, pad=text)
    figure.tight_layout(pad=0.3)
    return figure


def errors_figure(worst: list[tuple[float, torch.Tensor, int, int]], names: list[Any]) -> Any:
    """The most confident mistakes as a grid of titled images (four to a row, pixels shown as
    they are, each title two lines), or ``None`` if there are none. The grid is one image with
    its titles written over it, which one drawing makes, rather than sixteen axes placed by a
    layout engine."""
    if not worst:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    columns = COLUMNS  # fewer mistakes leave cells blank: the text keeps its size on the card
    rows = -(-len(worst) // columns)
    height, width = worst[0][1].shape[-2:]
    pad = max(1, width // 8)  # between images
    per_pixel = FIGURE_INCHES / (columns * (width + pad))  # inches of one grid pixel
    text = points(TEXT_PX)
    band = math.ceil(2.5 * text / 72 / per_pixel)  # above each image, its two-line title
    cell_width, cell_height = width + pad, band + height + pad
    grid = np.full((rows * cell_height, columns * cell_width, 3), 255, dtype=np.uint8)
    grid_inches = per_pixel * grid.shape[0]
    header = 3.0 * text / 72  # the figure's two-line title
    figure = plt.figure(figsize=(FIGURE_INCHES, grid_inches + header))
    axes = figure.add_axes((0.0, 0.0, 1.0, grid_inches / (grid_inches + header)))
    for index, (confidence, image, true, predicted) in enumerate(worst):
        row, column = divmod(index, columns)
        top, left = row * cell_height + band, column * cell_width + pad // 2
        rgb = image.expand(3, -1, -1).permute(1, 2, 0).numpy()  # a grey image as three channels
        grid[top : top + height, left : left + width] = rgb
        title = error_title(names[true], names[predicted], confidence)
        axes.text(left + width / 2, top - 0.5, title, ha="center", va="bottom", fontsize=text)
    axes.imshow(grid, interpolation="nearest")
    axes.set_axis_off()
    figure.suptitle(
        "Most confident test mistakes\n(true → predicted, confidence)",
        fontsize=text,
        y=1.0,
        va="top",
    )
    return figure


def error_title(true: Any, predicted: Any, confidence: float) -> str:
    """A mistake's title, on two lines to fit a quarter of a card: ``cat →`` then ``dog 97%``
    (the true class, the prediction, its probability)."""
    return f"{true} →\n{predicted} {confidence:.0%}"
