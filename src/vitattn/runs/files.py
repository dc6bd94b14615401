"""A run's files, read and written safely: never through a symbolic link, and a malformed file
is one line that names it.

A run or sweep directory is data (``docs/runs.md``, "What vitattn trusts"): on a shared disk
anyone who can write there can plant a symbolic link at a name vitattn writes, or leave a file
that is not what vitattn wrote. So, here and only here:

* a file is **written** whole to a temporary ``.<name>.partial`` beside it, created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a link there is never followed), then renamed over the
  target with ``os.replace`` (a link at the target is replaced, not written through)
  (:func:`replacing`, :func:`write_text`, :func:`write_bytes`, :func:`write_with`). A link, or
  anything but a regular file, at the temporary's name is refused in one line
  (:class:`UnsafeWriteError`). The writer holds an ``flock`` on its temporary until it is
  renamed, so a regular one no process holds is a killed process's leftover, written anew, and
  one another process holds (two summaries of one sweep at once) is waited for, never removed;
* a file that is **appended** to (the log) is opened with ``O_NOFOLLOW`` (:func:`open_for_append`);
* the names Hydra and other libraries write *through* (the log file, ``.hydra/``, the lock) are
  checked before a command starts (:func:`vitattn.runs.layout.refuse_planted_links`);
* a file that is **read** (:func:`read_json`, :func:`read_yaml`, :func:`whole_number`) gives one
  line ``<path>: <what is wrong>`` when it is malformed (:class:`UnreadableFileError`);
* while this process holds a run directory (:mod:`vitattn.runs.lock`), every write and deletion
  in it first checks that the directory is still the one it took, and that no folder between it
  and the file was replaced by a symbolic link since (:func:`check_confined`): a link planted
  *while* a run trains would otherwise carry every later write, and deletion, outside.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from vitattn.errors import ConfigError, TrainingError

PARTIAL = ".partial"
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
MAX_READ = 16 << 20
"""The largest run file read (``metrics.json``, ``.hydra/config.yaml``, ...): far more than any
vitattn writes (``docs/runs.md`` gives the largest measured)."""
WRITER_WAIT = 60.0
"""Seconds a write waits for another process writing the same file (two summaries of one sweep
at once) before it is refused."""
MAX_DEPTH = 64
"""The deepest nesting of a YAML or JSON run file read (vitattn's configs nest a few levels)."""
MAX_NODES = 100_000
"""The most values (mappings, lists, scalars) in a YAML or JSON run file read."""


ADVICE = "it is not as vitattn writes it: restore it or remove it"


class UnsafeWriteError(TrainingError):
    """A file vitattn writes is a symbolic link, or not a regular file: it is refused, and
    nothing is written through it. A :class:`TrainingError`: a run that meets one keeps its
    directory."""


class FileBusyError(TrainingError):
    """Another live process is writing the same file (it holds its temporary's ``flock``) and
    went on longer than a write waits for it."""


class UnreadableFileError(ConfigError):
    """A run file that cannot be read, or does not hold what vitattn writes there: one line,
    ``<path>: <problem>; <advice>``."""

    def __init__(self, path: Path, problem: str, advice: str = ADVICE) -> None:
        self.path, self.problem = path, one_line(problem)
        super().__init__(f"{one_line(path)}: {self.problem}; {advice}")


HELD: dict[Path, tuple[int, int]] = {}
"""The run directories this process holds, each with its device and inode when it was taken
(:func:`confine`); :func:`check_confined` checks writes and deletions in them."""


def confine(run_dir: Path) -> None:
    """Check every later write and deletion in ``run_dir`` (an absolute path, a directory this
    process now holds) against the directory it is now."""
    status = os.stat(run_dir)
    HELD[run_dir] = (status.st_dev, status.st_ino)


def unconfine(run_dir: Path) -> None:
    """Stop checking writes in ``run_dir`` (given back)."""
    HELD.pop(run_dir, None)


def check_confined(path: Path) -> None:
    """Refuse in one line (:class:`UnsafeWriteError`) a write or deletion at ``path`` inside a
    directory this process holds (:data:`HELD`) where that directory is no longer the one it
    took (moved away, or a symbolic link planted at its name since: ``os.stat`` follows it to
    another directory), or a folder between it and ``path`` is now a symbolic link. A folder
    not there yet is left to the write, which makes it or fails. What no check by name closes is
    the instant between it and the open; it closes the run-long window."""
    absolute = Path(os.path.abspath(path))
    for root, identity in HELD.items():
        if absolute == root or not absolute.is_relative_to(root):
            continue
        try:
            status = os.stat(root)
            same = (status.st_dev, status.st_ino) == identity
        except OSError:
            same = False
        if not same:
            raise _replaced(root, path)
        folder = root
        for part in absolute.relative_to(root).parts[:-1]:
            folder = folder / part
            try:
                linked = stat.S_ISLNK(os.lstat(folder).st_mode)
            except OSError:
                break
            if linked:
                raise _replaced(folder, path)


def check_written_in_place(path: Path) -> None:
    """Before a library opens ``path`` by name to write it in place (Lightning's
    ``hparams.yaml``, the CSV logger's ``metrics.csv``, which vitattn cannot write through
    :func:`replacing`): :func:`check_confined`, and no symbolic link at ``path`` itself."""
    check_confined(path)
    refuse_link(path)


def _replaced(folder: Path, path: Path) -> UnsafeWriteError:
    if os.path.islink(folder):
        now = f"is now {what_is_at(folder)}"
    elif os.path.isdir(folder):
        now = "is now another folder"
    else:
        now = "is gone" if not os.path.lexists(folder) else "is now no folder"
    return UnsafeWriteError(
        f"{one_line(folder)} was replaced while this command wrote in it, and {now}: vitattn "
        f"wrote and deleted nothing more there ({one_line(path.name)} included); restore the "
        "folder, or run again elsewhere"
    )


def one_line(text: object) -> str:
    """``text`` with control characters escaped (a link's target may hold a line break)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def partial_path(path: Path) -> Path:
    """Where ``path`` is written before it is complete: ``.<name>.partial`` beside it."""
    return path.with_name(f".{path.name}{PARTIAL}")


def what_is_at(path: Path) -> str:
    """What a planted entry at ``path`` is, for a one-line refusal: ``a symbolic link (to
    <target>)``, ``a hard link (one of 2 names of one file)``, or ``not a regular file (a
    FIFO)``."""
    try:
        status = path.lstat()
    except OSError:
        return "not a regular file"
    if stat.S_ISLNK(status.st_mode):
        return f"a symbolic link (to {one_line(os.readlink(path))})"
    if stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
        return f"a hard link (one of {status.st_nlink} names of one file)"
    return not_regular(status.st_mode)


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be made, or used, as a folder to write in: it, or the nearest entry
    above it that there is, is no folder (a file, a symbolic link to nothing); else ``None``.
    A script's ``--out`` is checked so before it reads any run (it said ``[Errno 17] File
    exists`` after reading them all)."""
    for entry in (path, *path.parents):
        if entry.is_symlink() and not entry.exists():
            return f"{one_line(entry)} is a symbolic link to nothing"
        if entry.exists():
            return None if entry.is_dir() else f"{one_line(entry)} is not a folder"
    return None


def not_regular(mode: int) -> str:
    """What an entry of ``mode`` that is not a regular file is: ``not a regular file (a
    FIFO)``, ``(a socket)``, ``(a device)``, ``(a folder)``."""
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return f"not a regular file (a {'FIFO' if stat.S_ISFIFO(mode) else 'socket'})"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (a device)"
    if stat.S_ISDIR(mode):
        return "not a regular file (a folder)"
    return "not a regular file"


def unsafe(path: Path) -> UnsafeWriteError:
    """The one line refusing ``path``: what is there, and that nothing went through it."""
    what = what_is_at(path)
    return UnsafeWriteError(
        f"{one_line(path)} is {what}: vitattn writes its run files itself, never through a link, "
        "and wrote nothing there: remove it and run again"
    )


def refuse_link(path: Path) -> None:
    """Refuse in one line if ``path`` is a symbolic link."""
    if path.is_symlink():
        raise unsafe(path)


def create_new(path: Path) -> int:
    """A descriptor of an empty regular file at ``path`` that this process alone writes until
    it closes it: opened with ``O_NOFOLLOW`` and held with an ``flock``. A regular file already
    there is a killed process's leftover (no one holds it: it is emptied and written anew) or
    another live process writing the same file (it holds it: waited for, up to
    :data:`WRITER_WAIT` seconds, then refused in one line, :class:`FileBusyError`). A
    link or anything else there is refused (:class:`UnsafeWriteError`). Nothing is removed, so
    two writers of one file never remove each other's temporary."""
    deadline = time.monotonic() + WRITER_WAIT
    while True:
        descriptor = _open_temporary(path)
        if descriptor is not None:
            if not _lock_for_writing(descriptor):
                os.close(descriptor)
            elif _same_file(descriptor, path):  # not yet renamed over its target
                os.ftruncate(descriptor, 0)
                return descriptor
            else:
                os.close(descriptor)
                continue
        if time.monotonic() > deadline:
            raise FileBusyError(
                f"{one_line(path)} is being written by another process: vitattn waited "
                f"{WRITER_WAIT:g} s for it and wrote nothing: run again when that process has ended"
            )
        time.sleep(0.05)


def _lock_for_writing(descriptor: int) -> bool:
    """Take the ``flock`` of the temporary open at ``descriptor``: ``False`` where another live
    process holds it. A filesystem without ``flock`` (``ENOLCK``, ``EOPNOTSUPP``, ``ENOSYS``:
    some network and FUSE mounts) lets the write go on unlocked, as every write went before."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    return True


def _open_temporary(path: Path) -> int | None:
    """A new file at ``path``, or the regular file there already (never through a link, never
    waiting on a FIFO); ``None`` if it went away in between."""
    flags = os.O_WRONLY | NOFOLLOW | CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        pass
    try:
        if not stat.S_ISREG(path.lstat().st_mode):  # a device is never opened
            raise unsafe(path)
    except FileNotFoundError:
        return None
    try:
        descriptor = os.open(path, flags | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:  # a link (ELOOP), a folder (EISDIR), a FIFO no one reads (ENXIO)
        raise unsafe(path) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1:
        os.close(descriptor)
        raise unsafe(path)
    os.set_blocking(descriptor, True)
    return descriptor


def _same_file(descriptor: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``descriptor``."""
    try:
        status = path.lstat()
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (status.st_dev, status.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def replacing(
    path: Path, *, text: bool = False, newline: str | None = None, fsync: bool = False
) -> Iterator[IO[Any]]:
    """A file object to write ``path``'s new content to. It goes to ``.<name>.partial`` (made
    by :func:`create_new`), which replaces ``path`` when the block ends without an error (after
    an ``fsync`` with ``fsync``); on an error it is removed and ``path`` stays as it was. A
    folder at ``path`` (which ``os.replace`` cannot replace) is refused in one line before
    anything is written."""
    check_confined(path)
    if path.is_dir() and not path.is_symlink():
        raise unsafe(path)
    partial = partial_path(path)
    mode = "w" if text else "wb"
    options = {"encoding": "utf-8", "newline": newline} if text else {}
    with os.fdopen(create_new(partial), mode, **options) as handle:  # its flock held till closed
        try:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, whole or not at all (:func:`replacing`)."""
    with replacing(path, text=True) as handle:
        handle.write(text)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, whole or not at all (:func:`replacing`)."""
    with replacing(path) as handle:
        handle.write(data)


def write_with(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Let ``write`` (``figure.savefig``, ``np.savez_compressed``, ``torch.save``, with the
    format given) write ``path`` through a binary file object, whole or not at all."""
    with replacing(path) as handle:
        write(handle)


def save_figure(figure: Any, path: Path, **options: Any) -> None:
    """``figure.savefig(path, **options)`` (a matplotlib figure) in the format of ``path``'s
    suffix, written whole or not at all (:func:`write_with`)."""
    kind = path.suffix.lstrip(".").lower() or "png"
    write_with(path, lambda handle: figure.savefig(handle, format=kind, **options))


def open_for_append(
    path: Path,
    mode: str = "a",
    encoding: str | None = None,
    errors: str | None = None,
    buffering: int = -1,
) -> IO[Any]:
    """``open(path, mode, buffering)`` for a log file (``"a"``, or ``"w"`` to start it afresh;
    with ``"b"``, bytes: an event file), only as the one name of a regular file: a symbolic
    link, a hard link (a file outside the run under a second name) or a FIFO (opened as it is,
    it waits for a reader for ever) at ``path`` is refused in one line. Opened without
    blocking, then checked."""
    check_confined(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | NOFOLLOW | CLOEXEC
    flags |= os.O_APPEND if "w" not in mode else 0
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise unsafe(path) from None
        raise
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1:
        os.close(descriptor)
        raise unsafe(path)
    os.set_blocking(descriptor, True)
    if "w" in mode:
        os.ftruncate(descriptor, 0)
    opened = ("w" if "w" in mode else "a") + ("b" if "b" in mode else "")
    return os.fdopen(descriptor, opened, buffering, encoding=encoding, errors=errors)


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` lies in ``root`` once ``..`` and symbolic links are resolved."""
    return path.resolve().is_relative_to(root.resolve())


def kind_of(value: Any) -> str:
    """What a value read from a file is, in a refusal's words (``a mapping``, ``a list``)."""
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}
    if value is None:
        return "nothing (null)"
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a value")


def open_regular(
    path: Path,
    *,
    follow_links: bool = False,
    max_bytes: int | None = MAX_READ,
    too_big: str = "more than vitattn writes there",
    advice: str | None = None,
    missing_ok: bool = False,
) -> IO[bytes]:
    """``path`` opened for reading, the one way vitattn opens a file it did not just write: a
    regular file (a FIFO would block, a device never end) of at most ``max_bytes`` bytes
    (``None``: any), not through a symbolic link unless ``follow_links``, opened without
    blocking and closed on exec. Anything else is one line (:class:`UnreadableFileError`,
    with ``advice`` where given): what is there, its size and ``too_big``, or why it cannot be
    opened; with ``missing_ok``, a missing file raises :class:`FileNotFoundError` as it is."""
    flags = os.O_RDONLY | os.O_NONBLOCK | CLOEXEC | (0 if follow_links else NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if missing_ok and isinstance(error, FileNotFoundError):
            raise
        if not follow_links and path.is_symlink():
            target = one_line(os.readlink(path))
            problem = f"is a symbolic link (to {target}), not a file"
            raise UnreadableFileError(path, problem, advice or ADVICE) from None
        raise UnreadableFileError(
            path,
            f"cannot be read ({error.strerror or error})",
            advice or "make it readable, or remove it",
        ) from None
    status = os.fstat(descriptor)
    problem = None
    if not stat.S_ISREG(status.st_mode):
        problem = f"is {not_regular(status.st_mode)}"
    elif max_bytes is not None and status.st_size > max_bytes:
        problem = f"is {status.st_size} bytes, {too_big}"
    if problem is not None:
        os.close(descriptor)
        raise UnreadableFileError(path, problem, advice or ADVICE)
    return os.fdopen(descriptor, "rb")


def read_text(path: Path, follow_links: bool = True) -> str:
    """``path``'s text: a regular file of at most :data:`MAX_READ` bytes, opened without
    following a link unless ``follow_links`` (:func:`open_regular`)."""
    try:
        with open_regular(path, follow_links=follow_links) as handle:
            return handle.read(MAX_READ + 1)[:MAX_READ].decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFileError(path, "is not UTF-8 text") from None


def _checked(path: Path, content: Any, expected: type) -> Any:
    if not isinstance(content, expected):
        raise UnreadableFileError(
            path, f"holds {kind_of(content)} where {kind_of(expected())} belongs"
        )
    return content


def read_json(path: Path, expected: type = dict, *, follow_links: bool = True) -> Any:
    """``path``'s JSON, which must be an ``expected`` (``dict`` or ``list``); anything else,
    or a file that cannot be read, is one line (:class:`UnreadableFileError`). The file is
    bounded (:data:`MAX_READ`, :data:`MAX_DEPTH`, :data:`MAX_NODES`). Without
    ``follow_links``, a symbolic link at ``path`` is such a file too (for a file whose content
    is copied into a run directory: a link would copy another file's)."""
    text = read_text(path, follow_links)
    try:
        content = json.loads(text)
    except ValueError as error:  # not JSON, or an integer of more digits than Python parses
        raise UnreadableFileError(path, f"is not JSON ({one_line(error)[:200]})") from None
    except RecursionError:
        raise UnreadableFileError(path, f"is nested more than {MAX_DEPTH} deep") from None
    _check_bounds(path, content)
    return _checked(path, content, expected)


def _check_bounds(path: Path, content: Any) -> None:
    """Refuse ``content`` (read from ``path``) nested deeper than :data:`MAX_DEPTH` or holding
    more than :data:`MAX_NODES` values; walked without recursion."""
    pending, nodes = [(content, 1)], 0
    while pending:
        value, depth = pending.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise UnreadableFileError(path, f"is nested more than {MAX_DEPTH} deep")
        if nodes > MAX_NODES:
            raise UnreadableFileError(path, f"holds more than {MAX_NODES} values")
        children = value.values() if isinstance(value, dict) else value
        if isinstance(value, dict | list):
            pending.extend((child, depth + 1) for child in children)


def read_yaml(path: Path, expected: type = dict, *, follow_links: bool = True) -> Any:
    """``path``'s YAML (plain data, :class:`RunFileLoader`: no anchors or aliases, bounded by
    :data:`MAX_READ`, :data:`MAX_DEPTH` and :data:`MAX_NODES`), which must be an ``expected``;
    an empty file, other content or a file that cannot be read is one line
    (:class:`UnreadableFileError`). Without ``follow_links``, a symbolic link at ``path`` is
    such a file too (as :func:`read_json`: a sweep's own files, read before its check of
    links)."""
    return _yaml_content(path, read_text(path, follow_links), expected)


def parse_yaml(path: Path, text: str, expected: type = dict) -> Any:
    """``text`` (read from ``path``, which errors name) as :func:`read_yaml` reads a file."""
    return _yaml_content(path, text, expected)


def _yaml_content(path: Path, text: str, expected: type) -> Any:
    import yaml

    loader = run_file_loader()
    try:
        check_yaml_events(yaml.parse(text, Loader=loader))
        content = yaml.load(text, Loader=loader)  # a SafeLoader, its events checked
    except BoundExceededError as error:
        raise UnreadableFileError(path, str(error)) from None
    except yaml.YAMLError as error:
        raise UnreadableFileError(path, f"is not valid YAML{_yaml_problem(error)}") from None
    except RecursionError:
        raise UnreadableFileError(path, f"is nested more than {MAX_DEPTH} deep") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise UnreadableFileError(path, f"is not plain data ({one_line(error)[:200]})") from None
    except (KeyError, IndexError, AttributeError, TypeError) as error:
        # an explicit tag PyYAML's constructors fail on (!!bool foo, !!int '', !!timestamp 9999x)
        problem = f"{type(error).__name__}: {one_line(error)[:200]}"
        raise UnreadableFileError(path, f"is not plain data ({problem})") from None
    if content is None:
        raise UnreadableFileError(path, f"is empty where {kind_of(expected())} belongs")
    _check_plain(path, content)
    return _checked(path, content, expected)


PLAIN = (str, int, float, bool, type(None), list, dict)
"""What YAML that Hydra, OmegaConf and Lightning write holds: PyYAML's safe loader also builds
dates (``2026-01-01`` unquoted), bytes (``!!binary``) and sets (``!!set``), which none writes
and the code reading run files does not expect (a summary's ``json.dumps``)."""


NOT_PLAIN = {
    "date": "a date",
    "datetime": "a date and time",
    "bytes": "binary data",
    "set": "a set",
}


def _check_plain(path: Path, content: Any) -> None:
    """Refuse in one line a YAML run file holding a value (or key) of any type but
    :data:`PLAIN` (walked without recursion; the loader took at most :data:`MAX_NODES`)."""
    stack = [content]
    while stack:
        node = stack.pop()
        if not isinstance(node, PLAIN):
            kind = NOT_PLAIN.get(type(node).__name__, f"a {type(node).__name__}")
            raise UnreadableFileError(
                path,
                f"holds {kind} ({one_line(repr(node))[:60]}), which vitattn never writes: only "
                "text, numbers, true or false, null, lists and mappings",
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


class BoundExceededError(ValueError):
    """A YAML run file holds an anchor or alias, or exceeds :data:`MAX_DEPTH` or
    :data:`MAX_NODES`: what it is, without the file's name (:func:`read_yaml` adds it)."""


def run_file_loader() -> type:
    """The YAML loader of run files: libyaml's ``CSafeLoader`` where PyYAML has it (a run file
    of :data:`MAX_READ` bytes is parsed in about a second; the pure-Python ``SafeLoader`` takes
    a minute), else ``SafeLoader``. Plain data only; :func:`check_yaml_events` runs first."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_yaml_events(events: Iterable[Any]) -> None:
    """Refuse, from the parser's events and before any node is built, an anchor or an alias
    (vitattn never writes them; an alias bomb is a few KB that expand to gigabytes), nesting
    deeper than :data:`MAX_DEPTH` and more than :data:`MAX_NODES` values
    (:class:`BoundExceededError`)."""
    import yaml

    depth = nodes = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            where = event.start_mark
            raise BoundExceededError(
                f"holds a YAML anchor or alias (line {where.line + 1}, column "
                f"{where.column + 1}), which vitattn never writes"
            )
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise BoundExceededError(f"holds more than {MAX_NODES} values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise BoundExceededError(f"is nested more than {MAX_DEPTH} deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _yaml_problem(error: Exception) -> str:
    """`` at line L, column C: <problem>`` (or ``: <problem>`` without a position)."""
    mark = getattr(error, "problem_mark", None)
    problem = " ".join((getattr(error, "problem", None) or str(error)).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {problem}"


def whole_number(content: dict[str, Any], key: str, path: Path) -> int:
    """``content[key]`` as a count (missing or null: 0): a whole number of zero or more, else
    one line naming ``path`` and ``key``."""
    value = content.get(key)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise UnreadableFileError(path, f'"{key}" is {value!r}, not a count (a whole number >= 0)')


def set_aside_unreadable(path: Path) -> Path:
    """Rename ``path`` (a file that could not be read) to ``<name>.unreadable-<n>`` beside it,
    ``n`` the first number free; the new path. The file itself (a link: the link) is kept.
    Numbers of more than nine digits are not vitattn's (a planted one made the next name longer
    than a file system takes)."""
    taken = [
        int(match.group(1))
        for other in path.parent.iterdir()
        if (match := re.fullmatch(re.escape(path.name) + r"\.unreadable-([0-9]{1,9})", other.name))
    ]
    target = path.with_name(f"{path.name}.unreadable-{1 + max(taken, default=0)}")
    check_confined(target)
    os.rename(path, target)
    return target


def remove_file(path: Path) -> None:
    """Delete the file at ``path`` (a link: the link itself) where :func:`check_confined` allows;
    nothing where there is none."""
    check_confined(path)
    path.unlink(missing_ok=True)


def make_folder(path: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)`` where :func:`check_confined` allows."""
    check_confined(path)
    path.mkdir(parents=True, exist_ok=True)
