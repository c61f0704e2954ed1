"""``gradientmail.learner_id()`` under each launcher's environment variables."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import gradientmail
from gradientmail import ConfigurationError
from gradientmail._identity import identify, learner_id
from gradientmail._keys import validate_segment


def test_torchrun_gives_the_global_rank_and_reads_the_rest() -> None:
    env = {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "2",
        "WORLD_SIZE": "8",
        "TORCHELASTIC_RESTART_COUNT": "3",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",  # torchrun inside a pod: the rank wins
    }
    who = identify(env)
    assert who.learner_id == "rank5"
    assert who.launcher == "torchrun"
    assert (who.rank, who.local_rank, who.node_rank, who.world_size) == (5, 1, 2, 8)
    assert who.restart == 3
    # A restart keeps the id, so the restarted rank takes back its own units.
    assert learner_id({**env, "TORCHELASTIC_RESTART_COUNT": "4"}) == "rank5"


def test_slurm_gives_the_task_rank_and_reads_the_job() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_JOB_ID": "123456", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}
    who = identify(env)
    assert who.learner_id == "rank3"
    assert (who.launcher, who.rank, who.local_rank, who.node_rank) == ("slurm", 3, 1, 1)
    assert who.job == "123456"
    # Submitted again (a new job id), the task resumes under the same id.
    assert learner_id({**env, "SLURM_JOB_ID": "123999"}) == "rank3"


def test_tasks_of_a_slurm_array_get_different_ids_that_survive_a_resubmission() -> None:
    # Each array task is its own job, and each has SLURM_PROCID 0.
    first = learner_id({"SLURM_PROCID": "0", "SLURM_JOB_ID": "1001", "SLURM_ARRAY_TASK_ID": "0"})
    second = learner_id({"SLURM_PROCID": "0", "SLURM_JOB_ID": "1002", "SLURM_ARRAY_TASK_ID": "1"})
    assert (first, second) == ("task0-rank0", "task1-rank0")
    again = learner_id({"SLURM_PROCID": "0", "SLURM_JOB_ID": "2001", "SLURM_ARRAY_TASK_ID": "1"})
    assert again == second


def test_torchrun_inside_slurm_uses_the_torchrun_rank() -> None:
    env = {"RANK": "9", "SLURM_PROCID": "1", "SLURM_JOB_ID": "77"}
    assert identify(env).learner_id == "rank9"
    assert identify(env).launcher == "torchrun"
    assert identify(env).job == "77"
    assert identify({**env, "SLURM_ARRAY_TASK_ID": "4"}).learner_id == "task4-rank9"


def test_kubernetes_gives_the_pod_name() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    who = identify(env, hostname="train-job-3")
    assert (who.learner_id, who.launcher) == ("train-job-3", "kubernetes")


def test_elsewhere_hostname_and_pid() -> None:
    who = identify({}, hostname="gpu-box.example.org")
    assert who.learner_id == f"gpu-box.example.org-{os.getpid()}"
    assert who.launcher == "process"


def test_a_hostname_with_odd_characters_becomes_one_key_segment() -> None:
    who = identify({"KUBERNETES_SERVICE_HOST": "x"}, hostname="weird/host name\\ü")
    assert who.learner_id == "weird-host-name"
    validate_segment(who.learner_id, "learner id")
    assert identify({"KUBERNETES_SERVICE_HOST": "x"}, hostname="///").learner_id == "host"


@pytest.mark.parametrize("name", ["RANK", "SLURM_PROCID", "SLURM_ARRAY_TASK_ID"])
def test_a_rank_that_is_not_a_number_is_refused_naming_the_variable(name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        learner_id({name: "zero"})
    with pytest.raises(ConfigurationError, match=name):
        learner_id({name: "-1"})


def test_reads_os_environ_by_default_and_is_public() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "KUBERNETES_"))}
    env.update(RANK="4", LOCAL_RANK="0", WORLD_SIZE="8")
    out = subprocess.run(
        [sys.executable, "-c", "import gradientmail; print(gradientmail.learner_id())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "rank4"
    assert gradientmail.learner_id is learner_id
