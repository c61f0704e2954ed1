#!/usr/bin/env python3
"""Mutation check: does some fast test fail for each deliberate bug in a mechanism users rely on?

Each entry of :data:`MUTANTS` is one realistic bug: a file under ``src/gradientmail``, the
exact original text (which must occur exactly once, so the script fails loudly when the
code moved), its replacement, and the fast tests that must fail because of it. For each
mutant the script copies the repository (``src``, ``tests``, ``conformance``,
``conftest.py``, ``pyproject.toml``) into a temporary directory, applies the mutant to the
copy (the working tree is never touched), runs the selected tests there with the copy's
``src`` first on ``PYTHONPATH``, and prints one line::

    KILLED    <name>  <how many selected tests failed, in how many test functions>  <seconds>
    SINGLE    <name>  killed, but by fewer distinct test functions than it needs (its
                      ``killers``, or ``--min-killers`` if more)
    SURVIVED  <name>  every selected test passed: the bug goes unnoticed
    ERROR     <name>  the selection could not say (it fails without the mutant, or pytest
                      could not run it)

The first five kinds of bug were named by an audit of the tests' power, which found them
surviving or caught only by chance or by one test: a pipeline consumer that takes an end
record for exhaustion (``pipeline-end-ignores-count``), a loader error delivered before the
items buffered ahead of it (``loader-error-jumps-the-queue``), a claim that does not check
its read-back (``claim-read-back-unchecked``), consumers that stop when the *registered*
producers are done (``*-stops-when-registered-producers-end``), and ``file://`` locking
without ``flock`` (``file-cas-without-flock``); the pipeline's two end-record error paths
follow them. The rest are chosen the same way: one realistic bug per mechanism users rely on.

Before any mutant, the union of every selection runs once on the unmutated copy: a test
that fails there would make its mutants look killed, so they are reported as ERROR.
Tests run on ``memory://`` and ``file://`` only (``-k`` leaves the emulator rigs out); the
same tests run on every backend in the full suite. The exit status is 1 if any mutant
survived, errored, or (with ``--min-killers``) was caught by too few test functions.

Usage::

    .venv/bin/python scripts/mutants.py              # every mutant
    .venv/bin/python scripts/mutants.py --list       # the table, without running
    .venv/bin/python scripts/mutants.py NAME [NAME]  # a subset, by name
    .venv/bin/python scripts/mutants.py --files --min-killers 2
        # each mutant against its test files whole: is it caught by two tests or more?

This is a check of the tests' power, not part of CI (``make mutants``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What the copy needs: the package, every test and the pytest configuration.
COPIED = ("src", "tests", "conformance", "conftest.py", "pyproject.toml")
#: Leaves out the emulator rigs (their tests run in the full suite).
LOCAL_ONLY = "not s3 and not gcs and not azure and not seaweed"
#: Seconds one mutant's tests may take; a selection still running then counts as killed
#: (the mutant made a test hang), and is reported so.
TIMEOUT = 300.0


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug and the fast tests that must catch it."""

    name: str
    #: Path below ``src/gradientmail``.
    file: str
    #: ``(original, replacement)`` pairs, each original occurring exactly once in the file.
    edits: tuple[tuple[str, str], ...]
    #: pytest node ids (files, tests) that must fail with the mutant applied.
    tests: tuple[str, ...]
    #: The bug, in one line.
    bug: str
    #: How many distinct test functions of ``tests`` must catch it: 2 for the mechanisms
    #: whose tests were once the single point of their kill (leases, waiting and the end of
    #: an epoch, resume, early exit, no compare-and-swap, the claim policy, the pipeline's
    #: takeover, the DataLoader adapter, status).
    killers: int = 1


MUTANTS: tuple[Mutant, ...] = (
    # -- the counting door (queue.stats.cost, Exchange.stats.traffic, LatencyMailbox) -----------
    Mutant(
        "counting-door-misses-a-request",
        "_counting.py",
        (("        tally.add(REQUESTS, label, operation, group)\n", ""),),
        (
            "tests/core/test_latency_mailbox.py::test_every_operation_is_delegated_and_counted_by_kind",
            "tests/core/test_latency_mailbox.py::test_counts_are_exact_under_threads_and_add_up",
            "tests/torch/test_exchange.py::test_stats_count_the_requests_and_bytes_an_exchange_costs",
        ),
        "the one counting door counts no request: LatencyMailbox's counts and the exchange's "
        "traffic read 0 requests however many were sent",
        killers=2,
    ),
    Mutant(
        "counting-door-misses-the-bytes-sent",
        "_counting.py",
        (
            (
                "            tally.add(SENT, label, operation, group, memoryview(sent).nbytes)\n",
                "            pass\n",
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_stats_count_the_requests_and_bytes_an_exchange_costs",
        ),
        "the bytes a request sends are not counted: Exchange.stats.traffic.bytes_written "
        "stays 0 while fragments and heads are written",
    ),
    Mutant(
        "counting-door-misses-the-bytes-received",
        "_counting.py",
        (
            (
                "        self.tally.add(RECEIVED, self.label, operation, group, len(data))\n",
                "        pass\n",
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_stats_count_the_requests_and_bytes_an_exchange_costs",
        ),
        "the bytes a read receives are not counted: Exchange.stats.traffic.bytes_read stays "
        "0 while heads and fragments are read",
    ),
    Mutant(
        "counting-door-misses-a-listing",
        "_counting.py",
        (('        self.tally.add(CALLS, self.label, "list", group)\n', ""),),
        (
            "tests/patterns/shared_queue/test_free_runs.py::test_a_page_marks_its_claims_and_says_how_far_it_reached",
            "tests/patterns/shared_queue/test_waiting.py::test_a_waiting_learner_looks_for_the_end_each_second_and_ends_within_one",
            "tests/patterns/shared_queue/test_shared_queue.py",
        ),
        "listings are not counted: queue.stats.cost.listings and idle_polls stay 0",
        killers=2,
    ),
    Mutant(
        "counting-door-misses-the-keys-listed",
        "_counting.py",
        (
            (
                '            self.tally.add(KEYS, self.label, "list", group, listed)\n',
                "            pass\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_free_runs.py::test_a_page_marks_its_claims_and_says_how_far_it_reached",
            "tests/patterns/shared_queue/test_claim_policy.py",
        ),
        "the keys a listing returned are not counted: queue.stats.cost.listed_keys stays 0",
        killers=2,
    ),
    Mutant(
        "takeover-scans-counted-as-claiming-listings",
        "patterns/shared_queue/_epoch.py",
        (
            (
                "Counting(setup.mailbox, setup.tally, label=SCANS)",
                "Counting(setup.mailbox, setup.tally)",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_lifecycle.py::test_leaving_early_releases_units_to_the_others_at_once",
        ),
        "a takeover's scans are counted as claiming listings: queue.stats.cost.wait_scans "
        "stays 0 while a waiting learner scans the claims",
    ),
    # -- the DataLoader's workers of one rank ---------------------------------------------------
    Mutant(
        "sibling-workers-warned-about-as-other-learners",
        "patterns/shared_queue/_waiting.py",
        (("if owner not in self.siblings]", "if owner]"),),
        (
            "tests/torch/test_loader.py::test_a_clean_epoch_with_two_workers_warns_of_no_sibling_worker",
        ),
        "a DataLoader worker that ends while its rank's other worker holds its last unit "
        "warns of unfinished units of other learners: one false WARNING per worker, every "
        "clean epoch",
    ),
    # -- the recipe for unequal learners -------------------------------------------------------
    Mutant(
        "exchange-infinite-buffer-becomes-nan",
        "_exchange/tensors.py",
        (
            (
                "torch.where(a == b, torch.zeros((), dtype=a.dtype, device=a.device), a - b)",
                "a - b",
            ),
        ),
        ("tests/torch/test_exchange_shared_state.py",),
        "an unchanged -inf buffer (an attention mask) gives -inf - -inf = NaN in every delta "
        "and adoption: every learner's mask, and the shared one, becomes NaN",
    ),
    Mutant(
        "exchange-late-fresh-version-replaces-the-next-result",
        "_exchange/handoff.py",
        (("            if self._result is outcome:\n", "            if True:\n"),),
        ("tests/torch/test_exchange_recipe.py",),
        "a newer version read after the loop took its exchange's result replaces the next "
        "exchange's result: that exchange's own progress is adopted over, and lost",
    ),
    Mutant(
        "exchange-fresh-version-not-anchored",
        "_exchange/handoff.py",
        (("                self.applier.adopted(shared, version)\n", ""),),
        ("tests/torch/test_exchange_recipe.py",),
        "the loop adopts a fresher version but the next delta is measured from the older "
        "anchor: the other learners' progress in between is applied twice",
    ),
    Mutant(
        "exchange-delta-ignores-its-sample-share",
        "_exchange/rules.py",
        (
            (
                "            weight = share * max(1, active)",
                "            weight = 1.0",
            ),
        ),
        ("tests/torch/test_exchange_recipe.py",),
        "every delta weighs 1/N whatever samples it covers: a slow learner's small batches "
        "move the shared model as much as the fastest learner's",
    ),
    Mutant(
        "exchange-batch-not-scaled-by-speed",
        "_exchange/pace.py",
        (
            (
                "return max(1, min(batch_size, round(max(fits, fixed))))",
                "return batch_size",
            ),
        ),
        ("tests/torch/test_exchange_pace.py", "tests/torch/test_exchange_recipe.py"),
        "every learner takes batch_size items whatever its speed: the slow learners step "
        "less often and their deltas go stale",
    ),
    Mutant(
        "exchange-snapshot-reuses-the-last",
        "_exchange/learner.py",
        (
            (
                "spare = self._recent[0] if len(self._recent) == 2 else None",
                "spare = self._recent[-1] if self._recent else None",
            ),
        ),
        ("tests/torch/test_exchange_snapshots.py",),
        "a snapshot is copied into the memory of the last one, which a fresher read handed "
        "back for it may still be reading",
    ),
    Mutant(
        "exchange-snapshot-host-copies-kept",
        "_exchange/learner.py",
        (("                self._recent.clear()\n", "                pass\n"),),
        ("tests/torch/test_exchange_snapshots.py",),
        "a model moved to a GPU keeps two host copies of itself for the rest of the run",
    ),
    Mutant(
        "exchange-snapshot-fresh-memory",
        "_exchange/tensors.py",
        (("return State(torch.cat(pieces, out=into), self._count_vector())", "pass"),),
        ("tests/torch/test_exchange_snapshots.py",),
        "every snapshot takes fresh memory: 25 ms a step for a 64 MiB model on a CPU",
    ),
    Mutant(
        "exchange-snapshot-spare-on-gpu",
        "_exchange/tensors.py",
        (('return values.device.type == "cpu"', "return True"),),
        ("tests/torch/test_exchange_snapshots.py",),
        "a GPU learner keeps a spare snapshot: a model's size of GPU memory held for nothing",
    ),
    Mutant(
        "exchange-refresh-failure-lost",
        "_exchange/handoff.py",
        (
            (
                "                try:\n                    self._refresh(outcome, snapshot)\n"
                "                except BaseException as exc:  # noqa: BLE001 - else the next "
                "job would never run\n                    self._fail(exc)\n"
                "                    return\n",
                "                self._refresh(outcome, snapshot)\n",
            ),
        ),
        ("tests/torch/test_exchange_snapshots.py",),
        "a fresher read that fails with anything but a store error ends the exchange thread "
        "silently: leaving then waits forever for an outcome no thread will make",
    ),
    Mutant(
        "exchange-sampler-size-read-once",
        "_exchange/sampler.py",
        (
            (
                "                batch = []\n"
                "                size = self.exchange._hand_out_batch()\n",
                "                batch = []\n",
            ),
        ),
        ("tests/torch/test_exchange_sampler.py",),
        "a DataLoader keeps the batch size asked when its epoch began: a learner that slows "
        "(or a new fastest one) changes nothing until the next epoch",
    ),
    Mutant(
        "exchange-batch-check-ignores-handed",
        "_exchange/batch_check.py",
        (
            (
                "if fits(forwards, self._asked) or fits(forwards, self._handed):",
                "if fits(forwards, self._asked):",
            ),
        ),
        ("tests/torch/test_exchange_sampler.py",),
        "a DataLoader whose workers hold more batches ahead than the check remembers asking "
        "for is warned at a resize, though its sampler made exactly what was asked",
    ),
    Mutant(
        "exchange-sampler-not-recorded",
        "_exchange/learner.py",
        (("            self._check.handed(batch)\n", "            pass\n"),),
        ("tests/torch/test_exchange_sampler.py",),
        "the batches an ExchangeBatchSampler made ahead never reach the batch check",
    ),
    Mutant(
        "exchange-sampler-drop-last-ignored",
        "_exchange/sampler.py",
        (("if batch and not self.drop_last:", "if batch:"),),
        ("tests/torch/test_exchange_sampler.py",),
        "drop_last=True still yields the epoch's last, smaller batch",
    ),
    Mutant(
        "exchange-sampler-last-lost",
        "_exchange/sampler.py",
        (("if batch and not self.drop_last:", "if batch and self.drop_last:"),),
        ("tests/torch/test_exchange_sampler.py",),
        "the items of an epoch's last, smaller batch are never trained on",
    ),
    Mutant(
        "exchange-wrapper-names-kept",
        "_exchange/layout.py",
        (('        name = name.partition(".")[2]', "        break"),),
        ("tests/torch/test_exchange_shared_state.py",),
        "a learner that compiles its model (torch.compile) or wraps it (DataParallel) is "
        "refused by the others' shared model, though its parameters are the same",
    ),
    Mutant(
        "exchange-wrapper-frozen-names-kept",
        "_exchange/layout.py",
        (('here = {unwrapped(name) for name in mine["frozen"]}', 'here = set(mine["frozen"])'),),
        ("tests/torch/test_exchange_shared_state.py",),
        "a compiled learner that freezes the same parameters as the others is warned that it "
        "freezes different ones",
    ),
    Mutant(
        "exchange-liveness-not-wired",
        "_exchange/applier.py",
        (
            (
                "and self.liveness.live(name, entry, head.version, expected[name])",
                "and True",
            ),
        ),
        ("tests/torch/test_exchange_liveness.py",),
        "a learner killed without leaving stays in the group's batch for active_window (10 "
        "minutes): every live learner's delta weighs less than its share meanwhile",
    ),
    Mutant(
        "exchange-liveness-never-dead",
        "_exchange/liveness.py",
        (("live=version - seen.version <= FACTOR * usual", "live=True"),),
        ("tests/torch/test_exchange_liveness.py",),
        "nobody ever leaves the group before active_window ends",
    ),
    Mutant(
        "exchange-liveness-no-floor",
        "_exchange/liveness.py",
        (("usual = max(1.0, seen.usual, expected)", "usual = max(seen.usual, expected)"),),
        ("tests/torch/test_exchange_liveness.py",),
        "a learner seen once, with no pace yet, drops out of the group at the next version",
    ),
    Mutant(
        "exchange-liveness-pace-ignored",
        "_exchange/liveness.py",
        (("usual = max(1.0, seen.usual, expected)", "usual = max(1.0, seen.usual)"),),
        ("tests/torch/test_exchange_liveness.py",),
        "a slow learner, seen once, drops out of the group after ten versions made by the "
        "faster ones, before its next exchange",
    ),
    Mutant(
        "exchange-liveness-observed-intervals-ignored",
        "_exchange/liveness.py",
        (("usual = max(1.0, seen.usual, expected)", "usual = max(1.0, expected)"),),
        ("tests/torch/test_exchange_liveness.py",),
        "on a slow store, or with a learner whose exchanges are coalesced, a live learner "
        "drops out of the group between its exchanges",
    ),
    Mutant(
        "exchange-liveness-expected-in-seconds",
        "_exchange/liveness.py",
        (
            (
                "rate * e.pace.exchange_seconds if e.pace.measured else 0.0",
                "e.pace.exchange_seconds if e.pace.measured else 0.0",
            ),
        ),
        ("tests/torch/test_exchange_liveness.py",),
        "the versions a learner's pace implies are taken for its seconds: a slow learner "
        "drops out before its first intervals are observed",
    ),
    Mutant(
        "exchange-liveness-every-ignored",
        "_exchange/pace.py",
        (("return self.step_seconds * max(1, self.every)", "return self.step_seconds"),),
        ("tests/torch/test_exchange_liveness.py",),
        "a learner exchanging every 10 steps drops out of the group between its exchanges",
    ),
    Mutant(
        "exchange-liveness-pause-counted-whole",
        "_exchange/liveness.py",
        (("min(interval, OUTLIER * usual)", "interval"),),
        ("tests/torch/test_exchange_liveness.py",),
        "after one long pause a learner's death goes unnoticed for ten times that pause",
    ),
    Mutant(
        "exchange-liveness-interval-per-read",
        "_exchange/liveness.py",
        ((" / max(1, entry.seq - seen.seq)", ""),),
        ("tests/torch/test_exchange_liveness.py",),
        "an observer that reads rarely takes a learner's exchanges for as rare as its reads",
    ),
    Mutant(
        "exchange-liveness-interval-from-first-sight",
        "_exchange/liveness.py",
        (("            if seen.moved:\n", "            if True:\n"),),
        ("tests/torch/test_exchange_liveness.py",),
        "the partial gap from first sight to the first exchange sets the usual interval: a "
        "learner seen just before it exchanged looks dead between its next exchanges",
    ),
    Mutant(
        "exchange-liveness-silence-from-first-sight",
        "_exchange/liveness.py",
        (
            (
                "seen.seq, seen.version, seen.moved = entry.seq, version, True",
                "seen.seq, seen.moved = entry.seq, True",
            ),
        ),
        ("tests/torch/test_exchange_liveness.py",),
        "silence counts from when a learner was first seen, not from its last exchange: "
        "every learner drops out of the group as the run goes on",
    ),
    Mutant(
        "exchange-batch-check-judges-the-next-batch",
        "_exchange/learner.py",
        (
            (
                "            slip = self._check.stepped(self._work.batch) "
                "if self._check else None\n"
                "            self._work.stepped()\n",
                "            self._work.stepped()\n"
                "            slip = self._check.stepped(self._work.batch) "
                "if self._check else None\n",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "a step is judged against the batch sized for the next one: a loop that takes "
        "exactly what was asked is warned about while the batches are being resized",
    ),
    Mutant(
        "exchange-batch-check-without-batch-size",
        "_exchange/learner.py",
        (
            (
                "BatchCheck(self.learner_id) if batch_size is not None else None",
                "BatchCheck(self.learner_id)",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "a loop that sizes its own batches (no batch_size=) is warned that it does not take "
        "the 1 item a step it was never asked for",
    ),
    Mutant(
        "exchange-batch-check-counts-no-grad-forwards",
        "_exchange/batch_check.py",
        (
            (
                "if not module.training or not torch.is_grad_enabled():",
                "if not module.training:",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "an evaluation under torch.no_grad() counts as training items: a right loop that "
        "evaluates is warned about",
    ),
    Mutant(
        "exchange-batch-check-counts-eval-mode-forwards",
        "_exchange/batch_check.py",
        (
            (
                "if not module.training or not torch.is_grad_enabled():",
                "if not torch.is_grad_enabled():",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "a forward in eval mode counts as training items: a right loop that evaluates is "
        "warned about",
    ),
    Mutant(
        "exchange-batch-check-never-forgives",
        "_exchange/batch_check.py",
        (("            self._misses = 0\n", ""),),
        ("tests/torch/test_exchange_batch_check.py",),
        "a short last batch now and then adds up to the warning: a right loop is warned about",
    ),
    Mutant(
        "exchange-batch-check-unseen-step-resets",
        "_exchange/batch_check.py",
        (
            (
                "        if self.warned or not forwards:\n",
                "        if not forwards:\n            self._misses = 0\n"
                "        if self.warned or not forwards:\n",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "a step whose forward the check could not see hides the slip: a loop that mixes them "
        "is never warned",
    ),
    Mutant(
        "exchange-batch-check-warns-every-step",
        "_exchange/batch_check.py",
        (("        if self.warned or not forwards:\n", "        if not forwards:\n"),),
        ("tests/torch/test_exchange_batch_check.py",),
        "the warning repeats at every step after the patience: a log flooded",
    ),
    Mutant(
        "exchange-batch-check-sum-only",
        "_exchange/batch_check.py",
        ((" or (len(set(sizes)) == 1 and sizes[0] in asked)", ""),),
        ("tests/torch/test_exchange_batch_check.py",),
        "a model that sees its batch twice (two views, a contrastive loss) is warned about",
    ),
    Mutant(
        "exchange-batch-check-dimension-0-only",
        "_exchange/batch_check.py",
        (("    for dim in (0, 1):\n", "    for dim in (0,):\n"),),
        ("tests/torch/test_exchange_batch_check.py",),
        "a sequence-first model (batch on dimension 1) is warned about at every step",
    ),
    Mutant(
        "exchange-batch-check-this-step-only",
        "_exchange/batch_check.py",
        (("deque(maxlen=recent)", "deque(maxlen=1)"),),
        ("tests/torch/test_exchange_batch_check.py",),
        "a loader that reads exchange.batch_size a few steps ahead (a sampler feeding "
        "prefetching workers) is warned about at every resize",
    ),
    Mutant(
        "exchange-batch-check-reads-nested-sizes",
        "_exchange/batch_check.py",
        (("if first is None or first.is_nested or ", "if first is None or "),),
        ("tests/torch/test_exchange_batch_check.py",),
        "a model fed nested tensors raises out of its own forward once the Exchange is entered",
    ),
    Mutant(
        "exchange-batch-check-refuses-torchscript",
        "_exchange/batch_check.py",
        (
            (
                "        except RuntimeError:\n            return None\n",
                "        finally:\n            pass\n",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "a TorchScript model (no hooks) can no longer enter an Exchange with batch_size=",
    ),
    Mutant(
        "exchange-batch-check-late",
        "_exchange/batch_check.py",
        (
            (
                "        if self._misses < self.patience:\n",
                "        if self._misses <= self.patience:\n",
            ),
        ),
        ("tests/torch/test_exchange_batch_check.py",),
        "the warning comes a step after the patience the docs give",
    ),
    Mutant(
        "exchange-pace-outlier-not-capped",
        "_exchange/pace.py",
        (("                interval = min(interval, OUTLIER * self.seconds_per_sample)\n", ""),),
        ("tests/torch/test_exchange_pace.py",),
        "one long pause (an evaluation, a checkpoint) enters the pace whole: the learner's "
        "batch shrinks for many steps after it",
    ),
    Mutant(
        "exchange-step-cost-not-measured",
        "_exchange/pace.py",
        (
            (
                (
                    "            self.cost.stepped(samples, took)  # whole: its fit leaves "
                    "stalls out itself\n"
                ),
                "",
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        (
            "a learner never measures its fixed step cost: one whose step no batch "
            "makes as short as the fastest's shrinks to a batch of 1 or 2 and "
            "throws most of its items away"
        ),
    ),
    Mutant(
        "exchange-step-cost-clamped-times",
        "_exchange/pace.py",
        (
            (
                "self.cost.stepped(samples, took)",
                (
                    "self.cost.stepped(samples, min(took, OUTLIER * self.seconds_per_sample"
                    " * samples) if self.seconds_per_sample > 0 else took)"
                ),
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        (
            "the fit is fed step times capped as the pace's smoothing caps them: a "
            "sudden fall in batch looks cheaper than it was and the fixed part is "
            "under-measured"
        ),
    ),
    Mutant(
        "exchange-step-cost-ignored",
        "_exchange/pace.py",
        (("round(max(fits, fixed))", "round(fits)"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "the batch rule ignores the floor a fixed step cost sets: the latency-"
            "bound learner shrinks to a batch of 2 again"
        ),
    ),
    Mutant(
        "exchange-step-cost-not-in-the-fit",
        "_exchange/pace.py",
        (
            (
                "target * (mine.batch + fixed) / mine.step_seconds - fixed",
                "target * mine.batch / mine.step_seconds",
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        (
            "the batch that fits in the fastest's step time is worked out as if "
            "steps cost in proportion to their items: a learner with a fixed part "
            "steps slower than the fastest"
        ),
    ),
    Mutant(
        "exchange-step-cost-not-passed",
        "_exchange/pace.py",
        (("self.batch_size, self.pace.cost.items", "self.batch_size, 0.0"),),
        ("tests/torch/test_exchange_pace.py",),
        "the measured fixed cost never reaches the batch rule",
    ),
    Mutant(
        "exchange-step-cost-noise-taken-for-fixed",
        "_exchange/step_cost.py",
        (("least_fixed = fixed - 3 * fixed_error", "least_fixed = fixed"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "the fitted fixed part is taken whole, noise and all: a proportional "
            "learner whose steps jitter takes more items than its share, and steps "
            "slower"
        ),
    ),
    Mutant(
        "exchange-step-cost-item-noise-ignored",
        "_exchange/step_cost.py",
        (("most_per_item = per_item + 3 * per_item_error", "most_per_item = per_item"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "a noisy, nearly flat fit divides by a cost per item near 0: a "
            "jittering proportional learner is taken for a latency-bound one"
        ),
    ),
    Mutant(
        "exchange-step-cost-below-zero",
        "_exchange/step_cost.py",
        (
            (
                "        if least_fixed <= 0:\n            self.items = 0.0\n        elif",
                "        if",
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        (
            "a fit whose fixed part is below 0 within its noise gives a negative "
            "one: the batch rule then sizes a proportional learner as if small "
            "batches cost less than their items"
        ),
    ),
    Mutant(
        "exchange-step-cost-slower-as-it-shrank",
        "_exchange/step_cost.py",
        (
            (
                "        if per_item < -tiny:\n            return None",
                "        if False:\n            return None",
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        (
            "a GPU slowing while its batch follows it down is taken for one whose "
            "items cost nothing: it is asked for twice its largest batch and steps "
            "far slower than the fastest"
        ),
    ),
    Mutant(
        "exchange-step-cost-stalls-kept",
        "_exchange/step_cost.py",
        (("kept = _below_the_stalls(steps)", "kept = steps"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "stalls (a log flush, an evaluation) stay in the fit: no line describes"
            " the steps, the fixed part fades, and the latency-bound learner "
            "shrinks to a batch of 1 for good"
        ),
    ),
    Mutant(
        "exchange-step-cost-stalls-judged-by-their-own-line",
        "_exchange/step_cost.py",
        (("line = _least_squares(quartiles)", "line = _least_squares(steps)"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "stalls are judged against a least-squares line that bends toward them "
            "when they fall at one batch: they stay in, and the fit is refused"
        ),
    ),
    Mutant(
        "exchange-step-cost-no-clock-accepted",
        "_exchange/step_cost.py",
        (("if samples > 0 and 0.0 <= seconds < math.inf:", "if samples > 0:"),),
        ("tests/torch/test_exchange_pace.py",),
        ("a NaN or infinite step time enters the fit: the fixed part jumps to its cap"),
    ),
    Mutant(
        "exchange-step-cost-no-fade",
        "_exchange/step_cost.py",
        (("            self.items *= COST_FADE\n", ""),),
        ("tests/torch/test_exchange_pace.py",),
        ("a fixed part fitted while the GPU's speed changed holds the learner's batch up for good"),
    ),
    Mutant(
        "exchange-step-cost-unbounded",
        "_exchange/step_cost.py",
        (("most = 2.0 * max(b for b, _ in self._steps)", "most = math.inf"),),
        ("tests/torch/test_exchange_pace.py",),
        "a flat fit makes the fixed part infinite, and it never fades back",
    ),
    Mutant(
        "exchange-step-cost-flat-not-fixed",
        "_exchange/step_cost.py",
        (("            self.items = most\n", "            self.items *= COST_FADE\n"),),
        ("tests/torch/test_exchange_pace.py",),
        (
            "step times that do not grow with the batch are not taken for a fixed "
            "cost: the learner whose GPU is all launches and updates shrinks to a "
            "batch of 1"
        ),
    ),
    Mutant(
        "exchange-normal-staleness-damped",
        "_exchange/rules.py",
        (
            (
                "((1 + max(0.0, expected)) / (1 + max(0, staleness)))",
                "(1 / (1 + max(0, staleness)))",
            ),
        ),
        ("tests/torch/test_exchange_pace.py",),
        "a delta as stale as the learners' paces make normal is damped anyway: the shared "
        "model under-steps (the outer rule's 1 / (1 + tau))",
    ),
    Mutant(
        "exchange-gain-not-applied",
        "_exchange/applier.py",
        (
            (
                "            share = group.share(per_step) * gain\n",
                "            share = group.share(per_step)\n",
            ),
        ),
        ("tests/torch/test_exchange_gain.py",),
        "the noise gain is measured and reported but not applied: with Adam, the small "
        "batches' deltas carry less than their part of a step on the group's batch",
    ),
    Mutant(
        "exchange-gain-all-noise-taken-for-none",
        "_exchange/noise.py",
        (("        return math.sqrt(group_batch / batch)\n", "        return 1.0\n"),),
        ("tests/torch/test_exchange_gain.py",),
        "a fit at or below zero signal (all noise, common with few learners) gives no gain: "
        "the small batches' deltas carry about half their part of a step on the group's batch",
    ),
    Mutant(
        "exchange-gain-own-batch-as-the-groups",
        "_exchange/noise.py",
        (("    if fit is None or not 0 < batch < group_batch:", "    if fit is None:"),),
        ("tests/torch/test_exchange_gain.py",),
        "a delta covering more items a step than the group's batch as last read (a learner "
        "whose batch grew since) is scaled below its share, and a batch of 0 divides by 0",
    ),
    Mutant(
        "exchange-gain-meter-not-smoothed",
        "_exchange/gradients.py",
        (
            (
                "smoothed + SMOOTHING * (square - smoothed)",
                "square",
            ),
        ),
        ("tests/torch/test_exchange_gain.py",),
        "each step's gradient mean square is published as it is: the fit, and so every "
        "gain, jumps with one batch's noise",
    ),
    Mutant(
        "exchange-gain-unmeasured-learners-fitted",
        "_exchange/noise.py",
        (("        if batch > 0 and 0 < square < math.inf:", "        if batch > 0:"),),
        ("tests/torch/test_exchange_gain.py",),
        "a learner that does not measure (its square 0) enters the fit as a point of no "
        "gradient at all: the fitted noise, and every gain, goes wrong",
    ),
    # -- the pipeline over a mailbox ---------------------------------------------------------
    Mutant(
        "pipeline-end-ignores-count",
        "patterns/pipeline/_producer_watch.py",
        (
            (
                "return self.end is not None and self.next >= self.end.count",
                "return self.end is not None",
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_end_records.py",),
        "a consumer treats a producer as exhausted once it has seen its end record, "
        "ignoring the count: items written between its missed read and the end are dropped",
    ),
    Mutant(
        "pipeline-missing-item-skipped",
        "patterns/pipeline/_mailbox_consumer.py",
        (
            (
                """                if cursor.end is not None:
                    # The end record promises this item; an item never disappears.
                    raise PipelineError(
                        f"item #{seq} of producer {producer!r} is missing although its end "
                        f"record counts {cursor.end.count} items; was the mailbox edited?"
                    ) from None
""",
                """                if cursor.end is not None:
                    cursor.next += 1  # skip the hole
                    continue
""",
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_end_records.py",),
        "an item missing although the end record counts it is skipped silently instead of "
        "raising a PipelineError naming the producer and the item",
    ),
    Mutant(
        "pipeline-end-count-defaults-to-zero",
        "patterns/pipeline/_records.py",
        (
            (
                '            _field(fields, "count", int),\n',
                '            fields.get("count") or 0,\n',
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_end_records.py",),
        "an end record without a count reads as count 0, so consumers finish early instead "
        "of raising a PipelineError naming the key",
    ),
    Mutant(
        "pipeline-stops-when-registered-producers-end",
        "patterns/pipeline/_producer_watch.py",
        (
            (
                "        return all(c.exhausted() for c in self.cursors)\n",
                "        from gradientmail.patterns.pipeline._records import registered_key\n\n"
                "        return all(\n"
                "            c.exhausted()\n"
                "            for c in self.cursors\n"
                "            if exists(self._box, registered_key(c.producer))\n"
                "        )\n",
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_declared_producers.py",),
        "mailbox consumers stop once every *registered* producer ended, although a declared "
        "producer has not registered yet",
    ),
    Mutant(
        "in-process-stops-when-registered-producers-end",
        "patterns/pipeline/_in_process.py",
        (
            (
                "                    if len(core.finished) == len(core.declared):\n"
                "                        self._closed = True\n",
                "                    if len(core.finished) == len(core.registered):\n"
                "                        self._closed = True\n",
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_declared_producers.py",),
        "in-process consumers stop once every *registered* producer finished, although a "
        "declared producer has not registered yet",
    ),
    Mutant(
        "pipeline-error-jumps-the-queue",
        "patterns/pipeline/_mailbox_consumer.py",
        (
            (
                """        except (PipelineError, LeaseLostError) as exc:
            self._buffer.put_control(exc)
""",
                """        except (PipelineError, LeaseLostError) as exc:
            with self._buffer._lock:
                self._buffer._entries.appendleft((exc, False))
                self._buffer._not_empty.notify()
""",
            ),
        ),
        ("tests/patterns/shared_queue/test_loader_error_order.py",),
        "a pipeline consumer's prefetch thread delivers a producer's failure before the "
        "items it had already buffered",
    ),
    Mutant(
        "producer-fencing-skipped",
        "patterns/pipeline/_mailbox_producer.py",
        (
            (
                """            try:
                self._lease.ensure_fresh()
            except LeaseLostError as exc:
                self._stop(self._fenced(exc), "failed")
                raise PipelineAbortedError(self._stopped) from exc
""",
                "",
            ),
        ),
        ("tests/patterns/test_lease_liveness.py",),
        "a producer declared lost keeps putting items: put() no longer checks its lease",
    ),
    # -- shared_queue ------------------------------------------------------------------------
    Mutant(
        "loader-error-jumps-the-queue",
        "patterns/shared_queue/_loader.py",
        (
            (
                "            self.buffer.put_control(Failed(CarriedError.of(exc), context))\n",
                "            with self.buffer._lock:\n"
                "                failed = Failed(CarriedError.of(exc), context)\n"
                "                self.buffer._entries.appendleft((failed, False))\n"
                "                self.buffer._not_empty.notify()\n",
            ),
        ),
        ("tests/patterns/shared_queue/test_loader_error_order.py",),
        "shared_queue's loader error is delivered before the items buffered ahead of it",
    ),
    Mutant(
        "holdings-bound-ignored",
        "patterns/shared_queue/_holdings.py",
        (
            (
                "            while len(self._held) > limit and not self._closed:\n",
                "            while False:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_lifecycle.py::test_completions_keep_up_units_held_stay_bounded",
            "tests/patterns/shared_queue/test_waiting.py::test_no_idle_marker_while_a_finished_unit_awaits_its_record",
            "tests/patterns/shared_queue/test_waiting.py::test_a_learner_whose_last_record_is_slow_goes_idle_after_it_and_still_ends_the_epoch",
        ),
        "the loader claims on however many units await their completion records, so a "
        "learner killed then leaves many trained but unrecorded units to train again",
        killers=2,
    ),
    Mutant(
        "idle-while-holding-units",
        "patterns/shared_queue/_waiting.py",
        (
            (
                "        if not self.scope.holdings.wait_at_most(0)"
                " or self.scope.closing.is_set():\n",
                "        if self.scope.closing.is_set():\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_waiting.py::test_no_idle_marker_while_a_finished_unit_awaits_its_record",
            "tests/patterns/shared_queue/test_waiting.py::test_a_learner_whose_last_record_is_slow_goes_idle_after_it_and_still_ends_the_epoch",
        ),
        "a learner marks itself idle while its own units still await their completion "
        "records, so the others may end the epoch before they are done",
        killers=2,
    ),
    Mutant(
        "epoch-ends-without-listing-done",
        "patterns/shared_queue/_waiting.py",
        (("        if self.all_done():\n", "        if True:\n"),),
        (
            "tests/patterns/shared_queue/test_idle_watch.py::test_a_marker_planted_for_a_working_learner_does_not_end_the_epoch",
            "tests/patterns/shared_queue/test_completion_interleavings.py::test_a_completion_cut_between_its_two_writes_is_repaired_not_redelivered",
            "tests/patterns/shared_queue/test_waiting.py::test_a_restart_that_repairs_a_cut_completion_ends_at_its_next_poll",
        ),
        "with nobody busy, the leader ends the epoch without a listing of done/ showing "
        "every unit, though a learner may have died holding units unseen",
        killers=2,
    ),
    Mutant(
        "policy-win-keeps-jumping",
        "patterns/shared_queue/_policy/claim_policy.py",
        (
            (
                "        self._walk.won(position)\n        self._search.losses = 0\n",
                "        self._walk.won(position)\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_backward_walk_that_loses_a_claim_goes_on_to_the_next_run_from_its_end",
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_watcher_sweeps_the_share_of_a_learner_that_left",
        ),
        "after one lost claim the policy jumps (a page each) even once it wins again, "
        "instead of walking on from its last claim",
        killers=2,
    ),
    Mutant(
        "policy-walk-ignores-member-starts",
        "patterns/shared_queue/_policy/claim_policy.py",
        (
            (
                "            walk.stops = {self.start_of(m) for m in self._members}"
                " - {walk.next}\n",
                "            walk.stops = set()\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_walk_stops_short_of_where_another_member_starts",
            "tests/patterns/shared_queue/test_claim_policy.py::test_learners_that_start_together_lose_no_claim_where_another_starts",
        ),
        "a walk runs into the next member's first unit, a lost claim at every member's "
        "start, instead of stopping short of it",
        killers=2,
    ),
    Mutant(
        "policy-sweepers-collide",
        "patterns/shared_queue/_policy/claim_policy.py",
        (
            (
                "                    if self._learner_id in _sweepers(ring, stretch)[1:]:\n",
                "                    if False:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_short_run_in_a_long_order_is_left_to_its_walker_and_the_share_sweepers",
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_run_nobody_walks_is_taken_whole_by_either_sweeper_alone",
        ),
        "both sweepers of a stretch start at the same unit, so two learners sweeping "
        "together lose a claim on every unit they meet",
        killers=2,
    ),
    Mutant(
        "policy-blind-never-refreshes",
        "patterns/shared_queue/_policy/claim_policy.py",
        (
            (
                "        if search.losses >= PROBES_BEFORE_LISTING and not self._paged:\n",
                "        if False:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_claim_policy.py::test_without_pages_a_streak_of_lost_claims_refreshes_with_one_full_listing",
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_blind_learner_with_a_stale_view_loses_a_few_claims_then_lists_once",
        ),
        "without partial listings a stale learner probes one lost claim after another "
        "and never refreshes what it believes with a listing",
        killers=2,
    ),
    Mutant(
        "in-order-settled-before-written",
        "patterns/_in_order.py",
        (
            (
                "                entry = self._pending[0]\n",
                "                entry = self._pending.popleft()\n",
            ),
            ("                    self._pending.popleft()\n", "                    pass\n"),
        ),
        ("tests/patterns/test_in_order.py",),
        "an entry stops counting as pending when its write starts, so flush() (a pipeline "
        "consumer's next(), a queue's close) returns before the record has landed",
    ),
    # -- epochs that flow ------------------------------------------------------------------
    Mutant(
        "flow-never-opens-beside-an-open-epoch",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "        return all(run.dry.is_set() for run in self._open)\n",
                "        return not self._open\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_the_next_epoch_starts_while_a_unit_is_in_progress_and_never_the_one_after",
        ),
        "epoch k+1 opens only once k has ended: the barrier is back, and fast learners wait",
    ),
    Mutant(
        "flow-opens-before-the-open-epoch-runs-dry",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "        return all(run.dry.is_set() for run in self._open)\n",
                "        return True\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_the_next_epoch_opens_only_once_no_unit_of_the_open_one_is_free",
        ),
        "epoch k+1 opens while units of k are still free, so a learner holds units of the "
        "next epoch that others could have trained in this one",
    ),
    Mutant(
        "flow-runs-two-epochs-ahead",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "        if self._open and following - self._position[self._open[0].epoch] > 1:\n",
                "        if False:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_the_next_epoch_starts_while_a_unit_is_in_progress_and_never_the_one_after",
        ),
        "a learner opens epoch k+2 while a unit of k is still in progress",
    ),
    Mutant(
        "exchange-writes-before-checking-the-head",
        "_exchange/applier.py",
        (("            if self._overtaken(head):\n", "            if False:\n"),),
        (
            "tests/torch/test_exchange.py::"
            "test_a_learner_overtaken_while_it_computes_writes_no_fragments_of_the_lost_version",
        ),
        "a learner overtaken while it computes writes a whole version that then loses the swap",
    ),
    Mutant(
        "renewal-loop-stops-after-a-failure",
        "patterns/_leases.py",
        (
            (
                "                    self.renew_error = exc  # the next period retries; "
                "ensure_fresh fences\n",
                "                    return\n",
            ),
        ),
        (
            "tests/patterns/test_lease_clock.py::test_a_failed_background_renewal_is_retried_next_period_and_fences_nothing",
            "tests/patterns/test_lease_liveness.py::test_a_holder_renews_again_after_a_store_outage_and_is_not_declared_lost",
        ),
        "one failed background renewal ends the renewal thread: the lease then goes silent",
        killers=2,
    ),
    Mutant(
        "renewal-error-kept-after-success",
        "patterns/_leases.py",
        (("                    self.renew_error = None\n", ""),),
        (
            "tests/patterns/test_lease_clock.py::test_a_failed_background_renewal_is_retried_next_period_and_fences_nothing",
            "tests/patterns/test_lease_liveness.py::test_a_holder_renews_again_after_a_store_outage_and_is_not_declared_lost",
        ),
        "a renewal that succeeds after a failed one leaves the old error reported",
        killers=2,
    ),
    Mutant(
        "pipeline-consumer-returns-without-its-fence",
        "patterns/pipeline/_mailbox_consumer.py",
        (
            (
                "            self._lease.ensure_fresh()\n        except LeaseLostError:\n",
                "            pass\n        except LeaseLostError:\n",
            ),
        ),
        (
            "tests/patterns/pipeline/test_pipeline_consumer_clock.py::test_a_consumer_acts_inside_its_window_and_stops_once_stale_and_unable_to_renew",
            "tests/patterns/pipeline/test_pipeline_consumer_clock.py::test_a_consumer_declared_lost_returns_none_of_the_items_it_has_buffered",
        ),
        "a pipeline consumer past its freshness that cannot renew still returns items",
        killers=2,
    ),
    Mutant(
        "pipeline-consumer-stop-error-masks-the-fence",
        "patterns/pipeline/_mailbox_consumer.py",
        (("        except BackendError as exc:\n", "        except KeyNotFoundError as exc:\n"),),
        (
            "tests/patterns/pipeline/test_pipeline_consumer_clock.py::test_a_consumer_acts_inside_its_window_and_stops_once_stale_and_unable_to_renew",
            "tests/patterns/pipeline/test_pipeline_consumer_clock.py::test_an_idle_consumer_fenced_by_its_prefetch_thread_raises_lease_lost_not_a_store_error",
        ),
        "a store error while recording a fenced consumer's stop replaces its LeaseLostError",
        killers=2,
    ),
    Mutant(
        "fenced-learner-reads-released",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "            state.done = state.fenced = True  # taken over, or too stale",
                "            state.done = True  # taken over, or too stale",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_fenced_close.py::test_a_learner_fenced_for_a_stale_lease_raises_lease_lost_and_never_reads_finished",
            "tests/patterns/shared_queue/test_fenced_close.py::test_status_shows_a_learner_fenced_at_its_first_item_failed_not_released",
        ),
        "a learner fenced for a stale lease records its lease as released, not failed",
        killers=2,
    ),
    Mutant(
        "status-calls-an-expired-lease-lost",
        "status.py",
        (
            (
                '            return "expired"  # silent past the lease, and not declared lost',
                '            return "lost"  # silent past the lease, and not declared lost',
            ),
        ),
        (
            "tests/core/test_status_liveness.py::test_a_lease_unrenewed_past_its_lease_reads_expired_never_lost_and_the_run_stalled",
            "tests/patterns/shared_queue/test_lifecycle.py::test_status_shows_a_lost_learner_and_watch_ends_on_a_stalled_run",
        ),
        "status calls a learner lost when only its lease expired: it may be merely paused",
        killers=2,
    ),
    Mutant(
        "pipeline-consumer-without-patience",
        "patterns/pipeline/_mailbox_consumer.py",
        (
            (
                "        box = Patient(core.mailbox, settings.lease, "
                "self._worker.stop_event, what)\n",
                "        box = core.mailbox\n",
            ),
        ),
        ("tests/patterns/pipeline/test_pipeline_outage.py",),
        "a pipeline consumer dies on the first transient store failure past the mailbox's "
        "own retries",
    ),
    Mutant(
        "patience-gives-up-at-once",
        "patterns/_patience.py",
        (
            (
                "        if waited >= self.patience or self._stop.is_set():\n",
                "        if True:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_store_outage.py",
            "tests/patterns/test_patience.py::"
            "test_a_transient_failure_is_retried_and_an_answer_is_not",
        ),
        "a learner's loader dies on the first transient store failure after the mailbox's "
        "own retries, instead of riding out an outage shorter than the lease",
    ),
    Mutant(
        "patience-ignores-stop",
        "patterns/_patience.py",
        (
            (
                "        if waited >= self.patience or self._stop.is_set():\n",
                "        if waited >= self.patience:\n",
            ),
        ),
        (
            "tests/patterns/test_patience.py::"
            "test_it_gives_up_after_its_patience_and_at_once_when_stopped",
        ),
        "a closing queue keeps retrying a failing store for a whole lease before it closes",
    ),
    Mutant(
        "patience-listing-restarts-from-the-top",
        "patterns/_patience.py",
        (("                    last = key\n", "                    pass\n"),),
        (
            "tests/patterns/test_patience.py::"
            "test_a_listing_that_fails_part_way_resumes_after_the_last_key",
        ),
        "a listing that fails part-way starts again from its first key, yielding keys twice",
    ),
    Mutant(
        "restart-takes-back-its-own-units-last",
        "patterns/shared_queue/_takeover.py",
        (
            (
                "        while self.own:\n            ident, record, version = self.own.pop(0)\n",
                "        while False:\n            ident, record, version = self.own.pop(0)\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_lifecycle.py::test_a_restarted_learner_takes_back_its_own_units_first[rig_file]",
            "tests/patterns/shared_queue/test_resume.py::test_a_learner_restarted_after_leaving_early_takes_back_what_it_released_first",
            "tests/patterns/shared_queue/test_resume.py::test_a_learner_restarted_after_dying_takes_its_units_back_before_claiming_a_free_one",
        ),
        "a restarted learner claims free units before the ones its old incarnation held",
        killers=2,
    ),
    Mutant(
        "taken-over-unit-not-held",
        "patterns/shared_queue/_loader.py",
        (
            (
                "                return self.hold(found)\n        return None\n",
                "                return found\n        return None\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_early_exit.py::test_a_unit_taken_over_while_waiting_is_released_on_an_early_exit_like_a_claimed_one",
            "tests/patterns/shared_queue/test_lifecycle.py::test_leaving_early_releases_units_to_the_others_at_once",
        ),
        "a unit taken over while waiting is loaded but not held: leaving early does not "
        "release it, and the learner's session never reports it claimed",
        killers=2,
    ),
    Mutant(
        "flow-newer-epoch-first",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "            for run in self._open:  # the oldest epoch first\n",
                "            for run in reversed(self._open):\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_a_unit_taken_back_in_the_older_epoch_is_delivered_before_the_newer_epochs_items",
        ),
        "a unit taken over in the older epoch waits behind the newer epoch's items",
    ),
    Mutant(
        "flow-lease-names-only-the-first-epoch",
        "patterns/shared_queue/_consumer.py",
        (
            (
                '        if self._lease.extra.get("epochs") == epochs:\n',
                "        if True:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_the_next_epoch_starts_while_a_unit_is_in_progress_and_never_the_one_after",
        ),
        "the lease never says which epochs the learner works in, so the learners of the "
        "next epoch count it absent there",
    ),
    Mutant(
        "flow-lease-keeps-an-ended-epoch",
        "patterns/shared_queue/_consumer.py",
        (
            (
                "        if self._open:\n            self._name_epochs()\n",
                "",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_the_next_epoch_starts_while_a_unit_is_in_progress_and_never_the_one_after",
        ),
        "once an epoch ends the lease still names it, so its learners keep counting this "
        "one busy there",
    ),
    Mutant(
        "lease-epochs-ignored",
        "patterns/_lease_watch.py",
        (("        if self.epochs:\n", "        if False:\n"),),
        (
            "tests/patterns/shared_queue/test_idle_watch.py::"
            "test_a_learner_whose_epochs_flow_is_busy_in_both_its_open_epochs",
        ),
        "an observer reads only the oldest epoch of a lease, so a learner busy in the next "
        "epoch is marked idle there on its behalf",
    ),
    Mutant(
        "flow-done-before-counts-the-last-epoch-only",
        "patterns/shared_queue/_loader.py",
        (
            (
                "        stats.units_done_before += done",
                "        stats.units_done_before = done",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_flowing_epochs.py::"
            "test_a_resumed_flowing_run_skips_complete_epochs_and_says_complete",
        ),
        "a resumed flowing queue reports only its last epoch's units as done before",
    ),
    Mutant(
        "bell-ring-not-counted",
        "patterns/_workers.py",
        (("            self._rings += 1\n", ""),),
        ("tests/patterns/test_bell.py",),
        "a ring between the consumer's look and its wait is missed: it sleeps beside an item",
    ),
    Mutant(
        "buffer-put-does-not-ring",
        "patterns/_workers.py",
        (
            (
                "            self._counted += 1\n"
                "            self._not_empty.notify()\n"
                "        self._ring()\n",
                "            self._counted += 1\n            self._not_empty.notify()\n",
            ),
        ),
        ("tests/patterns/test_bell.py",),
        "an item put in a buffer wakes no consumer waiting on the bell",
    ),
    Mutant(
        "end-notice-waits-the-whole-backoff",
        "patterns/shared_queue/_pacing.py",
        (
            (
                "        self._closing.wait(min(NOTICE_S, self._poll_at - now))",
                "        self._closing.wait(self._poll_at - now)",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_end_notice.py::test_a_learner_waiting_long_notices_the_end_within_the_bound_at_a_60_s_lease",
            "tests/patterns/shared_queue/test_waiting.py::test_a_waiting_learner_looks_for_the_end_each_second_and_ends_within_one",
            "tests/patterns/shared_queue/test_waiting.py::test_the_learner_that_finishes_last_ends_the_epoch_at_once_leader_or_not",
        ),
        "a waiting learner sleeps until its next full poll, up to a renewal period (20 s "
        "at the default lease), so it notices the end of the epoch that late",
        killers=2,
    ),
    Mutant(
        "no-complete-read-between-polls",
        "patterns/shared_queue/_waiting.py",
        (
            (
                "            return Next.END if self.idle.ended() else Next.WAIT\n",
                "            return Next.WAIT\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_end_notice.py::test_a_learner_waiting_long_notices_the_end_within_the_bound_at_a_60_s_lease",
            "tests/patterns/shared_queue/test_waiting.py::test_a_waiting_learner_looks_for_the_end_each_second_and_ends_within_one",
            "tests/patterns/shared_queue/test_waiting.py::test_the_learner_that_finishes_last_ends_the_epoch_at_once_leader_or_not",
        ),
        "between full polls a waiting learner reads nothing, so the end reaches it only at "
        "its next full poll",
        killers=2,
    ),
    Mutant(
        "last-idle-leaves-the-end-to-the-leader",
        "patterns/shared_queue/_waiting.py",
        (("        if not last:\n", "        if True:\n"),),
        (
            "tests/patterns/shared_queue/test_end_notice.py::test_a_learner_waiting_long_notices_the_end_within_the_bound_at_a_60_s_lease",
            "tests/patterns/shared_queue/test_waiting.py::test_the_learner_that_finishes_last_ends_the_epoch_at_once_leader_or_not",
        ),
        "the learner that finishes last waits for the leader to list done/, which it does "
        "only at its next full poll",
        killers=2,
    ),
    Mutant(
        "no-cas-release-keeps-the-claim",
        "patterns/shared_queue/_unit_claims.py",
        (
            (
                "        if not self.cas:\n            self.mailbox.delete(key)\n",
                "        if not self.cas:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_without_cas.py::test_an_early_exit_deletes_the_learners_unfinished_claims",
            "tests/patterns/shared_queue/test_without_cas.py::test_a_released_claim_is_gone_so_the_next_learner_claims_the_unit_with_a_create",
        ),
        "without compare-and-swap an early exit leaves its unfinished claims, which are "
        "permanent there: nobody ever finishes those units",
        killers=2,
    ),
    Mutant(
        "no-cas-reclaim-tries-a-takeover",
        "patterns/shared_queue/_takeover.py",
        (
            (
                "        if not waiting or not self.claims.cas:\n",
                "        if not waiting:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_without_cas.py::test_three_learners_complete_every_unit_exactly_once",
            "tests/patterns/shared_queue/test_without_cas.py::test_a_learner_that_finds_only_others_claims_ends_and_status_says_why",
            "tests/patterns/shared_queue/test_waiting.py::test_without_compare_and_swap_a_learner_finding_only_live_claims_ends_at_its_first_step",
        ),
        "without compare-and-swap a learner that finds others' claims reads them to take "
        "them over, and fails on the swap the store does not have",
        killers=2,
    ),
    Mutant(
        "no-cas-waits-for-others",
        "patterns/shared_queue/_waiting.py",
        (
            (
                "        if not self.scope.claims.cas or not self.wait_for_others:\n",
                "        if not self.wait_for_others:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_without_cas.py::test_a_learner_that_finds_only_others_claims_ends_and_status_says_why",
            "tests/patterns/shared_queue/test_waiting.py::test_without_compare_and_swap_a_learner_finding_only_live_claims_ends_at_its_first_step",
        ),
        "without compare-and-swap a learner waits for units others hold, which no takeover "
        "can ever free: it hangs while the holder lives",
        killers=2,
    ),
    Mutant(
        "repair-leaves-the-confirmation-stale",
        "patterns/shared_queue/_pacing.py",
        (
            (
                '        self.backoff.reset()\n        self.quiet.confirmed_at = float("-inf")\n',
                "        self.backoff.reset()\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_completion_interleavings.py::test_a_completion_cut_between_its_two_writes_is_repaired_not_redelivered",
            "tests/patterns/shared_queue/test_waiting.py::test_a_restart_that_repairs_a_cut_completion_ends_at_its_next_poll",
        ),
        "after a learner writes a completion record it repaired, it waits a renewal period "
        "before it lists done/ again, so the epoch ends 20 s late at the default lease",
        killers=2,
    ),
    Mutant(
        "declare-lost-swaps-unconditionally",
        "patterns/_lease_watch.py",
        (
            (
                "        declared = self.mailbox.put_if_match(key, encode_record(record), "
                "version) is not None\n",
                "        self.mailbox.put(key, encode_record(record))\n        declared = True\n",
            ),
        ),
        (
            "tests/patterns/test_lease_interleavings.py::test_an_owner_renewing_while_declared_lost_stays_the_owner",
            "tests/patterns/test_lease_interleavings.py::test_an_owner_that_stays_silent_is_declared_lost_exactly_once",
            "tests/patterns/test_lease_interleavings.py::test_an_owner_that_ends_while_declared_lost_is_gone_and_keeps_its_record",
        ),
        "an observer overwrites a lease renewed after its read: a live owner is declared "
        "lost and fenced",
        killers=2,
    ),
    Mutant(
        "declare-lost-race-reads-as-alive",
        "patterns/_lease_watch.py",
        (
            (
                '            return (decode_record(data) or {}).get("state") not in LIVE_STATES\n',
                "            return False\n",
            ),
        ),
        (
            "tests/patterns/test_lease_interleavings.py::test_an_owner_that_stays_silent_is_declared_lost_exactly_once",
            "tests/patterns/test_lease_interleavings.py::test_an_owner_that_ends_while_declared_lost_is_gone_and_keeps_its_record",
        ),
        "an observer that lost the race to declare a silent owner lost reports it alive, "
        "and leaves its units for a later poll",
        killers=2,
    ),
    Mutant(
        "silent-learner-never-suspected",
        "patterns/shared_queue/_idle_markers.py",
        (("                suspects.append(holder)\n", "                pass\n"),),
        (
            "tests/patterns/shared_queue/test_idle_suspects.py::test_a_learner_of_this_epoch_whose_lease_went_silent_is_a_suspect",
            "tests/patterns/shared_queue/test_idle_watch.py::test_a_working_learner_stays_busy_and_one_that_left_is_a_suspect",
            "tests/patterns/shared_queue/test_waiting.py::test_a_busy_learner_that_renews_once_suspected_stays_watched_and_is_not_scanned_for",
        ),
        "a busy learner whose lease went silent is never a suspect: its units wait for the "
        "end-of-epoch safety net instead of a takeover",
        killers=2,
    ),
    Mutant(
        "settle-marks-a-renewed-suspect",
        "patterns/shared_queue/_idle_markers.py",
        (("            gone = state.dead and (\n", "            gone = True or (\n"),),
        (
            "tests/patterns/shared_queue/test_idle_suspects.py::test_a_suspect_that_renews_before_settle_is_left_alone",
            "tests/patterns/shared_queue/test_waiting.py::test_a_busy_learner_that_renews_once_suspected_stays_watched_and_is_not_scanned_for",
        ),
        "settle marks a suspect idle although it renewed: a live learner is left unwatched "
        "while it still works",
        killers=2,
    ),
    Mutant(
        "backward-walk-stops-before-position-0",
        "patterns/shared_queue/_policy/walk.py",
        (
            (
                "                if p >= 0 and not taken[p]:\n",
                "                if p > 0 and not taken[p]:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_short_run_at_either_end_of_the_order_is_found_and_walked_back",
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_sweep_takes_a_run_at_the_front_of_the_order_down_to_position_0",
        ),
        "a backward walk never claims the first unit of the order: a run at the front "
        "loses its first unit to a later sweep or takeover",
        killers=2,
    ),
    Mutant(
        "free-run-at-the-end-cut-short",
        "patterns/shared_queue/_policy/free_runs.py",
        (
            (
                "            self._iter_runs(last + 1, len(self.taken)), "
                "self._iter_runs(0, last + 1)\n",
                "            self._iter_runs(last + 1, len(self.taken) - 1), "
                "self._iter_runs(0, last + 1)\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_free_runs.py::test_runs_at_the_front_and_at_the_end_of_the_order_are_found",
            "tests/patterns/shared_queue/test_claim_policy.py::test_a_jumps_pages_go_on_to_a_free_unit_at_the_very_end_of_the_order",
        ),
        "the run after a position is looked for one unit short of the end: a free unit at "
        "the end of the order is passed over for one at the front",
        killers=2,
    ),
    Mutant(
        "delivery-wait-skips-the-record-in-flight",
        "patterns/pipeline/_deliveries.py",
        (("        self._thread.flush()\n", "        pass\n"),),
        (
            "tests/patterns/pipeline/test_delivery_recorder.py::test_wait_blocks_until_the_record_in_flight_has_landed",
            "tests/patterns/pipeline/test_delivery_recorder.py::test_records_land_in_order_and_wait_returns_once_they_have",
            "tests/patterns/pipeline/test_pipeline_takeover.py::test_when_next_returns_an_item_the_one_before_it_is_recorded_delivered",
        ),
        "next() returns the following item before the previous one's delivery record "
        "landed: two deliveries are unrecorded at once, and a failed one is raised late",
        killers=2,
    ),
    Mutant(
        "delivery-error-swallowed",
        "patterns/pipeline/_deliveries.py",
        (("            self._error = exc\n", "            pass\n"),),
        (
            "tests/patterns/pipeline/test_delivery_recorder.py::test_a_failed_record_is_raised_by_the_next_wait_once",
            "tests/patterns/pipeline/test_delivery_recorder.py::test_close_lets_the_record_in_flight_land_and_returns_its_error",
            "tests/patterns/pipeline/test_pipeline_takeover.py::test_an_item_taken_over_before_its_delivery_record_landed_fails_the_consumer",
        ),
        "a delivery record that failed is forgotten: the consumer goes on as if the item "
        "were recorded delivered",
        killers=2,
    ),
    Mutant(
        "undelivered-frontier-ignored",
        "patterns/pipeline/_takeover.py",
        (
            (
                "        group.advance(claim.n + 1 if claim.settled else claim.delivered_before)\n",
                "        group.advance(claim.n + 1 if claim.settled else 0)\n",
            ),
        ),
        (
            "tests/patterns/pipeline/test_undelivered.py::test_a_later_claim_of_the_owner_forgets_the_ones_it_shows_delivered",
            "tests/patterns/pipeline/test_undelivered.py::test_at_the_end_claims_a_later_claim_shows_delivered_are_not_read_again",
        ),
        "a consumer keeps every claim it passed until it sees that very claim delivered: "
        "it reads them all again at the end instead of trusting the owner's order",
        killers=2,
    ),
    Mutant(
        "undelivered-taken-highest-first",
        "patterns/pipeline/_takeover.py",
        (
            (
                "key=lambda entry: entry[1]):\n",
                "key=lambda entry: -entry[1]):\n",
            ),
        ),
        (
            "tests/patterns/pipeline/test_undelivered.py::test_a_dead_owners_items_are_taken_lowest_number_first_and_delivered_ones_never",
            "tests/patterns/pipeline/test_pipeline_takeover.py::test_a_closed_consumers_items_are_taken_over_in_the_order_it_claimed_them",
        ),
        "a dead owner's items are taken over from its newest claim back: a producer's items "
        "reach the next consumer out of order",
        killers=2,
    ),
    Mutant(
        "undelivered-observes-every-call",
        "patterns/pipeline/_takeover.py",
        (
            (
                "            if not group.dead and now - group.observed >= self._period:\n",
                "            if not group.dead:\n",
            ),
        ),
        (
            "tests/patterns/pipeline/test_undelivered.py::test_a_live_owner_is_observed_once_a_period_and_its_items_are_left",
            "tests/patterns/pipeline/test_pipeline_takeover.py::test_a_consumer_waiting_for_a_live_owners_item_reads_its_lease_once_a_period",
        ),
        "a consumer with nothing else to take reads a live owner's lease on every poll, "
        "not once per renewal period",
        killers=2,
    ),
    Mutant(
        "holdings-forget-before-recorded",
        "patterns/shared_queue/_recorder.py",
        (
            (
                "        recorded = self._record(held)\n",
                "        self._scope.holdings.remove(held.identifier)\n"
                "        recorded = self._record(held)\n",
            ),
        ),
        ("tests/patterns/shared_queue/test_waiting.py",),
        "a unit leaves the holdings before its completion is recorded: left early then, "
        "it is neither done nor released, and waits a whole lease for a takeover",
    ),
    Mutant(
        "handoff-buffer-one-over-capacity",
        "patterns/_workers.py",
        (
            (
                """            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            return not self._closed
""",
                """            while self._counted > self.capacity and not self._closed:
                self._not_full.wait()
            return not self._closed
""",
            ),
            (
                """            while self._counted >= self.capacity and not self._closed:
                self._not_full.wait()
            if self._closed:
""",
                """            while self._counted > self.capacity and not self._closed:
                self._not_full.wait()
            if self._closed:
""",
            ),
        ),
        ("tests/patterns/test_prefetch_bound.py",),
        "the handoff buffer holds prefetch + 1 items: the loader runs one item further ahead",
    ),
    Mutant(
        "unit-takeover-without-cas",
        "patterns/shared_queue/_unit_claims.py",
        (
            (
                "        new = swap_claim(\n"
                "            self.mailbox, key, self.learner_id, version, "
                "**self._extra(CLAIMED, previous)\n"
                "        )\n",
                "        from gradientmail.patterns._claims import claim_body, new_token\n\n"
                "        extra = self._extra(CLAIMED, previous)\n"
                "        self.mailbox.put(key, claim_body(self.learner_id, new_token(), **extra))\n"
                "        new = self.mailbox.get_versioned(key)[1]\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_unit_claim_transitions.py::test_two_learners_taking_over_one_released_unit_from_one_read_one_wins",
            "tests/patterns/shared_queue/test_unit_claim_transitions.py::test_a_takeover_from_a_stale_read_loses_to_the_owners_completion",
        ),
        "a unit is taken over with a plain put: two takers both win, and a completed unit "
        "can be taken back from a stale read",
        killers=2,
    ),
    # -- claims ------------------------------------------------------------------------------
    Mutant(
        "claim-read-back-unchecked",
        "patterns/_claims.py",
        (
            (
                "    if stored is None or stored[0].token != token:\n",
                "    if stored is None:\n",
            ),
        ),
        ("tests/contract/test_claim_read_back.py",),
        "a claim reported won is trusted without comparing the token read back: a store "
        "that lets two claimants win goes unnoticed",
    ),
    Mutant(
        "claim-takeover-before-read-back-as-violation",
        "patterns/_claims.py",
        (
            (
                "token != token and owner in previous_owners(stored[0]):\n",
                "token != token and owner in []:\n",
            ),
        ),
        ("tests/contract/test_claim_read_back.py",),
        "a claimant paused between its create and its read-back, whose claim was taken over "
        "meanwhile, reports the store as non-atomic instead of being fenced",
    ),
    Mutant(
        "claim-ambiguous-create-as-lost",
        "patterns/_claims.py",
        (
            (
                """            stored = _read_versioned(mailbox, key)
            if stored is not None:
                return stored if stored[0].token == token else None
            if attempt == SETTLE_ATTEMPTS:
                raise
""",
                "            return None\n",
            ),
        ),
        ("tests/contract/test_claim_read_back.py",),
        "a claim whose create lost its response counts as lost without reading it back: "
        "the claim this learner made is never loaded by anyone",
    ),
    Mutant(
        "claim-ambiguous-create-as-won",
        "patterns/_claims.py",
        (
            (
                "                return stored if stored[0].token == token else None\n",
                "                return stored\n",
            ),
        ),
        ("tests/contract/test_claim_read_back.py",),
        "a claim whose create lost its response counts as won whenever some claim is "
        "stored, even another claimant's: both load the unit",
    ),
    Mutant(
        "claim-swap-unsettled",
        "patterns/_claims.py",
        (
            (
                "            if record.token == token:\n                return current\n",
                "            if False:\n                return current\n",
            ),
        ),
        ("tests/patterns/shared_queue/test_ambiguous_writes.py",),
        "a claim swap (a completion, a release, a takeover) whose response was lost is not "
        "recognised as landed: a completed unit reads as taken over and is never recorded",
    ),
    Mutant(
        "claim-swap-lost-request-not-resent",
        "patterns/_claims.py",
        (
            (
                "            if current != version:\n"
                "                return None  # another learner's swap came first\n",
                "            if True:\n"
                "                return None  # another learner's swap came first\n",
            ),
        ),
        ("tests/patterns/shared_queue/test_ambiguous_writes.py",),
        "a claim swap whose request was lost is taken for another learner's: the completion "
        "is dropped though the claim is still this learner's",
    ),
    Mutant(
        "record-create-not-resent",
        "patterns/_claims.py",
        (
            (
                "                continue  # ours did not land (or not yet): create again\n",
                "                raise\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_ambiguous_writes.py",
            "tests/patterns/pipeline/test_pipeline_ambiguous_writes.py",
        ),
        "a record whose create was lost before the store saw it (a completion, a marker, a "
        "manifest, a pipeline item) kills the learner instead of being sent again",
    ),
    Mutant(
        "record-create-takes-any-record-as-ours",
        "patterns/_claims.py",
        (
            (
                "            return True if same is None else same(stored)\n",
                "            return True\n",
            ),
        ),
        ("tests/patterns/shared_queue/test_ambiguous_writes.py",),
        "an ambiguous create that finds another run's manifest or another producer's record "
        "counts it as its own: two runs mix in one namespace",
    ),
    Mutant(
        "completion-error-kills-the-recorder",
        "patterns/shared_queue/_recorder.py",
        (
            (
                "        except BaseException as exc:  # noqa: BLE001 - any failure must reach",
                '        except __import__("gradientmail").BackendError as exc:  # noqa: BLE001 -',
            ),
        ),
        (
            "tests/patterns/shared_queue/test_ambiguous_writes.py::"
            "test_any_error_recording_a_completion_reaches_the_loop",
        ),
        "an error other than the store's while recording a completion ends the recorder "
        "thread with the unit still held: the loader waits for it, and the training loop hangs",
    ),
    # -- leases ------------------------------------------------------------------------------
    Mutant(
        "lease-never-renews",
        "patterns/_leases.py",
        (
            (
                """                try:
                    self.renew()
                    self.renew_error = None
""",
                """                try:
                    self.renew_error = None
""",
            ),
        ),
        (
            "tests/patterns/test_lease_liveness.py::test_a_started_lease_renews_in_the_background",
            "tests/patterns/test_lease_liveness.py::test_a_watcher_never_declares_a_renewing_holder_dead",
            "tests/patterns/test_lease_clock.py::test_a_failed_background_renewal_is_retried_next_period_and_fences_nothing",
        ),
        "the background thread of a lease never renews it: an idle live holder is declared "
        "dead after one lease duration",
        killers=2,
    ),
    Mutant(
        "lease-watcher-ignores-renewals",
        "patterns/_lease_watch.py",
        (("        if seen is None or seen[0] != mark:\n", "        if seen is None:\n"),),
        (
            "tests/patterns/test_lease_clock.py::test_a_renewal_restarts_the_observers_count",
            "tests/patterns/test_lease_liveness.py::test_a_watcher_never_declares_a_renewing_holder_dead",
        ),
        "a lease watcher measures silence from its first observation, not from the last "
        "change: it declares a renewing (live) holder dead",
        killers=2,
    ),
    Mutant(
        "lease-fresh-from-the-answer",
        "patterns/_leases.py",
        (
            (
                "                raise self._error()\n            self._stored(new, sent)\n",
                "                raise self._error()\n"
                "            self._stored(new, self.clock())\n",
            ),
        ),
        (
            "tests/patterns/test_lease_clock.py::test_freshness_counts_from_when_a_renewal_was_sent_not_answered",
            "tests/patterns/test_lease_clock.py::test_a_holder_answered_late_never_acts_once_an_observer_declared_it_lost",
        ),
        "a holder counts its freshness from when a renewal was answered, not sent: a slow "
        "answer lets it act after an observer may already have declared it dead",
        killers=2,
    ),
    Mutant(
        "lease-fresh-for-the-whole-lease",
        "patterns/_leases.py",
        (
            (
                "        self._own.fresh_until = sent + SAFE_FRACTION * self.duration\n",
                "        self._own.fresh_until = sent + self.duration\n",
            ),
        ),
        (
            "tests/patterns/test_lease_clock.py::test_the_holder_acts_without_a_request_inside_its_window_and_renews_past_it",
            "tests/patterns/test_lease_clock.py::test_a_stale_holder_that_cannot_renew_stops_acting",
            "tests/patterns/shared_queue/test_incarnation_takeover.py::test_the_earlier_incarnation_is_stale_when_the_new_one_takes_over",
        ),
        "a holder trusts a renewal for the whole lease, no margin: it acts up to the moment "
        "an observer may take its work",
        killers=2,
    ),
    Mutant(
        "stale-holder-acts-when-renewal-fails",
        "patterns/_leases.py",
        (
            (
                "            self.renew()\n        except BackendError as exc:\n",
                "            self.renew()\n        except BackendError:\n            return\n"
                "        except ZeroDivisionError as exc:\n",
            ),
        ),
        (
            "tests/patterns/test_lease_clock.py::test_a_stale_holder_that_cannot_renew_stops_acting",
            "tests/patterns/test_lease_clock.py::test_an_observer_with_another_lease_setting_declares_a_silent_holder_lost_on_its_lease",
            "tests/patterns/shared_queue/test_fenced_close.py::test_a_learner_fenced_for_a_stale_lease_raises_lease_lost_and_never_reads_finished",
        ),
        "a stale holder whose renewal fails acts anyway, on work another may take over",
        killers=2,
    ),
    Mutant(
        "observer-uses-its-own-duration",
        "patterns/_lease_watch.py",
        (
            (
                '        duration = float(record.get("lease") or self.duration)\n',
                "        duration = self.duration\n",
            ),
        ),
        (
            "tests/patterns/test_lease_clock.py::test_an_observer_counts_silence_by_the_duration_the_lease_states",
            "tests/patterns/test_lease_clock.py::test_an_observer_with_another_lease_setting_declares_a_silent_holder_lost_on_its_lease",
        ),
        "an observer configured with a shorter lease than the holder's declares a live "
        "holder dead by its own figure",
        killers=2,
    ),
    # -- backends ----------------------------------------------------------------------------
    Mutant(
        "base-ambiguous-conflict-as-lost",
        "backends/_base.py",
        (
            (
                """            if outcome is Conflict.LOST and not ambiguous:
                return None
            return self._resolve(key, write_id, replace=replace, cause=None)
""",
                """            return None
""",
            ),
        ),
        (
            "tests/contract/test_lost_responses.py",
            "tests/contract/test_claim_read_back.py",
        ),
        "BaseMailbox reports a conflict after an ambiguous attempt as lost without reading "
        "the key back, although its own earlier attempt may be the write stored",
    ),
    Mutant(
        "memory-create-check-then-set",
        "backends/memory.py",
        (
            (
                """        with store.lock:
            if key in store.values:
                return Conflict.LOST
            store.values[key] = (data, write_id)
            bisect.insort(store.sorted_keys, key)
""",
                """        with store.lock:
            taken = key in store.values
        if taken:
            return Conflict.LOST
        with store.lock:
            store.values[key] = (data, write_id)
            bisect.insort(store.sorted_keys, key)
""",
            ),
        ),
        ("tests/contract/test_create_interleavings.py",),
        "memory:// put_if_absent checks and sets under two lock holds: a create between "
        "them is overwritten and both callers win",
    ),
    Mutant(
        "file-create-check-then-rename",
        "backends/local.py",
        (
            (
                "                os.link(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent, "
                "follow_symlinks=False)\n"
                "                return True\n",
                """                try:
                    os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                    raise FileExistsError(leaf)
                except FileNotFoundError:
                    pass
                os.rename(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
                return True
""",
            ),
        ),
        ("tests/contract/test_create_interleavings.py",),
        "file:// put_if_absent checks that the name is free, then renames over it: a create "
        "in between is overwritten and both callers win",
    ),
    Mutant(
        "memory-cas-ignores-version",
        "backends/memory.py",
        (
            (
                "            if entry is None or entry[1] != version.token:\n",
                "            if entry is None:\n",
            ),
        ),
        ("tests/contract/test_contract.py",),
        "memory:// put_if_match ignores the expected version: a stale swap overwrites",
    ),
    Mutant(
        "file-cas-ignores-version",
        "backends/local.py",
        (
            (
                "            return current is not None and current.version == version\n",
                "            return current is not None\n",
            ),
        ),
        ("tests/contract/test_contract.py",),
        "file:// put_if_match ignores the expected version: a stale swap overwrites",
    ),
    Mutant(
        "file-cas-without-flock",
        "backends/_local_root.py",
        (
            (
                """                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
""",
                """                yield
""",
            ),
        ),
        ("tests/backends/test_local_cas_locking.py",),
        "file:// compare-and-swap and put lock the key's stripe only within the "
        "process: two processes can both swap from one version",
    ),
    Mutant(
        "file-delete-ignores-swaps",
        "backends/_local_swaps.py",
        (
            (
                "            os.rename(leaf, name, src_dir_fd=parent, dst_dir_fd=staging)\n",
                "            os.unlink(leaf, dir_fd=parent)\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "file:// delete unlinks the key's file whatever swap is announced: a swap that read "
        "the key before the delete places its value after it",
        killers=2,
    ),
    Mutant(
        "file-swap-skips-its-announcement",
        "backends/_local_swaps.py",
        (
            (
                "        fd = _announce(staging, name, staged)\n",
                '        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=staging)\n',
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "a file:// swap places its value from .tmp without announcing itself: a delete "
        "between its read and its rename is undone, a create there overwritten",
        killers=2,
    ),
    Mutant(
        "file-swap-trusts-its-first-read",
        "backends/local.py",
        (
            (
                "swaps.swap(staging, name, staged, matches, place)",
                "swaps.swap(staging, name, staged, lambda: True, place)",
            ),
        ),
        ("tests/backends/test_local_deletes.py", "tests/backends/test_local_cas_locking.py"),
        "a file:// swap trusts the version it read before taking the lock and announcing "
        "itself: a write in between is overwritten",
        killers=2,
    ),
    Mutant(
        "file-delete-waits-for-a-stopped-swap",
        "backends/_local_swaps.py",
        (
            (
                "            _cancel(staging, name)  # a swap of this key is announced\n",
                "            pass  # a swap of this key is announced: wait for it\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "a file:// delete that meets a swap's announcement waits for it instead of cancelling "
        "it, so a swap stopped inside its lock holds up the key's deletes too",
        killers=2,
    ),
    Mutant(
        "file-swap-blocked-by-what-a-dead-one-left",
        "backends/_local_swaps.py",
        (
            (
                "            _clear(staging, name)  # a deleter's moved file, or a dead swap's "
                "announcement\n",
                "            pass  # a deleter's moved file, or a dead swap's announcement\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "a file:// swap cannot announce itself while a killed swap's announcement or a "
        "stopped delete's moved file is in the way: the key can no longer be swapped",
        killers=2,
    ),
    Mutant(
        "file-swap-fails-when-a-delete-took-its-name",
        "backends/_local_swaps.py",
        (
            (
                "        except (FileNotFoundError, NotADirectoryError):\n",
                "        except FileNotFoundError:\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py", "tests/backends/test_local_linearizable.py"),
        "a file:// swap whose announcement a delete removed while empty, moving the key's file "
        "to that name, fails with a BackendError instead of reading the key again",
    ),
    Mutant(
        "file-open-keeps-dead-announcements",
        "backends/local.py",
        (("                swaps.sweep(staging)\n", ""),),
        ("tests/backends/test_local_deletes.py",),
        "opening a file:// mailbox leaves a killed swap's announcement (and the hard link to "
        "its value) in .tmp forever",
    ),
    Mutant(
        "file-delete-takes-the-lock",
        "backends/local.py",
        (
            (
                "            with self._managed(fs.STAGING) as staging:\n"
                "                chain = fs.open_chain(root, names)\n",
                "            with self._dir.locked(key), self._managed(fs.STAGING) as staging:\n"
                "                chain = fs.open_chain(root, names)\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "file:// delete holds the key's lock stripe, as it once did: a process stopped inside "
        "a swap, or inside a delete, holds up every delete and swap of that stripe",
        killers=2,
    ),
    Mutant(
        "file-delete-keeps-empty-folders",
        "backends/local.py",
        (
            (
                "                        fs.prune_empty(root, chain, names)\n",
                "                        pass\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "file:// delete leaves its key's empty folders behind: one per version an exchange "
        "ever wrote, each walked by every listing (the 40,000-version test of "
        "test_exchange_file_store.py catches it too, in minutes)",
        killers=2,
    ),
    Mutant(
        "file-create-into-a-removed-folder-fails",
        "backends/local.py",
        (
            (
                "                            continue  # emptied and removed since we opened it: "
                "make it again\n",
                "                            raise\n",
            ),
        ),
        ("tests/backends/test_local_deletes.py",),
        "a file:// create whose folder a delete removed before it placed its value fails "
        "instead of making the folder again",
    ),
    Mutant(
        "file-walk-gives-up-on-a-removed-folder",
        "backends/_local_fs.py",
        (("    for _ in range(REMADE if create else 0):\n", "    for _ in range(0):\n"),),
        ("tests/backends/test_local_deletes.py",),
        "a file:// create whose parent folder a delete removed while it made the folders of "
        "its key fails instead of making it again",
    ),
    Mutant(
        "keys-allow-dot-dot",
        "_keys.py",
        (('        if segment in (".", ".."):\n', '        if segment == ".":\n'),),
        ("tests/contract/test_contract.py",),
        "validate_key lets a '..' segment through, so a key can name a path outside "
        "its directory on file:// and differ between stores",
    ),
    # -- the asynchronous parameter exchange ----------------------------------------------------
    Mutant(
        "exchange-ledger-ignored",
        "_exchange/applier.py",
        (("            if entry.seq >= pending:", "            if False:"),),
        (
            "tests/torch/test_exchange.py::test_lost_swap_responses_are_settled_by_the_ledger_exactly_once",
            "tests/torch/test_exchange.py::test_head_swaps_whose_responses_are_lost_on_the_wire_apply_every_delta_once[s3-ledger]",
        ),
        "after a lost response the exchange applies its delta again instead of reading the "
        "ledger: a swap that landed is applied twice",
    ),
    Mutant(
        "exchange-counted-before-published",
        "_exchange/applier.py",
        (
            (
                "        return Outcome(self.anchor, head.version, tau, applied)",
                "        self.tally.exchanged(version=head.version, tau=tau, applied=applied)\n"
                "        return Outcome(self.anchor, head.version, None, applied)",
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_stats_count_an_exchange_only_once_the_next_step_can_adopt_it",
        ),
        "the stats count an exchange before its result is handed over, so a loop pacing "
        "itself on stats.exchanges finds nothing to adopt and starts no exchange",
    ),
    Mutant(
        "exchange-no-fence",
        "_exchange/membership.py",
        (
            (
                "        return entry is not None and entry.incarnation == self.incarnation",
                "        return entry is not None",
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_a_restart_with_the_same_id_continues_its_ledger_and_fences_the_old_process",
        ),
        "a restarted learner does not fence the old process, which goes on applying with "
        "the same ledger entry",
    ),
    Mutant(
        "exchange-adopt-drops-local-steps",
        "_exchange/learner.py",
        (
            (
                "            self._tensors.add(change)\n",
                "            self._tensors.assign(outcome.shared)\n",
            ),
        ),
        ("tests/torch/test_exchange.py::test_sixteen_threads_apply_every_delta_exactly_once",),
        "adopting a shared version throws away the local steps made while the exchange ran",
    ),
    Mutant(
        "exchange-stale-cache",
        "_exchange/reader.py",
        (
            (
                "        if self._cached is not None and self._cached[0] == head.token:",
                "        if self._cached is not None:",
            ),
        ),
        ("tests/torch/test_exchange.py::test_sixteen_threads_apply_every_delta_exactly_once",),
        "a learner applies its delta to the version it last saw instead of the current one, "
        "overwriting the others' progress",
    ),
    Mutant(
        "exchange-weight-uncapped",
        "_exchange/rules.py",
        (
            (
                "        return min(weight, 1.0 / self.rule.step(active))",
                "        return weight",
            ),
        ),
        (
            "tests/torch/test_exchange.py::"
            "test_an_outer_lr_is_the_fraction_of_a_fresh_delta_applied",
        ),
        "a fresh delta with an explicit outer_lr is amplified past its own size",
    ),
    Mutant(
        "exchange-leave-without-final",
        "_exchange/learner.py",
        (
            (
                "            if exc_type is None:\n                self._leave()",
                "            if False:\n                self._leave()",
            ),
        ),
        ("tests/torch/test_exchange.py::test_sixteen_threads_apply_every_delta_exactly_once",),
        "leaving the with block normally does not exchange the steps made since the last exchange",
    ),
    Mutant(
        "exchange-fragments-after-head",
        "_exchange/store.py",
        (
            (
                "                raise Superseded(head.token) from exc",
                '                chunks.append(b"")',
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_a_version_collected_while_it_is_read_is_read_again_from_the_new_head",
        ),
        "a reader that meets a collected fragment uses what it has instead of reading the "
        "head again: a version read half from another",
    ),
    # -- the exchange used the wrong way (issue 49) --
    Mutant(
        "exchange-leave-judged-by-a-counter",
        "_exchange/learner.py",
        (
            (
                "        if leaving and self._tensors.equal(self._handoff.applier.anchor):",
                "        if leaving and self._since == 0:",
            ),
        ),
        (
            "tests/torch/test_exchange_use.py::test_leaving_exchanges_training_that_no_step_call_counted",
        ),
        "leaving trusts the step counter: training no step() counted is discarded",
    ),
    Mutant(
        "exchange-optimizer-not-hooked",
        "_exchange/learner.py",
        (
            (
                "            self._hooks.append(self._optimizer.register_step_post_hook("
                "self._optimizer_stepped))",
                "            pass",
            ),
        ),
        (
            "tests/torch/test_exchange_use.py::test_the_optimizer_hook_counts_each_optimizer_step_without_a_step_call",
            "tests/torch/test_exchange_use.py::test_with_gradient_accumulation_the_hook_counts_optimizer_steps_not_micro_batches",
        ),
        "optimizer= is accepted but its steps are never counted: no exchange before leaving",
        killers=2,
    ),
    Mutant(
        "exchange-hook-outlives-the-with-block",
        "_exchange/learner.py",
        (("            hook.remove()\n", "            pass\n"),),
        ("tests/torch/test_exchange_use.py::test_the_hook_goes_with_the_with_block",),
        "the optimizer keeps calling a left Exchange, and its steps raise after the with block",
    ),
    Mutant(
        "exchange-steps-counted-twice",
        "_exchange/learner.py",
        (
            (
                "        if self._optimizer is not None:\n            raise",
                "        if False:\n            raise",
            ),
        ),
        (
            "tests/torch/test_exchange_use.py::test_step_is_refused_when_the_optimizer_counts_the_steps",
        ),
        "step() beside the optimizer hook counts every step twice, silently",
    ),
    Mutant(
        "exchange-step-outside-the-with-block",
        "_exchange/learner.py",
        (('        if self._phase != "entered":\n', "        if False:\n"),),
        ("tests/torch/test_exchange_use.py::test_step_outside_the_with_block_is_refused",),
        "step() before entering or after leaving does nothing, silently",
    ),
    Mutant(
        "exchange-entered-twice",
        "_exchange/learner.py",
        (('        if self._phase != "new":\n', "        if False:\n"),),
        (
            "tests/torch/test_exchange_use.py::test_entering_the_same_exchange_twice_is_refused_and_never_hangs",
        ),
        "a second with block on one Exchange hangs at its end",
    ),
    Mutant(
        "exchange-memory-in-several-processes",
        "_exchange/options.py",
        (("    if where is not None:\n", "    if False:\n"),),
        (
            "tests/torch/test_exchange_processes.py::test_memory_in_a_torch_distributed_job_of_several_processes_is_refused",
            "tests/torch/test_exchange_processes.py::test_memory_in_a_spawned_process_is_refused",
            "tests/torch/test_exchange_processes.py::test_memory_in_a_dataloader_worker_is_refused",
        ),
        "memory:// is accepted in several processes: each trains its own model, unseen",
        killers=2,
    ),
    Mutant(
        "exchange-buffers-stay-local",
        "_exchange/tensors.py",
        (("        if buffers:\n", "        if False:\n"),),
        (
            "tests/torch/test_exchange_shared_state.py::test_buffers_travel_with_the_parameters_and_load_shared_fills_them",
            "tests/torch/test_exchange_shared_state.py::test_batch_norm_statistics_are_shared_so_the_loaded_model_evaluates_as_the_learners",
        ),
        "buffers are never shared: BatchNorm statistics differ per learner and load_shared "
        "returns a model that evaluates wrong",
        killers=2,
    ),
    Mutant(
        "exchange-load-shared-skips-buffers",
        "_exchange/loading.py",
        (
            (
                'buffers=bool(settings.get("buffers", False))',
                "buffers=False",
            ),
        ),
        (
            "tests/torch/test_exchange_shared_state.py::test_buffers_travel_with_the_parameters_and_load_shared_fills_them",
            "tests/torch/test_exchange_shared_state.py::test_batch_norm_statistics_are_shared_so_the_loaded_model_evaluates_as_the_learners",
        ),
        "load_shared fills the parameters but leaves the model's buffers as they were",
        killers=2,
    ),
    Mutant(
        "exchange-counts-last-writer-wins",
        "_exchange/applier.py",
        (
            (
                "            counts = torch.maximum(current.counts, snapshot.counts)",
                "            counts = snapshot.counts",
            ),
        ),
        (
            "tests/torch/test_exchange_shared_state.py::test_buffers_travel_with_the_parameters_and_load_shared_fills_them",
        ),
        "an integer buffer takes the last learner's value, not the largest",
    ),
    Mutant(
        "exchange-adopt-drops-larger-counts",
        "_exchange/applier.py",
        (
            (
                "counts = torch.maximum(current.counts, snapshot.counts)",
                "counts = snapshot.counts",
            ),
        ),
        (
            "tests/torch/test_exchange_shared_state.py::test_buffers_travel_with_the_parameters_and_load_shared_fills_them",
        ),
        "adopting keeps the learner's own integer buffers, not the shared largest value",
    ),
    Mutant(
        "exchange-settings-unchecked",
        "_exchange/layout.py",
        (
            (
                "        if name in settings and settings[name] != value:",
                "        if False:",
            ),
        ),
        (
            "tests/torch/test_exchange_shared_state.py::test_a_learner_asking_for_another_shared_setting_is_refused_naming_both_values",
            "tests/torch/test_exchange_shared_state.py::test_the_momentum_of_a_rule_object_is_a_shared_setting_too",
        ),
        "a learner with another outer_lr, staleness or window joins, and moves the shared "
        "model by its own rule, silently",
        killers=2,
    ),
    Mutant(
        "exchange-frozen-not-warned",
        "_exchange/learner.py",
        (("        if frozen is not None:\n", "        if False:\n"),),
        (
            "tests/torch/test_exchange_shared_state.py::test_a_parameter_frozen_here_but_trained_by_the_first_learner_is_warned_about",
        ),
        "a parameter frozen on one learner and trained on another moves, without a word",
    ),
    Mutant(
        "exchange-caches-unrounded-values",
        "_exchange/store.py",
        (
            (
                "        return Written(token, count, min(step, len(data)), "
                "State(stored, state.counts))",
                "        return Written(token, count, min(step, len(data)), state)",
            ),
        ),
        (
            "tests/torch/test_exchange_shared_state.py::test_a_bf16_wire_stores_the_shared_weights_in_bf16_and_never_moves_a_frozen_one_again",
        ),
        "the writer keeps the unrounded values it wrote in bf16: each version rounds them "
        "anew, and weights nobody trains drift",
    ),
    # -- the exchange and a failing store (issue 49) --
    Mutant(
        "exchange-not-patient",
        "_exchange/options.py",
        (
            (
                '        Patient(counted, patience, closing, f"exchange learner {learner!r}"),',
                "        counted,",
            ),
        ),
        (
            "tests/torch/test_exchange_outages.py::test_an_outage_is_ridden_out_steps_never_wait_and_the_progress_lands_once",
            "tests/torch/test_exchange_outages.py::test_a_join_during_an_outage_waits_for_the_store",
            "tests/torch/test_exchange_outages.py::test_eight_threads_under_random_faults_apply_every_delta_exactly_once",
        ),
        "the exchange gives up after the mailbox's own retries (about a second): a short "
        "outage kills every learner",
        killers=2,
    ),
    Mutant(
        "exchange-outage-outlives-the-exit",
        "_exchange/handoff.py",
        (("        self.closing.set()\n", ""),),
        (
            "tests/torch/test_exchange_outages.py::test_leaving_through_an_exception_during_an_outage_does_not_wait_it_out",
        ),
        "a learner leaving through an exception waits out the whole outage first",
    ),
    Mutant(
        "exchange-unknown-create-fatal",
        "_exchange/store.py",
        (
            (
                "            except OutcomeUnknownError:\n"
                "                if self.tally is not None:",
                "            except OutcomeUnknownError:\n                raise\n"
                "                if self.tally is not None:",
            ),
        ),
        (
            "tests/torch/test_exchange_outages.py::test_a_layout_create_whose_outcome_is_unknown_is_settled_by_reading_it_back",
            "tests/torch/test_exchange_outages.py::test_fragment_creates_whose_outcome_is_unknown_are_settled_and_applied_once",
        ),
        "a create of the layout or a fragment whose response is lost kills the learner",
        killers=2,
    ),
    Mutant(
        "exchange-failed-delete-fatal",
        "_exchange/store.py",
        (
            (
                "                log.info("
                '"could not delete %s (%s); left for the sweep", key, exc)',
                "                raise",
            ),
        ),
        (
            "tests/torch/test_exchange_outages.py::test_a_failed_delete_after_a_landed_swap_is_logged_and_never_fatal",
        ),
        "a delete the store refuses after a landed swap kills the learner",
    ),
    # -- damaged or foreign records under a shared model (issue 49) --
    Mutant(
        "exchange-unreadable-read-for-ever",
        "_exchange/reader.py",
        (
            (
                "        if now - since >= UNREADABLE_AFTER_S or stopping:\n",
                "        if stopping:\n",
            ),
        ),
        (
            "tests/torch/test_exchange_damage.py::test_a_missing_fragment_is_named_by_every_reader_and_a_joiner_never_swaps_over_it",
            "tests/torch/test_exchange_damage.py::test_a_head_naming_an_absent_token_is_named",
            "tests/torch/test_exchange_damage.py::test_a_running_learner_meeting_an_unreadable_version_raises_at_a_step",
            "tests/torch/test_exchange_reader.py::test_an_unreadable_version_is_read_again_at_once_then_paused_doubling_up_to_the_bound",
        ),
        "a head naming a version that cannot be read makes every reader spin for ever",
        killers=2,
    ),
    Mutant(
        "exchange-unreadable-outlives-the-exit",
        "_exchange/reader.py",
        (
            (
                "        stopping = self._stop is not None and self._stop.is_set()",
                "        stopping = False",
            ),
        ),
        (
            "tests/torch/test_exchange_damage.py::test_leaving_through_an_exception_ends_the_wait_on_an_unreadable_version",
        ),
        "a learner leaving through an exception waits out the unreadable version's bound",
    ),
    Mutant(
        "exchange-fragment-length-unchecked",
        "_exchange/store.py",
        (
            (
                "            if total:\n                self._check_length(",
                "            if False:\n                self._check_length(",
            ),
        ),
        (
            "tests/torch/test_exchange_damage.py::test_a_fragment_of_the_wrong_length_is_refused_naming_it_and_both_lengths",
        ),
        "a fragment 4 bytes longer shifts every value silently; a shorter one raises an "
        "untyped error naming no key",
    ),
    Mutant(
        "exchange-fragment-count-unchecked",
        "_exchange/store.py",
        (("            if head.fragments != expected:\n", "            if False:\n"),),
        (
            "tests/torch/test_exchange_damage.py::test_a_head_naming_more_fragments_than_the_layout_makes_is_refused_at_once",
        ),
        "a head naming more fragments than the layout makes is read until the bound, and "
        "blamed on a missing fragment",
    ),
    Mutant(
        "exchange-deleted-head-starts-over",
        "_exchange/membership.py",
        (("                if store.stored_versions() > 0:\n", "                if False:\n"),),
        (
            "tests/torch/test_exchange_damage.py::test_a_deleted_head_with_versions_still_stored_is_refused_not_started_over",
        ),
        "a deleted head makes the next joiner start a new model from its own weights, "
        "dropping the training stored",
    ),
    Mutant(
        "exchange-deleted-layout-rewritten",
        "_exchange/store.py",
        (
            (
                "before the head\n            if stored is None:\n",
                "before the head\n            if False:\n",
            ),
        ),
        (
            "tests/torch/test_exchange_damage.py::test_a_deleted_layout_is_refused_and_never_rewritten_by_another_shape",
        ),
        "a deleted layout lets a joiner of another shape write its own over a running model",
    ),
    Mutant(
        "exchange-head-may-go-back",
        "_exchange/watch.py",
        (("        if head.version < self._highest:\n", "        if False:\n"),),
        (
            "tests/torch/test_exchange_damage.py::test_a_head_restored_from_an_older_copy_is_refused_by_a_learner_that_saw_newer",
            "tests/torch/test_exchange_reader.py::test_a_head_older_than_one_read_before_is_refused",
        ),
        "a head restored from an older copy is accepted: the training since is dropped",
        killers=2,
    ),
    Mutant(
        "exchange-head-version-unchecked",
        "_exchange/layout.py",
        (("        if token_version(head.token) != head.version:\n", "        if False:\n"),),
        ("tests/torch/test_exchange_damage.py::test_a_head_whose_version_was_set_back_is_refused",),
        "a head whose version number was set back is accepted",
    ),
    Mutant(
        "exchange-emptied-ledger-taken-for-a-restart",
        "_exchange/applier.py",
        (
            (
                "            if entry is None:\n                raise InvalidDataError(",
                "            if False:\n                raise InvalidDataError(",
            ),
        ),
        (
            "tests/torch/test_exchange_damage.py::test_an_emptied_ledger_is_refused_as_damage_not_taken_for_a_newer_process",
        ),
        "an emptied ledger is reported as a newer process having replaced this one",
    ),
    Mutant(
        "exchange-clock-skew-unwarned",
        "_exchange/watch.py",
        (("        if off > allowed:\n", "        if False:\n"),),
        (
            "tests/torch/test_exchange_damage.py::test_a_writer_whose_clock_is_far_ahead_is_warned_about_once",
            "tests/torch/test_exchange_reader.py::test_a_writer_clock_off_by_more_than_a_quarter_window_is_warned_about",
        ),
        "a learner whose clock is far off changes the outer step without a word",
        killers=2,
    ),
    Mutant(
        "status-json-counts-no-exchanges",
        "_exchange/report.py",
        (
            (
                '            "exchanges": sum(entry.seq for entry in head.learners.values()),',
                '            "exchanges": 0,',
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_status_json_has_the_shared_model_section_even_without_a_queue_run",
            "tests/torch/test_exchange.py::test_status_json_of_a_queue_run_beside_a_shared_model_has_both",
        ),
        "status --json reports no exchanges for a shared model that trained",
        killers=2,
    ),
    Mutant(
        "status-json-prints-a-table-for-shared-models-alone",
        "_cli/status.py",
        (
            (
                "                if args.json:  # a mailbox that holds shared models alone",
                "                if False:",
            ),
        ),
        (
            "tests/torch/test_exchange.py::test_status_json_has_the_shared_model_section_even_without_a_queue_run",
        ),
        "status --json on a mailbox holding only a shared model prints the table, exit 0",
    ),
    # -- the mechanisms this round fixed: each mutant is the bug a test was written for --
    Mutant(
        "lease-takeover-after-periods",
        "patterns/_leases.py",
        (("        window = TAKEOVER_FRACTION * duration", "        window = period * 1.5"),),
        (
            "tests/patterns/shared_queue/test_incarnation_takeover.py::test_the_earlier_incarnation_is_stale_when_the_new_one_takes_over",
            "tests/patterns/shared_queue/test_incarnation_takeover.py::test_the_wait_is_logged_at_info_with_its_length",
        ),
        "a restart takes its id's lease over after 1.5 renewal periods, while the paused "
        "earlier incarnation still trusts its last renewal: both deliver",
        killers=2,
    ),
    Mutant(
        "claim-foreign-record-skipped",
        "patterns/shared_queue/_unit_claims.py",
        (
            (
                "        if record is None:\n            raise ForeignRecordError(",
                "        if record is None:\n            return None\n"
                "            raise ForeignRecordError(",
            ),
        ),
        ("tests/patterns/shared_queue/test_foreign_records.py",),
        "a claim key holding bytes no learner wrote is skipped: its unit is never finished "
        "and the queue waits for it forever",
    ),
    Mutant(
        "refused-session-marks-failed",
        "session.py",
        (
            (
                "        if refused and self._found.read and self._counters()"
                " == self._found.entered:",
                "        if False:",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_refused_learner.py::test_a_refused_rerun_leaves_the_finished_learner_finished",
            "tests/patterns/shared_queue/test_refused_learner.py::test_a_refused_learner_of_a_new_id_leaves_no_record",
        ),
        "a Session left by a run's refusal publishes 'failed' over the finished learner's "
        "record, so status of a complete run exits 1",
        killers=2,
    ),
    Mutant(
        "manifest-refused-list-left",
        "patterns/_run_layout.py",
        (
            (
                "    if wrote_list:\n"
                "        # Another job won the manifest: this job's list is not the run's.\n"
                '        mailbox.delete(f"{MANIFEST_UNITS_KEY}/{digest}")',
                "    if False:\n        pass",
            ),
        ),
        ("tests/patterns/shared_queue/test_two_jobs_one_url.py",),
        "a job refused in a race for the manifest leaves its identifier list behind",
    ),
    Mutant(
        "conformance-nothing-held-passes",
        "conformance/_report.py",
        (
            (
                "        if not self.by_outcome(Outcome.PASS):\n"
                "            # Every selected property was skipped: nothing was tested, so nothing"
                " passed.\n"
                "            return Verdict.INCONCLUSIVE",
                "",
            ),
        ),
        (
            "tests/conformance/test_conformance_verdicts.py::test_a_run_in_which_no_property_held_is_never_a_pass",
        ),
        "a run in which every selected property was skipped is called PASS",
    ),
    Mutant(
        "conformance-unguarded-main-ignored",
        "conformance/_runner.py",
        (("    report.unguarded = unguarded_main_call()", "    report.unguarded = None"),),
        (
            "tests/conformance/test_main_guard.py::test_an_unguarded_script_is_told_the_fix_and_runs_once",
        ),
        "a script without a __main__ guard starts racer processes that each rerun the suite",
    ),
    Mutant(
        "lease-renewal-unsettled",
        "patterns/_leases.py",
        (
            (
                "                new = self._settle(self.incarnation)[1]\n"
                "                if new is None:\n"
                "                    raise",
                "                raise",
            ),
        ),
        ("tests/patterns/shared_queue/test_ambiguous_writes.py",),
        "a renewal whose response was lost is not settled by the record: the holder keeps "
        "the old version and its next renewal thinks the lease was taken",
    ),
    Mutant(
        "record-create-unsettled",
        "patterns/_claims.py",
        (
            (
                "        except OutcomeUnknownError as exc:\n"
                "            try:\n"
                "                stored = mailbox.get(key)",
                "        except KeyError as exc:\n"
                "            try:\n"
                "                stored = mailbox.get(key)",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_ambiguous_writes.py",
            "tests/patterns/pipeline/test_pipeline_ambiguous_writes.py",
        ),
        "an ambiguous create of the manifest, the identifier list, a completion or a "
        "pipeline record kills the learner",
    ),
    Mutant(
        "manifest-values-ignored",
        "patterns/_run_layout.py",
        (
            (
                "        if values is not None and isinstance(theirs_values, str)"
                " and theirs_values != values:",
                "        if False:",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_refused_learner.py::test_resuming_with_the_same_ids_but_other_values_is_refused",
        ),
        "a resume with the same identifiers but other unit values is accepted: old and new "
        "data mix in one run",
    ),
    Mutant(
        "completion-ignores-the-gate",
        "patterns/shared_queue/_recorder.py",
        (("        if not self._gate.wait(mark):", "        if False:"),),
        (
            "tests/torch/test_loader.py::test_a_break_then_finishing_the_epoch_delivers_every_item",
            "tests/torch/test_loader.py::test_drop_last_leaves_the_dropped_items_units_undone_and_says_so",
            "tests/torch/test_loader.py::test_a_worker_queue_run_to_its_end_releases_the_unit_whose_items_the_loop_never_took",
        ),
        "a DataLoader worker records a unit done as its generator passes the last item, "
        "while that batch may still be dropped by torch: a break loses items",
        killers=2,
    ),
    Mutant(
        "gate-opens-for-a-new-iteration",
        "_torch_data/acks.py",
        (
            (
                "            if taken is None:\n                return False",
                "            if taken is None:\n                return True",
            ),
        ),
        (
            "tests/torch/test_loader.py::test_a_workers_gate_opens_only_for_what_the_loop_took_in_the_gates_own_iteration",
            "tests/torch/test_loader.py::test_a_break_then_finishing_the_epoch_delivers_every_item",
        ),
        "units whose batches torch dropped at a break are recorded done once the next "
        "iteration begins",
        killers=2,
    ),
    Mutant(
        "loop-end-does-not-wait-for-the-workers",
        "_torch_data/acks.py",
        (("        self.seal(generation)\n        began", "        return []\n        began"),),
        (
            "tests/torch/test_loader.py::test_drop_last_leaves_the_dropped_items_units_undone_and_says_so",
            "tests/torch/test_torch.py::test_every_unit_once_per_epoch_and_set_epoch_gives_a_full_next_epoch",
        ),
        "a loop that ran to its end returns before the workers recorded their last units: "
        "status reads the epoch incomplete, and set_epoch abandons them",
        killers=2,
    ),
    Mutant(
        "gated-epoch-end-keeps-undone-units",
        "patterns/shared_queue/_epoch.py",
        (
            (
                "        if not self._ended or self.completes_at_close:",
                "        if not self._ended:",
            ),
        ),
        (
            "tests/torch/test_loader.py::test_drop_last_leaves_the_dropped_items_units_undone_and_says_so",
            "tests/torch/test_loader.py::test_a_worker_queue_run_to_its_end_releases_the_unit_whose_items_the_loop_never_took",
        ),
        "units whose items torch dropped stay claimed by a worker that has left, instead "
        "of being released for the next iteration",
        killers=2,
    ),
    Mutant(
        "loop-tells-nothing-when-it-asks",
        "_torch_data/loader.py",
        (
            (
                "            self._board.took(pending[0], pending[1], self._generation)",
                "            pass",
            ),
        ),
        (
            "tests/torch/test_loader.py::test_a_unit_is_done_only_once_the_loop_asked_past_its_last_batch",
            "tests/torch/test_torch.py::test_leaving_early_releases_the_units_and_the_epoch_can_be_finished",
        ),
        "the loop never says which batches it took: no unit is ever recorded done",
        killers=2,
    ),
    Mutant(
        "twin-that-ends-goes-unsaid",
        "patterns/_lease_watch.py",
        (('            _log.warning(_TWIN_ENDED, holder, where, current[0].get("state"))\n', ""),),
        (
            "tests/patterns/shared_queue/test_incarnation_takeover.py::test_a_live_holder_that_ends_while_the_new_one_waits_is_named_at_warning",
            "tests/patterns/shared_queue/test_incarnation_takeover.py::test_a_learner_started_beside_a_twin_that_then_finishes_names_it_at_warning",
        ),
        "two live processes given one id overlap briefly: the second takes over in silence "
        "and trains what is left, often nothing, and exits 0",
        killers=2,
    ),
    Mutant(
        "status-ignores-a-declared-loss",
        "status.py",
        (('        if state == "lost":\n            return "lost"\n', ""),),
        (
            "tests/core/test_status_liveness.py::test_a_lease_declared_lost_moments_ago_reads_lost_not_running",
            "tests/core/test_status_liveness.py::test_a_learner_declared_lost_while_it_still_trains_reads_lost_in_status_json",
        ),
        "a learner declared lost moments ago (its lease recently renewed) reads running: "
        "status hides that its units were taken over",
        killers=2,
    ),
    Mutant(
        "one-worker-may-copy-memory",
        "_torch_data/dataset.py",
        (
            (
                "            self._require_shared("
                'f"with DataLoader num_workers={info.num_workers}")',
                "            if info.num_workers > 1:\n"
                "                self._require_shared("
                'f"with DataLoader num_workers={info.num_workers}")',
            ),
        ),
        (
            "tests/torch/test_torch.py::test_a_mailbox_in_one_process_only_is_refused_with_workers",
            "tests/torch/test_torch.py::test_a_memory_mailbox_is_refused_in_the_one_worker_of_a_loader_naming_the_fix",
        ),
        "a memory:// mailbox under one DataLoader worker is copied into the worker: the "
        "worker and the training process each deliver every unit",
        killers=2,
    ),
    Mutant(
        "delivery-ignores-a-takeover",
        "patterns/pipeline/_item_claims.py",
        (("            if new is None:\n                raise self._taken(held)\n", ""),),
        (
            "tests/patterns/pipeline/test_item_claims.py::test_a_delivery_of_an_item_taken_over_is_refused_naming_the_taker",
            "tests/patterns/pipeline/test_pipeline_takeover.py::test_an_item_taken_over_before_its_delivery_record_landed_fails_the_consumer",
        ),
        "a consumer whose item was taken over still returns it: two consumers deliver it",
        killers=2,
    ),
    Mutant(
        "pipeline-takeover-unconditional",
        "patterns/pipeline/_item_claims.py",
        (
            (
                "            new = self.mailbox.put_if_match(key, mine.to_bytes(), version)",
                "            new = self.mailbox.put(key, mine.to_bytes())",
            ),
        ),
        (
            "tests/patterns/pipeline/test_item_claims.py::test_an_owner_that_delivers_between_a_note_and_a_takeover_keeps_the_item",
            "tests/patterns/pipeline/test_item_claims.py::test_a_delivery_of_an_item_taken_over_is_refused_naming_the_taker",
        ),
        "a takeover overwrites a claim its owner delivered after the note: the item is "
        "delivered twice",
        killers=2,
    ),
    Mutant(
        "status-epoch-ignores-unit-epochs",
        "_unit_rows.py",
        (
            (
                "        epoch = raw[5] if len(raw) > 5 and _integer(raw[5]) else 0\n",
                "        epoch = 0\n",
            ),
        ),
        (
            "tests/core/test_status.py::test_epoch_filters_the_learner_table_and_the_plot",
            "tests/core/test_status.py::test_the_plot_of_a_later_epoch_measures_its_time_from_that_epoch",
        ),
        "a unit row's epoch decodes as 0: status --epoch k counts and plots every epoch's "
        "units as epoch 0's",
        killers=2,
    ),
    Mutant(
        "queue-start-impatient",
        "patterns/shared_queue/_consumer.py",
        (("        check_manifest(starting, ", "        check_manifest(setup.mailbox, "),),
        (
            "tests/patterns/shared_queue/test_store_outage.py::"
            "test_a_learner_that_starts_during_an_outage_waits_for_the_store_and_runs",
        ),
        "a learner that starts while the store is briefly down dies on the manifest instead "
        "of waiting the outage out",
    ),
    Mutant(
        "lease-acquire-impatient",
        "patterns/_leases.py",
        (("        if patience > 0:\n", "        if False:\n"),),
        (
            "tests/patterns/shared_queue/test_store_outage.py::"
            "test_a_learner_that_starts_during_an_outage_waits_for_the_store_and_runs",
            "tests/patterns/pipeline/test_pipeline_outage.py::"
            "test_a_producer_and_a_consumer_that_start_during_an_outage_wait_for_the_store",
        ),
        "a learner or consumer whose lease write meets a brief outage at start dies instead "
        "of waiting it out",
    ),
    Mutant(
        "pipeline-start-impatient",
        "patterns/pipeline/_mailbox_run.py",
        (('        box = self.starting("a pipeline handle")\n', "        box = self.mailbox\n"),),
        (
            "tests/patterns/pipeline/test_pipeline_outage.py::"
            "test_a_producer_and_a_consumer_that_start_during_an_outage_wait_for_the_store",
        ),
        "a pipeline handle opened while the store is briefly down dies on the manifest",
    ),
    Mutant(
        "status-reads-learners-after-completions",
        "status.py",
        (
            (
                "    leases = _records(mailbox, LEASES_PREFIX, unreadable)\n"
                "    learners = _records(mailbox, LEARNERS_PREFIX, unreadable)\n",
                "",
            ),
            (
                "    reclaimed = sum(1 for _ in mailbox.list(layout.reclaimed))\n",
                "    reclaimed = sum(1 for _ in mailbox.list(layout.reclaimed))\n"
                "    leases = _records(mailbox, LEASES_PREFIX, unreadable)\n"
                "    learners = _records(mailbox, LEARNERS_PREFIX, unreadable)\n",
            ),
        ),
        (
            "tests/core/test_status_liveness.py::test_a_learner_finishing_while_status_reads_is_never_shown_stalled",
            "tests/core/test_status_liveness.py::test_watch_ends_on_the_complete_run_when_its_learner_finishes_during_a_read",
        ),
        "status reads the completions before the learners: a learner that finishes in "
        "between reads finished beside an old count, and a live run is called stalled",
        killers=2,
    ),
    Mutant(
        "unit-rows-of-older-versions-skipped",
        "_unit_rows.py",
        (
            (
                "        if not isinstance(raw, (list, tuple)) or len(raw) < _REQUIRED:\n",
                "        if not isinstance(raw, (list, tuple)) or len(raw) < 6:\n",
            ),
        ),
        (
            "tests/core/test_unit_rows.py::test_status_reads_the_rows_of_every_version_by_epoch",
            "tests/core/test_unit_rows.py::test_a_session_resuming_an_older_record_keeps_its_finished_units",
        ),
        "the rows of a record written by an older version (no reclaimed or epoch field) are "
        "skipped: status undercounts them, and a resuming session drops its finished units",
        killers=2,
    ),
    Mutant(
        "loop-waits-for-a-dead-worker",
        "_torch_data/acks.py",
        (
            (
                "        return pid == 0 or any(",
                "        return True or any(",
            ),
        ),
        (
            "tests/torch/test_loader.py::test_the_end_of_an_iteration_does_not_wait_for_a_worker_that_died_before_its_last_records",
            "tests/torch/test_loader.py::test_a_worker_that_dies_closing_its_iteration_fails_the_loop_instead_of_hanging",
        ),
        "the end of an iteration waits forever for a DataLoader worker that died before it "
        "closed its queue",
        killers=2,
    ),
    Mutant(
        "finished-iteration-keeps-its-workers",
        "_torch_data/loader.py",
        (
            (
                "                self._inner = self._runner = None\n",
                "                pass\n",
            ),
        ),
        (
            "tests/torch/test_loader.py::test_an_iteration_run_to_its_end_stops_its_workers_unless_they_persist",
        ),
        "a SharedQueueLoader iteration run to its end keeps its (non-persistent) workers up "
        "for as long as its iterator is held",
    ),
    Mutant(
        "plot-axis-starts-at-the-session",
        "_status_plot.py",
        (("    if begins:\n        return min(begins)\n", ""),),
        (
            "tests/core/test_status.py::test_the_plot_of_one_epoch_starts_at_that_epochs_first_unit",
            "tests/core/test_status.py::test_the_plot_of_a_later_epoch_measures_its_time_from_that_epoch",
        ),
        "status --plot --epoch k starts the time axis at the learner's session start: an "
        "empty stretch as long as the earlier epochs before the bars",
        killers=2,
    ),
    Mutant(
        "restart-takes-over-while-the-old-one-trusts-its-lease",
        "patterns/_leases.py",
        (
            (
                "TAKEOVER_FRACTION = SAFE_FRACTION + 0.1\n",
                "TAKEOVER_FRACTION = SAFE_FRACTION - 0.35\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_incarnation_takeover.py::"
            "test_the_earlier_incarnation_is_stale_when_the_new_one_takes_over",
            "tests/patterns/shared_queue/test_incarnation_takeover.py::"
            "test_a_restart_acts_no_sooner_than_its_earlier_incarnation_stops_trusting_its_renewal",
            "tests/patterns/shared_queue/test_lifecycle.py::"
            "test_a_paused_learner_restarted_with_its_id_delivers_nothing_beside_the_new_one",
            "tests/patterns/pipeline/test_pipeline_consumers.py::"
            "test_a_paused_consumer_restarted_with_its_id_returns_nothing_beside_the_new_one",
        ),
        "a restart with the same id takes the lease over while its paused earlier incarnation "
        "still trusts its last renewal: woken, the old one delivers beside the new one",
        killers=2,
    ),
    Mutant(
        "early-exit-releases-nothing",
        "patterns/shared_queue/_epoch.py",
        (
            (
                "        if not self._ended or self.completes_at_close:\n",
                "        if self._ended and self.completes_at_close:\n",
            ),
        ),
        (
            "tests/patterns/shared_queue/test_early_exit.py::"
            "test_an_early_exit_leaves_each_claim_it_held_released_and_counts_them",
            "tests/patterns/shared_queue/test_early_exit.py::"
            "test_the_next_learner_takes_the_released_units_as_released_not_as_a_dead_learners",
            "tests/patterns/shared_queue/test_resume.py::"
            "test_a_learner_restarted_after_leaving_early_takes_back_what_it_released_first",
        ),
        "a learner that leaves early releases nothing: its unfinished claims stay claimed "
        "until another learner, finding its lease released, takes them over as a dead "
        "learner's; status counts them in progress meanwhile",
        killers=2,
    ),
    Mutant(
        "session-keeps-a-released-finished-unit",
        "_session_parts.py",
        (
            (
                "            self._entries.pop(identifier, None)\n",
                "            entry = self._entries.get(identifier)\n"
                "            if entry is None or entry.finished is None:\n"
                "                self._entries.pop(identifier, None)\n",
            ),
        ),
        (
            "tests/core/test_session.py::"
            "test_a_unit_given_back_after_its_last_item_is_not_counted_finished",
            "tests/torch/test_loader.py::"
            "test_drop_last_leaves_the_dropped_items_units_undone_and_says_so",
        ),
        "a unit whose last items torch dropped after the worker handed them over is released "
        "but still counted finished by the worker's session: status adds up more finished "
        "units than are done",
        killers=2,
    ),
)


# -- running ---------------------------------------------------------------------------------


def _check(mutant: Mutant, source: str) -> None:
    for original, _ in mutant.edits:
        found = source.count(original)
        if found != 1:
            raise SystemExit(
                f"mutant {mutant.name}: its original text occurs {found} times in "
                f"src/gradientmail/{mutant.file} (expected once); the code moved, so update "
                f"the table in scripts/mutants.py:\n{original}"
            )


def _apply(mutant: Mutant, source: str) -> str:
    for original, replacement in mutant.edits:
        source = source.replace(original, replacement)
    return source


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    emulators = ROOT / ".emulators"
    if emulators.exists():  # Azurite, if installed; the local selection does not need it
        (dest / ".emulators").symlink_to(emulators)


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy / "src")
    # Never reuse bytecode: a mutant and the original can share a size and an mtime second.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _pytest(copy: Path, tests: list[str], timeout: float) -> tuple[int | None, str, float]:
    """Run pytest in ``copy``; ``(exit status or None on timeout, output, seconds)``."""
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"]
    command += ["-k", LOCAL_ONLY, *tests]
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=copy,
        env=_env(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends every child too
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        status: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = None
    return status, output, time.perf_counter() - start


def _failed(output: str) -> list[str]:
    """The node ids pytest's ``-rfE`` summary lists as failed or errored."""
    return re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, flags=re.MULTILINE)


def _counts(output: str) -> str:
    """pytest's final tally, e.g. ``2 failed, 5 passed``."""
    lines = [
        line for line in output.strip().splitlines() if re.search(r"\d+ (passed|failed)", line)
    ]
    if not lines:
        return "no tally"
    return re.sub(r"=+|, \d+ deselected|\bin [\d.]+s.*", "", lines[-1]).strip()


def _by_test(nodes: list[str]) -> str:
    """``file::test[a, b]; ...``: the failed node ids grouped by test function."""
    grouped: dict[str, list[str]] = {}
    for node in nodes:
        test, _, param = node.partition("[")
        grouped.setdefault(test.rsplit("/", 1)[-1], []).append(param.rstrip("]"))
    parts = []
    for test, params in grouped.items():
        shown = ", ".join(p for p in params if p)
        parts.append(f"{test}[{shown}]" if shown else test)
    return "; ".join(parts)


def _functions(nodes: list[str]) -> set[str]:
    """The distinct test functions among failed node ids (parameters folded)."""
    return {node.partition("[")[0] for node in nodes}


def _files(tests: tuple[str, ...]) -> list[str]:
    """Each selection widened to its whole file (``--files``)."""
    return sorted({test.partition("::")[0] for test in tests})


def _selects(selection: str, node: str) -> bool:
    return node == selection or node.startswith((selection + "::", selection + "["))


def _check_import(copy: Path) -> None:
    probe = [sys.executable, "-c", "import gradientmail; print(gradientmail.__file__)"]
    where = subprocess.run(
        probe, cwd=copy, env=_env(copy), capture_output=True, text=True, check=True
    ).stdout.strip()
    if not where.startswith(str(copy / "src")):
        raise SystemExit(f"the copy imports gradientmail from {where}, not from {copy}/src")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per mutant")
    parser.add_argument(
        "--min-killers",
        type=int,
        default=1,
        help="a mutant caught by fewer distinct test functions counts as SINGLE (a failure); "
        "each mutant also states its own need (killers=)",
    )
    parser.add_argument(
        "--files",
        action="store_true",
        help="run each mutant's test files whole, not only the tests it names (to find "
        "every test that catches it)",
    )
    args = parser.parse_args(argv)

    unknown = sorted(set(args.names) - {m.name for m in MUTANTS})
    if unknown:
        parser.error(f"unknown mutants: {', '.join(unknown)} (see --list)")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    sources = {}
    for mutant in chosen:
        path = ROOT / "src" / "gradientmail" / mutant.file
        sources[mutant.file] = path.read_text(encoding="utf-8")
        _check(mutant, sources[mutant.file])

    if args.list:
        for mutant in chosen:
            print(f"{mutant.name}\n    {mutant.file}: {mutant.bug}")
            print(f"    killed by: {' '.join(mutant.tests)}")
        return 0

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gm-mutants-") as tmp:
        copy = Path(tmp)
        _copy_tree(copy)
        _check_import(copy)

        def selection(mutant: Mutant) -> list[str]:
            return _files(mutant.tests) if args.files else list(mutant.tests)

        selections = sorted({t for m in chosen for t in selection(m)})
        status, output, seconds = _pytest(copy, selections, args.timeout)
        broken = _failed(output) if status != 0 else []
        print(f"baseline (no mutant): {_counts(output)} in {seconds:.1f}s")
        if status not in (0, 1):
            print(output[-3000:])
            print(f"ERROR     the unmutated selection did not run (pytest status {status})")
            return 1
        for node in broken:
            print(f"          fails without any mutant: {node}")

        results: dict[str, int] = {"KILLED": 0, "SINGLE": 0, "SURVIVED": 0, "ERROR": 0}
        singles: list[str] = []
        for mutant in chosen:
            if any(_selects(t, node) for t in selection(mutant) for node in broken):
                verdict, detail, seconds = "ERROR", "its tests fail without the mutant", 0.0
            else:
                target = copy / "src" / "gradientmail" / mutant.file
                target.write_text(_apply(mutant, sources[mutant.file]), encoding="utf-8")
                try:
                    status, output, seconds = _pytest(copy, selection(mutant), args.timeout)
                finally:
                    target.write_text(sources[mutant.file], encoding="utf-8")
                if status is None:
                    verdict, detail = "KILLED", f"timed out after {args.timeout:.0f}s (a hang)"
                elif status == 1:
                    failed = _failed(output)
                    killers = len(_functions(failed))
                    needed = max(args.min_killers, mutant.killers)
                    verdict = "KILLED" if killers >= needed else "SINGLE"
                    detail = (
                        f"{_counts(output)}; {killers} test function(s)\n"
                        f"{'':10}caught by {_by_test(failed)}"
                    )
                    if verdict == "SINGLE":
                        singles.append(mutant.name)
                elif status == 0:
                    verdict, detail = "SURVIVED", f"{_counts(output)}: no selected test failed"
                else:
                    print(output[-3000:])
                    verdict, detail = "ERROR", f"pytest exit status {status}"
            results[verdict] += 1
            print(f"{verdict:<9} {mutant.name:<48} {seconds:5.1f}s  {detail}", flush=True)

    total = time.perf_counter() - began
    single = f", {results['SINGLE']} killed by fewer test functions than they need"
    print(
        f"{len(chosen)} mutants: {results['KILLED']} killed{single}, "
        f"{results['SURVIVED']} survived, "
        f"{results['ERROR']} errors ({total:.0f}s)"
    )
    if singles:
        print("caught by too few tests: " + " ".join(singles))
    return 0 if results["KILLED"] == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
