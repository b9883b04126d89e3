"""Fixtures of the end-to-end tests (tests/e2e/): the verl parquet of the OmniSpatial fixture, and
one real adaptsoft training run that the run-life test (test_train_cpu.py) goes on training and the
signalled run (test_train_signals.py), a second run of its command, is compared with."""
import pytest

from train_helpers import TrainedRun, prepare_train_data, train_adaptsoft


@pytest.fixture(scope="session")
def train_data(tmp_path_factory, tiny_qwen3_vl_small):
    return prepare_train_data(tmp_path_factory.mktemp("train_data"), tiny_qwen3_vl_small)


@pytest.fixture(scope="session")
def adaptsoft_run(tmp_path_factory, tiny_qwen3_vl_small, train_data) -> TrainedRun:
    """``train_helpers.ADAPTSOFT_RUN`` trained once; the run-life test goes on training in its
    directory (resume, export), so a reader takes the metrics and dumps of the returned object."""
    return train_adaptsoft(tiny_qwen3_vl_small, train_data, tmp_path_factory.mktemp("adaptsoft_run"))
