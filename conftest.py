"""Root pytest configuration: loads the backend rigs shared by tests/ and conformance/."""

pytest_plugins = [
    "tests.rigs",
    "tests.emulators.s3",
    "tests.emulators.gcs",
    "tests.emulators.azure",
]
