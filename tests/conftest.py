"""Options shared by every test tier."""

import os

DEFAULT_SOAK_SECONDS = 45.0


def pytest_addoption(parser):
    parser.addoption(
        "--soak-seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", DEFAULT_SOAK_SECONDS)),
        help=f"How long tests/soak runs its client threads (default {DEFAULT_SOAK_SECONDS:g} s,"
             " or $SOAK_SECONDS); e.g. --soak-seconds 600 for a long soak.")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: a real server under concurrent valid and malformed requests (--soak-seconds)")
