#!/usr/bin/env bash
# The founding report's comparison in one command: one pixel-level ViT per attention type
# (experiment=report: 1024 tokens, batch 256, Adam 5e-4, cosine, 50 epochs, bf16 on the GPU),
# then its figure (validation accuracy against step) and table from the TensorBoard logs.
#
#   scripts/reproduce_report.sh                     # the five attentions of the report
#   scripts/reproduce_report.sh trainer.precision=16-mixed   # extra overrides (e.g. on a T4)
#   ATTENTIONS=softmax,performer scripts/reproduce_report.sh
#   SWEEP_DIR=/scratch/report scripts/reproduce_report.sh   # somewhere else than outputs/
#
# Writes a job folder per attention, outputs/train/multiruns/report_<stamp>/attention=softmax/ and
# so on (or under SWEEP_DIR/), and beside them val_acc_vs_step.png, train_loss_vs_step.png,
# frontier.png, summary.csv and summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."

attentions="${ATTENTIONS:-softmax,linear,linformer,random_feature,nystrom}"
sweep_dir="${SWEEP_DIR:-outputs/train/multiruns/report_$(date +%Y-%m-%d_%H-%M-%S)}"

status=0
vitattn-train -m experiment=report "attention=${attentions}" "hydra.sweep.dir=${sweep_dir}" "$@" \
    || status=$?   # a failed job is named in the summary; the figure still shows the others
python scripts/plot_curves.py "${sweep_dir}"
exit "${status}"
