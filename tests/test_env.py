"""gpupipe.env: one answer for cores, the place in a distributed job, and the cache folder."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time

import pytest

from gpupipe import env, remote

JOB_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") + env.LOCAL_SIZE_VARS


@pytest.fixture
def no_job(monkeypatch):
    for name in JOB_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_one_cache_rule_for_every_cache(no_job, tmp_path):
    no_job.delenv("GPUPIPE_CACHE", raising=False)
    no_job.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert env.cache_dir() == tmp_path / "xdg" / "gpupipe"
    assert remote.default_cache_dir() == tmp_path / "xdg" / "gpupipe" / "remote", "remote tars follow XDG too"
    no_job.setenv("GPUPIPE_CACHE", str(tmp_path / "mine"))
    assert env.cache_dir("scan") == tmp_path / "mine" / "scan"
    no_job.delenv("GPUPIPE_CACHE")
    no_job.delenv("XDG_CACHE_HOME")
    assert env.cache_dir() == env.Path.home() / ".cache" / "gpupipe"


def test_rank_and_world_from_the_launcher_before_any_group(no_job):
    assert env.rank_and_world() == (0, 1)
    no_job.setenv("WORLD_SIZE", "4")
    assert env.rank_and_world() == (0, 1), "no RANK: not known yet"
    no_job.setenv("RANK", "3")
    assert env.rank_and_world() == (3, 4)
    no_job.setenv("RANK", "4")
    assert env.rank_and_world() == (0, 1), "a rank outside the world is not believed"


@pytest.mark.parametrize("variables, expected", [
    ({}, 1),
    ({"LOCAL_WORLD_SIZE": "3", "WORLD_SIZE": "8"}, 3),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "WORLD_SIZE": "8"}, 2),
    ({"WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, 4),
    ({"WORLD_SIZE": "4", "MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "1"}, 1),
])
def test_local_world_size_from_any_launcher(no_job, variables, expected):
    for name, value in variables.items():
        no_job.setenv(name, value)
    assert env.local_world_size() == expected


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_local_world_size_counts_this_jobs_processes_on_this_host(no_job):
    job = {"MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "41234", "WORLD_SIZE": "8"}
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, **job, "LOCAL_RANK": "3"})
    try:
        time.sleep(0.2)
        for name, value in job.items():
            no_job.setenv(name, value)
        no_job.setenv("LOCAL_RANK", "0")
        assert env.local_world_size() == 4, "local ranks 0..3 of this job are on this host"
        no_job.setenv("MASTER_PORT", "41235")
        assert env.local_world_size() == 1, "another job's processes do not count"
    finally:
        sibling.kill()
        sibling.wait()


def test_default_threads_divide_the_cores(no_job):
    no_job.setattr(env.os, "sched_getaffinity", lambda pid: set(range(16)))
    no_job.setenv("LOCAL_WORLD_SIZE", "8")
    assert env.cores() == 16 and env.default_threads() == 2


def test_a_rank_pinned_to_its_own_cores_keeps_them(no_job):
    """A launcher that pins each rank (an affinity smaller than the host) already gave it its share."""
    no_job.setattr(env.os, "sched_getaffinity", lambda pid: {4, 5, 6, 7})
    no_job.setattr(env.os, "cpu_count", lambda: 16)
    no_job.setenv("LOCAL_WORLD_SIZE", "4")
    assert env.default_threads() == 4
    no_job.setattr(env.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert env.default_threads() == 4, "the whole host: divided among the 4 local ranks"


def test_versions_name_what_decides_behaviour():
    found = env.versions()
    assert {"python", "gpupipe", "torch", "torchvision", "dali"} <= set(found)
    assert found["torch"] and found["python"].count(".") == 2


def test_gpupipe_version_is_the_running_codes_even_when_not_installed(monkeypatch):
    """A working tree on PYTHONPATH (the GPU proof's machine) has no installed metadata: the first H200 run
    recorded ``gpupipe None``; the version is the code's own."""
    import gpupipe

    real = importlib.metadata.version

    def without_gpupipe(dist):
        if dist == "gpupipe":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(env.importlib.metadata, "version", without_gpupipe)
    assert env.versions()["gpupipe"] == gpupipe.__version__
