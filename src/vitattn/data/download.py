"""CIFAR-10's "python version" archive: downloaded, checked and unpacked into a data directory.

An archive from a mirror (any ``data.url`` but the official one, whose MD5 is checked) or one
left in the data directory is data from someone else; a mirror's batch files are compared with
the official MD5s once unpacked, and those that differ are named in a warning. It is unpacked by
an allow-list, not by tarfile's extraction: the folder :data:`FOLDER` and, in it, the regular
files of :data:`ARCHIVE_FILES`, each of at most :data:`MAX_MEMBER_BYTES`, every batch file there
once.
Any other member (a link, a device, a name that climbs out or is absolute, a file the archive
does not hold, a sparse member, more than :data:`MAX_MEMBERS` in all) is refused in one line at
its header, before its data is read; the archive is read as a gzipped stream that inflates to
at most :data:`MAX_ARCHIVE_BYTES` (a header tarfile reads whole cannot claim gigabytes); each
file is written by this module, as a new file in a new folder, never through a link. tarfile's
``data`` filter is not relied on: it can be bypassed on the Python releases before the fixes of
June 2025 (CVE-2025-4517 and its family; Python 3.11.13, 3.12.11, 3.13.4), with links chained
past the length of a path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from vitattn.data.settings import URL
from vitattn.errors import DataError

if TYPE_CHECKING:
    import tarfile

log = logging.getLogger(__name__)

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
ARCHIVE = "cifar-10-python.tar.gz"
LOCK = f".{FOLDER}.lock"
"""The file a download locks (``filelock``), left in the data directory empty afterwards: a lock
file removed on release lets a process that waits on it and a newcomer hold two different files
at once (filelock keeps it for that reason)."""
STAGING = ".unpacking-"
"""The prefix of a download's staging folder in the data directory, made and removed under the
lock; one a killed download left is removed by the next (:func:`remove_dead_staging`)."""
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
BATCHES_META = "batches.meta"
ARCHIVE_FILES = (*TRAIN_FILES, *TEST_FILES, BATCHES_META, "readme.html")
"""The files the official archive holds in :data:`FOLDER`; the batch files must all be there."""
MAX_MEMBER_BYTES = 40 * 2**20
"""The most bytes a file of the archive may hold: an official batch file of 10,000 images has
31,035,704."""
MAX_MEMBERS = 64
"""The most members (folders included) an archive may hold: the official one has 8."""
MAX_ARCHIVE_BYTES = len(ARCHIVE_FILES) * MAX_MEMBER_BYTES + MAX_MEMBERS * 4096
"""The most bytes an archive may inflate to: its files at their bound and a few blocks of
headers each. A header tarfile reads whole (a PAX or GNU long-name record claiming gigabytes)
is refused before it is read."""
MAX_DOWNLOAD_BYTES = MAX_ARCHIVE_BYTES + MAX_ARCHIVE_BYTES // 8192 + 4096
"""The most bytes a download may take: gzip of :data:`MAX_ARCHIVE_BYTES` at its least
compressed (deflate's stored blocks, 5 bytes of header for each 65,535) and its own header and
trailer. A server that sends more (or never ends) is cut off there."""
OFFICIAL_ARCHIVE_BYTES = 170_498_071
"""The official archive's length."""
OFFICIAL_BATCH_BYTES = 31_035_704
"""An official batch file's length (10,000 images)."""
OFFICIAL_UNPACKED_BYTES = len((*TRAIN_FILES, *TEST_FILES)) * OFFICIAL_BATCH_BYTES + 4096
"""What the official archive unpacks to, at most: its six batch files, and ``batches.meta`` and
``readme.html``, a few hundred bytes."""
UNPACK_FACTOR = OFFICIAL_UNPACKED_BYTES / OFFICIAL_ARCHIVE_BYTES
"""Bytes unpacked per byte of archive, the official archive's: what a mirror's archive of an
announced length is taken to unpack to."""
CHUNK = 1 << 20
SHOWN = 200
"""The most characters of a member's name a refusal shows."""


def describe(member: tarfile.TarInfo) -> str:
    """What ``member`` is, in a few words: its kind and name, and where a link points (names
    cut to :data:`SHOWN` characters: a tar's names may be of any length)."""
    name = repr(member.name[:SHOWN])
    if member.issym() or member.islnk():
        kind = "a symbolic link" if member.issym() else "a hard link"
        return f"{kind} {name} to {member.linkname[:SHOWN]!r}"
    if member.isdir():
        return f"a folder {name}"
    if member.isreg():
        return f"a file {name}"
    return f"{name}, neither a file nor a folder"


def checked_members(stream: ArchiveStream, archive: Path) -> Iterator[tarfile.TarInfo]:
    """Each file member of ``stream``'s tar as its header is read (before its data), refused in
    one line (:class:`DataError`) at the first member that is not :data:`FOLDER` or a regular
    file of :data:`ARCHIVE_FILES` in it within :data:`MAX_MEMBER_BYTES`, or that repeats one.
    Once the tar ends, the gzip stream is read to its end (:meth:`ArchiveStream.drain`: its
    checksum and length are checked there, so a corrupt archive is one, not an archive that
    lacks a batch file), and one that lacks a batch file is refused too. A file's name is taken
    as tarfile reads it (``data_batch_1/`` is no batch file's)."""
    seen: set[str] = set()
    valid = f"a CIFAR-10 archive holds only {FOLDER}/ with {', '.join(ARCHIVE_FILES)}"
    for count, member in enumerate(stream.tar, start=1):
        if count > MAX_MEMBERS:
            raise DataError(f"{archive} was not unpacked: it holds more than {MAX_MEMBERS} members")
        name = member.name.removeprefix("./")
        if member.isdir() and name.rstrip("/") == FOLDER:
            continue
        if member.issparse():
            raise DataError(f"{archive} was not unpacked: {describe(member)} is sparse; {valid}")
        folder, _, file = name.partition("/")
        if not (member.isreg() and folder == FOLDER and file in ARCHIVE_FILES):
            raise DataError(f"{archive} was not unpacked: it holds {describe(member)}; {valid}")
        if file in seen:
            raise DataError(f"{archive} was not unpacked: it holds {name!r} twice; {valid}")
        if member.size > MAX_MEMBER_BYTES:
            raise DataError(
                f"{archive} was not unpacked: its {name!r} holds {member.size:,} bytes, more than "
                f"the {MAX_MEMBER_BYTES:,} a batch file of CIFAR-10 may hold"
            )
        seen.add(file)
        yield member
    stream.drain()
    missing = [file for file in (*TRAIN_FILES, *TEST_FILES) if file not in seen]
    if missing:
        raise DataError(
            f"{archive} was not unpacked: it lacks {', '.join(missing)} in {FOLDER}/; {valid}"
        )


def verify_archive(path: Path, md5: str | None) -> None:
    """Raise :class:`DataError` unless ``path`` is a complete archive: its MD5 where known,
    otherwise a listing of the gzipped tar whose every member :func:`checked_members` allows (a
    cut download ends before its last member)."""
    import tarfile
    import zlib

    from torchvision.datasets.utils import check_integrity

    if md5 is not None:
        if not check_integrity(str(path), md5):
            raise DataError(f"{path} does not have the official MD5 {md5} (cut or altered)")
        return
    try:
        with opened_archive(path) as stream:
            for _ in checked_members(stream, path):
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        reason = f"{type(error).__name__}: {error}"
        raise DataError(f"{path} is not a complete .tar.gz ({reason})") from error


def files_not_official(folder: Path) -> list[str]:
    """The batch files in ``folder`` (a :data:`FOLDER` this module unpacked) whose MD5 is not
    the official one, as torchvision's ``CIFAR10`` lists them, in the official order."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    official = [*CIFAR10.train_list, *CIFAR10.test_list]
    return [name for name, md5 in official if not check_integrity(str(folder / name), md5)]


def tell_of_a_mirrors_files(folder: Path, source: str) -> None:
    """One line on the batch files unpacked into ``folder`` from ``source``, a mirror's archive
    or one found in the data directory for a mirror (checked by member names alone): a warning
    naming those whose MD5 is not the official one (kept: a mirror may serve a subset or a
    variant on purpose), else that all are official. Until 2026-12-02 nothing compared them
    (data audit F5)."""
    differing = files_not_official(folder)
    if differing:
        log.warning(
            "the archive from %s is not the official CIFAR-10: %s %s not have the official MD5; "
            "kept, but its figures do not compare with those of CIFAR-10",
            source,
            ", ".join(differing),
            "does" if len(differing) == 1 else "do",
        )
    else:
        log.info("the archive from %s holds the official CIFAR-10 batch files (MD5s)", source)


def check_folder_place(data_dir: Path) -> None:
    """Refuse in one line (:class:`DataError`) a ``data_dir/FOLDER`` that is no folder (a file,
    a link to nothing; or ``data_dir`` itself no folder), named before anything is downloaded:
    unpacked, the folder could not be put in its place."""
    from vitattn.runs.files import folder_problem

    problem = folder_problem(data_dir / FOLDER)
    if problem is not None:
        raise DataError(
            f"{problem}, so data.data_dir={data_dir} cannot hold the folder {FOLDER}/; move it "
            f"away, or put the official 'CIFAR-10 python version' folder {FOLDER}/ in its place"
        )
    if not os.path.lexists(data_dir / FOLDER) and is_batches_folder(data_dir):
        raise DataError(
            f"data.data_dir={data_dir} is a {FOLDER}/ folder itself (it holds {BATCHES_META}); "
            f"give the directory that holds it: data.data_dir={data_dir.parent} (or "
            f"VITATTN_DATA_DIR={data_dir.parent})"
        )


def is_batches_folder(path: Path) -> bool:
    """Whether ``path`` looks like the unpacked ``cifar-10-batches-py/`` itself (it holds
    :data:`BATCHES_META`): a data directory one level too deep, where a download would nest a
    second copy, 170 MB, inside the first."""
    return os.path.lexists(path / BATCHES_META)


def check_lock_place(data_dir: Path) -> None:
    """Refuse in one line (:class:`DataError`), before anything is downloaded, a :data:`LOCK` in
    ``data_dir`` that is not the empty regular file a download leaves there: filelock writes
    nothing in it, but its releases up to 4.0 empty it, and a link there (refused by filelock's
    ``O_NOFOLLOW``) would otherwise end the download as an ``OSError``."""
    import stat

    from vitattn.runs.files import not_regular, one_line

    lock = data_dir / LOCK
    try:
        mode, size = (status := lock.lstat()).st_mode, status.st_size
    except FileNotFoundError:
        return
    except OSError:
        return  # data_dir itself: check_folder_place names it
    if stat.S_ISLNK(mode):
        problem = "a symbolic link"
    elif not stat.S_ISREG(mode):
        problem = not_regular(mode)
    elif size:
        problem = f"a file of {size} bytes"
    else:
        return
    raise DataError(
        f"{one_line(lock)} is {problem}, not the empty lock file a download of {FOLDER}/ leaves "
        f"in data.data_dir={data_dir}; move it away, or put the official 'CIFAR-10 python "
        f"version' folder {FOLDER}/ in {data_dir}"
    )


@dataclass
class SpaceNeeded:
    """The bytes a download of CIFAR-10 takes in its data directory at once: the ``archive``
    (0 where one is already there) beside its ``unpacked`` files, both in the staging folder
    until the folder is moved into place. The official archive's until a server announces its
    length (:meth:`announced`)."""

    archive: int = OFFICIAL_ARCHIVE_BYTES
    unpacked: int = OFFICIAL_UNPACKED_BYTES

    @property
    def total(self) -> int:
        """The bytes needed in all."""
        return self.archive + self.unpacked

    def announced(self, length: int) -> None:
        """An archive of ``length`` bytes, announced by its server, to download."""
        self.archive, self.unpacked = length, math.ceil(length * UNPACK_FACTOR)

    def present(self, length: int) -> None:
        """An archive of ``length`` bytes already in the data directory, to unpack alone."""
        self.archive, self.unpacked = 0, math.ceil(length * UNPACK_FACTOR)

    def __str__(self) -> str:
        from vitattn.runs.disk import byte_size

        unpacked = f"its unpacked files, {byte_size(self.unpacked)}"
        if not self.archive:
            return f"about {byte_size(self.total)} ({unpacked}, beside the archive there)"
        archive = f"the archive, {byte_size(self.archive)}"
        return f"about {byte_size(self.total)} ({archive}, and {unpacked})"


class TooLittleSpaceError(DataError):
    """The data directory's file system has less space free than the download announced needs:
    refused after the server's headers, before the archive's first byte."""


def no_space_line(data_dir: Path, url: str, needed: SpaceNeeded, refused: bool) -> str:
    """The one line for a download of CIFAR-10 that does not fit in ``data_dir`` (``refused``:
    before it came, from the length announced; else a write that met a full disk): the
    directory, the space left there (once what was written is removed), the space needed, and
    where else to put it."""
    from vitattn.runs.disk import space_left

    happened = (
        "has too little space for CIFAR-10, so nothing was downloaded"
        if refused
        else "ran out of space while CIFAR-10 was downloaded and unpacked there; nothing was kept"
    )
    return (
        f"data.data_dir={data_dir} {happened}: {space_left(data_dir)} on its device, and the "
        f"download from {url} needs {needed}; free space there, or set data.data_dir "
        f"(or VITATTN_DATA_DIR) to a directory with room for it, or to one that holds {FOLDER}/"
    )


def download_cifar10(data_dir: Path, url: str = URL, timeout: float = 60.0) -> None:
    """Put ``cifar-10-batches-py/`` into ``data_dir``, all or nothing.

    The archive is downloaded (:func:`download_bounded`) into a staging folder inside
    ``data_dir``, verified (:func:`verify_archive`), unpacked there, and the folder is moved into
    place whole; a cut, failed or oversized download leaves nothing behind, so a retry starts
    clean. An archive already in ``data_dir`` (put there by hand) is used if it verifies, and
    moved aside as ``<name>.corrupt`` (or ``<name>.corrupt.1`` ..., never over a file) if it
    does not. The download fails once the server has sent nothing for ``timeout`` seconds.

    Safe to call from several processes at once (DDP ranks, parallel sweep jobs, two users of one
    data directory): a file lock (:data:`LOCK`, checked by :func:`check_lock_place`) lets one
    download while the others wait; it stays, empty, afterwards. The lock's holder first removes
    the staging folders a killed download left (:func:`remove_dead_staging`).

    A full disk, whatever write meets it (:func:`vitattn.runs.disk.disk_full`), is one line
    naming the data directory, the space left there and the space the download needs
    (:class:`SpaceNeeded`), as is a length announced that could not fit, before its first
    byte (:func:`no_space_line`).
    """
    from filelock import FileLock

    from vitattn.runs.disk import disk_full

    md5 = ARCHIVE_MD5 if url == URL else None
    lock_path = data_dir / LOCK
    check_lock_place(data_dir)
    needed = SpaceNeeded()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(lock_path):
            remove_dead_staging(data_dir)
            if (data_dir / FOLDER).is_dir():  # another process got it while this one waited
                return
            with tempfile.TemporaryDirectory(dir=data_dir, prefix=STAGING) as staging:
                archive = usable_local_archive(data_dir / ARCHIVE, md5)
                source = str(archive)
                if archive is None:
                    archive, source = Path(staging) / ARCHIVE, url
                    download_bounded(url, archive, timeout, needed)
                    verify_archive(archive, md5)
                else:
                    needed.present(archive.stat().st_size)
                unpack_archive(archive, Path(staging))
                if md5 is None:
                    tell_of_a_mirrors_files(Path(staging) / FOLDER, source)
                os.replace(Path(staging) / FOLDER, data_dir / FOLDER)
    except Exception as error:
        # The staging folder is gone by now: the space left is what a retry would have.
        refused = isinstance(error, TooLittleSpaceError)
        if refused or disk_full(error, data_dir):
            raise DataError(no_space_line(data_dir, url, needed, refused)) from error
        if not isinstance(error, DataError):
            raise DataError(
                f"data.data_dir={data_dir} holds no {FOLDER}/ and downloading {url} failed "
                f"({type(error).__name__}: {error}); put the official 'CIFAR-10 python "
                f"version' folder {FOLDER}/ in {data_dir}, or set VITATTN_DATA_DIR to a "
                "directory that has it"
            ) from error
        raise DataError(
            f"data.data_dir={data_dir} holds no {FOLDER}/ and the download from {url} is "
            f"unusable: {error}; nothing was kept, so running again downloads afresh"
        ) from error


def remove_dead_staging(data_dir: Path) -> None:
    """Remove the staging folders (``.unpacking-*``) that downloads killed while they held the
    lock left in ``data_dir`` (SIGKILL, the OOM killer: ``TemporaryDirectory`` is removed only
    by a process that lives to do it), each named in one warning; called with the lock held,
    and only the lock's holder makes one, so none is in use. Nothing is removed through a
    link: one of that name that is a symbolic link is unlinked, never followed, and a folder is
    removed by ``shutil.rmtree``, which on Linux (``rmtree.avoids_symlink_attacks``) removes a
    link inside it, not what it points at; where it cannot promise that, the folder is left. A
    name that is anything else (a file) is left as it is, and so is one that cannot be removed
    (another user's, in a shared data directory): the download makes a folder of its own."""
    import shutil
    import stat

    with os.scandir(data_dir) as entries:
        leftovers = sorted(entry.name for entry in entries if entry.name.startswith(STAGING))
    for name in leftovers:
        path = data_dir / name
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                path.unlink()
                what = "a link named as a download's staging folder (not followed)"
            elif stat.S_ISDIR(mode) and shutil.rmtree.avoids_symlink_attacks:
                shutil.rmtree(path)
                what = "the staging folder of a download cut off while it held the lock"
            else:
                continue
        except FileNotFoundError:
            continue
        except OSError as error:
            log.warning("could not remove %s, left by a download cut off: %s", path, error)
            continue
        log.warning("removed %s, %s", path, what)


def download_bounded(
    url: str, path: Path, timeout: float, needed: SpaceNeeded | None = None
) -> None:
    """Download ``url`` into a new file at ``path`` (:func:`urllib.request.urlopen`, which
    follows redirects), at most :data:`MAX_DOWNLOAD_BYTES` of it: a larger length announced is
    refused before a byte is read, and a download that goes past the bound is stopped there, in
    one line (:class:`DataError`); the caller removes what was written. The download fails once
    the server has sent nothing for ``timeout`` seconds. A length announced is recorded in
    ``needed``, and refused before a byte is read (:class:`TooLittleSpaceError`) where the archive
    and its unpacked files would not fit on the file system of ``path``."""
    import urllib.request

    from torchvision.datasets.utils import USER_AGENT

    from vitattn.runs.disk import short_of_space

    log.info("downloading %s to %s", url, path)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    too_big = f"more than the {MAX_DOWNLOAD_BYTES:,} bytes a CIFAR-10 archive can take"
    with urllib.request.urlopen(request, timeout=timeout) as response:
        length = getattr(response, "length", None)  # a file:// URL's response has none
        if length is not None and length > MAX_DOWNLOAD_BYTES:
            raise DataError(f"the server announces {length:,} bytes, {too_big}")
        if length is not None and needed is not None:
            needed.announced(length)
            if short_of_space(path.parent, needed.total):
                raise TooLittleSpaceError(f"the server announces {length:,} bytes")
        write_new(path, ProgressReader(response, length), MAX_DOWNLOAD_BYTES + 1)
    if path.stat().st_size > MAX_DOWNLOAD_BYTES:
        raise DataError(f"the server sent {too_big}; stopped there")


def unpack_archive(archive: Path, target: Path) -> None:
    """Unpack the tar ``archive`` (official or a mirror's) into ``target``, a staging folder the
    caller made and removes: ``target/FOLDER`` made new, and each member
    :func:`checked_members` allows written into it as a new file of at most its size; any other
    member is one line (:class:`DataError`) naming the archive and the member."""
    import gzip
    import tarfile
    import zlib

    try:
        with opened_archive(archive) as stream:
            folder = target / FOLDER
            folder.mkdir()
            for member in checked_members(stream, archive):
                data = stream.tar.extractfile(member)
                if data is None:  # a regular file always has its data
                    raise tarfile.ReadError(f"no data for {member.name}")
                write_new(folder / member.name.rpartition("/")[2], data, member.size)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(
            f"{archive} is not a readable .tar.gz ({type(error).__name__}: {error})"
        ) from None


@dataclass(frozen=True)
class ArchiveStream:
    """A gzipped tar read as a stream: ``tar`` (each member read once, in order) over
    ``inflated``, the archive's bytes as gzip inflates them, within their bound."""

    tar: tarfile.TarFile
    inflated: BoundedReader

    def drain(self) -> None:
        """Read what is left of the gzip stream once the tar has ended (its end-of-archive
        blocks, the record's padding), within the bound: gzip checks its checksum and length
        only at its end, which the tar's end does not reach, so a bit flipped inside a member
        was unpacked unseen."""
        while self.inflated.read(min(CHUNK, max(self.inflated.room, 1))):
            pass


@contextlib.contextmanager
def opened_archive(archive: Path) -> Iterator[ArchiveStream]:
    """The gzipped tar ``archive`` as a stream (:class:`ArchiveStream`), inflated through a
    :class:`BoundedReader` of :data:`MAX_ARCHIVE_BYTES`."""
    import gzip
    import tarfile

    with gzip.open(archive, "rb") as source:
        inflated = BoundedReader(source, MAX_ARCHIVE_BYTES, archive)
        with tarfile.open(fileobj=inflated, mode="r|") as tar:
            yield ArchiveStream(tar, inflated)


class BoundedReader:
    """The ``read`` of ``source`` (the inflated archive) that refuses, in one line
    (:class:`DataError`), to go past ``bound`` bytes in all, before it reads: tarfile reads a
    PAX or GNU long-name header whole, whatever size it claims."""

    def __init__(self, source: IO[bytes], bound: int, archive: Path) -> None:
        self.source, self.bound, self.archive, self.taken = source, bound, archive, 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or self.taken + size > self.bound:
            wanted = "the rest" if size is None or size < 0 else f"{size:,} bytes more"
            raise DataError(
                f"{self.archive} was not unpacked: it asks to read {wanted} past "
                f"{self.taken:,}, and a CIFAR-10 archive inflates to at most {self.bound:,}"
            )
        data = self.source.read(size)
        self.taken += len(data)
        return data

    @property
    def room(self) -> int:
        """The bytes left to read within the bound."""
        return self.bound - self.taken


class ProgressReader:
    """The ``read`` of a download (``source``, ``total`` bytes where the server said) that logs
    how much has come at each tenth of it and at its end (each :data:`PROGRESS_STEP` bytes where
    the total is not known): a download of minutes says it is going, as torchvision's progress
    bar did."""

    def __init__(self, source: IO[bytes], total: int | None) -> None:
        self.source, self.total, self.taken = source, total, 0
        self.step = max(total // 10, 1) if total else PROGRESS_STEP
        self.next = self.step

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.taken += len(data)
        if data and (self.taken >= self.next or self.taken == self.total):
            self.next = (self.taken // self.step + 1) * self.step
            of = (
                f" of {self.total / 1e6:,.1f} MB ({self.taken / self.total:.0%})"
                if self.total
                else ""
            )
            log.info("downloaded %.1f MB%s", self.taken / 1e6, of)
        return data


PROGRESS_STEP = 16 << 20
"""Bytes between two progress lines of a download whose length the server does not say."""


def write_new(path: Path, source: IO[bytes], size: int) -> None:
    """Copy at most ``size`` bytes of ``source`` into a new file at ``path``, never through a
    link nor over a file already there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o644), "wb") as handle:
        left = size
        while left and (chunk := source.read(min(CHUNK, left))):
            handle.write(chunk)
            left -= len(chunk)


def usable_local_archive(path: Path, md5: str | None) -> Path | None:
    """``path`` if an archive there verifies; one that does not is moved aside
    (:func:`move_aside`, and said so in the log) so that it is neither used nor in the way."""
    if not path.is_file():
        return None
    try:
        verify_archive(path, md5)
    except DataError as error:
        aside = move_aside(path)
        if aside is None:
            log.warning(
                "%s; left it there (%s.corrupt to .corrupt.%d are all taken) and downloading "
                "afresh",
                error,
                path.name,
                MAX_ASIDE,
            )
        else:
            log.warning("%s; moved it aside to %s and downloading afresh", error, aside)
        return None
    return path


MAX_ASIDE = 99
"""The most numbered names (``<name>.corrupt.1`` ...) an archive that does not verify is tried
under before it is left where it is."""


def move_aside(path: Path) -> Path | None:
    """Rename ``path`` to the first of ``<name>.corrupt``, ``<name>.corrupt.1`` ...
    ``<name>.corrupt.<MAX_ASIDE>`` that nothing holds, never over a file: a hard link, which
    fails where the name is taken, then the old name removed (on a file system without hard
    links, a rename to a name found free). The new name, or ``None`` where all are taken and
    ``path`` is left as it was."""
    for number in range(MAX_ASIDE + 1):
        aside = path.with_name(f"{path.name}.corrupt" + (f".{number}" if number else ""))
        try:
            os.link(path, aside, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:  # no hard links here; the data directory's lock is held
            if os.path.lexists(aside):
                continue
            os.rename(path, aside)
            return aside
        path.unlink()
        return aside
    return None
