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


#: how long a test's process waits for a DataLoader worker to exit when a loader iterator is shut
#: down (torch: 5 s). A worker whose loader left it waiting for an index that never comes (after an
#: error raised in a worker, torch's own loaders leave one so: also with a plain torch dataset) only
#: notices the shutdown when its 5-second poll times out, and the process shutting it down waits that
#: long at its join, then terminates it. Tests shut many such loaders down; 0.5 s here saves the
#: suite over a minute of idle waits and changes nothing else (the workers' own poll is unchanged;
#: a worker still running at the join is terminated, as torch does after the 5 s).
WORKER_JOIN_TIMEOUT = 0.5


@pytest.fixture(autouse=True)
def _short_worker_joins():
    utils = sys.modules.get("torch.utils.data._utils")  # never imports torch (tests of import order)
    if utils is not None and getattr(utils, "MP_STATUS_CHECK_INTERVAL", None) != WORKER_JOIN_TIMEOUT:
        utils.MP_STATUS_CHECK_INTERVAL = WORKER_JOIN_TIMEOUT
    yield
