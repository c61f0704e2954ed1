"""``learner_id()``: a learner's name, read from the launcher that started this process.

Every learner of a run needs an id no other live learner uses, and a learner restarted in
the same place should get the same id back: a ``shared_queue`` learner that restarts with
its old id takes back its own unfinished units first. :func:`learner_id` builds such an id
from the environment the launcher sets, so training scripts need not build it by hand::

    import gradientmail

    with gradientmail.Session(box, gradientmail.learner_id()) as session: ...

What it reads, first match wins:

* **torchrun** (``RANK`` is set): ``rank{RANK}``. Also read: ``LOCAL_RANK``,
  ``GROUP_RANK``, ``WORLD_SIZE`` and ``TORCHELASTIC_RESTART_COUNT``.
* **SLURM** (``SLURM_PROCID`` is set): ``rank{SLURM_PROCID}``. Also read:
  ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS`` and ``SLURM_JOB_ID``.
* In a **SLURM job array** (``SLURM_ARRAY_TASK_ID`` is set), either id gets
  ``task{SLURM_ARRAY_TASK_ID}-`` in front: ``task7-rank0``.
* **Kubernetes** (``KUBERNETES_SERVICE_HOST`` is set): the pod's hostname.
* **anything else**: ``{hostname}-{pid}``.

Why these ids:

* A rank is unique within a launch and stays the same when torchrun restarts its workers
  (``TORCHELASTIC_RESTART_COUNT`` counts those restarts; it is reported in
  :attr:`Identity.restart` but kept out of the id, so the restarted rank takes back its
  own units instead of waiting a whole lease for them).
* The array task id keeps the tasks of a job array apart (each has ``SLURM_PROCID`` 0)
  and is the same when a task is requeued or the array submitted again, so each task
  resumes its own units. The job id is not in the id for the same reason: a job submitted
  again gets a new one. Two different jobs running at once on one URL therefore share
  ids, and the second to start is refused (``ConfigurationError``: the id is in use)
  rather than mixed in: give each job its own URL.
* In a Kubernetes pod the hostname is the pod's name, which a StatefulSet or an indexed
  Job keeps across restarts. Run one learner per pod, or add your own suffix.
* Elsewhere the process id makes the id unique on its host, but a restarted process gets a
  new one: pass your own stable id where resuming matters.

Hostnames are reduced to letters, digits, ``.``, ``_`` and ``-`` so the id is always one key
segment. An id built here can be extended (``f"{learner_id()}-w{worker}"``) and stays valid.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from gradientmail._errors import ConfigurationError
from gradientmail._keys import validate_segment

__all__ = ["Identity", "identify", "learner_id"]


@dataclass(frozen=True)
class Identity:
    """Who this process is, as its launcher described it."""

    #: The learner id :func:`learner_id` returns.
    learner_id: str
    #: ``"torchrun"``, ``"slurm"``, ``"kubernetes"`` or ``"process"`` (none detected).
    launcher: str
    #: The global rank (``RANK`` or ``SLURM_PROCID``), when a launcher set one.
    rank: int | None = None
    #: The rank on this node (``LOCAL_RANK`` or ``SLURM_LOCALID``): which GPU to use.
    local_rank: int | None = None
    #: The node's rank (``GROUP_RANK`` or ``SLURM_NODEID``).
    node_rank: int | None = None
    #: Processes in the launch (``WORLD_SIZE`` or ``SLURM_NTASKS``).
    world_size: int | None = None
    #: How many times torchrun restarted its workers (``TORCHELASTIC_RESTART_COUNT``).
    restart: int | None = None
    #: The SLURM job id, when inside a SLURM job.
    job: str | None = None
    #: The SLURM job array's task id (``SLURM_ARRAY_TASK_ID``), when in a job array.
    task: int | None = None


#: Launcher -> the variables holding (rank, local rank, node rank, world size, restarts),
#: tried in this order: torchrun inside a SLURM job is torchrun.
_LAUNCHERS: dict[str, tuple[str, str, str, str, str]] = {
    "torchrun": ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"),
    "slurm": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", ""),
}


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(
            f"the environment variable {name}={value!r} is not an integer; the launcher sets "
            "it to a rank or count, so a script must not overwrite it"
        ) from None
    if number < 0:
        raise ConfigurationError(f"the environment variable {name}={value!r} is negative")
    return number


def _segment(text: str) -> str:
    """``text`` reduced to characters every store keeps in a key segment."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return cleaned or "host"


def identify(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> Identity:
    """Read the launcher's environment (``os.environ`` by default); see the module table.

    Args:
        environ: the environment to read, for tests and for launching others.
        hostname: the host's name; ``socket.gethostname()`` by default.

    Raises:
        ConfigurationError: a rank or count variable is set but is not an integer >= 0.
    """
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or None
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    prefix = "" if task is None else f"task{task}-"
    for launcher, (rank_of, local_of, node_of, world_of, restart_of) in _LAUNCHERS.items():
        rank = _int(env, rank_of)
        if rank is None:
            continue
        identity = Identity(
            learner_id=f"{prefix}rank{rank}",
            launcher=launcher,
            rank=rank,
            local_rank=_int(env, local_of),
            node_rank=_int(env, node_of),
            world_size=_int(env, world_of),
            restart=_int(env, restart_of) if restart_of else None,
            job=job,
            task=task,
        )
        break
    else:
        host = _segment(socket.gethostname() if hostname is None else hostname)
        if env.get("KUBERNETES_SERVICE_HOST"):
            identity = Identity(learner_id=host, launcher="kubernetes")
        else:
            identity = Identity(learner_id=f"{host}-{os.getpid()}", launcher="process")
    validate_segment(identity.learner_id, "learner id")
    return identity


def learner_id(environ: Mapping[str, str] | None = None) -> str:
    """This process's learner id, from its launcher's environment (see the module table).

    Stable across restarts under torchrun, SLURM (requeued or submitted again) and
    Kubernetes (same pod name); ``{hostname}-{pid}`` elsewhere. Always one valid key segment.

    Raises:
        ConfigurationError: a rank variable is set but is not an integer >= 0.
    """
    return identify(environ).learner_id
