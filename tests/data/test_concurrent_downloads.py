"""Two downloads into one data directory, the first killed while it holds the download's lock:
the second downloads once the lock is free, and nothing of the killed one is left behind."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.data.test_cifar10 import archive_url
from vitattn.data.cifar10 import FOLDER, CIFAR10DataModule
from vitattn.utils.config import PROJECT_ROOT

pytestmark = pytest.mark.slow

MOST_WAITED = 120.0
"""Seconds the test waits for the first download to be half sent before it fails."""


def test_a_download_killed_while_it_holds_the_lock_leaves_no_staging_folder(
    served: Path, tmp_path: Path
) -> None:
    """docs/runs.md: "a cut, failed or oversized download leaves nothing behind, so a retry
    starts clean". A download killed (SIGKILL, the OOM killer, a node's power) half-way keeps
    its staging folder, ``.unpacking-<random>/`` with the archive as far as it came (170 MB of
    the official one at most), hidden in the data directory; the next download, which takes the
    lock once the kernel drops it, removes it (no process can be using it while the lock is
    held), where until 2026-12-01 it made a folder of its own and left that one for ever."""
    half_sent, finish = threading.Event(), threading.Event()
    archive = served / "cifar-10-python.tar.gz"

    class CutHandler(http.server.SimpleHTTPRequestHandler):
        requests = 0

        def do_GET(self) -> None:
            CutHandler.requests += 1
            if CutHandler.requests > 1:
                super().do_GET()
                return
            body = archive.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            half_sent.set()
            finish.wait(MOST_WAITED)  # the client is killed meanwhile

        def log_message(self, *args: object) -> None:
            pass

    target = tmp_path / "data"
    with archive_url(served, CutHandler) as url:
        script = (
            "from vitattn.data.cifar10 import CIFAR10DataModule as D; "
            f"D({str(target)!r}, url={url!r}).prepare_data()"
        )
        environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
        first = subprocess.Popen([sys.executable, "-c", script], env=environment)
        try:
            assert half_sent.wait(MOST_WAITED), "the first download never began"
            assert list(target.glob(".unpacking-*")), "the first download made no staging folder"
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            finish.set()
        CIFAR10DataModule(target, url=url).prepare_data()  # the lock is free: it downloads
    assert (target / FOLDER).is_dir()
    left = sorted(path.name for path in target.glob(".unpacking-*"))
    assert not left, f"the killed download's staging folder is left in {target}: {left}"
