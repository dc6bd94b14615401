"""A checkpoint and a run directory are data: what they *say* builds nothing vitattn would not
build itself (issue 35). Each vector is a real file built here from a real run of
``vitattn-train`` (a checkpoint whose configs name a callable that runs a real pickle, truncates
or deletes a real file, reads the environment; a run's recorded overrides that set Hydra's own
settings; Lightning's checkpoint state pointing outside the run), and goes through the real
console scripts that read it. Each test checks that the payload is real (it does its harm when
built the way the file asks), then that the command runs nothing (the marker stays absent),
changes nothing outside the run, leaks no environment variable, and says so in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from tests.support.faults import PauseAfterStep
from tests.support.in_process import refused_in_process, run_in_process
from tests.support.presets import FEW_STEPS, plug
from tests.support.runners import refusal_message
from tests.support.trees import copy_run, tree_digest

pytestmark = pytest.mark.slow

SECRET_NAME = "VITATTN_TEST_SECRET"
SECRET = "s3cr3t-7f1c2a"


class Payload:
    """Unpickled, it runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch {self.marker}",)


@dataclass
class Site:
    """A copy of a trained run in ``root/runs/run``, with what an attacker plants in it (a
    pickle and a NumPy file carrying a payload) and what they aim at outside it (a file and a
    folder beside the run, and the marker the payload touches)."""

    root: Path
    run: Path
    marker: Path
    victim: Path
    victim_dir: Path

    @property
    def checkpoint(self) -> Path:
        return self.run / "checkpoints" / "last.ckpt"

    @property
    def pickle(self) -> Path:
        return self.run / "payload.pkl"

    @property
    def numpy_file(self) -> Path:
        return self.run / "payload.npy"

    @property
    def overrides(self) -> Path:
        return self.run / ".hydra" / "overrides.yaml"

    def edit_checkpoint(self, edit: Callable[[dict[str, Any]], None]) -> None:
        checkpoint = torch.load(self.checkpoint, weights_only=True)
        edit(checkpoint)
        torch.save(checkpoint, self.checkpoint)

    def unharmed(self) -> bool:
        return (
            not self.marker.exists()
            and self.victim.is_file()
            and self.victim.read_text() == "keep"
            and (self.victim_dir / "inside.txt").is_file()
            and (self.victim_dir / "inside.txt").read_text() == "keep"
        )


@pytest.fixture
def site(tmp_path: Path, tiny_run: Path) -> Site:
    run = copy_run(tiny_run, tmp_path / "runs" / "run")
    site = Site(tmp_path, run, tmp_path / "PWNED", tmp_path / "runs" / "victim.txt", tmp_path / "d")
    site.victim.write_text("keep")
    site.victim_dir.mkdir()
    (site.victim_dir / "inside.txt").write_text("keep")
    torch.save(Payload(site.marker), site.pickle)
    np.save(site.numpy_file, np.array([Payload(site.marker)], dtype=object), allow_pickle=True)
    return site


# --- what a checkpoint stores ------------------------------------------------------------------


def loads_the_pickle(site: Site) -> dict[str, Any]:
    return {"_target_": "torch.load", "f": str(site.pickle), "weights_only": False}


def truncates_the_victim(site: Site) -> dict[str, Any]:
    return {"_target_": "builtins.open", "file": str(site.victim), "mode": "w"}


def loads_the_numpy_pickle(site: Site) -> dict[str, Any]:
    return {"_target_": "numpy.load", "file": str(site.numpy_file), "allow_pickle": True}


def deletes_the_victim(site: Site) -> dict[str, Any]:
    path = {"_target_": "pathlib.Path", "_args_": [str(site.victim)]}
    return {"_target_": "pathlib.Path.unlink", "_args_": [path]}


def set_network(node: Callable[[Site], Any]) -> Callable[[Site, dict[str, Any]], None]:
    def edit(site: Site, checkpoint: dict[str, Any]) -> None:
        checkpoint["hyper_parameters"]["net"] = node(site)

    return edit


def set_legacy_network(site: Site, checkpoint: dict[str, Any]) -> None:
    checkpoint["hparams"] = {"net": loads_the_pickle(site)}  # Lightning merges it in


def set_data(name: str, node: Callable[[Site], Any]) -> Callable[[Site, dict[str, Any]], None]:
    def edit(site: Site, checkpoint: dict[str, Any]) -> None:
        checkpoint["datamodule_hyper_parameters"][name] = node(site)

    return edit


def trains_elsewhere(site: Site) -> dict[str, Any]:
    """A class vitattn builds, but never from a module's settings: a trainer and its logger,
    with folders outside the run."""
    logger = {"_target_": "vitattn.training.logger.RunCSVLogger", "save_dir": str(site.victim_dir)}
    trainer = {"_target_": "lightning.pytorch.Trainer", "default_root_dir": str(site.victim_dir)}
    return {**trainer, "logger": logger}


def downloads_elsewhere(site: Site, checkpoint: dict[str, Any]) -> None:
    """The network's attention is vitattn's data module, downloading into a folder outside."""
    checkpoint["hyper_parameters"]["net"]["attention"] = {
        "_target_": "vitattn.data.cifar10.CIFAR10DataModule",
        "_partial_": True,
        "data_dir": str(site.victim_dir / "data"),
        "download": True,
    }


def reads_the_secret(site: Site, checkpoint: dict[str, Any]) -> None:
    checkpoint["hyper_parameters"]["net"]["embed_dim"] = f"${{oc.env:{SECRET_NAME}}}"


CHECKPOINT_VECTORS: dict[str, tuple[Callable[[Site, dict[str, Any]], None], str]] = {
    "the network loads a pickle": (
        set_network(loads_the_pickle),
        r"hyper_parameters\.net\._target_=torch\.load is not something vitattn builds",
    ),
    "the network truncates a file": (
        set_network(truncates_the_victim),
        r"hyper_parameters\.net\._target_=builtins\.open is not something vitattn builds",
    ),
    "the legacy hparams key": (
        set_legacy_network,
        r"hparams\.net\._target_=torch\.load is not something vitattn builds",
    ),
    "data.shift loads a pickle": (
        set_data("shift", loads_the_numpy_pickle),
        r"datamodule_hyper_parameters\.shift is a dict, not a plain value",
    ),
    "data.grayscale deletes a file": (
        set_data("grayscale", deletes_the_victim),
        r"datamodule_hyper_parameters\.grayscale is a dict, not a plain value",
    ),
    "a setting reads the environment": (reads_the_secret, r"calls the resolver 'oc\.env'"),
    "the network is a trainer writing elsewhere": (
        set_network(trains_elsewhere),
        r"hyper_parameters\.net\._target_=lightning\.pytorch\.Trainer is built by vitattn "
        r"elsewhere, never from a module's settings",
    ),
    "the attention is a data module": (
        downloads_elsewhere,
        r"hyper_parameters\.net\.attention\._target_=vitattn\.data\.cifar10\."
        r"CIFAR10DataModule is built by vitattn elsewhere",
    ),
}

COMMANDS = {
    "vitattn-eval": [],
    "vitattn-finetune": [],
    "vitattn-bench": ["mode=approx"],
    "vitattn-train": [],  # ckpt_path= continues the run the checkpoint belongs to
}


@pytest.mark.parametrize(
    "node", [loads_the_pickle, truncates_the_victim, loads_the_numpy_pickle, deletes_the_victim]
)
def test_each_payload_is_real(site: Site, node: Callable[[Site], Any]) -> None:
    """Built as the file asks, each node does its harm: the tests below can fail."""
    from hydra.utils import instantiate

    result = instantiate(node(site))
    if isinstance(result, np.ndarray):
        result[0]
    if hasattr(result, "close"):
        result.close()
    assert not site.unharmed()


@pytest.mark.parametrize("vector", sorted(CHECKPOINT_VECTORS))
@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_a_checkpoints_configs_build_nothing_through_any_command(
    site: Site, vector: str, program: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    edit, refusal = CHECKPOINT_VECTORS[vector]
    site.edit_checkpoint(lambda checkpoint: edit(site, checkpoint))
    before = tree_digest(site.root)
    out = site.root / "out"
    arguments = [*COMMANDS[program], f"ckpt_path={site.checkpoint}"]
    if program != "vitattn-train":
        arguments.append(f"hydra.run.dir={out}")
    monkeypatch.setenv(SECRET_NAME, SECRET)
    message = refused_in_process(
        program, *arguments, data_dir=data_dir, creates=out, env={SECRET_NAME: SECRET}
    )
    assert message.startswith(f"{site.checkpoint}: ")
    assert re.search(refusal, message), message
    assert SECRET not in message
    assert site.unharmed()
    assert tree_digest(site.root) == before


def test_a_checkpoint_of_todays_vitattn_train_still_loads(site: Site, data_dir: Path) -> None:
    result = run_in_process(
        "vitattn-eval",
        f"ckpt_path={site.checkpoint}",
        f"hydra.run.dir={site.root / 'eval'}",
        "trainer=cpu",
        data_dir=data_dir,
    )
    assert result.returncode == 0
    assert json.loads((site.root / "eval" / "metrics.json").read_text())["test/acc"] > 0


# --- a run's recorded overrides ----------------------------------------------------------------


def resume(site: Site) -> list[str]:
    """``vitattn-train`` arguments that continue the run for four more steps."""
    return ["resume=true", f"hydra.run.dir={site.run}", "trainer.max_steps=12"]


def write_overrides(site: Site, lines: list[str]) -> int:
    """The run's recorded overrides with ``lines`` after them; the line of the first added."""
    recorded = yaml.safe_load(site.overrides.read_text())
    site.overrides.write_text(yaml.safe_dump([*recorded, *lines]))
    return len(recorded) + 1


def plant_compiler(site: Site) -> list[str]:
    """A ``g++`` in the run that touches the marker, and overrides that put it first on PATH."""
    compiler = site.run / "bin" / "g++"
    compiler.parent.mkdir()
    compiler.write_text(f"#!/bin/sh\ntouch {site.marker}\n")
    compiler.chmod(0o755)
    return [f"++hydra.job.env_set.PATH={compiler.parent}", "model.compile=true"]


RECORDED_VECTORS: dict[str, tuple[Callable[[Site], list[str]], str]] = {
    "a callback loads a pickle": (
        lambda site: [
            "+callbacks.x._target_=torch.load",
            f"+callbacks.x.f={site.pickle}",
            "+callbacks.x.weights_only=false",
        ],
        r"callbacks\.x\._target_=torch\.load is not something vitattn builds",
    ),
    "a callback as one node": (
        lambda site: [f"+callbacks.x={{_target_:builtins.open,file:{site.victim},mode:w}}"],
        r"callbacks\.x\._target_=builtins\.open is not something vitattn builds",
    ),
    "the log file truncates a file": (
        lambda site: [
            f"++hydra.job_logging.handlers.file.filename={site.victim}",
            "++hydra.job_logging.handlers.file.mode=w",
        ],
        "sets Hydra's own settings",
    ),
    "PATH runs a planted compiler": (plant_compiler, "sets Hydra's own settings"),
    "the log format reads the environment": (
        lambda site: [
            f"++hydra.job_logging.formatters.simple.format='${{oc.env:{SECRET_NAME}}} %(message)s'"
        ],
        "sets Hydra's own settings",
    ),
    "a setting reads the environment": (
        lambda site: [f"+note='${{oc.env:{SECRET_NAME}}}'"],
        r"calls the resolver 'oc\.env'",
    ),
    "Hydra's settings deleted": (lambda site: ["~hydra.job_logging"], "sets Hydra's own"),
}

WHERE = r"says where something is read or written \({key}\)"

PLACE_VECTORS: dict[str, Callable[[Site], list[str]]] = {
    "callbacks.last_checkpoint.dirpath": lambda site: [
        f"callbacks.last_checkpoint.dirpath={site.victim_dir}"
    ],
    "callbacks.last_checkpoint.filename": lambda site: [
        "callbacks.last_checkpoint.filename=../../victim/evil_last"
    ],
    "logger.csv.name": lambda site: ["logger.csv.name=../../victim/csvdir", "logger=many_loggers"],
    "logger.tensorboard.save_dir": lambda site: [f"logger.tensorboard.save_dir={site.victim_dir}"],
    "data.data_dir": lambda site: [
        f"data.data_dir={site.victim_dir}",
        "data.url=http://127.0.0.1:9/cifar-10-python.tar.gz",
    ],
    "data.url": lambda site: ["data.url=http://127.0.0.1:9/cifar-10-python.tar.gz"],
    "trainer.default_root_dir": lambda site: [f"trainer.default_root_dir={site.victim_dir}"],
    "callbacks.model_checkpoint.dirpath": lambda site: [
        f"callbacks.model_checkpoint.dirpath={site.victim_dir}"
    ],
    "callbacks.interrupt_checkpoint.filename": lambda site: [
        "callbacks.interrupt_checkpoint.filename=../../d/inside"
    ],
    "paths.output_dir": lambda site: [f"paths.output_dir={site.victim_dir}"],
    "paths.data_dir": lambda site: [f"paths.data_dir={site.victim_dir}"],
    "task_name": lambda site: ["task_name=../../d/inside"],
}
"""Settings that say where something is read or written, each recorded by a run: none is
replayed (the command line or the defaults say where), whatever its key."""

RECORDED_VECTORS.update(
    {
        f"{key} from the file": (lines, WHERE.format(key=re.escape(key)))
        for key, lines in PLACE_VECTORS.items()
    }
)
RECORDED_VECTORS.update(
    {
        "a setting vitattn does not have": (
            lambda site: ["+trainer.num_nodes=2"],
            r"trainer\.num_nodes, which is not a setting of vitattn's configs",
        ),
        "a Lightning argument that is not its type": (
            lambda site: ["+trainer.limit_val_batches=../../victim"],
            r"is not a finite number .* the type of trainer\.limit_val_batches",
        ),
        "a word setting holds a path": (
            lambda site: ["data.shift=../../victim"],
            r"is not a plain word .* the type of data\.shift",
        ),
        "a size that is not a number": (
            lambda site: ["model.embed_dim=[32,32]"],
            r"is not an integer within .* the type of model\.embed_dim",
        ),
        "a group choice that is not in configs": (
            lambda site: ["attention=../../d/inside"],
            r"is not a choice of attention",
        ),
        "a search's preset, which sets Hydra's mode and sweeper": (
            lambda site: ["hparams_search=optuna"],
            r"'hparams_search=optuna' chooses an option that sets hydra\.mode, hydra\.sweeper",
        ),
        "the checkpoint plugin deleted": (
            lambda site: ["~trainer.plugins"],
            r"may delete only one of the callbacks or loggers",
        ),
    }
)


@pytest.mark.parametrize("vector", sorted(RECORDED_VECTORS))
def test_a_runs_recorded_overrides_are_settings_not_hydras_machinery(
    site: Site, vector: str, data_dir: Path
) -> None:
    lines, refusal = RECORDED_VECTORS[vector]
    line = write_overrides(site, lines(site))
    before = tree_digest(site.root)
    result = run_in_process("vitattn-train", *resume(site), data_dir=data_dir, check=False)
    message = refusal_message("vitattn-train", result)
    assert message.startswith(f"{site.overrides} line {line}: "), message
    assert re.search(refusal, message), message
    assert SECRET not in result.stdout + result.stderr
    assert site.unharmed()
    assert tree_digest(site.root) == before


def test_a_checkpoint_of_someone_elses_run_replays_no_place_from_its_files(
    site: Site, data_dir: Path
) -> None:
    """``ckpt_path=<their run>/checkpoints/last.ckpt`` replays that run's overrides as
    ``resume=true`` does: a file name that climbs out of the run is refused in one line naming
    the file and its line, and nothing is written, not even in the run."""
    line = write_overrides(site, ["callbacks.last_checkpoint.filename=../../victim/evil_last"])
    before = tree_digest(site.root)
    message = refused_in_process(
        "vitattn-train", f"ckpt_path={site.checkpoint}", "trainer.max_steps=12", data_dir=data_dir
    )
    assert message.startswith(f"{site.overrides} line {line}: "), message
    assert "callbacks.last_checkpoint.filename" in message
    assert tree_digest(site.root) == before and site.unharmed()
    assert not list(site.root.rglob("evil_last*"))


def test_a_recorded_count_that_would_never_end_a_step_is_refused(
    site: Site, data_dir: Path
) -> None:
    """A recorded ``data.randaugment_ops=10^9`` is an integer of vitattn's configs, so it is
    replayed; the data settings' bound refuses it before the run is touched (a resume trained
    its first step for ever, and a SIGTERM waited for that step to end)."""
    write_overrides(site, ["data.randaugment_ops=1000000000"])
    before = tree_digest(site.root)
    message = refused_in_process(
        "vitattn-train", "resume=true", f"hydra.run.dir={site.run}", data_dir=data_dir
    )
    assert "data.randaugment_ops=1000000000 is not valid; choose 0..16" in message, message
    assert tree_digest(site.root) == before and site.unharmed()


@pytest.mark.parametrize(
    ("recorded", "refusal"),
    [
        # a training process per device: the resume stalled the machine
        ("trainer.devices=1000", r"trainer\.devices=1000 is not valid; choose a number of "),
        # gigabytes of images held for one figure
        ("callbacks.confusion_report.errors=1000000000", r"errors=1000000000 is not valid"),
        ("callbacks.attention_insight.images=1000000000", r"images=1000000000 is not valid"),
    ],
)
def test_a_recorded_count_that_would_start_processes_or_fill_memory_is_refused(
    site: Site, recorded: str, refusal: str, data_dir: Path
) -> None:
    """Integers of vitattn's configs, so replayed by a resume; their bounds refuse them before
    the run is touched (red team)."""
    write_overrides(site, [recorded])
    before = tree_digest(site.root)
    message = refused_in_process(
        "vitattn-train", "resume=true", f"hydra.run.dir={site.run}", data_dir=data_dir
    )
    assert re.search(refusal, message), message
    assert tree_digest(site.root) == before and site.unharmed()


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        ("- a=b\n- [unclosed\n", "is not valid YAML at line"),
        ("trainer: {max_steps: 8}\n", "is not a list of overrides"),
        ("- 5\n- seed=1\n", "is not a list of overrides"),
        (b"\xff\xfe- seed=1\n", "is not UTF-8 text"),
        ("link", "is a symbolic link"),
    ],
)
def test_a_malformed_overrides_file_is_one_line(
    site: Site, content: str | bytes, refusal: str, data_dir: Path
) -> None:
    site.overrides.unlink()
    if content == "link":
        site.overrides.symlink_to(site.victim)
    elif isinstance(content, bytes):
        site.overrides.write_bytes(content)
    else:
        site.overrides.write_text(content)
    before = tree_digest(site.root)
    message = refused_in_process(
        "vitattn-train", "resume=true", f"hydra.run.dir={site.run}", data_dir=data_dir
    )
    assert message.startswith(str(site.overrides)) and refusal in message, message
    assert tree_digest(site.root) == before and site.unharmed()


def test_a_target_the_user_trusts_is_given_on_the_command_line(site: Site, data_dir: Path) -> None:
    """A run trained with a callback of the user's own: resuming refuses to take it from the
    file, and names the line; given again on the command line, it is the user's and runs."""
    mine = plug("mine", PauseAfterStep, step=100)
    line = write_overrides(site, mine)
    message = refused_in_process("vitattn-train", *resume(site), data_dir=data_dir)
    assert message.startswith(f"{site.overrides} line {line}: ")
    assert "tests.support.faults.PauseAfterStep is not something vitattn builds" in message
    assert "a target you trust can be given on the command line" in message
    run_in_process("vitattn-train", *resume(site), *mine, data_dir=data_dir)
    assert json.loads((site.run / "metrics.json").read_text())["steps"] == 12


# --- Lightning's callback state -----------------------------------------------------------------


def point_outside(site: Site, checkpoint: dict[str, Any]) -> None:
    """Every ``ModelCheckpoint`` state of the run names the victims through
    ``<dirpath>/../../``, which Lightning's own ``dirpath in path.parents`` check does not
    collapse, with scores any new checkpoint beats: the checkpoint it replaces is deleted."""
    folder = site.run / "checkpoints"
    escape = f"{folder}/../../"
    for state in checkpoint["callbacks"].values():
        if "best_k_models" not in state:
            continue
        state["dirpath"] = str(folder)
        state["best_model_path"] = escape + "victim.txt"
        state["kth_best_model_path"] = escape + "../d"
        state["best_k_models"] = {escape + "../d": torch.tensor(0.0)}
        state["kth_value"] = torch.tensor(0.0)
        state["best_model_score"] = torch.tensor(0.0)
        state["last_model_path"] = escape + "victim.txt"


def test_callback_state_never_deletes_outside_the_run(site: Site, data_dir: Path) -> None:
    site.edit_checkpoint(lambda checkpoint: point_outside(site, checkpoint))
    result = run_in_process("vitattn-train", *resume(site), data_dir=data_dir)
    assert site.unharmed()
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "were dropped" in line]
    assert len(warnings) == 1, output[-3000:]
    assert "nothing but the run's checkpoints is read or deleted" in warnings[0]
    assert json.loads((site.run / "metrics.json").read_text())["steps"] == 12


def test_callback_state_never_deletes_a_users_file_in_the_runs_checkpoints(
    site: Site, data_dir: Path
) -> None:
    """The user keeps ``notes.txt`` in the run's ``checkpoints/``; the checkpoint's
    ``ModelCheckpoint`` states name it as their worst top-k model with a score any new one
    beats: the resume trains to its end and ``notes.txt`` is as it was (red team: Lightning
    deleted it, a path inside ``checkpoints/`` being all that was asked of it)."""
    folder = site.run / "checkpoints"
    notes = folder / "notes.txt"
    notes.write_text("my notes")

    def name_notes(checkpoint: dict[str, Any]) -> None:
        for state in checkpoint["callbacks"].values():
            if "best_k_models" not in state:
                continue
            state["dirpath"] = str(folder)
            state["best_k_models"] = {str(notes): torch.tensor(0.0)}
            state["kth_best_model_path"] = state["best_model_path"] = str(notes)
            state["kth_value"] = state["best_model_score"] = torch.tensor(0.0)

    site.edit_checkpoint(name_notes)
    result = run_in_process("vitattn-train", *resume(site), data_dir=data_dir)
    assert notes.read_text() == "my notes", result.stderr[-2000:]
    assert json.loads((site.run / "metrics.json").read_text())["steps"] == 12


# --- a sweep continuation -------------------------------------------------------------------------


def interrupted_sweep_job(site: Site) -> list[str]:
    """The trained run as the one job of a sweep that was interrupted, and the sweep's command."""
    from vitattn.cli.console import name_jobs_by_what_differs
    from vitattn.cli.overrides import overrides_of
    from vitattn.runs.continuation import planned_jobs

    sweep = site.root / "runs" / "sweep"
    command = ["-m", *FEW_STEPS, "trainer.max_steps=12", f"hydra.sweep.dir={sweep}"]
    (job,) = planned_jobs(overrides_of(name_jobs_by_what_differs(command)), sweep)
    shutil.move(site.run, job.directory)
    site.run = job.directory
    metrics = json.loads((site.run / "metrics.json").read_text())
    (site.run / "metrics.json").write_text(json.dumps({**metrics, "status": "interrupted"}))
    stored = yaml.safe_load((site.run / ".hydra" / "config.yaml").read_text())
    stored["trainer"]["max_steps"] = 12  # as the sweep's command gives it
    (site.run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(stored))
    return command


@pytest.mark.parametrize(
    "vector", ["the network loads a pickle", "a setting reads the environment"]
)
def test_a_sweep_continuation_refuses_an_interrupted_jobs_checkpoint_before_any_job_runs(
    site: Site, vector: str, data_dir: Path
) -> None:
    command = interrupted_sweep_job(site)
    edit, refusal = CHECKPOINT_VECTORS[vector]
    site.edit_checkpoint(lambda checkpoint: edit(site, checkpoint))
    before = tree_digest(site.root)
    message = refused_in_process(
        "vitattn-train", *command, data_dir=data_dir, env={SECRET_NAME: SECRET}
    )
    assert message.startswith(f"{site.checkpoint}: ") and re.search(refusal, message), message
    assert SECRET not in message
    assert site.unharmed()
    assert tree_digest(site.root) == before  # the job is not run, not even marked failed
