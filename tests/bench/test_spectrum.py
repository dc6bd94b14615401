"""``mode=spectrum`` (:mod:`vitattn.bench.spectrum`): singular values of softmax attention."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from tests.support.runners import run_cli
from tests.support.written import assert_the_closing_line_names_every_file
from vitattn.bench.spectrum import cumulative_energy, head_spectra, rank_at_energy, singular_values


def test_spectrum_recovers_the_rank_of_a_low_rank_matrix() -> None:
    generator = torch.Generator().manual_seed(0)
    for rank in (1, 5, 17):
        matrix = torch.randn(64, rank, generator=generator) @ torch.randn(rank, 64)
        values = singular_values(matrix)
        assert int(rank_at_energy(values, 1.0)) == rank
        assert int(rank_at_energy(values, 0.9)) <= rank
    # Known spectrum 3, 2, 1: energies 9, 4, 1 of 14, E = 0.64, 0.93, 1.
    values = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert cumulative_energy(values).tolist()[:3] == pytest.approx([9 / 14, 13 / 14, 1.0])
    assert int(rank_at_energy(values, 0.9)) == 2


def test_head_spectra_of_rank_one_attention() -> None:
    # Keys all equal: every row of softmax(QK^T) is uniform, a rank-one matrix.
    q = torch.randn(3, 2, 16, 8)
    k = torch.ones(3, 2, 16, 8)
    spectra = head_spectra([(q, k), (q, k)], energy=0.9)
    assert [(s.layer, s.head) for s in spectra] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(s.rank == 1 and s.rank_max == 1 and s.seq_len == 16 for s in spectra)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_spectrum_mode_on_a_checkpoint(
    tiny_checkpoint: Path, tmp_path: Path, data_dir: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        "vitattn-bench",
        "mode=spectrum",
        f"ckpt_path={tiny_checkpoint}",
        "spectrum.images=2",
        f"hydra.run.dir={run_dir}",
        data_dir=data_dir,
    )
    summary = read_csv(run_dir / "spectrum_summary.csv")
    assert [(r["layer"], r["head"]) for r in summary] == [("0", "0"), ("0", "1")]  # depth 1
    assert all(1 <= int(r["rank"]) <= 64 for r in summary)
    values = read_csv(run_dir / "spectrum.csv")
    assert len(values) == 2 * 64
    energies = [float(r["cumulative_energy"]) for r in values if r["head"] == "0"]
    assert energies == sorted(energies) and energies[-1] == pytest.approx(1.0)
    assert (run_dir / "spectrum.png").read_bytes()[:4] == b"\x89PNG"
    # its last line names every file it wrote (spectrum.md and results.json were left out)
    assert_the_closing_line_names_every_file(result.stdout + result.stderr, run_dir)
