"""Hostile run files made in a moment: a YAML alias bomb, nesting, a flood of values, a file past
the size cap, an ``.npz`` that inflates a thousandfold, an event record claiming a terabyte; and
a child process under a memory cap, so that a regression fails instead of eating the machine."""

from __future__ import annotations

import resource
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from numpy.lib import format as npy

MEMORY_CAP = 3 << 29
"""The address space (1.5 GB) a command runs under in these tests: 1 GB above what it takes
when it refuses a run before loading torch (``vitattn-train``: 35 MB; ``plot_curves.py``
summarizing the tiny run: 450 MB; VmPeak of each, measured), so a bomb that expands fails the
test, and so does a refusal that comes only after torch is loaded (3.8 GB of address space)."""


def capped(limit: int = MEMORY_CAP) -> Callable[[], None]:
    """A ``preexec_fn`` that caps the child's address space at ``limit`` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A few hundred bytes of YAML whose aliases expand to ``width ** levels`` strings."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def alias_bomb_list(levels: int = 9, width: int = 9) -> str:
    """:func:`alias_bomb` as a YAML list (where ``overrides.yaml`` holds one)."""
    return "".join(f"- {line}\n" for line in alias_bomb(levels, width).splitlines())


def nested_list(depth: int) -> str:
    """A YAML (and JSON) list nested ``depth`` deep."""
    return "[" * depth + "]" * depth


def nested_block_mapping(depth: int) -> str:
    """A block YAML mapping nested ``depth`` deep (``a:`` indented one more each line)."""
    return "".join(" " * level + "a:\n" for level in range(depth)) + " " * depth + "a: 1\n"


def flood(values: int) -> str:
    """A YAML (and JSON) list of ``values`` numbers on one line."""
    return "[" + "1," * (values - 1) + "1]"


def oversized(size: int, head: str = "seed: 1\n") -> str:
    """Valid YAML of ``size`` bytes: ``head`` and a comment."""
    return head + "#" + "x" * (size - len(head) - 2) + "\n"


def zip_bomb(path: Path, inflated: int = 3_500_000_000, member: str = "rollout.npy") -> Path:
    """An ``.npz`` at ``path`` whose one float32 array inflates to about ``inflated`` bytes from
    a few MB: its deflate stream is one block of 64 MB of zeros, compressed once and repeated
    (a full flush makes each copy stand alone). Its CRC is not computed: a reader that checks
    the declared size first never gets that far."""
    chunk = 64 << 20
    copies = max(1, inflated // chunk)
    total = copies * chunk
    header = _npy_header((total - 128) // 4)
    assert len(header) == 128
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = first.compress(header + bytes(chunk - len(header))) + first.flush(zlib.Z_FULL_FLUSH)
    repeat = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = repeat.compress(bytes(chunk)) + repeat.flush(zlib.Z_FULL_FLUSH)
    data = head + block * (copies - 1) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    name = member.encode()
    entry = struct.pack("<HHHHHIII", 20, 0, 8, 0, 0x21, 0, len(data), total)
    local = b"PK\x03\x04" + entry + struct.pack("<HH", len(name), 0) + name
    central = (
        b"PK\x01\x02"
        + struct.pack("<H", 20)
        + entry
        + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, 0)
        + name
    )
    end = b"PK\x05\x06" + struct.pack(
        "<HHHHIIH", 0, 0, 1, 1, len(central), len(local) + len(data), 0
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(local + data + central + end)
    return path


def length_bomb(path: Path, claimed: int = 1 << 40) -> Path:
    """Append to the TensorBoard event file ``path`` a record whose header claims ``claimed``
    bytes (its CRC valid) and 100 bytes of it: TensorBoard's reader asks Python for the
    ``claimed`` bytes before it reads them."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    length = struct.pack("<Q", claimed)
    with path.open("ab") as handle:
        handle.write(length + struct.pack("<I", masked_crc32c(length)) + bytes(100))
    return path


def _npy_header(count: int) -> bytes:
    """The ``.npy`` version 1.0 header of a float32 array of ``count`` values."""
    import io

    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": (count,)})
    return buffer.getvalue()
