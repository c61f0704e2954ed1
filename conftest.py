"""Root pytest configuration: loads the backend rigs shared by tests/ and conformance/."""

pytest_plugins = [
    "tests.support.rigs",
    "tests.support.emulators.s3",
    "tests.support.emulators.gcs",
    "tests.support.emulators.azure",
]
