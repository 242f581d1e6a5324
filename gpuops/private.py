"""Files and directories only their user can read: directories 0700, files 0600, whatever the
umask, set where each is created (DESIGN's security bar). The state's own records use the
store's copy of this (store/local.py); everything else gpuops writes on a host (known_hosts,
guardians' logs and pid files, delivered results, the event log, compact's lock and log) comes
through here.

A directory that already exists is left as it is: it may be a home directory or a results
folder a person made, and gpuops never changes the mode of what it did not make.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tarfile costs every command that writes an event about 6 ms to import
    import tarfile

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dirs(folder: Path) -> Path:
    """``folder`` and every missing directory above it, each made 0700 (a umask that would
    narrow it further is undone too); another process making one at the same moment is fine.
    Returns ``folder``."""
    missing = []
    here = folder
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another process made it first, with this same mode
        made.chmod(DIR_MODE)
    return folder


def open_private(path: Path, flags: int) -> int:
    """``os.open`` of ``path`` with ``flags`` (O_CREAT among them), a new file made 0600."""
    return os.open(path, flags | os.O_CREAT, FILE_MODE)


def extract_private(tar: tarfile.TarFile, target: Path) -> None:
    """Extract ``tar`` under ``target`` as the 'data' filter allows (no absolute paths, no
    '..', no devices, no links out), every directory 0700 and every file 0600: the modes the
    box's tarball carried (0755, 0644) are not kept, and a directory the archive only implies
    is made 0700 before anything lands in it."""
    import tarfile

    def private(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        safe = tarfile.data_filter(member, dest)  # refuses a path outside ``dest``
        private_dirs(Path(dest, safe.name).parent)
        return safe.replace(mode=DIR_MODE if safe.isdir() else FILE_MODE, deep=False)

    private_dirs(target)
    tar.extractall(target, filter=private)
