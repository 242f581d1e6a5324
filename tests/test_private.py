"""What gpuops writes on a host is its user's alone (DESIGN's security bar): directories 0700
and files 0600 where each is made, whatever the umask (gpuops/private.py and its callers).
The whole demo's walk (tests/test_demo.py) judges every path a real run leaves; these pin
each piece on its own."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuops.market import spawn
from gpuops.market.results import LocalResults
from gpuops.private import extract_private, open_private, private_dirs
from gpuops.providers.ssh import known_hosts_path


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    """A umask that leaves group and others everything: only gpuops' own modes stand."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def tarball(tmp_path: Path, members: dict[str, bytes | None]) -> Path:
    """A gzipped tarball of ``members`` (None: a directory), modes as a box's tar gives them."""
    path = tmp_path / "results.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o777
                tar.addfile(info, io.BytesIO(data))
    return path


def test_private_dirs_makes_every_missing_directory_0700_under_any_umask(tmp_path):
    """Each directory it makes, the parents included, is 0700 under umask 0 and under a umask
    stricter than 077 (0277: its mkdir alone would leave 0500)."""
    private_dirs(tmp_path / "a" / "b")
    os.umask(0o277)
    private_dirs(tmp_path / "c" / "d")

    for made in ("a", "a/b", "c", "c/d"):
        assert mode(tmp_path / made) == 0o700, made


def test_private_dirs_leaves_a_directory_it_did_not_make_as_it_was(tmp_path):
    """An existing directory (a home, a results folder a person made) keeps its mode; only
    what is made below it is 0700; a second call on a made one changes nothing."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    made = private_dirs(mine / "new")
    private_dirs(made)

    assert made == mine / "new"
    assert (mode(mine), mode(made)) == (0o755, 0o700)


def test_open_private_makes_a_new_file_0600(tmp_path):
    """A file it creates is 0600 under umask 0 (flags without O_CREAT get it added)."""
    os.close(open_private(tmp_path / "f", os.O_WRONLY))

    assert mode(tmp_path / "f") == 0o600


def test_extract_private_makes_0700_directories_and_0600_files_of_a_0777_tarball(tmp_path):
    """A tarball whose members are 0777 lands as 0700 directories and 0600 files, and a
    directory the archive only implies (a/b of a/b/c.txt) is 0700 too; contents are kept."""
    tar_path = tarball(tmp_path, {"./": None, "./x.txt": b"x", "a/b/c.txt": b"c", "d": None})
    target = tmp_path / "out" / "name"
    with tarfile.open(tar_path, "r:gz") as tar:
        extract_private(tar, target)

    assert (target / "a" / "b" / "c.txt").read_bytes() == b"c"
    for made in ("out", "out/name", "out/name/a", "out/name/a/b", "out/name/d"):
        assert mode(tmp_path / made) == 0o700, made
    for made in ("x.txt", "a/b/c.txt"):
        assert mode(target / made) == 0o600, made


def test_extract_private_still_refuses_a_member_outside_its_target(tmp_path):
    """The 'data' filter still stands: a '..' member is refused and nothing lands outside."""
    tar_path = tarball(tmp_path, {"../escaped.txt": b"x"})
    with tarfile.open(tar_path, "r:gz") as tar, pytest.raises(tarfile.OutsideDestinationError):
        extract_private(tar, tmp_path / "out")

    assert not (tmp_path / "escaped.txt").exists()


def test_delivered_local_results_are_0700_and_0600_under_a_new_results_root(tmp_path):
    """LocalResults makes its root, the rental's folder and everything the tarball holds
    private (the box's tar says 0777)."""
    tar_path = tarball(tmp_path, {"./": None, "./run/summary.txt": b"loss 0.031"})
    where = LocalResults(tmp_path / "results").deliver("train/r-1", tar_path)

    assert where == str(tmp_path / "results" / "train/r-1")
    found = [tmp_path / "results", *sorted((tmp_path / "results").rglob("*"))]
    assert [(p.name, mode(p)) for p in found] == [
        ("results", 0o700), ("train", 0o700), ("r-1", 0o700), ("run", 0o700),
        ("summary.txt", 0o600),
    ]  # fmt: skip


def test_known_hosts_live_in_a_0700_ssh_directory(tmp_path):
    """<state>/ssh and <state>/ssh/known_hosts are 0700, each box's file 0600."""
    path = known_hosts_path(tmp_path, "123")

    assert (mode(tmp_path / "ssh"), mode(path.parent), mode(path)) == (0o700, 0o700, 0o600)


def test_a_guardian_pid_file_is_0600(tmp_path):
    """The pid file a spawn writes (whole, by a rename) is 0600."""
    spawn._write_pid(tmp_path / "x.pid", 42)

    assert mode(tmp_path / "x.pid") == 0o600
