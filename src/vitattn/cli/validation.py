"""Checking a composed config before anything runs: types from the targets' signatures, and what
a resume may do. (Ranges: :mod:`vitattn.training.trial_build` builds each object once.)

The schema is the code itself: every config node with a ``_target_`` is checked against the
type hints of the callable it names (``VisionTransformer(patch_size: int, ...)``,
``torch.optim.AdamW(lr: float, ...)``, ``lightning.Trainer(precision: Literal[...], ...)``), so
a setting added to a class is checked as soon as it exists. Range checks live where the values
are used (the classes raise :class:`ConfigError` in their constructors, torch and Lightning raise
their own errors); :func:`vitattn.training.trial_build.check_buildable` builds each object
once, on nothing, to let them speak. Every failure is one :class:`ConfigError` line naming the
setting.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vitattn.cli.additions import did_you_mean
from vitattn.cli.overrides import key_of
from vitattn.errors import ConfigError
from vitattn.runs.files import read_json, whole_number
from vitattn.runs.layout import RunDir, RunState, run_state
from vitattn.utils import checks
from vitattn.utils.config import MatmulPrecision

SKIPPED_NODES = ("hydra", "paths")
"""Nodes that are Hydra's or hold only locations: not settings of any object."""

SETTINGS_CHECKS = {
    "vitattn.data.cifar10.CIFAR10DataModule": "vitattn.data.settings.DataSettings.of"
}
"""Targets that take their settings as ``**settings`` and check them with a class torch alone
imports: a node naming one is checked by building that class from its settings (each key, its
type and its range, in the lines the target gives), without importing the target, whose module
imports Lightning."""


# --- types ------------------------------------------------------------------------------------


def target_nodes(cfg: DictConfig, prefix: str = "") -> Iterator[tuple[str, DictConfig]]:
    """``(path, node)`` of every node with a ``_target_``, not following interpolations (the
    module's ``net: ${model}`` is the ``model`` node, checked once, under its own name)."""
    for key, value in cfg.items_ex(resolve=False):
        path = f"{prefix}{key}"
        if not prefix and key in SKIPPED_NODES:
            continue
        node = cfg._get_node(key)
        if node is None or node._is_interpolation() or not isinstance(value, DictConfig):
            continue
        if "_target_" in value:
            yield path, value
        yield from target_nodes(value, f"{path}.")


def settings_of(node: DictConfig) -> dict[str, Any]:
    """The node's own settings, resolved where they can be; ``...`` where they cannot (an
    interpolation of the running app's output directory, say)."""
    values: dict[str, Any] = {}
    for key in node:
        if str(key).startswith("_"):
            continue
        try:
            value = node[key]
        except Exception:  # an interpolation only the running Hydra app can resolve
            values[str(key)] = ...
            continue
        if isinstance(value, DictConfig | ListConfig):
            try:
                value = OmegaConf.to_container(value, resolve=True)
            except Exception:
                value = ...
        values[str(key)] = value
    return values


def check_target_policy(path: str, target_name: str) -> None:
    """Refuse in one line a ``_target_`` that Hydra's target policy blocks (``os.system``,
    ``subprocess.run``, ...: callables that would let a config run commands or change files),
    asking ``instantiate`` for a partial of it, which checks the policy and calls nothing."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        instantiate({"_target_": target_name, "_partial_": True})
    except InstantiationException as error:
        if "blocklisted" not in str(error):
            return  # not importable: check_types names that
        raise ConfigError(
            f"{path}._target_={target_name} is refused by Hydra's target policy: a config may "
            "not name code that runs commands or changes files (check the command line, or the "
            "run's .hydra/overrides.yaml when resuming)"
        ) from None


MAX_SEED = 2**32 - 1
"""The largest seed numpy (and so Lightning's ``seed_everything``) takes."""


def check_run_settings(cfg: DictConfig) -> None:
    """The run's own settings, at the config's top level, which no class checks as it is built:
    ``seed`` an integer 0..2**32-1 or null, ``resume`` and ``test`` true or false, and
    ``matmul_precision`` one torch knows (torch itself takes any other word with a warning and
    keeps its float32 products as they were). ``ckpt_path`` is the resume's
    (:func:`check_resume`) or the fine-tune's."""
    seed = cfg.get("seed")
    if seed is not None:
        checks.integer("seed", seed, 0, MAX_SEED, hint=", or null (unseeded)")
    for name in ("resume", "test"):
        if name in cfg:
            checks.flag(name, cfg[name])
    value = cfg.get("matmul_precision")
    if value is not None:
        checks.one_of("matmul_precision", value, [p.value for p in MatmulPrecision])


TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""What ``task_name`` may be: one plain name, which names the run's log file and the folder under
``paths.log_dir`` its runs go to."""


def check_task_name(cfg: DictConfig) -> None:
    """Refuse in one line a ``task_name`` that is no plain name: ``task_name=../victim`` appended
    the run's log to a file outside the run directory, and ``a/b`` ended in a traceback."""
    name = OmegaConf.select(cfg, "task_name", default=None)
    if name is not None and not (isinstance(name, str) and TASK_NAME.fullmatch(name)):
        raise checks.invalid(
            "task_name",
            name,
            "a name of at most 100 letters, digits, '_', '-' and '.', not beginning with '.' (it "
            "names the run's log file and the folder of its runs under paths.log_dir)",
        )


LAUNCHER_COUNTS = {
    "timeout_min": 1,
    "cpus_per_task": 1,
    "tasks_per_node": 1,
    "nodes": 1,
    "gpus_per_node": 0,
    "array_parallelism": 1,
    "max_num_timeout": 0,
    "signal_delay_s": 0,
}
"""The counts of Hydra's submitit launchers (``hydra/launcher=local|slurm``) with the least each
takes: submitit and SLURM take what they are given (``timeout_min=-1`` ended each job at once
and the sweep in a traceback; ``cpus_per_task=0`` was taken)."""
LAUNCHER_POSITIVE = ("mem_gb", "mem_per_gpu", "mem_per_cpu", "cpus_per_gpu", "gpus_per_task")
"""Sizes of the submitit launchers that are above zero where they are given (null: SLURM's)."""


def check_launcher(cfg: DictConfig) -> None:
    """The launcher of a sweep (``hydra.launcher`` of the composed ``cfg``): its counts in their
    ranges, and joblib's ``n_jobs`` not 0 (joblib ended the sweep in a traceback for 0, with
    its folder made), each refused in one line naming it."""
    launcher = OmegaConf.select(cfg, "hydra.launcher", default=None)
    if not isinstance(launcher, DictConfig):
        return
    target = str(launcher.get("_target_", ""))
    if target.endswith("JoblibLauncher"):
        n_jobs = launcher.get("n_jobs")
        if n_jobs is not None and (not isinstance(n_jobs, int) or n_jobs == 0):
            raise checks.invalid(
                "hydra.launcher.n_jobs",
                n_jobs,
                "a number of jobs at once >= 1, or below 0 (-1: one per CPU, -2: one fewer)",
            )
        return
    if "submitit_launcher" not in target:
        return
    for key, least in LAUNCHER_COUNTS.items():
        if launcher.get(key) is not None:
            checks.integer(f"hydra.launcher.{key}", launcher[key], least)
    for key in LAUNCHER_POSITIVE:
        if launcher.get(key) is not None:
            checks.positive(f"hydra.launcher.{key}", launcher[key], hint=", or null")


REMOTE_LAUNCHERS = ("SlurmLauncher",)
"""Hydra's launchers (their classes' names) that run a sweep's jobs on other machines than the
one that starts it: hydra-submitit-launcher's ``hydra/launcher=slurm``."""

MACHINE_FREE = {
    "trainer.accelerator": "cpu",
    "trainer.devices": 1,
    "data.download": True,
}
"""What :func:`for_another_machine` gives the settings a job's own machine bounds (its GPUs, its
CPUs, its data folder): values any machine takes. ``data.num_workers`` above 0 becomes 0."""


def jobs_run_elsewhere(cfg: DictConfig) -> bool:
    """Whether the composed ``cfg`` (Hydra's settings included, ``hydra.mode`` as the app gets
    it) is a sweep whose launcher runs its jobs on other machines (:data:`REMOTE_LAUNCHERS`)."""
    mode = OmegaConf.select(cfg, "hydra.mode", default=None)
    target = OmegaConf.select(cfg, "hydra.launcher._target_", default=None)
    multirun = getattr(mode, "name", mode) == "MULTIRUN"
    return multirun and isinstance(target, str) and target.rsplit(".", 1)[-1] in REMOTE_LAUNCHERS


def for_another_machine(cfg: DictConfig) -> DictConfig:
    """A sweep's job ``cfg`` as the checks before a sweep of :func:`jobs_run_elsewhere` take it:
    a copy whose settings the job's machine bounds are :data:`MACHINE_FREE` (each job checks
    them where it runs, as its trainer and data module are built: a SLURM sweep of
    ``trainer=gpu`` from a login node without a GPU, or with data on the nodes' own disks, was
    refused), after what each job asks SLURM for is checked against what it trains on
    (:func:`check_what_jobs_ask_for`) and ``data.num_workers`` against the CPUs it asks for
    (``hydra.launcher.cpus_per_task``), each in one line."""
    import copy

    check_what_jobs_ask_for(cfg)
    cpus = checks.as_count(OmegaConf.select(cfg, "hydra.launcher.cpus_per_task", default=None))
    workers = OmegaConf.select(cfg, "data.num_workers", default=None)
    if type(workers) is int and (workers < 0 or (cpus is not None and workers > cpus)):
        raise checks.invalid(
            "data.num_workers",
            workers,
            f"0..{cpus} (hydra.launcher.cpus_per_task={cpus}: the CPUs each job asks for)"
            if cpus is not None
            else "an integer >= 0, at most the CPUs of the machine each job runs on",
        )
    machine_free = copy.deepcopy(cfg)
    settings = dict(MACHINE_FREE)
    if type(workers) is int and workers > 0:
        settings["data.num_workers"] = 0
    for key, value in settings.items():
        group, name = key.split(".")
        node = machine_free.get(group)
        if isinstance(node, DictConfig) and name in node:
            node[name] = value
    return machine_free


def check_what_jobs_ask_for(cfg: DictConfig) -> None:
    """What each job of a SLURM sweep asks for (``hydra.launcher``) against what its trainer
    trains on, in one line naming both (the job would wait in the queue to fail): Lightning
    runs one process per SLURM task and refuses a job whose tasks per node are not its
    ``trainer.devices``, or whose nodes are not its ``trainer.num_nodes``; and a GPU trainer on
    more devices than the GPUs the job asks for (``accelerator=auto`` too, where the job asks
    for a GPU: Lightning takes the GPUs there are)."""
    launcher = OmegaConf.select(cfg, "hydra.launcher", default=None)
    if not isinstance(launcher, DictConfig) or not isinstance(cfg.get("trainer"), DictConfig):
        return
    trainer = cfg.trainer
    devices = checks.as_count(trainer.get("devices"))
    tasks = checks.as_count(launcher.get("tasks_per_node"))
    if devices is not None and tasks is not None and devices != tasks:
        raise ConfigError(
            f"trainer.devices={devices} but hydra.launcher.tasks_per_node={tasks}: Lightning "
            "trains one process per SLURM task and refuses a job whose tasks per node are not "
            "its devices; set both to the devices each node trains on"
        )
    nodes = checks.as_count(trainer.get("num_nodes", 1))
    asked = checks.as_count(launcher.get("nodes"))
    if nodes is not None and asked is not None and nodes != asked:
        raise ConfigError(
            f"trainer.num_nodes={nodes} but hydra.launcher.nodes={asked}: Lightning refuses a "
            "job on other nodes than it trains on; set both to the same number"
        )
    accelerator, gpus = trainer.get("accelerator"), checks.as_count(launcher.get("gpus_per_node"))
    # auto takes the GPUs a job is given (Lightning's choice on a node with CUDA)
    on_gpus = accelerator in ("gpu", "cuda") or (accelerator == "auto" and bool(gpus))
    if on_gpus and devices and gpus is not None and devices > gpus:
        raise ConfigError(
            f"trainer.devices={devices} on trainer.accelerator={accelerator} but "
            f"hydra.launcher.gpus_per_node={gpus}: each job would ask SLURM for fewer GPUs "
            f"than it trains on; set hydra.launcher.gpus_per_node={devices}"
        )


def given_keys(cfg: DictConfig) -> list[str]:
    """The keys the command line sets, as Hydra recorded them (``optimizer.lr``,
    ``trainer``)."""
    task = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if not isinstance(task, ListConfig):
        return []
    # as written: a value that is an interpolation (data.shift=${nope}) is not resolved here
    return [key_of(str(override)) for override in OmegaConf.to_container(task, resolve=False)]


def given_groups(cfg: DictConfig) -> set[str]:
    """The top-level nodes the command line sets a value in (``optimizer.lr=...``:
    ``optimizer``; not a group's choice, ``trainer=cpu``)."""
    return {key.split(".", 1)[0] for key in given_keys(cfg) if "." in key}


def given_first(
    cfg: DictConfig, nodes: Iterable[tuple[str, DictConfig]]
) -> list[tuple[str, DictConfig]]:
    """``nodes`` with those the command line sets a value in first (``optimizer.lr=...``: the
    ``optimizer`` node; not a group's choice, ``trainer=cpu``), in their order: checking a node
    imports its target, and a mistake typed on the command line is then named after importing
    its own target only (torch's optimizer, not Lightning's trainer: seconds apart)."""
    keys = given_keys(cfg)

    def given(path: str) -> bool:
        return any(key.startswith(f"{path}.") for key in keys)

    return sorted(nodes, key=lambda pair: not given(pair[0]))


def check_types(
    cfg: DictConfig, groups: Container[str] | None = None, checked: Container[str] = ()
) -> None:
    """Every setting of every ``_target_`` node exists in its target's signature and fits its
    type hint; otherwise one :class:`ConfigError` naming the setting and what is valid. The
    nodes the command line sets a value in are checked first (:func:`given_first`); with
    ``groups``, only the nodes under those top-level groups; none under the groups ``checked``
    (by a call before)."""
    from hydra.utils import get_object

    def wanted(path: str) -> bool:
        group = path.split(".", 1)[0]
        return (groups is None or group in groups) and group not in checked

    nodes = ((path, node) for path, node in target_nodes(cfg) if wanted(path))
    for path, node in given_first(cfg, nodes):
        try:  # as Hydra's instantiate reads it: resolved (_target_: ${attention._target_})
            target_name = str(node["_target_"])
        except Exception as error:
            raise ConfigError(f"{path}._target_ cannot be resolved ({error})") from None
        settings = settings_of(node)
        if target_name in SETTINGS_CHECKS:  # vitattn's own target: no policy to check
            if ... not in settings.values():  # else the trial build checks them
                get_object(SETTINGS_CHECKS[target_name])(**settings)
            continue
        check_target_policy(path, target_name)
        try:
            target = get_object(target_name)
        except Exception as error:
            raise ConfigError(
                f"{path}._target_={target_name} cannot be imported ({type(error).__name__})"
            ) from error
        hints, names, variadic = checks.signature_of(target)
        for key, value in settings.items():
            if key not in names and not variadic:
                valid = sorted(names - {"args", "kwargs"})
                hint = did_you_mean(key, valid, f"{path}.")
                raise ConfigError(
                    f"{path}.{key} is not a setting of {target_name}; {hint}choose among: "
                    f"{', '.join(valid)}"
                )
            if key in hints:
                checks.of_type(f"{path}.{key}", value, hints[key])


# --- resuming ---------------------------------------------------------------------------------


def finished_run(metrics_path: Path, trainer_cfg: DictConfig) -> str | None:
    """Why a run whose ``metrics.json`` is at ``metrics_path`` has nothing left to train under
    ``trainer_cfg``, or ``None`` if resuming it would train. A ``metrics.json`` that cannot be
    read, or whose steps or epochs are not counts, is one line (:class:`UnreadableFileError`)."""
    if not metrics_path.exists() and not metrics_path.is_symlink():
        return None
    metrics = read_json(metrics_path, dict)
    if run_state(metrics, metrics_path.parent) is not RunState.COMPLETED:
        return None
    steps = whole_number(metrics, "steps", metrics_path)
    epochs = whole_number(metrics, "epochs", metrics_path)
    max_steps, max_epochs = trainer_cfg.get("max_steps", -1), trainer_cfg.get("max_epochs")
    if isinstance(max_steps, int) and 0 < max_steps <= steps:
        return f"it finished at step {steps} (trainer.max_steps={max_steps})"
    if isinstance(max_steps, int) and max_steps > 0:
        return None  # trainer.max_steps overrides trainer.max_epochs
    if isinstance(max_epochs, int) and 0 < max_epochs <= epochs:
        return f"it finished after {epochs} epochs (trainer.max_epochs={max_epochs})"
    return None


def resume_path(cfg: DictConfig) -> str | None:
    """The ``ckpt_path`` a run continues from, or ``None``; a value that names no file is one
    line."""
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path is not None and not (isinstance(ckpt_path, str) and ckpt_path.strip()):
        raise checks.invalid("ckpt_path", ckpt_path, "a checkpoint file (.ckpt), or null")
    return ckpt_path


def check_resume_file(cfg: DictConfig) -> None:
    """Refuse in one line a ``ckpt_path`` to continue from that is no checkpoint vitattn reads
    (:func:`vitattn.runs.checkpoints.stored_network`: bounded, holding no code), before any
    object is built: such a file is refused before Lightning is imported, the most of a
    refusal's time; :func:`check_resume` then checks it against the settings."""
    from vitattn.runs.checkpoints import stored_network

    ckpt_path = resume_path(cfg)
    if ckpt_path is not None:
        stored_network(ckpt_path)


def check_resume(cfg: DictConfig) -> None:
    """A ``ckpt_path`` to continue from must be a checkpoint of the configured network, whose
    training state is what the configured optimizer and scheduler write, and its run must have
    steps left to train; refuse in one line otherwise, touching nothing."""
    from vitattn.runs.checkpoints import check_checkpoint_matches

    ckpt_path = resume_path(cfg)
    if ckpt_path is None:
        return
    scheduler = cfg.get("scheduler")
    training = {
        "optimizer": OmegaConf.to_container(cfg.optimizer, resolve=True),
        "scheduler": None if scheduler is None else OmegaConf.to_container(scheduler, resolve=True),
    }
    check_checkpoint_matches(
        str(ckpt_path), OmegaConf.to_container(cfg.model, resolve=True), training
    )
    run_dir = Path(str(ckpt_path)).expanduser().parent.parent
    reason = finished_run(RunDir(run_dir).metrics_file, cfg.trainer)
    if reason is not None:
        asked = "resume=true" if cfg.get("resume") else f"ckpt_path={ckpt_path}"
        raise ConfigError(
            f"{asked}: the run in {run_dir} is complete, {reason}; nothing to "
            "resume and its results are kept. To train longer, raise trainer.max_steps or "
            "trainer.max_epochs"
        )
