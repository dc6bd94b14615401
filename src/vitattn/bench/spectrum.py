"""Singular values of softmax attention matrices (``vitattn-bench mode=spectrum``).

Linformer's argument (Wang et al. 2020, Fig. 1) is that the attention matrix P = softmax(Q K^T /
sqrt(d)) of a trained transformer is close to low rank: most of its spectrum's energy sits in a
few singular values. Here, for every layer and head of a checkpoint, on real images: the singular
values sigma_i of P (averaged over images), the cumulative energy

    E(r) = sum_{i <= r} sigma_i^2 / sum_i sigma_i^2,

and the rank at which E first reaches ``energy`` (0.9 by default). The Linformer paper plots the
normalised cumulative singular value sum_{i <= r} sigma_i / sum_i sigma_i instead (``power=1``
below); both curves and both ranks are reported. A row-stochastic P always has sigma_1 >= 1
(the mean row), so nearly uniform attention has almost all its energy in one component: the
sigma-curve separates heads better there. P is computed from the q, k
the model attends with, whatever its mechanism, so the spectrum is that of exact softmax
attention on the trained projections. :func:`run_spectrum` does this for the settings'
checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from vitattn.bench.capture import checkpoint_qkv
from vitattn.bench.settings import BenchSettings


def singular_values(matrices: torch.Tensor) -> torch.Tensor:
    """Singular values (descending) of each ``(..., n, n)`` matrix, in float64."""
    return torch.linalg.svdvals(matrices.double())


def cumulative_energy(values: torch.Tensor, power: int = 2) -> torch.Tensor:
    """E(r) for r = 1..n along the last axis: cumulative share of sigma^power (2: energy)."""
    energy = values.double().abs() ** power
    return energy.cumsum(dim=-1) / energy.sum(dim=-1, keepdim=True).clamp_min(1e-300)


def rank_at_energy(values: torch.Tensor, energy: float = 0.9, power: int = 2) -> torch.Tensor:
    """Smallest r with E(r) >= ``energy`` (an integer tensor over the leading axes)."""
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"energy={energy} must be in (0, 1]")
    curve = cumulative_energy(values, power)
    # A tiny tolerance, so that energy=1.0 is reached despite rounding in the cumulative sum.
    return (curve < energy - 1e-12).sum(dim=-1) + 1


def softmax_matrices(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) for ``(..., n, d)`` q and k, in float64."""
    scale = q.shape[-1] ** -0.5
    return ((q.double() * scale) @ k.double().transpose(-2, -1)).softmax(dim=-1)


@dataclass
class HeadSpectrum:
    """Spectrum of one layer's head, averaged over images."""

    layer: int
    head: int
    singular_values: list[float]  # mean over images, descending
    cumulative_energy: list[float]  # E(r) of the mean singular values
    cumulative_singular: list[float]  # the Linformer paper's sum of sigma, normalised
    rank: int  # rank at `energy` of the mean spectrum's E(r)
    rank_mean: float  # mean over images of each image's rank at `energy`
    rank_min: int
    rank_max: int
    rank_singular: int  # rank at `energy` of the mean spectrum's normalised sum of sigma
    seq_len: int


def head_spectra(
    qk_per_layer: list[tuple[torch.Tensor, torch.Tensor]], energy: float = 0.9
) -> list[HeadSpectrum]:
    """Spectra of every layer x head from ``[(q, k) per layer]`` of shape (images, heads, n, d)."""
    spectra: list[HeadSpectrum] = []
    for layer, (q, k) in enumerate(qk_per_layer):
        values = singular_values(softmax_matrices(q, k))  # (images, heads, n)
        ranks = rank_at_energy(values, energy)  # (images, heads)
        mean_values = values.mean(dim=0)  # (heads, n)
        mean_curve = cumulative_energy(mean_values)
        mean_rank = rank_at_energy(mean_values, energy)
        singular_curve = cumulative_energy(mean_values, power=1)
        singular_rank = rank_at_energy(mean_values, energy, power=1)
        for head in range(values.shape[1]):
            spectra.append(
                HeadSpectrum(
                    layer=layer,
                    head=head,
                    singular_values=mean_values[head].tolist(),
                    cumulative_energy=mean_curve[head].tolist(),
                    cumulative_singular=singular_curve[head].tolist(),
                    rank=int(mean_rank[head]),
                    rank_mean=float(ranks[:, head].double().mean()),
                    rank_min=int(ranks[:, head].min()),
                    rank_max=int(ranks[:, head].max()),
                    rank_singular=int(singular_rank[head]),
                    seq_len=int(values.shape[-1]),
                )
            )
    return spectra


def run_spectrum(settings: BenchSettings, data_cfg: DictConfig) -> list[HeadSpectrum]:
    """``mode=spectrum``: every layer x head of ``ckpt_path`` on ``spectrum.images`` real images
    (read with ``data_cfg``)."""
    assert settings.ckpt_path is not None
    layers = checkpoint_qkv(settings.ckpt_path, data_cfg, settings.spectrum.images)
    return head_spectra([(q, k) for q, k, _ in layers], settings.spectrum.energy)
