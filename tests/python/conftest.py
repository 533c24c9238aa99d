"""Shared fixtures of the Python suites, and the reporting meson and scripts/test_summary.py
read: a Criterion-style "Synthesis" line (each pytest case counts), and exit status 77 (SKIP)
when every case skipped (no PAGELLM_TEST_MODELS)."""
import os

import pytest

MODELS = os.environ.get("PAGELLM_TEST_MODELS")


def model_file(name: str) -> str:
    """A file of ../shared/models; skips the test without PAGELLM_TEST_MODELS."""
    if not MODELS:
        pytest.skip("SKIP: PAGELLM_TEST_MODELS is not set")
    path = os.path.join(MODELS, name)
    if not os.path.exists(path):
        pytest.skip(f"SKIP: {path} is missing")
    return path


@pytest.fixture(scope="module")
def stories():
    """(model, tokenizer) paths of stories260K."""
    return model_file("stories260K.bin"), model_file("tok512.model")


def tool(env: str) -> str:
    path = os.environ.get(env)
    if not path:
        pytest.skip(f"{env} is not set (run the suite through meson test)")
    return path


_counts = {"passed": 0, "failed": 0, "skipped": 0}
_skips = []


def pytest_runtest_logreport(report):
    # a case once: its call, or the setup that skipped or failed it
    if report.when == "call" or report.outcome != "passed":
        _counts[report.outcome] += 1
    if report.skipped:
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        why = why[len("Skipped: "):] if why.startswith("Skipped: ") else why
        _skips.append(f"[SKIP] {report.nodeid}: {why}")


def pytest_sessionfinish(session, exitstatus):
    p, f = _counts["passed"], _counts["failed"]
    if _skips:  # Criterion's line for a skipped case, which scripts/test_summary.py lists
        print("\n" + "\n".join(_skips))
    print(f"\nSynthesis: Tested: {p + f} | Passing: {p} | Failing: {f} | Crashing: 0")
    if exitstatus == 0 and p == 0 and f == 0 and _counts["skipped"] > 0:
        session.exitstatus = 77
