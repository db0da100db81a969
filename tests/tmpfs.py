"""A private tmpfs for the fault tests (the tests run as root; elsewhere they say why not).

Two uses: a *small* tmpfs is a real disk that fills up (ENOSPC) and has room again once a file
on it is deleted; a *large* one keeps the shared machine's disk (other jobs' writeback, fsync
stalls) out of latency measurements that are about the broker.
"""
from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator


class TmpfsUnavailable(Exception):
    """``mount -t tmpfs`` is not permitted here; ``str()`` says exactly why."""


def _run(*args: str) -> None:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise TmpfsUnavailable(f"`{' '.join(args)}` failed (exit {r.returncode}): "
                               f"{(r.stderr or r.stdout).strip()}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``2m``, ``512m``) on ``path`` (created) for the ``with``
    block; raise :class:`TmpfsUnavailable` if it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except FileNotFoundError as exc:
        raise TmpfsUnavailable(f"no mount command: {exc}") from None
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)

