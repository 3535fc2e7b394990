"""The eval baseline check (toolkit.evaluation.baseline, run by `make test` before pytest): the comparison with the
committed baseline, a changed sample set, and a deliberately worse chunker failing the real check."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from toolkit.chunking import get_chunker
from toolkit.evaluation.baseline import BASELINE_PATH, check, load_baseline, main, run_check, sample_fingerprint


@pytest.fixture
def baseline():
    return load_baseline()


def test_the_committed_baseline_is_for_this_sample_set_and_names_its_configuration(baseline):
    assert baseline.sample == sample_fingerprint()
    get_chunker(baseline.config)  # one chunker spec: the one setting to change (then record a new baseline)
    assert baseline.model == "sentence-transformers:all-MiniLM-L6-v2" and baseline.k == 5
    assert set(baseline.metrics) == set(baseline.tolerance) == {"recall", "span_iou"}


@pytest.mark.parametrize(
    ("recall", "iou", "passed"),
    [
        (0.7885, 0.0348, True),  # the baseline itself
        (0.7700, 0.0348, True),  # recall 0.0185 lower: within the 0.02 tolerance
        (0.7600, 0.0348, False),  # recall 0.0285 lower
        (0.7885, 0.0310, True),  # span IoU 0.0038 lower: within the 0.004 tolerance
        (0.7885, 0.0300, False),  # span IoU 0.0048 lower
        (0.9000, 0.0500, True),  # higher is never a failure
    ],
)
def test_check_fails_only_on_a_drop_past_the_tolerance(baseline, recall, iou, passed):
    base = dataclasses.replace(baseline, metrics={"recall": 0.7885, "span_iou": 0.0348})
    result = check({"recall": recall, "span_iou": iou}, base)
    assert result.passed is passed
    assert any("FAIL" in line for line in result.lines) is (not passed)


def test_a_rise_past_the_tolerance_asks_for_a_new_baseline(baseline):
    base = dataclasses.replace(baseline, metrics={"recall": 0.7885, "span_iou": 0.0348})
    result = check({"recall": 0.85, "span_iou": 0.0348}, base)
    assert result.passed and "record a new baseline" in result.lines[0]


def test_a_changed_sample_set_fails_with_what_to_do(baseline):
    result = run_check(dataclasses.replace(baseline, sample="0" * 64))
    assert not result.passed
    assert result.lines == [
        "The sample documents or queries changed since the baseline was recorded, so its figures no longer "
        "apply; record a new one with python -m toolkit.evaluation.baseline --update and review the figures."
    ]


def test_an_unreadable_baseline_is_one_sentence_and_exit_1(tmp_path, capsys):
    path = tmp_path / "baseline.json"
    path.write_text("{not json")
    assert main(["--baseline", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"eval baseline: The eval baseline {path} cannot be read") and "--update" in error


@pytest.mark.slow
def test_a_deliberately_worse_chunker_fails_the_check():
    before = BASELINE_PATH.read_text()
    # The real check, as `make test` runs it, with 400-token fixed windows instead of the baseline's configuration:
    # long chunks bury the answers in text that is not the answer, so span IoU falls far below the baseline (recall@5
    # alone would not see it: five long passages hold more answers whole).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "toolkit.evaluation.baseline", "--config", "fixed:400:0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    iou_line = next(line for line in result.stdout.splitlines() if "span IoU" in line)
    assert "FAIL" in iou_line and "below the baseline" in iou_line
    assert "eval baseline: FAILED" in result.stdout
    assert BASELINE_PATH.read_text() == before  # the baseline was not touched
