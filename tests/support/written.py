"""What a command says it wrote, against what it left in its folder."""

from __future__ import annotations

import re
from pathlib import Path

UNNAMED = {"bench.log", ".hydra", ".vitattn.lock"}
"""What the closing line leaves unnamed: Hydra's record, the log it is written to, the lock."""


def assert_the_closing_line_names_every_file(output: str, folder: Path) -> None:
    """The last ``wrote <a>, <b> and <c> to <folder>`` line of ``output`` names each file the
    command left in ``folder`` (a name with ``<attention>`` stands for each of its files)."""
    lines = re.findall(r"wrote (.+) to (\S+)\s*$", output, flags=re.MULTILINE)
    assert lines, output[-2000:]
    names, where = lines[-1]
    assert Path(where) == folder, where
    said = [name.strip() for name in re.split(r", | and ", names)]
    patterns = [re.compile(re.escape(name).replace("<attention>", r"\w+") + "$") for name in said]
    left = sorted(p.name for p in folder.iterdir() if p.name not in UNNAMED)
    unnamed = [name for name in left if not any(p.match(name) for p in patterns)]
    assert not unnamed, (unnamed, said)
