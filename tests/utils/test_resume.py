"""Command lines that continue a run: ``resume=true`` and ``ckpt_path=``."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitattn.utils.errors import ConfigError
from vitattn.utils.resume import resume_arguments


def test_resume_arguments_take_the_runs_settings_and_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / ".hydra" / "overrides.yaml").write_text(
        "- attention=linear\n- model.heads=2\n- trainer.max_steps=40\n- ckpt_path=old.ckpt\n"
    )
    ckpt = str(run / "checkpoints" / "last.ckpt")
    assert resume_arguments([f"ckpt_path={ckpt}", "trainer.max_steps=80"]) == [
        "attention=linear",
        "model.heads=2",
        f"ckpt_path={ckpt}",
        "trainer.max_steps=80",
        f"hydra.run.dir={run}",
    ]
    assert resume_arguments(["resume=true", f"hydra.run.dir={run}"])[-1] == f"ckpt_path={ckpt}"
    assert resume_arguments(["-m", f"ckpt_path={ckpt}"]) == ["-m", f"ckpt_path={ckpt}"]
    with pytest.raises(ConfigError, match=r"resume=true needs the run to continue"):
        resume_arguments(["resume=true"])
    with pytest.raises(ConfigError, match=r"resume=true: .*last.ckpt does not exist"):
        resume_arguments(["resume=true", f"hydra.run.dir={tmp_path}"])
