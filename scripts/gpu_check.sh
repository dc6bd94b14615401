#!/usr/bin/env bash
# vitattn-check on a GPU lent for a few minutes, in one call: every section, and each group of
# attentions of the training section, under its own share of a time budget, each part's check.md
# and check.json written under OUT as the part ends, so that a cap that cuts one part keeps the
# rest.
#
#   scripts/gpu_check.sh OUT [SECONDS]        # SECONDS: the whole budget, default 720
#
# The default budget is what the parts took on an H200 (docs/check.md), with room: more than a
# device's 600 s command, so run it in two calls there, PARTS="numerics training-1 training-2
# training-3 training-4" and then PARTS="reference kernels-linear kernels-features kernels-rest".
#
# Environment:
#   DEVICE=gpu|cpu     the check's profile (default gpu; cpu tries the script on a laptop)
#   ATTENTIONS="a b"   the attentions to check (default: every registered one)
#   TRAINING_PARTS=N   the training section in N parts of as many attentions (default 4; each
#                      part starts Python, torch and Lightning again: seconds each)
#   WHEELS=DIR         wheels to install first with --target OUT/.site (a machine's image that
#                      has torch, Lightning and timm but not Hydra: scripts/offline_wheels.sh)
#   VITATTN_DATA_DIR   a CIFAR-10 folder (cifar-10-batches-py inside): the training section
#   PACK=FILE.tgz      after each part, OUT so far packed into FILE.tgz, outside OUT (a device
#                      that hands back few files: PACK=$OUT/check.tgz scripts/gpu_check.sh /tmp/c)
#   FUSED="a b"        first, the part fused-paths: scripts/fused_paths_gpu.py for these of
#                      the fused paths (each against its plain path and flash SDPA, the tuned
#                      kernels' choices), its report in OUT/fused-paths.log, cut after
#                      FUSED_SECONDS (default 200), which the budget does not include
#   TRAIN_STEPS=N      after fused-paths, the part train-run: a real `vitattn-train trainer=DEVICE`
#                      of N steps (model.compile=auto, the default callbacks, the model summary
#                      included) in OUT/train-run, whose metrics.json says whether it trained
#                      compiled (train/compile_seconds) and how fast; cut after TRAIN_SECONDS
#                      (default 150), which the budget does not include
#   PARTS="a b"        run only these parts (names as PLAN=1 prints them), each with its cap
#   PLAN=1             print each part's cap and overrides, and run nothing
#
# Run from the repository root; vitattn is imported from src/ whether or not it is installed.
# OUT/parts.tsv lists each part, its exit status (124: cut by its cap) and its seconds.
set -uo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
    [[ $# -lt 1 ]] && exit 2 || exit 0
fi
OUT="$1"
BUDGET="${2:-720}"
DEVICE="${DEVICE:-gpu}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ -n "${WHEELS:-}" ]]; then
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$OUT/.site" "$WHEELS"/*.whl \
        || { echo "gpu_check: could not install the wheels in $WHEELS" >&2; exit 1; }
fi
export PYTHONPATH="$ROOT/src${WHEELS:+:$OUT/.site}${PYTHONPATH:+:$PYTHONPATH}"

if [[ -z "${ATTENTIONS:-}" ]]; then
    ATTENTIONS="$("$PYTHON" -c 'from vitattn.attention import ATTENTIONS; print(*sorted(ATTENTIONS))')" \
        || { echo "gpu_check: vitattn does not import here (WHEELS=?)" >&2; exit 1; }
fi
read -r -a attentions <<< "$ATTENTIONS"
listed="[$(IFS=,; echo "${attentions[*]}")]"

[[ -z "${PLAN:-}" ]] && printf 'part\texit\tseconds\n' > "$OUT/parts.tsv"

# run NAME SECONDS COMMAND...: one part, its output in OUT/NAME.log, cut after SECONDS (PLAN:
# the part's name, cap and PLAN_SHOWS printed instead).
run() {
    local name="$1" cap="$2" started status
    shift 2
    [[ -n "${PARTS:-}" && " $PARTS " != *" $name "* ]] && return
    if [[ -n "${PLAN:-}" ]]; then
        printf '%s\t%s\t%s\n' "$name" "$cap" "$PLAN_SHOWS"
        return
    fi
    started=$SECONDS
    timeout --kill-after=15 "$cap" "$@" > "$OUT/$name.log" 2>&1
    status=$?
    printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - started))" >> "$OUT/parts.tsv"
    echo "gpu_check: $name: exit $status after $((SECONDS - started)) s (cap $cap s)"
    if [[ -n "${PACK:-}" ]]; then
        tar czf "$PACK.partial" --exclude=.hydra --exclude=.site --exclude=checkpoints -C "$OUT" . \
            && mv "$PACK.partial" "$PACK"
    fi
}

# part NAME SECONDS OVERRIDES...: one vitattn-check run in OUT/NAME.
part() {
    local name="$1" cap="$2"
    shift 2
    PLAN_SHOWS="$*" run "$name" "$cap" "$PYTHON" -m vitattn.check "device=$DEVICE" "$@" \
        "hydra.run.dir=$OUT/$name"
}

# fused-paths first, outside the budget: the fused paths' own script.
if [[ -n "${FUSED:-}" ]]; then
    read -r -a fused <<< "$FUSED"
    PLAN_SHOWS="scripts/fused_paths_gpu.py ${fused[*]}" run fused-paths "${FUSED_SECONDS:-200}" \
        "$PYTHON" scripts/fused_paths_gpu.py "${fused[@]}"
fi

# train-run, outside the budget: what a user's first `vitattn-train trainer=gpu` does.
if [[ -n "${TRAIN_STEPS:-}" ]]; then
    train_run=("trainer=$DEVICE" "trainer.max_steps=$TRAIN_STEPS"
               "trainer.val_check_interval=$TRAIN_STEPS" "hydra.run.dir=$OUT/train-run")
    PLAN_SHOWS="vitattn-train ${train_run[*]}" run train-run "${TRAIN_SECONDS:-150}" \
        "$PYTHON" -m vitattn.train "${train_run[@]}"
fi

# The budget's shares, from what each part took on an H200: numerics 8%, training 42% in
# TRAINING_PARTS parts (the attentions dealt round, so that the slow ones fall in different
# parts), reference 8%, and the kernels 42% in three parts by family (one part for all was cut
# by its cap there and left no rows): the linear family 15%, the feature maps 17%, the rest 10%.
# A kernels part times the variants and the compiled rows of its own attentions.
share() { echo $(( BUDGET * $1 / 100 > 20 ? BUDGET * $1 / 100 : 20 )); }
part numerics "$(share 8)" "sections=[numerics]" "attentions=$listed"
parts="${TRAINING_PARTS:-4}"
(( parts < 1 )) && parts=1
(( parts > ${#attentions[@]} )) && parts=${#attentions[@]}
per_part=$(( $(share 42) / parts > 20 ? $(share 42) / parts : 20 ))
for (( first = 0; first < parts; first++ )); do
    group=()
    for (( i = first; i < ${#attentions[@]}; i += parts )); do group+=("${attentions[i]}"); done
    part "training-$((first + 1))" "$per_part" "sections=[training]" \
        "attentions=[$(IFS=,; echo "${group[*]}")]"
done
part reference "$(share 8)" "sections=[reference]"

LINEAR_FAMILY=" linear efficient linformer taylor "
FEATURE_MAPS=" performer random_feature nystrom "
# kernels PART SHARE FAMILY: the attentions checked that are in FAMILY ("rest": in neither).
kernels() {
    local a chosen=()
    for a in "${attentions[@]}"; do
        case "$3" in
            rest) [[ "$LINEAR_FAMILY$FEATURE_MAPS" == *" $a "* ]] || chosen+=("$a") ;;
            *) [[ "$3" == *" $a "* ]] && chosen+=("$a") ;;
        esac
    done
    (( ${#chosen[@]} )) || return 0
    part "$1" "$2" "sections=[kernels]" "attentions=[$(IFS=,; echo "${chosen[*]}")]"
}
kernels kernels-linear "$(share 15)" "$LINEAR_FAMILY"
kernels kernels-features "$(share 17)" "$FEATURE_MAPS"
kernels kernels-rest "$(share 10)" rest

[[ -n "${PLAN:-}" ]] && exit 0
echo "gpu_check: the parts, and each one's problems line:"
while IFS=$'\t' read -r name status seconds; do
    [[ "$name" == part ]] && continue
    problems="no check.md (cut or failed: $name.log)"
    if [[ "$name" == fused-paths ]]; then
        problems="its report: $name.log"
    elif [[ "$name" == train-run ]]; then
        problems="$(tail -n 1 "$OUT/$name.log")"  # its line: accuracy, seconds, directory
    elif [[ -f "$OUT/$name/check.md" ]]; then
        problems="$(grep -A2 '^## Problems' "$OUT/$name/check.md" | sed -n '3p')"
    fi
    printf '  %-24s exit %-4s %5s s  %s\n' "$name" "$status" "$seconds" "$problems"
done < "$OUT/parts.tsv"
