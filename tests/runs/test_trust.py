"""What vitattn builds from a file is limited to what it builds itself (``vitattn.runs.trust``):
every ``_target_`` a file names is checked against the allowlist wherever it sits, resolvers
other than vitattn's own are refused, data settings are plain values, recorded overrides never
touch Hydra's settings, and callback state cannot point outside the run. The end-to-end
vectors, through the console scripts, are in ``tests/test_hostile_files.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.support.presets import tiny_net
from vitattn.attention import ATTENTIONS
from vitattn.runs.checkpoint_io import AtomicCheckpointIO
from vitattn.runs.checkpoints import check_contents
from vitattn.runs.trust import (
    UntrustedFileError,
    allowed_targets,
    check_recorded_override,
    check_stored_config,
    confine_callback_state,
)

HOSTILE_TARGETS = [
    "builtins.open",
    "io.open",
    "builtins.exec",
    "builtins.eval",
    "builtins.__import__",
    "os.system",
    "os.remove",
    "os.unlink",
    "os.putenv",
    "shutil.rmtree",
    "shutil.move",
    "subprocess.run",
    "subprocess.Popen",
    "pathlib.Path",
    "pathlib.Path.unlink",
    "pathlib.Path.write_text",
    "pathlib.Path.write_bytes",
    "pathlib.Path.rename",
    "pathlib.Path.symlink_to",
    "pathlib.Path.mkdir",
    "torch.load",
    "torch.save",
    "numpy.load",
    "numpy.save",
    "pickle.loads",
    "pickle.load",
    "marshal.loads",
    "yaml.unsafe_load",
    "pkgutil.resolve_name",
    "importlib.import_module",
    "functools.partial",
    "operator.methodcaller",
    "hydra.utils.instantiate",
    "hydra.utils.get_method",
    "hydra.utils.get_object",
    "omegaconf.OmegaConf.load",
    "omegaconf.OmegaConf.save",
    "lightning.pytorch.Trainer.fit",
    "torch.hub.load",
    "vitattn.runs.task.record_failure",  # vitattn's own module, not a class its configs name
    "vitattn.models.module.ViTClassifier.load_from_checkpoint",
]


def test_the_allowlist_is_what_the_configs_build() -> None:
    allowed = allowed_targets()
    for kernel in ATTENTIONS.values():  # the registry: every mechanism has its config
        assert f"{kernel.__module__}.{kernel.__qualname__}" in allowed
    for target in [
        "vitattn.models.module.ViTClassifier",
        "vitattn.models.vit.VisionTransformer",
        "vitattn.data.cifar10.CIFAR10DataModule",
        "vitattn.training.callbacks.NanGuard",
        "vitattn.training.logger.RunTensorBoard",
        "torch.optim.AdamW",
        "lightning.pytorch.callbacks.ModelCheckpoint",
        "vitattn.training.logger.RunCSVLogger",
    ]:
        assert target in allowed, target
    # Hydra's own settings (sweepers, samplers, its callbacks) are not something a file builds
    assert not any(t.startswith(("hydra_plugins.", "optuna.")) for t in allowed)
    assert not allowed & set(HOSTILE_TARGETS)


def test_a_checkpoint_as_vitattn_train_writes_it_passes() -> None:
    settings_ = {
        "net": tiny_net(),
        "optimizer": {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
        "scheduler": {
            "_target_": "vitattn.models.schedulers.cosine_with_warmup",
            "_partial_": True,
        },
        "label_smoothing": 0.1,
        "num_classes": 10,
    }
    data = {"grayscale": False, "normalize": True, "shift": "none", "data_dir": "/data"}
    checkpoint = {"hyper_parameters": settings_, "datamodule_hyper_parameters": data}
    assert check_contents(checkpoint, "x.ckpt") is checkpoint
    # and as earlier versions wrote it: OmegaConf containers
    old = {"hyper_parameters": OmegaConf.create(settings_), "hparams": OmegaConf.create({})}
    check_contents(old, "old.ckpt")


PLACES = {
    "the network": lambda node: {"hyper_parameters": {"net": node}},
    "the attention": lambda node: {"hyper_parameters": {"net": tiny_net(attention=node)}},
    "a nested argument": lambda node: {"hyper_parameters": {"net": tiny_net(norm={"layer": node})}},
    "a positional argument": lambda node: {"hyper_parameters": {"net": tiny_net(_args_=[1, node])}},
    "a list": lambda node: {"hyper_parameters": {"optimizer": {"betas": [0.9, node]}}},
    "the legacy hparams key": lambda node: {"hparams": {"net": node}},
    "the oldest legacy key": lambda node: {"module_arguments": {"net": node}},
    "an OmegaConf container": lambda node: {"hyper_parameters": OmegaConf.create({"net": node})},
    "the data settings": lambda node: {"datamodule_hyper_parameters": {"shift": node}},
}


@settings(max_examples=150, deadline=None)
@given(
    target=st.sampled_from(HOSTILE_TARGETS),
    place=st.sampled_from(sorted(PLACES)),
    partial=st.sampled_from([None, True, False]),
    argument=st.sampled_from(["/tmp/x", "touch marker", 0]),
)
def test_every_callable_outside_the_allowlist_is_refused_in_one_line_wherever_it_sits(
    target: str, place: str, partial: bool | None, argument: Any
) -> None:
    node: dict[str, Any] = {"_target_": target, "_args_": [argument]}
    if partial is not None:
        node["_partial_"] = partial
    with pytest.raises(UntrustedFileError) as raised:
        check_contents(PLACES[place](node), "/runs/x/last.ckpt")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("/runs/x/last.ckpt: ")
    if place != "the data settings":  # data settings are refused as configs, whatever they name
        assert target in message and "._target_=" in message
        assert "command line" in message


@pytest.mark.parametrize(
    "text",
    [
        "${oc.env:HOME}",
        "prefix ${oc.env:SECRET,default} suffix",
        "${oc.decode:'{a: 1}'}",
        "${oc.create:{a: 1}}",
        "${now:%Y}",
        "${hydra:runtime.output_dir}",
        "${vitattn_ok:${oc.env:SECRET}}",  # nested in one of vitattn's own
        "${${a}:1}",  # a resolver named by an interpolation
    ],
)
def test_a_resolver_other_than_vitattns_own_is_refused(text: str) -> None:
    with pytest.raises(UntrustedFileError, match="resolver") as raised:
        check_stored_config({"net": {"depth": text}}, "f.ckpt", "hyper_parameters")
    assert "\n" not in str(raised.value)
    assert "hyper_parameters.net.depth" in str(raised.value)


def test_interpolations_of_other_settings_and_vitattns_resolvers_pass() -> None:
    check_stored_config({"a": "${b.c}", "d": "${project_root:}/x"}, "f", "k")
    with pytest.raises(UntrustedFileError, match="not a valid interpolation"):
        check_stored_config({"a": "${b"}, "f", "k")


@pytest.mark.parametrize("value", [{"_target_": "torch.optim.AdamW"}, [1, 2j], "${oc.env:X}"])
def test_data_settings_are_plain_values(value: Any) -> None:
    data = {"datamodule_hyper_parameters": {"normalize": value}}
    with pytest.raises(UntrustedFileError, match=r"datamodule_hyper_parameters\.normalize"):
        check_contents(data, "f.ckpt")


@settings(max_examples=60, deadline=None)
@given(
    prefix=st.sampled_from(["", "+", "++", "~"]),
    key=st.sampled_from(
        [
            "hydra.job_logging.handlers.file.filename",
            "hydra.job.env_set.PATH",
            "hydra.run.dir",
            "hydra.callbacks.x._target_",
            "hydra",
            "hydra/launcher",
        ]
    ),
)
def test_a_recorded_override_never_sets_hydra_in_any_prefix_form(prefix: str, key: str) -> None:
    text = f"{prefix}{key}" if prefix == "~" else f"{prefix}{key}=/tmp/x"
    with pytest.raises(UntrustedFileError, match="Hydra's own settings") as raised:
        check_recorded_override(text, "run/.hydra/overrides.yaml line 3")
    assert str(raised.value).startswith("run/.hydra/overrides.yaml line 3: ")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("+attention@hydra.x=linear", "Hydra's own settings"),
        ("+callbacks.x._target_=torch.load", "torch.load is not something vitattn builds"),
        ("+callbacks.x={_target_:os.system,command:ls}", "os.system is not something vitattn"),
        ("model.attention._target_=builtins.eval", "builtins.eval"),
        ("+tags=${oc.env:SECRET}", "resolver 'oc.env'"),
        ("+tags=[1,'${oc.env:SECRET}']", "resolver 'oc.env'"),
        ("seed=1,2", "a sweep"),
        ("not an override", "not an override"),
    ],
)
def test_recorded_overrides_that_are_refused(text: str, refusal: str) -> None:
    with pytest.raises(UntrustedFileError, match=refusal.replace(".", r"\.")):
        check_recorded_override(text, "overrides.yaml line 1")


@pytest.mark.parametrize(
    "text",
    [
        "attention=linear",
        "model.depth=2",
        "+callbacks.x._target_=vitattn.training.callbacks.NanGuard",
        "~callbacks.model_summary",
        "paths.data_dir=/data",
        "trainer.max_steps=8",
        "summary.baseline='attention=softmax, model.depth=2'",
    ],
)
def test_recorded_overrides_that_are_settings_pass(text: str) -> None:
    check_recorded_override(text, "overrides.yaml line 1")


def model_checkpoint_state(folder: Path, **paths: Any) -> dict[str, Any]:
    state = {
        "monitor": "val/acc",
        "best_model_score": torch.tensor(0.5),
        "best_model_path": str(folder / "best.ckpt"),
        "kth_best_model_path": str(folder / "best.ckpt"),
        "last_model_path": "",
        "dirpath": str(folder),
        "best_k_models": {str(folder / "best.ckpt"): torch.tensor(0.5)},
        "kth_value": torch.tensor(0.5),
        "current_score": torch.tensor(0.5),
    }
    state.update(paths)
    return {"callbacks": {"ModelCheckpoint{'monitor': 'val/acc'}": state}}


def test_callback_state_outside_the_runs_checkpoints_is_dropped(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (folder / "escape").symlink_to(tmp_path / "elsewhere")
    outside = [
        f"{folder}/../../victim.txt",  # `..` that Lightning's own check does not collapse
        str(tmp_path / "victim_dir"),
        f"{folder}/escape/file.ckpt",  # a link out of the folder
    ]
    checkpoint = model_checkpoint_state(
        folder,
        best_model_path=outside[0],
        kth_best_model_path=outside[2],
        last_model_path=str(folder / "last.ckpt"),
        best_k_models={outside[0]: 1.0, outside[1]: 0.9, str(folder / "best.ckpt"): 0.8},
    )
    dropped = confine_callback_state(checkpoint, folder)
    assert sorted(dropped) == sorted(outside)
    (state,) = checkpoint["callbacks"].values()
    assert state["best_model_path"] == "" and state["kth_best_model_path"] == ""
    assert state["last_model_path"] == str(folder / "last.ckpt")
    assert list(state["best_k_models"]) == [str(folder / "best.ckpt")]
    assert confine_callback_state(model_checkpoint_state(folder), folder) == []


def test_the_checkpoint_plugin_deletes_only_files_in_its_own_folders(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "checkpoints"
    plugin = AtomicCheckpointIO()
    plugin.save_checkpoint({"global_step": 1}, folder / "a.ckpt")
    victim_file, victim_dir = tmp_path / "victim.txt", tmp_path / "victim_dir"
    victim_file.write_text("keep")
    victim_dir.mkdir()
    (victim_dir / "f").write_text("keep")
    plugin.remove_checkpoint(f"{folder}/../../victim.txt")
    plugin.remove_checkpoint(str(victim_dir))
    plugin.remove_checkpoint(str(folder))  # its own folder is not a checkpoint file either
    assert victim_file.read_text() == "keep" and (victim_dir / "f").read_text() == "keep"
    assert (folder / "a.ckpt").is_file()
    plugin.remove_checkpoint(str(folder / "a.ckpt"))
    assert not (folder / "a.ckpt").exists()


def test_a_users_file_beside_the_checkpoints_is_neither_kept_in_the_state_nor_deleted(
    tmp_path: Path,
) -> None:
    """Only a ``.ckpt`` directly in the run's ``checkpoints/`` is a checkpoint of the run: a
    state naming the user's ``notes.txt`` there, or a file in a folder of theirs inside it, has
    those paths dropped, and the plugin deletes neither (red team: a resume's first better
    checkpoint deleted ``notes.txt``, which the state named as its worst top-k model)."""
    folder = tmp_path / "run" / "checkpoints"
    plugin = AtomicCheckpointIO()
    plugin.save_checkpoint({"global_step": 1}, folder / "a.ckpt")
    notes, nested = folder / "notes.txt", folder / "mine" / "kept.ckpt"
    nested.parent.mkdir()
    notes.write_text("my notes")
    nested.write_text("mine")
    checkpoint = model_checkpoint_state(
        folder,
        best_model_path=str(notes),
        best_k_models={str(notes): 0.0, str(nested): 0.0, str(folder / "a.ckpt"): 0.5},
    )
    assert sorted(confine_callback_state(checkpoint, folder)) == sorted([str(notes), str(nested)])
    (state,) = checkpoint["callbacks"].values()
    assert list(state["best_k_models"]) == [str(folder / "a.ckpt")]
    plugin.remove_checkpoint(str(notes))
    plugin.remove_checkpoint(str(nested))
    assert notes.read_text() == "my notes" and nested.read_text() == "mine"
    plugin.remove_checkpoint(str(folder / "a.ckpt"))
    assert not (folder / "a.ckpt").exists()


def test_the_checkpoint_plugin_checks_what_lightning_loads(tmp_path: Path) -> None:
    path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"hyper_parameters": {"net": {"_target_": "torch.load", "f": "x"}}}, path)
    with pytest.raises(UntrustedFileError, match=r"hyper_parameters\.net\._target_=torch\.load"):
        AtomicCheckpointIO().load_checkpoint(path)
    torch.save(model_checkpoint_state(path.parent, best_model_path="/etc/passwd"), path)
    loaded = AtomicCheckpointIO().load_checkpoint(path)
    (state,) = loaded["callbacks"].values()
    assert state["best_model_path"] == ""


def test_a_linked_checkpoints_folder_holds_nothing_of_the_run(tmp_path: Path) -> None:
    """``checkpoints -> <another run>/checkpoints``: resolving the link first would find the other
    run's files "inside"; a linked folder holds nothing that Lightning may read or delete."""
    other = tmp_path / "other" / "checkpoints"
    other.mkdir(parents=True)
    (other / "best.ckpt").write_bytes(b"theirs")
    folder = tmp_path / "run" / "checkpoints"
    folder.parent.mkdir()
    folder.symlink_to(other)
    paths = [str(folder / "best.ckpt"), str(other / "best.ckpt")]
    checkpoint = model_checkpoint_state(
        folder, best_model_path=paths[0], best_k_models={paths[1]: 1.0}
    )
    assert sorted(confine_callback_state(checkpoint, folder)) == sorted(paths)
    assert (other / "best.ckpt").read_bytes() == b"theirs"
