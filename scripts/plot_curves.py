#!/usr/bin/env python
"""Curves and summary of vitattn-train runs: ``python scripts/plot_curves.py DIR... [--out DIR]``.

Writes val_acc_vs_step.png, train_loss_vs_step.png, attention_maps.png (runs with
attention/maps.npz), summary.csv and summary.md (see ``vitattn.analysis.summary``). A sweep of
``vitattn-train -m`` gets the same files at its end, without running this script.
"""

import sys

from vitattn.analysis.summary import main

if __name__ == "__main__":
    sys.exit(main())
