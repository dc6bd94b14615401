"""What a checkpoint's values say is typed and bounded (issue 43): a real checkpoint of
``vitattn-train``, edited as an attacker would (a tensor that claims 40 GB, a network of 8192
dimensions, counters of -10^9, a config of shared references, a LoRA pattern that backtracks, an
optimizer state of another parameter's shape, a scheduler state of another type, a file cut
short), goes through the console scripts a user runs. Each is refused in one line naming the
checkpoint, and nothing that was there changes: a refused resume leaves the run's
``metrics.json`` as it was. A vector that would allocate runs as a process of its own under a
memory cap (:data:`MEMORY_CAP`), so that a check that comes after the allocation fails the test;
the others run in this process (:func:`tests.support.in_process.refused_in_process`). No test
here times a refusal: a pattern that backtracks or a walk of shared references that hangs is
ended by pytest-timeout, and the refusal's own line says which check refused."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.in_process import refused_in_process, run_in_process
from tests.support.runners import checked_in_a_fresh_process, refusal_message, run_cli
from tests.support.trees import copy_run, tree_digest

pytestmark = pytest.mark.slow

MEMORY_CAP = 5 << 30
"""Address space for a command: a refused run of a console script maps about 4 GB (torch,
OpenBLAS' threads); 1 GB more, so that a check that comes after an allocation fails the test."""


def refused_capped(program: str, *args: str, data_dir: Path, creates: Path | None = None) -> str:
    """The one-line refusal of ``program args`` run as a process under :data:`MEMORY_CAP`."""
    result = run_cli(program, *args, data_dir=data_dir, check=False, timeout=120, memory=MEMORY_CAP)
    return refusal_message(program, result, creates=creates)


@pytest.fixture
def run(tmp_path: Path, tiny_run: Path, elsewhere: Path) -> Path:
    """A copy of a trained run, beside ``elsewhere`` (a folder outside it)."""
    return copy_run(tiny_run, tmp_path / "run")


def edit(checkpoint_path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, checkpoint_path)


def expand_optimizer_state(checkpoint: dict[str, Any]) -> None:
    """An Adam moment as a stride-0 view of one number: a few bytes on disk, 40 GB claimed."""
    state = checkpoint["optimizer_states"][0]["state"][0]
    state["exp_avg"] = torch.zeros(1).expand(100_000, 100_000)


def wide_network(checkpoint: dict[str, Any]) -> None:
    checkpoint["hyper_parameters"]["net"]["embed_dim"] = 8192


def negative_progress(checkpoint: dict[str, Any]) -> None:
    progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    progress["total"]["completed"] = -(10**9)
    checkpoint["global_step"] = -(10**9)


def huge_progress(checkpoint: dict[str, Any]) -> None:
    checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["ready"] = 10**18


def text_progress(checkpoint: dict[str, Any]) -> None:
    checkpoint["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"] = "7"


def shared_references(checkpoint: dict[str, Any]) -> None:
    """A list that refers to itself 2 x 40 deep: 2^40 nodes to a walk that does not remember."""
    node: list[Any] = [0]
    for _ in range(40):
        node = [node, node]
    checkpoint["hyper_parameters"]["net"]["attention"]["extra"] = node


def bad_random_state(checkpoint: dict[str, Any]) -> None:
    checkpoint["callbacks"]["RandomStateInCheckpoint"]["torch"] = torch.zeros(7, dtype=torch.uint8)


def another_parameters_shape(checkpoint: dict[str, Any]) -> None:
    """Parameter 0's second moment in the shape of another parameter of the network: a weight
    has that shape, so only a check per parameter refuses it."""
    state = checkpoint["optimizer_states"][0]["state"]
    first = state[0]["exp_avg"].shape
    other = next(
        moments["exp_avg"].shape for moments in state.values() if moments["exp_avg"].shape != first
    )
    state[0]["exp_avg_sq"] = torch.zeros(other)


def text_scheduler_epoch(checkpoint: dict[str, Any]) -> None:
    """torch's scheduler sets whatever its state holds as its attributes: a string epoch would
    fail at the first step."""
    checkpoint["lr_schedulers"][0]["last_epoch"] = "7"


def wrong_weight_shape(checkpoint: dict[str, Any]) -> None:
    """A weight of another shape than its parameter (one that other weights have)."""
    checkpoint["state_dict"]["net.norm.weight"] = torch.zeros(10)


def missing_weight(checkpoint: dict[str, Any]) -> None:
    """A weight of the network left out: Lightning's strict load failed with a traceback."""
    del checkpoint["state_dict"]["net.norm.bias"]


def extra_weight(checkpoint: dict[str, Any]) -> None:
    """A weight no layer of the network has, its name holding a terminal escape."""
    checkpoint["state_dict"]["net.planted\x1b[2J"] = torch.zeros(2)


def disagreeing_classes(checkpoint: dict[str, Any]) -> None:
    """The module's classes not its network's: metrics sized by one, the head by the other
    (vitattn-eval ended in an unexpected ValueError once its run was made; red team)."""
    checkpoint["hyper_parameters"]["num_classes"] = 7


CLASSES = r"hyper_parameters\.num_classes=7 is not its network's \(10, "


def smoothing_of_five(checkpoint: dict[str, Any]) -> None:
    """A label smoothing out of its range, which the module refused as if the command line had
    set ``module.label_smoothing`` (user audit, 2026-12-02)."""
    checkpoint["hyper_parameters"]["label_smoothing"] = 5.0


SMOOTHING = r"hyper_parameters\.label_smoothing=5\.0 is not a number with 0 <= label_smoothing < 1"


def schedule_of_minus_one(checkpoint: dict[str, Any]) -> None:
    """The steps a run's schedule was planned for, read for a resume's warning: -1 was taken
    for a count and warned of a schedule of -1 steps (found reading the change that added the
    key, 2026-12-02)."""
    checkpoint["vitattn_schedule_steps"] = -1


SCHEDULE = r"vitattn_schedule_steps=-1 is not a count"


def precision_of_text(checkpoint: dict[str, Any]) -> None:
    """The precision a run trained at, which vitattn-eval tests at: a word Lightning has not."""
    checkpoint["vitattn_precision"] = {"trainer": "\x1b[2J", "matmul": "high"}


PRECISION = r"vitattn_precision is not a precision as vitattn records one"

VECTORS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a schedule of -1 steps": (schedule_of_minus_one, SCHEDULE),
    "a precision of a terminal escape": (precision_of_text, PRECISION),
    "classes the network has not": (disagreeing_classes, CLASSES),
    "a label smoothing of 5": (smoothing_of_five, SMOOTHING),
    "a stride-0 optimizer state": (expand_optimizer_state, r"exp_avg is a stride-0 view"),
    "embed_dim=8192": (wide_network, r"hyper_parameters\.net\.embed_dim=8192 is not valid"),
    "counters of -10^9": (negative_progress, r"global_step=-1000000000 is not a count"),
    "a counter of 10^18": (huge_progress, r"epoch_progress\.current\.ready=.* is not a count"),
    "a counter as text": (text_progress, r"_batches_that_stepped='7' is not a count"),
    "a config of shared references": (shared_references, r"is the same node as"),
    "a random state of 7 bytes": (bad_random_state, r"RandomStateInCheckpoint\.torch is not a"),
    "an optimizer state of another parameter's shape": (
        another_parameters_shape,
        r"optimizer_states\.0\.state\.0\.exp_avg_sq has shape \(.*\), but parameter 0 "
        r"\(net\.\S+\) has \(",
    ),
    "a scheduler's epoch as text": (
        text_scheduler_epoch,
        r"lr_schedulers\.0\.last_epoch is '7'; vitattn\.models\.schedulers\.cosine_with_warmup "
        r"writes an integer",
    ),
    "a weight of another shape": (wrong_weight_shape, r"state_dict\.net\.norm\.weight has shape"),
    "a weight missing": (missing_weight, r"state_dict lacks net\.norm\.bias, which the network"),
    "a weight more": (
        extra_weight,
        r"state_dict holds net\.planted\\x1b\[2J, which no weight of the network its config",
    ),
}

ALLOCATING = {"a stride-0 optimizer state", "embed_dim=8192"}
"""The vectors that would allocate (gigabytes) if their check came late: memory-capped."""


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_a_resume_refuses_a_checkpoints_values_in_one_line_and_changes_nothing(
    run: Path, elsewhere: Path, vector: str, data_dir: Path
) -> None:
    change, refusal = VECTORS[vector]
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(checkpoint, change)
    before = tree_digest(run.parent)
    command = ["resume=true", f"hydra.run.dir={run}", "trainer.max_steps=12"]
    refused = refused_capped if vector in ALLOCATING else refused_in_process
    message = refused("vitattn-train", *command, data_dir=data_dir)
    assert message.startswith(f"{checkpoint}: "), message
    assert re.search(refusal, message), message
    assert tree_digest(run.parent) == before  # metrics.json too: not rewritten to "failed"


def regex_adapters(checkpoint: dict[str, Any]) -> None:
    """A LoRA checkpoint whose targets are a pattern that backtracks on every layer name."""
    checkpoint["hyper_parameters"]["lora"] = {
        "rank": 2,
        "alpha": 4.0,
        "dropout": 0.0,
        "target_modules": "(a|a)*(a|a)*(a|a)*(a|a)*b$",
        "train_head": True,
    }


def huge_rank(checkpoint: dict[str, Any]) -> None:
    regex_adapters(checkpoint)
    checkpoint["hyper_parameters"]["lora"].update(target_modules=["attn.qkv"], rank=10**6)


def cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


COMMANDS = {
    "vitattn-eval": ["trainer=cpu"],
    "vitattn-finetune": ["trainer=cpu", "trainer.max_steps=2"],
    "vitattn-bench": ["mode=approx"],
}


@pytest.mark.parametrize("program", sorted(COMMANDS))
@pytest.mark.parametrize(
    "vector",
    ["a LoRA pattern", "a LoRA rank of 10^6", "cut short", "classes it has not", "smoothing of 5"],
)
def test_eval_finetune_and_bench_refuse_a_hostile_checkpoint_in_one_line(
    run: Path, elsewhere: Path, program: str, vector: str, data_dir: Path
) -> None:
    checkpoint = run / "checkpoints" / "last.ckpt"
    if vector == "cut short":
        cut_short(checkpoint)
        refusal = "is not a readable checkpoint"
    elif vector == "a LoRA pattern":
        edit(checkpoint, regex_adapters)
        refusal = "target_modules=.* is not a list of layer names"
    elif vector == "classes it has not":
        edit(checkpoint, disagreeing_classes)
        refusal = CLASSES
    elif vector == "smoothing of 5":
        edit(checkpoint, smoothing_of_five)
        refusal = SMOOTHING
    else:
        edit(checkpoint, huge_rank)
        refusal = r"hyper_parameters\.lora\.rank=1000000 is not valid"
    out = run.parent / "out"
    before = tree_digest(run.parent)
    command = [*COMMANDS[program], f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"]
    # what allocates: a process of its own, memory capped
    refused = refused_capped if vector == "a LoRA rank of 10^6" else refused_in_process
    message = refused(program, *command, creates=out, data_dir=data_dir)
    assert message.startswith(f"{checkpoint}"), message
    assert re.search(refusal, message), message
    assert tree_digest(run.parent) == before


def planted_gigabyte(path: Path, key: str) -> None:
    """A tensor of 1 GiB of zeros planted at ``key`` of the checkpoint at ``path`` (a top-level
    key, or a weight of ``state_dict``), the file then made sparse: a few hundred kilobytes of
    disk that a command reading the file in would hold as gigabytes."""
    import subprocess

    def plant(checkpoint: dict[str, Any]) -> None:
        where = checkpoint["state_dict"] if key.startswith("net.") else checkpoint
        # a weight of a network's dtype: one of another is refused for its dtype first
        dtype = torch.float32 if key.startswith("net.") else torch.uint8
        where[key] = torch.zeros((1 << 30) // dtype.itemsize, dtype=dtype)

    edit(path, plant)
    subprocess.run(["fallocate", "--dig-holes", str(path)], check=True)
    assert path.stat().st_blocks * 512 < 64 << 20


def planted_view(path: Path, key: str) -> None:
    """One element of a 1 GiB storage planted at ``key`` (a top-level key, or a weight of
    ``state_dict`` that the network has, of its shape), the file made sparse: a tensor that
    shows one byte and holds a gigabyte (red team, on the bounds of the commit before)."""
    import subprocess

    def plant(checkpoint: dict[str, Any]) -> None:
        storage = torch.zeros(1 << 30, dtype=torch.uint8)
        if key.startswith("net."):
            weight = checkpoint["state_dict"][key]
            floats = storage.view(weight.dtype)
            checkpoint["state_dict"][key] = floats[: weight.numel()].view(weight.shape)
        else:
            checkpoint[key] = storage[:1]

    edit(path, plant)
    subprocess.run(["fallocate", "--dig-holes", str(path)], check=True)


@pytest.mark.parametrize("key", ["junk", "net.head.bias"])
def test_a_view_of_a_gigabyte_of_storage_is_refused_before_it_is_read(
    run: Path, elsewhere: Path, key: str, data_dir: Path
) -> None:
    """On the code before, ``vitattn-eval`` counted what each tensor shows: it read the file in
    whole, 7.1 GB of memory, and evaluated."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    planted_view(checkpoint, key)
    out = run.parent / "out"
    before = tree_digest(run.parent)
    command = ["trainer=cpu", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"]
    message = refused_capped("vitattn-eval", *command, data_dir=data_dir, creates=out)
    assert message.startswith(f"{checkpoint}: its tensors are views of 1,07"), message
    assert tree_digest(run.parent) == before


PLANTED = {
    "junk": r": its tensors outside the weights and the optimizer's state claim 1,07\d,\d{3},\d{3} "
    r"bytes \(junk 1,073,741,824\), more than",
    "net.junk": r": state_dict holds net\.junk, which no weight of the network",
}


@pytest.mark.parametrize("program", ["vitattn-eval", "vitattn-train"])
@pytest.mark.parametrize("key", sorted(PLANTED))
def test_a_sparse_gigabyte_in_a_checkpoint_is_refused_before_it_is_read(
    run: Path, elsewhere: Path, program: str, key: str, data_dir: Path
) -> None:
    """A red team's checkpoint: 1 GiB of zeros at a key of its own, or as a weight no layer has,
    in a file of a few hundred kilobytes on disk. On the code before, ``vitattn-eval`` read the
    file in whole (7.1 GB of memory for 3 GiB planted) and a resume trained on, keeping it in
    every checkpoint it wrote; under the cap, both ended in ``MemoryError``. (A resume refused
    the weight more already: it checks the weights against the network.)"""
    checkpoint = run / "checkpoints" / "last.ckpt"
    planted_gigabyte(checkpoint, key)
    out = run.parent / "out"
    before = tree_digest(run.parent)
    if program == "vitattn-eval":
        command = ["trainer=cpu", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"]
    else:
        command = ["resume=true", f"hydra.run.dir={run}", "trainer.max_steps=12"]
    message = refused_capped(program, *command, data_dir=data_dir, creates=out)
    assert message.startswith(f"{checkpoint}"), message
    assert re.search(PLANTED[key], message), message
    assert tree_digest(run.parent) == before


def test_a_weight_no_layer_has_is_refused_before_lightning_or_peft_is_imported(
    run: Path,
) -> None:
    """``vitattn-eval`` and ``vitattn-finetune`` check a checkpoint's weights against the
    network its config builds (on the meta device) before they build anything: one line before
    Lightning (or PEFT) is imported, seconds sooner; each command in one process of its own."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(checkpoint, lambda stored: stored["state_dict"].update({"net.junk": torch.zeros(3)}))
    expected = f"{checkpoint}: state_dict holds net.junk, which no weight of the network"
    for command in ("eval", "finetune"):
        said, imported = checked_in_a_fresh_process(command, [f"ckpt_path={checkpoint}"])
        assert said.startswith(expected), (command, said)
        assert imported == [], (command, imported)


def test_a_file_larger_than_what_its_tensors_take_is_not_read_in(tmp_path: Path) -> None:
    """An archive member that no tensor uses (here 64 MiB of zeros beside a real checkpoint's
    records) is refused by the command that reads a checkpoint's bytes in whole, before it
    does."""
    import zipfile

    from vitattn.errors import ConfigError
    from vitattn.runs.checkpoints import read_checkpoint_bytes

    module = torch.nn.Linear(2, 2)
    path = tmp_path / "padded.ckpt"
    torch.save({"state_dict": module.state_dict()}, path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("padded/data/unused", bytes(17 << 20))
    with pytest.raises(ConfigError, match=r"more than the 16,\d{3},\d{3} its tensors and settings"):
        read_checkpoint_bytes(path)


def test_a_truncated_checkpoint_through_a_resume_is_one_line(run: Path, data_dir: Path) -> None:
    checkpoint = run / "checkpoints" / "last.ckpt"
    cut_short(checkpoint)
    before = tree_digest(run)
    message = refused_in_process(
        "vitattn-train", "resume=true", f"hydra.run.dir={run}", data_dir=data_dir
    )
    assert str(checkpoint) in message and "\n" not in message, message
    assert tree_digest(run) == before


def test_a_stored_config_cannot_list_folders_outside_configs(run: Path, data_dir: Path) -> None:
    """``vitattn_groups`` is vitattn's own resolver, so a stored config may call it; given a
    path that climbs out of ``configs/``, it is refused in one line and lists nothing."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(
        checkpoint,
        lambda c: c["hyper_parameters"]["net"].update(pool="${vitattn_groups:../../../etc}"),
    )
    out = run.parent / "out"
    result = run_in_process(
        "vitattn-eval",
        "trainer=cpu",
        f"ckpt_path={checkpoint}",
        f"hydra.run.dir={out}",
        data_dir=data_dir,
        check=False,
    )
    message = refusal_message("vitattn-eval", result)
    assert "vitattn_groups: '../../../etc' is not a config group" in message, message
    assert "passwd" not in result.stdout + result.stderr


def test_a_lora_checkpoints_weights_are_bounded_by_their_network(
    run: Path, elsewhere: Path, data_dir: Path
) -> None:
    """A LoRA checkpoint's weights are not its base network's, so their names are not checked;
    their bytes are: a gigabyte among them was read in whole (7.2 GB) before Lightning's strict
    load refused it (red team)."""
    import subprocess

    checkpoint = run / "checkpoints" / "last.ckpt"

    def plant(content: dict[str, Any]) -> None:
        huge_rank(content)
        content["hyper_parameters"]["lora"]["rank"] = 2
        content["state_dict"]["net.junk"] = torch.zeros(1 << 28, dtype=torch.float32)

    edit(checkpoint, plant)
    subprocess.run(["fallocate", "--dig-holes", str(checkpoint)], check=True)
    out = run.parent / "out"
    before = tree_digest(run.parent)
    command = ["trainer=cpu", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"]
    message = refused_capped("vitattn-eval", *command, data_dir=data_dir, creates=out)
    said = rf"{re.escape(str(checkpoint))}: its weights claim 1,07\d,\d{{3}},\d{{3}} bytes, more "
    assert re.match(said + r"than 2 times the [\d,]+ of the network", message), message
    assert tree_digest(run.parent) == before


MONITORED = "ModelCheckpoint{'monitor': 'val/acc'"
"""The start of the state key of the ``ModelCheckpoint`` that keeps the best ``val/acc``."""


def monitored_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The callback state of the ``ModelCheckpoint`` monitoring ``val/acc`` in ``checkpoint``."""
    (state,) = [s for k, s in checkpoint["callbacks"].items() if k.startswith(MONITORED)]
    return state


def text_scores(checkpoint: dict[str, Any]) -> None:
    """The monitored ``ModelCheckpoint``'s scores as text."""
    state = monitored_state(checkpoint)
    state["best_k_models"] = {path: "abc" for path in state["best_k_models"]}
    state["kth_value"] = state["best_model_score"] = "abc"


def test_a_resume_refuses_a_model_checkpoint_score_of_text_before_it_trains(
    run: Path, data_dir: Path
) -> None:
    """A ``ModelCheckpoint``'s state is typed as Lightning writes it: its scores (here
    ``best_k_models`` of ``{path: 'abc'}``, ``kth_value`` and ``best_model_score`` of ``'abc'``)
    are numbers or tensors of one, so a resume refuses text there in one line naming the key,
    before it trains (Lightning would compare the text at the first validation) and with the
    run unchanged."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(checkpoint, text_scores)
    before = tree_digest(run)
    command = ["resume=true", f"hydra.run.dir={run}", "trainer.max_steps=12"]
    message = refused_in_process("vitattn-train", *command, data_dir=data_dir)
    assert message.startswith(f"{checkpoint}: "), message
    assert "best_k_models" in message or "kth_value" in message, message
    assert tree_digest(run) == before


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.complex64])
def test_weights_of_a_dtype_no_network_has_are_named(
    run: Path, tmp_path: Path, dtype: torch.dtype, data_dir: Path
) -> None:
    """A network's weights are floating point (but for an attention's int64 index table): every
    weight of a checkpoint cast to ``int8``, ``bool`` or ``complex64`` is refused in one line
    naming ``state_dict.<weight>`` and its dtype (not blamed on the optimizer's state, which is
    as written; a complex weight is not evaluated with its imaginary parts dropped)."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(
        checkpoint,
        lambda c: c.update(state_dict={k: v.to(dtype) for k, v in c["state_dict"].items()}),
    )
    out = tmp_path / "out"
    message = refused_in_process(
        "vitattn-eval", "trainer=cpu", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}",
        creates=out, data_dir=data_dir,
    )  # fmt: skip
    assert message.startswith(f"{checkpoint}: state_dict."), message
    assert str(dtype).removeprefix("torch.") in message, message


NETWORK_SETTINGS = {"heads": 3, "pool": "bogus", "dropout": "x", "attention": None}
"""Stored network settings that do not build (3 heads of a width of 32, no attention)."""


@pytest.mark.parametrize("key", sorted(NETWORK_SETTINGS))
def test_a_stored_network_setting_that_does_not_build_is_named(
    run: Path, tmp_path: Path, key: str, data_dir: Path
) -> None:
    """A stored network that does not build (``hyper_parameters.net.pool='bogus'``, 3 heads of
    a width of 32, a dropout of text, no attention) is refused in one line that names the
    setting and why, not only the class Hydra failed to build."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(checkpoint, lambda c: c["hyper_parameters"]["net"].__setitem__(key, NETWORK_SETTINGS[key]))
    out = tmp_path / "out"
    result = run_in_process(
        "vitattn-eval", "trainer=cpu", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    message = refusal_message("vitattn-eval", result, creates=out)
    assert message.startswith(f"{checkpoint}: hyper_parameters.net"), message
    assert re.search(rf"\b{key}\b", message.removeprefix(str(checkpoint))), message


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory, tiny_run: Path, data_dir: Path) -> Path:
    """A tiny fine-tune of the tiny run: its ``last.ckpt`` holds LoRA adapters."""
    out = tmp_path_factory.mktemp("lora") / "run"
    base = tiny_run / "checkpoints" / "last.ckpt"
    run_in_process(
        "vitattn-finetune", "trainer=cpu", f"ckpt_path={base}", "data.batch_size=64",
        "trainer.max_steps=2", "trainer.val_check_interval=2", "logger=csv", "lora.merge=false",
        f"hydra.run.dir={out}", data_dir=data_dir,
    )  # fmt: skip
    return out


LORA_SETTINGS = {
    "alpha": ("x", r"hyper_parameters\.lora\.alpha='x' is not valid"),
    "dropout": (5.0, r"hyper_parameters\.lora\.dropout=5\.0 is not valid"),
    "train_head": ("yes", r"hyper_parameters\.lora\.train_head='yes' is not valid"),
    "target_modules": (["nosuchlayer"], r"hyper_parameters\.lora\.target_modules: 'nosuchlayer'"),
    "planted\x1b[2J": (1, r"hyper_parameters\.lora\.planted\\x1b\[2J is not a setting"),
}


@pytest.mark.parametrize("program", ["vitattn-eval", "vitattn-bench"])
@pytest.mark.parametrize("key", sorted(LORA_SETTINGS))
def test_a_lora_checkpoints_settings_are_refused_naming_the_checkpoint(
    lora_run: Path, tmp_path: Path, program: str, key: str, data_dir: Path
) -> None:
    """A LoRA checkpoint whose ``hyper_parameters.lora`` holds a wrong value (an alpha of text,
    a dropout of 5, a flag of text, a layer the network has not, a key of its own holding a
    terminal escape) is refused by ``vitattn-eval`` and ``vitattn-bench``, which have no
    ``lora`` setting, in one line naming the checkpoint and ``hyper_parameters.lora.<key>``,
    escaped."""
    checkpoint = tmp_path / "lora.ckpt"
    shutil.copy(lora_run / "checkpoints" / "last.ckpt", checkpoint)
    value, named = LORA_SETTINGS[key]
    edit(checkpoint, lambda c: c["hyper_parameters"]["lora"].__setitem__(key, value))
    out = tmp_path / "out"
    args = ["trainer=cpu"] if program == "vitattn-eval" else ["mode=approx"]
    result = run_in_process(
        program, *args, f"ckpt_path={checkpoint}", f"hydra.run.dir={out}",
        data_dir=data_dir, check=False,
    )  # fmt: skip
    message = refusal_message(program, result, creates=out)
    assert "\x1b" not in message, repr(message)
    assert message.startswith(f"{checkpoint}: "), message
    assert re.search(named, message), message


def with_network(checkpoint: dict[str, Any], **changes: Any) -> None:
    """``checkpoint`` with another network (``hyper_parameters.net`` updated by ``changes``) and
    that network's weights; no optimizer state, which the network's shapes would not fit."""
    import hydra

    from vitattn.runs.checkpoints import network_settings

    net = network_settings(checkpoint["hyper_parameters"]["net"])
    net.update(changes)
    weights = hydra.utils.instantiate(net).state_dict()
    checkpoint["hyper_parameters"]["net"] = net
    checkpoint["state_dict"] = {f"net.{name}": tensor for name, tensor in weights.items()}
    for key in ("optimizer_states", "lr_schedulers"):
        checkpoint.pop(key, None)


NAIVE_SOFTMAX = {"_target_": "vitattn.attention.softmax.SoftmaxAttention", "_partial_": True}
NAIVE_SOFTMAX["impl"] = "naive"


def crowded_attention(checkpoint: dict[str, Any]) -> None:
    """Every size within its bound, their product not: 1024 tokens, 128 heads, naive softmax,
    whose scores over vitattn-eval's batch of 500 are 268 GB (1 MB of file; it ended in the
    allocator's "can't allocate memory" once the run was made; red team, 2026-12-02)."""
    with_network(checkpoint, patch_size=1, embed_dim=128, heads=128, depth=1)
    checkpoint["hyper_parameters"]["net"]["attention"] = dict(NAIVE_SOFTMAX)


CROWDED = (
    r"hyper_parameters\.net: its forward over a batch of {setting}=\d+ builds a tensor of "
    r"about [\d,]+ bytes \(aten\.bmm\.default\), more than the [\d,]+ this process can use"
)

BATCH_SETTINGS = {
    "vitattn-eval": "data.eval_batch_size",
    "vitattn-finetune": "data.eval_batch_size",
    "vitattn-bench": "approx.images",
}


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_a_network_whose_forward_cannot_fit_is_refused_before_it_is_built(
    run: Path, program: str, data_dir: Path
) -> None:
    """A checkpoint whose network's sizes are each within bounds, but whose forward over the
    command's batch builds a tensor of more memory than the process has, is one line naming the
    file, the batch's setting and the bytes, under a memory cap: nothing made, nothing changed."""
    checkpoint = run / "checkpoints" / "last.ckpt"
    edit(checkpoint, crowded_attention)
    out = run.parent / "out"
    before = tree_digest(run.parent)
    command = [*COMMANDS[program], f"ckpt_path={checkpoint}", f"hydra.run.dir={out}"]
    message = refused_capped(program, *command, creates=out, data_dir=data_dir)
    assert message.startswith(f"{checkpoint}: "), message
    assert re.search(CROWDED.format(setting=re.escape(BATCH_SETTINGS[program])), message), message
    assert tree_digest(run.parent) == before


def test_the_largest_tensor_of_a_forward_is_its_attention_scores(tiny_run: Path) -> None:
    """The estimate: naive softmax's scores are batch x heads x tokens x tokens floats; the
    refusal names the batch that fits; a forward that does not run on fake tensors is bounded
    below by the MLP's activations; an estimate within the memory passes."""
    from vitattn.errors import ConfigError
    from vitattn.models import forward_memory
    from vitattn.runs.checkpoints import meta_network, network_settings

    checkpoint = torch.load(tiny_run / "checkpoints" / "last.ckpt", weights_only=True)
    crowded_attention(checkpoint)
    net = meta_network(network_settings(checkpoint["hyper_parameters"]["net"]))
    estimate = forward_memory.largest_tensor(net, 3)
    assert estimate.bytes == 3 * 128 * 1024 * 1024 * 4
    assert estimate.op == "aten.bmm.default"
    assert len(net.blocks) == 1 and net.training  # the network as it was
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(forward_memory, "usable_memory", lambda device="cpu": 2 << 30)
        with pytest.raises(ConfigError, match=r"x: its forward over a batch of b=500 .* b <= 4"):
            forward_memory.check_forward_fits(net, {"b": 500}, "x")
        forward_memory.check_forward_fits(net, {"b": 4}, "x")
    lower = forward_memory.least_tensor(net, 3)
    assert lower.bytes == 3 * 1024 * 3 * 128 * 4 < estimate.bytes  # queries, keys and values
    assert forward_memory.usable_memory() > 0


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def attention_configs() -> list[str]:
    return sorted(path.stem for path in (CONFIGS / "attention").glob("*.yaml"))


@pytest.mark.parametrize("attention", attention_configs())
def test_the_default_checkpoint_of_every_attention_is_taken(
    tmp_path: Path, tiny_run: Path, attention: str
) -> None:
    """The network of ``configs/model/vit.yaml`` with each attention's defaults, at the eval
    batch of ``configs/data/cifar10.yaml`` (500), passes the check; its estimate comes from its
    forward (Nystrom with a class token: its lower bound, the forward's shapes depend on values)."""
    from omegaconf import OmegaConf

    from vitattn.loading import checked_checkpoint
    from vitattn.models.forward_memory import largest_tensor
    from vitattn.runs.checkpoints import meta_network, network_settings

    model = OmegaConf.load(CONFIGS / "model" / "vit.yaml")
    model.attention = OmegaConf.load(CONFIGS / "attention" / f"{attention}.yaml")
    path = tmp_path / f"{attention}.ckpt"
    shutil.copy(tiny_run / "checkpoints" / "last.ckpt", path)
    settings = network_settings(model)
    edit(path, lambda c: with_network(c, **settings))
    for pool in ("mean", "cls"):
        net = meta_network({**settings, "pool": pool})
        estimate = largest_tensor(net, 500)
        assert estimate.op != "lower bound" or (attention, pool) == ("nystrom", "cls"), estimate
        assert estimate.bytes < 1 << 30, estimate
    checked_checkpoint(path, batches={"data.eval_batch_size": 500})
