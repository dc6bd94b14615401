"""``docs/claims.md`` pairs the README's promises with tests: every test it names exists."""

from __future__ import annotations

import re

from vitattn.utils.config import PROJECT_ROOT

TESTS = PROJECT_ROOT / "tests"
REFERENCE = re.compile(r"`((?:\w+/)*(?:test_\w+|conftest)\.py)?(?:::(\w+))?`")
"""```file.py```, ```file.py::test```, or ```::test``` (in the file named before it on the line)."""


def test_every_test_the_claims_page_names_exists() -> None:
    checked = 0
    for line in (PROJECT_ROOT / "docs" / "claims.md").read_text().splitlines():
        current = None
        for path, test in REFERENCE.findall(line):
            current = path or current
            if current is None:
                continue
            source = (TESTS / current).read_text()
            assert not test or f"def {test}(" in source, f"{current}::{test} does not exist"
            checked += 1
    assert checked > 40


def test_the_readme_caption_of_the_hparams_screenshot_names_the_sweep_it_shows() -> None:
    """The README's caption of ``docs/figures/tensorboard_hparams.png`` counts the attentions
    of the sweep ``docs/runs.md`` says it shows (it said two of three)."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    runs = (PROJECT_ROOT / "docs" / "runs.md").read_text()
    (caption,) = re.findall(r"!\[([^\]]*)\]\(docs/figures/tensorboard_hparams\.png\)", readme)
    shown = re.search(r"as it opens after `vitattn-train -m attention=([\w,]+)\s", runs)
    assert shown is not None
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    assert f"{words[len(shown.group(1).split(','))]}-attention" in caption, caption
