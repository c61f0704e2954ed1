"""How each cloud backend's requests look on the wire, for tests that inject faults.

A :class:`FaultProfile` names the requests a backend sends (a conditional create, a
compare-and-swap, a write-id read-back, a listing page) as proxy predicates, and the
statuses its store answers, so that one test body runs on S3 (moto and SeaweedFS), GCS and
Azure through :class:`~tests.support.faultproxy.FaultProxy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gradientmail import Mailbox, from_url
from gradientmail.backends import RetryPolicy
from tests.support.emulators.azure import connection_string
from tests.support.faultproxy import Predicate, match
from tests.support.rigs import Rig

#: The retry policy every backend uses by default: one call's requests are bounded by it.
ATTEMPTS = RetryPolicy().attempts


@dataclass(frozen=True)
class FaultProfile:
    """How one backend's requests and answers look to the proxy."""

    rig: str  # session fixture returning the Rig
    endpoint: str  # session fixture returning the emulator's base URL
    open_through: Callable[[Rig, str], Mailbox]  # a fresh mailbox via the proxy's URL
    create: Predicate  # a conditional create
    swap: Predicate  # a compare-and-swap
    read_back: Predicate  # how the write id is read back
    list_page: Predicate  # one listing request
    created: int  # the store's status for a successful create or swap
    refused: int  # the store's status for a create of an existing key


def _s3(rig: str, endpoint: str) -> FaultProfile:
    """The profile of S3 on one emulator: moto or SeaweedFS."""
    return FaultProfile(
        rig=rig,
        endpoint=endpoint,
        open_through=lambda opened, url: from_url(opened.url(), endpoint_url=url),
        create=match(method="PUT", headers={"if-none-match": r"^\*$"}),
        swap=match(method="PUT", headers={"if-match": "."}),
        read_back=match(method="HEAD"),
        list_page=match(method="GET", path=r"list-type=2"),
        created=200,
        refused=412,
    )


PROFILES = {
    "s3": _s3("rig_s3_moto", "moto_endpoint"),
    "s3-seaweed": _s3("rig_s3_seaweed", "seaweed_endpoint"),
    "gcs": FaultProfile(
        rig="rig_gcs",
        endpoint="gcs_endpoint",
        open_through=lambda rig, url: from_url(rig.url(), emulator_host=url),
        create=match(
            method="POST", path=r"/upload/storage/v1/b/[^/]+/o\?.*ifGenerationMatch=0(&|$)"
        ),
        swap=match(method="POST", path=r"/upload/storage/v1/b/[^/]+/o\?.*ifGenerationMatch=[1-9]"),
        read_back=match(method="GET", path=r"/storage/v1/b/[^/]+/o/"),
        list_page=match(method="GET", path=r"/storage/v1/b/[^/]+/o\?"),
        created=200,
        refused=412,
    ),
    "azure": FaultProfile(
        rig="rig_azure",
        endpoint="azure_endpoint",
        open_through=lambda rig, url: from_url(rig.url(), connection_string=connection_string(url)),
        create=match(method="PUT", headers={"if-none-match": r"^\*$"}),
        swap=match(method="PUT", headers={"if-match": "."}),
        read_back=match(method="HEAD"),
        list_page=match(method="GET", path=r"comp=list"),
        created=201,
        refused=409,
    ),
}
