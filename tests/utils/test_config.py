"""The ``--help`` groups, read from the config tree."""

from __future__ import annotations

from pathlib import Path

from vitattn.utils.config import CONFIG_DIR, default_parts, group_options, groups_help


def test_help_lists_callbacks_choices_and_the_parts_of_default_apart() -> None:
    text = groups_help("attention", "callbacks")
    lines = text.splitlines()
    assert lines[1].split(None, 1) == ["callbacks", "default, none"]
    parts_text = " ".join(line.strip() for line in lines[2:])
    parts = set(default_parts("callbacks"))
    assert parts == set(group_options("callbacks")) - {"default", "none"}
    assert all(part in parts_text for part in parts)
    assert parts_text.endswith("drop one with ~callbacks.<name>")
    assert all(len(line) <= 100 for line in lines[2:])


def test_a_group_without_a_composing_default_lists_every_option(tmp_path: Path) -> None:
    (tmp_path / "trainer").mkdir()
    for name in ("default", "cpu"):
        (tmp_path / "trainer" / f"{name}.yaml").write_text("max_steps: 1\n")
    assert default_parts("trainer", tmp_path) == []
    assert default_parts("attention", CONFIG_DIR) == []
