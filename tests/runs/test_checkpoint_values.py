"""The checks of :mod:`vitattn.runs.checkpoint_values` on checkpoint dictionaries built here
(the console scripts' cases are in ``tests/test_hostile_checkpoints.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from vitattn.errors import ConfigError
from vitattn.runs.checkpoint_values import check_values, leaves, tensor_problem
from vitattn.runs.trust import UntrustedFileError, check_stored_config


def checkpoint(**parts: Any) -> dict[str, Any]:
    weight = torch.zeros(4, 3)
    return {
        "state_dict": {"net.w": weight},
        "optimizer_states": [
            {"state": {0: {"exp_avg": torch.zeros(4, 3), "step": torch.tensor(1.0)}}}
        ],
        "global_step": 8,
        "epoch": 0,
        "loops": {"fit_loop": {"epoch_progress": {"total": {"ready": 1}, "is_last_batch": False}}},
        "hyper_parameters": {"net": {"embed_dim": 32, "depth": 1, "heads": 2}},
        **parts,
    }


def test_a_checkpoint_as_vitattn_writes_it_passes() -> None:
    check_values(checkpoint(), "f.ckpt")


@pytest.mark.parametrize(
    ("tensor", "problem"),
    [
        (torch.zeros(1).expand(1000, 1000), "stride-0 view"),
        (torch.zeros(10).as_strided((5, 5), (1, 1)), "claiming 100 bytes over 40"),
        (torch.zeros(100)[90:].as_strided((4, 4), (1, 1)), "claiming 64 bytes over 40"),
        (torch.zeros(2, 2).to_sparse(), "tensor, not a plain one"),
    ],
)
def test_a_tensor_that_claims_more_than_its_storage_is_named(tensor: Any, problem: str) -> None:
    assert problem in (tensor_problem(tensor) or "")
    with pytest.raises(ConfigError, match=r"^f\.ckpt: state_dict\.net\.w is a"):
        check_values(checkpoint(state_dict={"net.w": tensor}), "f.ckpt")


@pytest.mark.parametrize(
    ("part", "refusal"),
    [
        ({"global_step": -1}, r"global_step=-1 is not a count"),
        ({"global_step": 10**5000}, r"global_step=an integer of 16610 bits is not a count"),
        ({"epoch": 2.0}, r"epoch=2\.0 is not a count"),
        ({"loops": {"fit_loop": {"x": 10**13}}}, r"loops\.fit_loop\.x=10000000000000 is not"),
        ({"loops": {"fit_loop": {"x": [True, "1"]}}}, r"loops\.fit_loop\.x\.1='1' is not a count"),
        (
            {"optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(5, 5)}}}]},
            r"exp_avg has shape \(5, 5\), which no weight",
        ),
        ({"hyper_parameters": {"net": {"embed_dim": 8192}}}, r"net\.embed_dim=8192 is not valid"),
        ({"hyper_parameters": {"net": {"depth": True}}}, r"net\.depth=True is not valid"),
        (
            {"hyper_parameters": {"net": {"embed_dim": 4096, "depth": 128}}},
            r"billion parameters",
        ),
        ({"hyper_parameters": {"lora": {"rank": 10**6}}}, r"lora\.rank=1000000 is not valid"),
        (
            {"hyper_parameters": {"lora": {"target_modules": "(a+)+$"}}},
            r"is not a list of layer names",
        ),
        (
            {"hyper_parameters": {"lora": {"target_modules": ["attn.*"]}}},
            r"is not a list of layer names",
        ),
        (
            {"callbacks": {"RandomStateInCheckpoint": {"torch": torch.zeros(9)}}},
            r"RandomStateInCheckpoint\.torch is not a generator's state",
        ),
        (
            {"CIFAR10DataModule": {"batches_done_in_epoch": -5}},
            r"batches_done_in_epoch=-5 is not a count",
        ),
        ({"vitattn_schedule_steps": -8}, r"vitattn_schedule_steps=-8 is not a count"),
        ({"vitattn_schedule_steps": "8"}, r"vitattn_schedule_steps='8' is not a count"),
        (
            {"vitattn_precision": {"trainer": "8-true", "matmul": "high"}},
            r"vitattn_precision is not a precision as vitattn records one \(\{'trainer': one of "
            r"64-true, .*'matmul': one of highest, high, medium\}\)",
        ),
        ({"vitattn_precision": "bf16-mixed"}, r"vitattn_precision is not a precision"),
        (
            {"vitattn_precision": {"trainer": "32-true", "matmul": "high", "x": 1}},
            r"vitattn_precision is not a precision",
        ),
    ],
)
def test_a_value_outside_its_type_or_bound_is_one_line(part: dict, refusal: str) -> None:
    with pytest.raises(ConfigError, match=refusal) as refused:
        check_values(checkpoint(**part), "f.ckpt")
    assert str(refused.value).startswith("f.ckpt") and "\n" not in str(refused.value)


def shared(depth: int) -> list[Any]:
    node: list[Any] = [0]
    for _ in range(depth):
        node = [node, node]
    return node


def test_shared_references_are_visited_once_and_refused_in_a_stored_config() -> None:
    """2^60 paths through 60 lists: each walk visits each list once; a stored config refuses the
    second reference rather than handing billions of nodes to a copy. Nesting 50,000 deep is
    refused at the depth cap, without recursion. A walk that visited every path would not end:
    pytest-timeout ends it."""
    assert sum(1 for _ in leaves(shared(60))) == 1
    with pytest.raises(UntrustedFileError, match=r"is the same node as"):
        check_stored_config({"net": {"x": shared(60)}}, "f.ckpt", "hyper_parameters")
    deep: list[Any] = []
    for _ in range(50_000):
        deep = ["${a}", deep]
    with pytest.raises(UntrustedFileError, match=r"nested deeper than 64 levels"):
        check_stored_config(deep, "f.ckpt", "hyper_parameters")  # no RecursionError
    with pytest.raises(ConfigError, match=r"^f\.ckpt: .*nests deeper than 64 levels"):
        check_values(checkpoint(callbacks={"x": deep}), "f.ckpt")
