#!/usr/bin/env bash
# Download every wheel vitattn needs into DIR, for a machine without internet (a cluster's
# compute node, a GPU box behind a firewall):
#
#   scripts/offline_wheels.sh DIR                    # runtime and [dev] (tests, sweeps, bench, LoRA)
#   scripts/offline_wheels.sh --without-torch DIR    # for an image that already has torch and
#                                                    # torchvision (and CUDA): no torch, torchvision,
#                                                    # triton or nvidia-* wheels
#   scripts/offline_wheels.sh --extras "" DIR        # the runtime only (vitattn-train/-eval/-bench)
#
# then, on the machine without internet, in the repository:
#
#   pip install --no-index --find-links DIR -e ".[dev]"
#
# The wheels are those pip picks for the Python that runs this script (its version and
# platform): run it with the Python of the target (PYTHON=/path/to/python3.11 ...). What to
# download is what `pip install --dry-run --report` resolves for the project, so it follows
# pyproject.toml; setuptools and wheel come too, for the editable install.
set -euo pipefail

usage() {
    echo "usage: scripts/offline_wheels.sh [--without-torch] [--extras EXTRAS] DIR" >&2
    echo "  downloads the wheels of vitattn[EXTRAS] (default: dev) into DIR" >&2
}

PYTHON="${PYTHON:-python3}"
# The pip to run; tests replace it with a stand-in that does not touch the network.
read -r -a PIP <<< "${VITATTN_PIP:-$PYTHON -m pip}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

without_torch=0
extras="dev"
dir=""
while (($#)); do
    case "$1" in
        -h | --help)
            usage
            exit 0
            ;;
        --without-torch)
            without_torch=1
            ;;
        --extras)
            if (($# < 2)); then
                echo "offline_wheels.sh: error: --extras needs a value (e.g. dev, sweep,bench, or \"\")" >&2
                exit 2
            fi
            extras="$2"
            shift
            ;;
        -*)
            echo "offline_wheels.sh: error: unknown option $1" >&2
            usage
            exit 2
            ;;
        *)
            if [[ -n "$dir" ]]; then
                echo "offline_wheels.sh: error: one DIR only (got $dir and $1)" >&2
                exit 2
            fi
            dir="$1"
            ;;
    esac
    shift
done
if [[ -z "$dir" ]]; then
    echo "offline_wheels.sh: error: DIR is missing: where to put the wheels" >&2
    usage
    exit 2
fi
if [[ -e "$dir" && ! -d "$dir" ]]; then
    echo "offline_wheels.sh: error: $dir exists and is not a directory" >&2
    exit 2
fi
mkdir -p "$dir"

target="$ROOT"
if [[ -n "$extras" ]]; then
    target="$ROOT[$extras]"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# What a fresh install of the project would resolve to, as exact pins.
"${PIP[@]}" install --dry-run --ignore-installed --quiet --report "$work/report.json" "$target"
"$PYTHON" - "$work/report.json" "$without_torch" > "$work/requirements.txt" <<'PY'
import json
import sys

report, without_torch = sys.argv[1], sys.argv[2] == "1"
TORCH = ("torch", "torchvision", "triton")
for item in json.load(open(report))["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    key = name.lower().replace("_", "-")
    if key == "vitattn":
        continue  # the project itself is installed from the repository
    if without_torch and (key in TORCH or key.startswith("nvidia-")):
        continue
    print(f"{name}=={version}")
PY

"${PIP[@]}" download --quiet --no-deps --dest "$dir" -r "$work/requirements.txt"
"${PIP[@]}" download --quiet --dest "$dir" "setuptools>=77" wheel
count="$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l | tr -d ' ')"
echo "offline_wheels.sh: $count wheels in $dir ($(wc -l < "$work/requirements.txt" | tr -d ' ') packages for vitattn${extras:+[$extras]}$( ((without_torch)) && echo ', torch left out'))"
echo "install with: pip install --no-index --find-links $dir -e \"${ROOT}${extras:+[$extras]}\""
