"""The fused kernels compiled ahead of time for an NVIDIA GPU, on any machine (no GPU needed):
for each kernel and each configuration its tuner tries, the PTX instructions, the registers per
thread, the bytes spilled per thread (``ptxas -v``) and the shared memory. docs/check.md's
register and instruction tables come from it (with the H200 image's Triton 3.6.0 on the path).

    python scripts/kernel_registers.py performer random_feature           # sm_90, d = 32
    python scripts/kernel_registers.py random_feature --precise-trig      # libdevice's sin, cos
    python scripts/kernel_registers.py linear --d 64 --arch 80

The kernels' arguments are typed by their names, as the host passes them: q, k, v, the output
and their gradients in bf16 (training's autocast), every other tensor fp32, sizes and strides
int32, scales fp32; the compile-time ones are the host's for that d (``_meta``), products in TF32.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

# each mechanism's kernels module and the arguments of its _meta after (d, d_v, device)
MECHANISMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear": ("linear_kernels", ("elu",)),
    "taylor": ("linear_kernels", ("unit",)),
    "efficient": ("efficient_kernels", ()),
    "performer": ("favor_kernels", ("unbiased",)),
    "random_feature": ("fourier_kernels", ()),
}
SIZES = {"BATCH", "HEADS", "N", "D", "DV", "F", "M", "N_KEYS", "ROWS_PER_SPLIT"}
SCALARS = {"SCALE", "WEIGHT_SCALE", "eps"}
IN_THE_INPUTS_DTYPE = {"Q", "K", "V", "DO", "OUT", "DQ", "DK", "DVAL"}
STRIDE = re.compile(r"s[a-z]+_[bhnd]")
INSTRUCTION = re.compile(r"^\s+[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*", re.MULTILINE)
"""A line of PTX that begins with an instruction (not a directive, a label or a predicated
instruction, ``@%p``: the count docs/check.md gives)."""


@dataclass
class Compiled:
    kernel: str
    config: str
    instructions: int
    registers: int
    spilled: int
    shared_kib: int


def signature(kernel: JITFunction, constants: dict[str, object]) -> dict[str, str]:
    """Each argument's Triton type, by its name."""
    types = {}
    for parameter in kernel.params:
        name = parameter.name
        if parameter.is_constexpr:
            types[name] = "constexpr"
        elif name in SIZES or STRIDE.fullmatch(name):
            types[name] = "i32"
        elif name in SCALARS:
            types[name] = "fp32"
        else:
            types[name] = "*bf16" if name in IN_THE_INPUTS_DTYPE else "*fp32"
    missing = [
        name for name, kind in types.items() if kind == "constexpr" and name not in constants
    ]
    if missing:
        raise SystemExit(f"kernel_registers.py: {kernel.__name__}: no value for {missing}")
    return types


def ptxas(ptx: str, arch: int) -> tuple[int, int]:
    """(registers per thread, bytes spilled per thread) of ``ptx`` by ``ptxas -v``."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as source:
        source.write(ptx)
        source.flush()
        target = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"  # 90a: Hopper's own instructions
        report = subprocess.run(
            [
                triton.knobs.nvidia.ptxas.path,
                f"-arch={target}",
                "-v",
                source.name,
                "-o",
                os.devnull,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", report))
    return registers, spilled


def compile_kernel(
    name: str, kernel: JITFunction, constants: dict[str, object], options: dict, arch: int
) -> Compiled:
    types = signature(kernel, constants)
    used = {key: value for key, value in constants.items() if types.get(key) == "constexpr"}
    source = ASTSource(fn=kernel, signature=types, constexprs=used)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    ptx = compiled.asm["ptx"]
    registers, spilled = ptxas(ptx, arch)
    instructions = len(INSTRUCTION.findall(ptx))
    config = f"{options['num_warps']}w{options['num_stages']}s" + "".join(
        f",{key}={value}" for key, value in constants.items() if key == "HALVES"
    )
    return Compiled(
        name, config, instructions, registers, spilled, compiled.metadata.shared // 1024
    )


def kernels(module: object) -> dict[str, tuple[JITFunction, list[triton.Config]]]:
    """The module's launched kernels (those that take ``HEADS``) and the configurations each is
    tuned over (Triton's default, one, where it is not tuned)."""
    found = {}
    for name, value in vars(module).items():
        kernel = value.fn if isinstance(value, Autotuner) else value
        if not isinstance(kernel, JITFunction) or "HEADS" not in kernel.arg_names:
            continue
        configs = value.configs if isinstance(value, Autotuner) else [triton.Config({})]
        found[name] = (kernel, configs)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mechanisms", nargs="+", choices=sorted(MECHANISMS))
    parser.add_argument("--d", type=int, default=32, help="head size (d = d_v; default 32)")
    parser.add_argument("--arch", type=int, default=90, help="compute capability (default 90)")
    parser.add_argument("--precise-trig", action="store_true", help="random_feature: libdevice's")
    parser.add_argument("--kernels", help="only these kernels, by name, comma-separated")
    arguments = parser.parse_args()
    print(f"Triton {triton.__version__}, sm_{arguments.arch}, d = {arguments.d}, products in TF32")
    print("| mechanism | kernel | config | PTX instructions | registers | spilled B | shared KiB |")
    print("|---|---|---|---|---|---|---|")
    for mechanism in arguments.mechanisms:
        module_name, extra = MECHANISMS[mechanism]
        module = importlib.import_module(f"vitattn.attention.fused.{module_name}")
        meta = module._meta(arguments.d, arguments.d, torch.device("cpu"), *extra)
        meta["PRECISION"] = "tf32"
        if "FAST_TRIG" in meta:
            meta["FAST_TRIG"] = not arguments.precise_trig
        wanted = arguments.kernels.split(",") if arguments.kernels else None
        for name, (kernel, configs) in kernels(module).items():
            if wanted and name not in wanted:
                continue
            for config in configs:
                options = dict(num_warps=config.num_warps, num_stages=config.num_stages)
                row = compile_kernel(
                    name, kernel, {**meta, **config.kwargs}, options, arguments.arch
                )
                print(
                    f"| {mechanism} | `{row.kernel}` | {row.config} | {row.instructions:,} | "
                    f"{row.registers} | {row.spilled} | {row.shared_kib} |",
                    flush=True,
                )


if __name__ == "__main__":
    sys.exit(main())
