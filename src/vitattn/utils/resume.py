"""``vitattn-train`` command lines that continue a run: ``resume=true`` and ``ckpt_path=``."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from vitattn.utils.cli import MULTIRUN_FLAGS, overrides_of
from vitattn.utils.errors import ConfigError


def resume_arguments(arguments: list[str]) -> list[str]:
    """Command-line arguments that continue a run in its own directory with its own settings.

    ``ckpt_path=<run>/checkpoints/<file>.ckpt`` or ``resume=true hydra.run.dir=<run>`` (which
    takes ``<run>/checkpoints/last.ckpt``): the run's recorded overrides
    (``<run>/.hydra/overrides.yaml``) come first, so the model and data are rebuilt as they were,
    then the ones given now (e.g. a larger ``trainer.max_steps``); ``hydra.run.dir`` points at the
    run, so TensorBoard curves, checkpoints and ``metrics.json`` continue there.
    """
    if any(arg in MULTIRUN_FLAGS for arg in arguments):
        return arguments
    given = dict(arg.split("=", 1) for arg in overrides_of(arguments))
    run_dir = Path(given["hydra.run.dir"]) if "hydra.run.dir" in given else None
    ckpt_path = given.get("ckpt_path")
    if given.get("resume", "false").lower() == "true":
        if run_dir is None:
            raise ConfigError("resume=true needs the run to continue: add hydra.run.dir=<run dir>")
        if ckpt_path in (None, "null"):
            ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
            if not Path(ckpt_path).is_file():
                raise ConfigError(
                    f"resume=true: {ckpt_path} does not exist; hydra.run.dir must be a "
                    "vitattn-train run directory with checkpoints/last.ckpt"
                )
            arguments = [*arguments, f"ckpt_path={ckpt_path}"]
    if ckpt_path in (None, "null"):
        return arguments
    checkpoint = Path(ckpt_path).expanduser()
    if not checkpoint.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a file; pass a .ckpt saved by vitattn-train"
        )
    if run_dir is None and checkpoint.parent.name == "checkpoints":
        candidate = checkpoint.parent.parent
        if (candidate / ".hydra" / "overrides.yaml").is_file():
            run_dir = candidate
            arguments = [*arguments, f"hydra.run.dir={run_dir}"]
    recorded = run_dir / ".hydra" / "overrides.yaml" if run_dir is not None else None
    if recorded is None or not recorded.is_file():
        return arguments
    previous = OmegaConf.to_container(OmegaConf.load(recorded)) or []
    keys_now = {arg.split("=", 1)[0].lstrip("+~") for arg in arguments}
    skip = {"ckpt_path", "resume", *keys_now}
    kept = [
        str(arg)
        for arg in previous
        if str(arg).split("=", 1)[0].lstrip("+~") not in skip and not str(arg).startswith("hydra.")
    ]
    return [*kept, *arguments]
