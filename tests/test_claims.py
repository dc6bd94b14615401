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
