#!/usr/bin/env python
"""Rank x shift table of vitattn-finetune runs: ``python scripts/lora_table.py DIR... [--out DIR]``.

Prints the Markdown table and writes lora_table.md and lora_table.csv (see
``vitattn.analysis.lora``).
"""

import sys

from vitattn.analysis.lora import main

if __name__ == "__main__":
    sys.exit(main())
