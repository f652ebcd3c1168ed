import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

try:
    from hypothesis import HealthCheck, settings

    # CI draws the same examples on every run (a red CI must mean a change broke something, and
    # coverage checks such as "a replay shuffle was drawn" must not depend on luck); the soak
    # profile explores new ones
    settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, database=None,
                              suppress_health_check=list(HealthCheck))
    settings.register_profile("soak", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
    settings.register_profile("dev", max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False, help="run the long soak tests in full")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long soak / property runs (bounded unless --soak)")


@pytest.fixture
def soak(request):
    return request.config.getoption("--soak")


@pytest.fixture(autouse=True)
def _a_main_process_takes_no_buffer_logs():
    """Tests that take a shuffle buffer's logs in this process, as a DataLoader worker does, turn on
    its process-wide journaling (``state_logs.journaling``) for good; a real main process never
    takes one. Each test starts as the main process it was, whatever ran before it."""
    from resumable_iterable import state_logs

    before = state_logs.journaling()
    yield
    state_logs._journaling[0] = before
