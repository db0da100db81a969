"""The benchmarks' knobs for pairing an option against its default (pure): the SDK clients'
keyword arguments from ``ZEPS_BENCH_SDK_*`` (:func:`bench.systems.zeps_sdk.client_options`),
``bench.ab``'s per-side variables (:func:`bench.ab.side_env`) and the report header's line
naming the ``ZEPS_BENCH_*`` variables a run had (:func:`bench.report.bench_environment`)."""
import pytest

from bench.ab import side_env
from bench.report import bench_environment
from bench.systems.zeps_sdk import client_options


def test_client_options_are_python_literals_by_name():
    assert client_options("") == {}
    assert client_options(" batching=False ") == {"batching": False}
    assert client_options("batching=False, credit_window=65536,timestamps=True,") == {
        "batching": False, "credit_window": 65536, "timestamps": True}
    assert client_options("producer_id='p-1'") == {"producer_id": "p-1"}


@pytest.mark.parametrize("text, says", [
    ("batching", "not name=value: 'batching'"),
    ("=False", "not name=value: '=False'"),
    ("no such=1", "not name=value: 'no such=1'"),
    ("batching=Flase", "batching: not a Python literal: 'Flase'"),
    ("timeout=2*3", "timeout: not a Python literal: '2*3'"),
])
def test_client_options_refuse_what_is_not_a_literal_by_name(text, says):
    with pytest.raises(ValueError) as e:
        client_options(text)
    assert str(e.value) == says


def test_ab_side_env_takes_name_value_items():
    assert side_env(None) == {}
    assert side_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad in ("A", "=1"):
        with pytest.raises(ValueError, match="not NAME=VALUE"):
            side_env([bad])


def test_a_report_names_the_bench_variables_it_ran_with():
    env = {"PATH": "/bin", "ZEPS_BENCH_SDK_PUBLISHER": "batching=False",
           "ZEPS_BENCH_PACER": "spin", "ZEPS_DATA": "/x"}
    assert bench_environment(env) == {"ZEPS_BENCH_PACER": "spin",
                                      "ZEPS_BENCH_SDK_PUBLISHER": "batching=False"}
    assert bench_environment({"PATH": "/bin"}) == {}
