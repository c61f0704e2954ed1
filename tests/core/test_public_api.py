"""The user surface, pinned: every public module and the names its ``__all__`` lists.

The public line: a module is public when it is listed here, and internal when its dotted
path has a segment beginning with ``_`` (``gradientmail.patterns._leases``). Internals may
change in any release; a name added to or removed from a public ``__all__`` must be added or
removed here, on purpose, because users import it.
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import subprocess
import sys

import pytest

import gradientmail

PUBLIC_API: dict[str, list[str]] = {
    "gradientmail": [
        "AccessDeniedError",
        "AtomicityViolationError",
        "BackendError",
        "BaseMailbox",
        "BucketNotFoundError",
        "Capability",
        "ConfigurationError",
        "EndpointUnreachableError",
        "ForeignRecordError",
        "GradientMailError",
        "Identity",
        "InvalidDataError",
        "InvalidKeyError",
        "KeyNotFoundError",
        "LeaseLostError",
        "Mailbox",
        "MissingDependencyError",
        "NotSupportedError",
        "OutcomeUnknownError",
        "PipelineAbortedError",
        "PipelineError",
        "PipelineStalledError",
        "ProducerFailedError",
        "ProducerLostError",
        "ProducerRegistrationError",
        "ProtocolError",
        "RunMismatchError",
        "Session",
        "SupportsCompareAndSwap",
        "SupportsListStartAfter",
        "TransientBackendError",
        "Version",
        "WorkerError",
        "__version__",
        "from_url",
        "identify",
        "learner_id",
    ],
    "gradientmail.backends": [
        "BaseMailbox",
        "Conflict",
        "RetryPolicy",
        "SplitURL",
        "Stat",
        "parse_bool",
        "parse_options",
        "positive",
        "positive_float",
        "redact",
        "require",
        "split_store_url",
        "split_url",
    ],
    "gradientmail.backends.azure": [
        "AzureMailbox",
        "CONNECTION_STRING_ENV",
        "PAGE_SIZE",
        "WRITE_ID_METADATA",
    ],
    "gradientmail.backends.gcs": ["GCSMailbox", "PAGE_SIZE", "WRITE_ID_METADATA"],
    "gradientmail.backends.local": ["CHUNK_BYTES", "FileMailbox"],
    "gradientmail.backends.memory": ["MemoryMailbox", "PAGE_SIZE"],
    "gradientmail.backends.s3": [
        "CONNECT_TIMEOUT",
        "POOL_CONNECTIONS",
        "S3Mailbox",
        "SDK_ATTEMPTS",
        "WRITE_ID_METADATA",
    ],
    "gradientmail.conformance": [
        "CounterReport",
        "EXIT_STATUS",
        "MailboxConformance",
        "Outcome",
        "PROPERTIES",
        "Property",
        "PropertyFailed",
        "PropertySkipped",
        "RaceReport",
        "Result",
        "SuiteOptions",
        "SuiteReport",
        "Verdict",
        "cas_counter",
        "check_store",
        "race_put_if_absent",
        "race_winners",
        "run_property",
        "run_suite",
    ],
    "gradientmail.mailbox": [
        "BytesLike",
        "Capability",
        "Mailbox",
        "SupportsCompareAndSwap",
        "SupportsListStartAfter",
        "Version",
    ],
    "gradientmail.patterns.pipeline": [
        "Consumer",
        "ConsumerStats",
        "Pipeline",
        "PipelineAbortedError",
        "PipelineError",
        "PipelineStalledError",
        "PipelineStats",
        "Producer",
        "ProducerFailedError",
        "ProducerLostError",
        "ProducerRegistrationError",
        "ProducerStats",
    ],
    "gradientmail.patterns.shared_queue": [
        "DEFAULT_LEASE",
        "MANIFEST_KEY",
        "ProgressReporter",
        "QueueCost",
        "QueueStats",
        "SharedQueue",
        "UNITS_PREFIX",
        "shared_queue",
        "validate_segment",
    ],
    "gradientmail.session": ["LEARNERS_PREFIX", "Session", "active_session"],
    "gradientmail.status": [
        "EpochProgress",
        "RunStatus",
        "as_json",
        "data_wait_share",
        "format_status",
        "lane_of",
        "latest_epoch",
        "plot_gantt",
        "read_status",
    ],
    "gradientmail.testing": [
        "AZURE_LIKE",
        "GCS_LIKE",
        "Latency",
        "LatencyMailbox",
        "NO_LATENCY",
        "RequestCounts",
        "S3_LIKE",
        "key_group",
    ],
    "gradientmail.torch": [
        "Average",
        "DelayedNesterov",
        "Exchange",
        "ExchangeBatchSampler",
        "ExchangeStats",
        "ExchangeTraffic",
        "NoiseGain",
        "SharedQueueDataset",
        "SharedQueueLoader",
        "load_shared",
    ],
}

#: Packages that only hold others, with no names of their own.
HOLDERS = {"gradientmail.patterns"}


def _internal(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_every_module_is_public_or_marked_internal() -> None:
    unmarked = []
    for info in pkgutil.walk_packages(gradientmail.__path__, "gradientmail."):
        name = info.name
        if name in PUBLIC_API or name in HOLDERS or _internal(name):
            continue
        unmarked.append(name)
    assert unmarked == [], "neither pinned as public nor marked internal with a leading _"


def test_every_pinned_module_is_importable_and_public() -> None:
    for module in PUBLIC_API:
        assert not _internal(module), module
        importlib.import_module(module)


def test_holders_list_no_names() -> None:
    for module in HOLDERS:
        assert not hasattr(importlib.import_module(module), "__all__"), module


@pytest.mark.parametrize("module", sorted(PUBLIC_API))
def test_all_lists_exactly_the_pinned_names_and_each_exists(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == PUBLIC_API[module]
    for name in imported.__all__:
        assert hasattr(imported, name), f"{module}.{name}"


def test_errors_are_named_where_users_import_them() -> None:
    error = gradientmail.LeaseLostError("unit u-1 was taken over")
    assert type(error).__module__ == "gradientmail"
    assert repr(type(error)) == "<class 'gradientmail.LeaseLostError'>"
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is gradientmail.LeaseLostError
    assert str(again) == "unit u-1 was taken over"


def test_import_gradientmail_imports_no_sdk_and_no_torch() -> None:
    code = (
        "import sys, gradientmail, gradientmail.patterns.shared_queue, gradientmail._cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'boto3', 'botocore', 'google', 'azure', 'hypothesis', 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
