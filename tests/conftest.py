"""The quick tier: `python -m pytest -q -m "not slow"` leaves out the tests that take a second or more (they
train, compile, or run the scripts end to end). A test is slow when it says so (@pytest.mark.slow), or when it
waits for a module's background script runs (harness.py's `job` / `jobs` fixtures): a new @work test is in the
slow tier without a word. At each module's end, a run that a failed test left running is killed."""
import pytest

import harness


def pytest_collection_modifyitems(items):
    for item in items:
        if {'job', 'jobs'} & set(getattr(item, 'fixturenames', ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope='module')
def no_run_left_behind():
    yield
    harness.kill_leftovers()
