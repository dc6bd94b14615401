"""``vitattn-train`` command lines that continue a run: ``resume=true`` and ``ckpt_path=``."""

from __future__ import annotations

from pathlib import Path

import yaml

from vitattn.cli.console import config_source, multirun
from vitattn.cli.overrides import (
    given_path,
    given_values,
    key_of,
    override_positions,
    overrides_of,
)
from vitattn.errors import ConfigError
from vitattn.runs.files import (
    BoundExceededError,
    check_yaml_events,
    read_text,
    run_file_loader,
)
from vitattn.runs.layout import RunDir
from vitattn.runs.recorded import RecordedSettings
from vitattn.runs.trust import check_recorded_override, with_current_targets
from vitattn.utils.hydra_grammar import as_override


def resume_arguments(arguments: list[str]) -> list[str]:
    """Command-line arguments that continue a run in its own directory with its own settings.

    ``ckpt_path=<run>/checkpoints/<file>.ckpt`` or ``resume=true hydra.run.dir=<run>`` (which
    takes ``<run>/checkpoints/last.ckpt``): the run's recorded overrides
    (``<run>/.hydra/overrides.yaml``) come first, so the model and data are rebuilt as they were,
    then the ones given now (e.g. a larger ``trainer.max_steps``); ``hydra.run.dir`` points at the
    run, so TensorBoard curves, checkpoints and ``metrics.json`` continue there. The recorded
    overrides are data: each is checked (:func:`recorded_overrides`,
    :func:`~vitattn.runs.trust.check_recorded_override`, and typed by
    :class:`~vitattn.runs.recorded.RecordedSettings`) before it is used.
    """
    if multirun(arguments):
        return arguments
    at = set(override_positions(arguments))  # Hydra's flags (-cd <dir>) before any override
    flags = [arg for index, arg in enumerate(arguments) if index not in at]
    arguments = [*flags, *(arg for index, arg in enumerate(arguments) if index in at)]
    given_run = given_path(arguments, "hydra.run.dir")
    run_dir = Path(given_run) if given_run else None
    ckpt_path = given_path(arguments, "ckpt_path")
    if str(given_values(arguments).get("resume", False)).lower() == "true":
        if run_dir is None:
            raise ConfigError("resume=true needs the run to continue: add hydra.run.dir=<run dir>")
        if ckpt_path is None:
            ckpt_path = str(RunDir(run_dir).last_checkpoint)
            if not Path(ckpt_path).is_file():
                raise ConfigError(
                    f"resume=true: {ckpt_path} does not exist; hydra.run.dir must be a "
                    "vitattn-train run directory with checkpoints/last.ckpt"
                )
            arguments = [*arguments, as_override("ckpt_path", ckpt_path)]
    if ckpt_path is None:
        return arguments
    checkpoint = Path(ckpt_path).expanduser()
    if not checkpoint.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path} is not a file; pass a .ckpt saved by vitattn-train"
        )
    candidate = RunDir.of_checkpoint(checkpoint)
    if run_dir is None and candidate is not None and candidate.overrides_file.is_file():
        run_dir = candidate.path
        arguments = [*arguments, as_override("hydra.run.dir", str(run_dir))]
    recorded = RunDir(run_dir).overrides_file if run_dir is not None else None
    if recorded is None or not recorded.is_file():
        return arguments
    given_now = {"ckpt_path", "resume", *(key_of(arg) for arg in arguments)}
    previous = [(with_current_targets(arg), line) for arg, line in recorded_overrides(recorded)]
    kept = [(arg, line) for arg, line in previous if not set_now(key_of(arg), given_now)]
    sources = [(arg, f"{recorded} line {line}") for arg, line in kept]
    for arg, source in sources:
        check_recorded_override(arg, source)
    chosen = config_source(arguments, "train")  # the user's --config-dir and -cn, given now
    settings = RecordedSettings.of(
        sources, overrides_of(arguments), chosen.name, extra_dirs=chosen.extra_dirs or ()
    )
    for arg, source in sources:
        settings.check(arg, source)
    given = overrides_of(arguments)
    return [*flags, *(arg for arg, _ in kept), *without_recorded_additions(given, previous)]


def without_recorded_additions(arguments: list[str], recorded: list[tuple[str, int]]) -> list[str]:
    """``arguments`` less each deletion ``~node`` of a node that only the run's recorded
    overrides added (``+callbacks.mine._target_=...``): not replaying them deletes it, and Hydra
    would refuse to delete a node the config does not have."""

    def only_added(node: str) -> bool:
        under = [arg for arg, _ in recorded if set_now(key_of(arg), {node})]
        return bool(under) and all(arg.startswith("+") for arg in under)

    return [arg for arg in arguments if not (arg.startswith("~") and only_added(key_of(arg)))]


def set_now(key: str, given_now: set[str]) -> bool:
    """Whether the command line sets ``key`` now, itself or a node above it: ``~callbacks.mine``
    or ``callbacks.mine=...`` given now replaces a recorded ``+callbacks.mine._target_=...``."""
    parts = key.split(".")
    return any(".".join(parts[:end]) in given_now for end in range(1, len(parts) + 1))


def recorded_overrides(path: Path) -> list[tuple[str, int]]:
    """The overrides a run recorded (Hydra's ``.hydra/overrides.yaml``: a YAML list of
    ``key=value`` strings), each with its line in the file; one line naming the file when it is
    a link, unreadable, or not such a list."""
    text = read_text(path, follow_links=False)  # a link, a FIFO, bad UTF-8, too large: one line
    try:
        # bounded before a node is built: no anchors or aliases, depth, values (runs/files.py)
        check_yaml_events(yaml.parse(text, Loader=run_file_loader()))
        document = yaml.compose(text, Loader=run_file_loader())
    except BoundExceededError as error:
        raise ConfigError(f"{path} {error}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(
            f"{path} is not valid YAML{at}; it should be the list of "
            "overrides Hydra recorded (- key=value)"
        ) from None
    if document is None:
        return []
    items = document.value if isinstance(document, yaml.SequenceNode) else None
    if items is None or not all(
        isinstance(item, yaml.ScalarNode) and item.tag.endswith(":str") for item in items
    ):
        raise ConfigError(
            f"{path} is not a list of overrides (- key=value lines), as Hydra "
            "records them; resume with a run directory that vitattn-train wrote"
        )
    return [(str(item.value), item.start_mark.line + 1) for item in items]
