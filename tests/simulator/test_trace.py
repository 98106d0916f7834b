"""Trace loading: every format's values, the filters, every malformation, the bundled samples."""

from __future__ import annotations

import gzip
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attentived.simulator.samples import SAMPLES, sample_path
from attentived.simulator.trace import (
    FORMATS,
    Trace,
    TraceError,
    TraceJob,
    check_fits,
    load_trace,
    parse_duration,
)

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> Path:
    return FIXTURES / name


def summary(trace: Trace) -> list[tuple[str, float, str, int, float, str | None, int]]:
    return [(j.job_id, j.submit_time, j.user, j.num_gpus, j.duration, j.model, j.line) for j in trace.jobs]


# --- each format's good file, checked by hand -------------------------------------------


def test_generic_values_bom_extra_column_blank_line_and_order() -> None:
    trace = load_trace(fixture("generic_good.csv"))
    assert (trace.name, trace.format, trace.skipped) == ("generic_good", "generic", 0)
    assert trace.path == str(fixture("generic_good.csv"))
    # j1 and j3 tie at 100 s (ordered by id); the blank line 5 still counts as a line.
    assert summary(trace) == [
        ("j1", 0.0, "alice", 1, 3600.0, "resnet50", 2),
        ("j3", 0.0, "carol", 2, 60.0, "bert", 4),
        ("j2", 60.0, "bob", 8, 7200.5, None, 3),
        ("j4", 300.0, "alice", 4, 1800.0, "vgg16", 6),
        ("j5", 900.0, "bob", 1, 90.0, None, 7),
    ]


def test_generic_without_model_column_and_crlf() -> None:
    trace = load_trace(fixture("generic_crlf_no_model.csv"))
    assert summary(trace) == [("a", 0.0, "u1", 1, 10.0, None, 2), ("b", 5.5, "u2", 16, 20.0, None, 3)]


def test_philly_rows_are_sorted_with_ties_by_id() -> None:
    trace = load_trace(fixture("philly_good.csv"))
    assert trace.format == "philly"
    # 23:59:59 is the first submission; 06:13:03 is 6*3600+13*60+3 = 22383 s after midnight.
    assert summary(trace) == [
        ("philly-4", 0.0, "6c71a0", 8, 860662.0, None, 4),
        ("philly-6", 1.0, "11cb48", 2, 120.0, None, 6),
        ("philly-3", 22384.0, "6214e9", 1, 2951.0, None, 3),
        ("philly-5", 22384.0, "6214e9", 4, 2759.0, None, 5),
        ("philly-2", 25316.0, "11cb48", 1, 66.0, None, 2),
    ]


def test_tiresias_values() -> None:
    trace = load_trace(fixture("tiresias_good.csv"))
    assert trace.format == "tiresias"
    assert summary(trace) == [
        ("0", 0.0, "tiresias", 1, 164.0, "vgg19", 2),
        ("1", 30.0, "tiresias", 8, 147.0, "vgg11", 3),
        ("2", 53.0, "tiresias", 2, 127.0, "inception4", 4),
    ]


def test_alibaba_keeps_whole_gpu_pods_that_ran_and_counts_the_rest() -> None:
    trace = load_trace(fixture("alibaba_good.csv"))
    assert trace.format == "alibaba"
    # Skipped: GPU share (0022), no GPU (0016), never scheduled (7432), never deleted (0615),
    # deleted in the second it was scheduled (0700).
    assert trace.skipped == 5
    assert summary(trace) == [
        ("openb-pod-0017", 0.0, "Burstable", 8, 1332357.0, None, 2),
        ("openb-pod-0800", 0.0, "BE", 1, 3197.0, None, 11),  # gpu_milli 0 means whole GPUs
        ("openb-pod-0035", 529561.0, "LS", 1, 1512.0, None, 4),
        ("openb-pod-2263", 1377232.0, "LS", 4, 548.0, None, 6),
        ("openb-pod-4447", 2286710.0, "LS", 1, 1212.0, None, 9),
    ]


def test_generic_request_columns() -> None:
    trace = load_trace(fixture("generic_requests.csv"))
    requests = [
        (j.job_id, j.cpus, j.mem_per_node, j.mem_per_cpu, j.mem_per_gpu, j.exclusive, j.gpu_type, j.nodelist, j.exclude,
         j.features)
        for j in trace.jobs
    ]
    assert requests == [
        ("a", 8, 32000, 0, 0, True, "a100", ("gpu1", "gpu2"), (), ("ib", "nvme")),
        ("b", 3, 0, 1536, 0, False, "", (), ("gpu1",), ("ib", "nvme")),  # 1.5G per CPU; features split on spaces
        ("c", 0, 0, 0, 0, False, "", (), (), ()),  # empty cells: nothing asked
        ("d", 0, 0, 0, 20480, False, "", (), (), ()),  # --mem-per-gpu
    ]
    assert summary(trace)[1] == ("b", 5.0, "u2", 1, 20.0, "bert", 3)


def test_formats_without_request_columns_ask_for_nothing_more() -> None:
    for name in ("generic_good.csv", "philly_good.csv", "tiresias_good.csv"):
        for j in load_trace(fixture(name)).jobs:
            assert (j.cpus, j.mem_per_node, j.mem_per_cpu, j.mem_per_gpu, j.exclusive, j.gpu_type) == (0, 0, 0, 0, False, "")
            assert j.nodelist == j.exclude == j.features == ()


def test_alibaba_cpu_memory_and_gpu_spec() -> None:
    jobs = {j.job_id: j for j in load_trace(fixture("alibaba_good.csv")).jobs}
    # cpu_milli rounds up to whole CPUs; memory_mib is memory per node (a pod is on one node)
    assert (jobs["openb-pod-2263"].cpus, jobs["openb-pod-2263"].mem_per_node) == (33, 132096)  # 32200 milli
    assert (jobs["openb-pod-0017"].cpus, jobs["openb-pod-0017"].mem_per_node) == (88, 327680)
    # gpu_spec alternatives (V100M16|V100M32, A10|T4) ask for no one type
    assert jobs["openb-pod-0035"].gpu_type == jobs["openb-pod-4447"].gpu_type == ""


def test_alibaba_single_gpu_spec_is_the_gpu_type(tmp_path: Path) -> None:
    header = fixture("alibaba_good.csv").read_text().splitlines()[0]
    path = tmp_path / "pods.csv"
    path.write_text(header + "\nopenb-pod-1,500,0,2,1000,V100M32,LS,Running,100,200,100\n")
    (j,) = load_trace(path).jobs
    assert (j.cpus, j.mem_per_node, j.gpu_type) == (1, 0, "V100M32")


def test_gzip_is_read_whatever_the_name(tmp_path: Path) -> None:
    plain = load_trace(fixture("philly_good.csv"))
    for name in ("philly_good.csv.gz", "compressed.csv"):
        target = tmp_path / name
        target.write_bytes(gzip.compress(fixture("philly_good.csv").read_bytes()))
        trace = load_trace(target)
        assert trace.jobs == plain.jobs
    assert load_trace(tmp_path / "philly_good.csv.gz").name == "philly_good"


def test_accepts_pathlike_and_str() -> None:
    assert load_trace(str(fixture("tiresias_good.csv"))).jobs == load_trace(fixture("tiresias_good.csv")).jobs


def test_jobs_are_frozen() -> None:
    job = load_trace(fixture("tiresias_good.csv")).jobs[0]
    with pytest.raises(AttributeError):
        job.num_gpus = 4  # type: ignore[misc]


# --- malformations: each names file, line and field --------------------------------------

MALFORMED = [
    # (file, line, field, words the message must contain)
    ("empty.csv", None, None, "empty"),
    ("header_only.csv", None, None, "no job rows"),
    ("unknown_header.csv", 1, None, "accepted headers"),
    ("generic_missing_column.csv", 1, "user", "missing required column"),
    ("generic_duplicate_column.csv", 1, "user", "more than once"),
    ("generic_non_numeric.csv", 3, "duration", "'ten' is not a number"),
    ("generic_nan.csv", 2, "submit_time", "not a finite number"),
    ("generic_inf.csv", 4, "duration", "not a finite number"),
    ("generic_zero_duration.csv", 3, "duration", "must be positive"),
    ("generic_negative_duration.csv", 2, "duration", "must be positive"),
    ("generic_fractional_gpus.csv", 3, "num_gpus", "not a whole number"),
    ("generic_zero_gpus.csv", 2, "num_gpus", "at least 1"),
    ("generic_duplicate_id.csv", 4, "job_id", "first on line 2"),
    ("generic_short_row.csv", 3, None, "expected 5 fields"),
    ("generic_empty_user.csv", 2, "user", "empty"),
    ("generic_bad_utf8.csv", 3, None, "UTF-8"),
    ("philly_bad_date.csv", 3, "timestamp", "YYYY-mm-dd HH:MM:SS"),
    ("philly_bad_time_format.csv", 2, "timestamp", "YYYY-mm-dd HH:MM:SS"),
    ("philly_zero_duration.csv", 4, "duration", "must be positive"),
    ("philly_missing_column.csv", 1, "cluster", "philly format"),
    ("tiresias_non_numeric_gpus.csv", 3, "num_gpu", "not a number"),
    ("tiresias_duplicate_id.csv", 3, "job_id", "duplicate"),
    ("alibaba_scheduled_before_created.csv", 2, "scheduled_time", "before creation"),
    ("alibaba_deleted_before_scheduled.csv", 3, "deletion_time", "before scheduling"),
    ("alibaba_bad_gpu_milli.csv", 2, "gpu_milli", "1000 milli-GPUs"),
    ("alibaba_bad_time.csv", 2, "creation_time", "not a number"),
    ("alibaba_all_skipped.csv", None, None, "all 2 rows were skipped"),
    ("alibaba_negative_cpu.csv", 3, "cpu_milli", "must be at least 0"),
    ("generic_negative_cpus.csv", 3, "cpus", "must be at least 0, got -2"),
    ("generic_bad_exclusive.csv", 2, "exclusive", "'maybe' is not a yes/no value"),
    ("generic_bad_memory.csv", 3, "mem_per_node", "'12X' is not an amount of memory"),
    ("generic_two_memories.csv", 2, "mem_per_cpu", "not mem_per_node and mem_per_cpu"),
    ("generic_memory_per_cpu_and_gpu.csv", 3, "mem_per_gpu", "give one of mem_per_node, mem_per_cpu and mem_per_gpu"),
    ("generic_mem_per_cpu_without_cpus.csv", 2, "mem_per_cpu", "needs a cpus count"),
    ("generic_bad_nodelist.csv", 3, "nodelist", "not a Slurm hostlist"),
    ("generic_nodelist_excluded.csv", 2, "exclude", "n2 is both in nodelist and excluded"),
    ("generic_or_features.csv", 3, "features", "only feature names joined by '&' or spaces"),
    ("generic_bad_gpu_type.csv", 2, "gpu_type", "not one GPU type name"),
]


@pytest.mark.parametrize(("name", "line", "field", "words"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_file_names_line_and_field(name: str, line: int | None, field: str | None, words: str) -> None:
    path = str(fixture(name))
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (path, line, field)
    assert words in error.message
    location = path if line is None else f"{path}:{line}"
    assert str(error) == (f"{location}: {field}: {error.message}" if field else f"{location}: {error.message}")


def test_unknown_header_lists_every_accepted_header() -> None:
    with pytest.raises(TraceError) as caught:
        load_trace(fixture("unknown_header.csv"))
    for fmt, columns in FORMATS.items():
        assert f"{fmt}: {','.join(columns)}" in caught.value.message


def test_missing_file_and_corrupt_gzip(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the file"):
        load_trace(tmp_path / "absent.csv")
    broken = tmp_path / "broken.csv.gz"
    broken.write_bytes(gzip.compress(b"job_id,submit_time,user,num_gpus,duration\n")[:15])
    with pytest.raises(TraceError, match="not a readable gzip file"):
        load_trace(broken)


def test_trace_error_survives_pickling() -> None:
    with pytest.raises(TraceError) as caught:
        load_trace(fixture("generic_zero_gpus.csv"))
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (str(copy), copy.line, copy.field, copy.message) == (
        str(caught.value), 2, "num_gpus", caught.value.message
    )


# --- filters ----------------------------------------------------------------------------


def ids(trace: Trace) -> list[str]:
    return [j.job_id for j in trace.jobs]


def test_window_is_relative_to_first_submit_and_half_open() -> None:
    # generic_good submits (relative): j1 0, j3 0, j2 60, j4 300, j5 900.
    trace = load_trace(fixture("generic_good.csv"), start=60, end=900)
    assert ids(trace) == ["j2", "j4"]
    assert [j.submit_time for j in trace.jobs] == [0.0, 240.0]  # re-based on the first kept job
    assert ids(load_trace(fixture("generic_good.csv"), start=300)) == ["j4", "j5"]
    assert ids(load_trace(fixture("generic_good.csv"), end=60)) == ["j1", "j3"]


def test_users_filter() -> None:
    trace = load_trace(fixture("generic_good.csv"), users={"bob"})
    assert ids(trace) == ["j2", "j5"]
    assert [j.submit_time for j in trace.jobs] == [0.0, 840.0]


def test_window_applies_before_users() -> None:
    # Offsets stay relative to the whole trace's first submission, not bob's.
    assert ids(load_trace(fixture("generic_good.csv"), users=["bob"], start=100)) == ["j5"]


def test_load_scale_divides_gaps() -> None:
    trace = load_trace(fixture("generic_good.csv"), load_scale=2.0)
    assert [j.submit_time for j in trace.jobs] == [0.0, 0.0, 30.0, 150.0, 450.0]
    assert [j.duration for j in trace.jobs] == [j.duration for j in load_trace(fixture("generic_good.csv")).jobs]


def test_max_jobs_keeps_the_first_after_other_filters() -> None:
    trace = load_trace(fixture("generic_good.csv"), start=60, max_jobs=2, load_scale=3.0)
    assert ids(trace) == ["j2", "j4"]
    assert [j.submit_time for j in trace.jobs] == [0.0, 80.0]


def test_no_jobs_left_says_what_the_trace_holds() -> None:
    path = str(fixture("generic_good.csv"))
    with pytest.raises(TraceError) as caught:
        load_trace(path, users={"dave"}, start=10)
    assert caught.value.line is None
    assert str(caught.value).startswith(f"{path}: no jobs left after filters (start=10s users=dave)")
    assert "5 jobs submitted over 900 s by 3 users (alice, bob, carol)" in caught.value.message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"start": 100, "end": 100},
        {"start": float("nan")},
        {"end": float("inf")},
        {"load_scale": 0.0},
        {"load_scale": float("nan")},
        {"max_jobs": 0},
    ],
)
def test_bad_arguments_are_value_errors_not_trace_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError) as caught:
        load_trace(fixture("generic_good.csv"), **kwargs)  # type: ignore[arg-type]
    assert not isinstance(caught.value, TraceError)


# --- check_fits ---------------------------------------------------------------------------


def test_check_fits_names_the_first_line_too_big() -> None:
    trace = load_trace(fixture("generic_good.csv"))
    check_fits(trace, 8)
    with pytest.raises(TraceError) as caught:
        check_fits(trace, 3)
    # j2 (8 GPUs, line 3) and j4 (4 GPUs, line 6) do not fit; line 3 comes first.
    assert (caught.value.line, caught.value.field) == (3, "num_gpus")
    assert "job j2 asks for 8 GPUs but the cluster has 3 (2 of 5 jobs" in caught.value.message
    with pytest.raises(ValueError):
        check_fits(trace, 0)


# --- parse_duration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600.0), ("90s", 90.0), ("45m", 2700.0), ("6h", 21600.0), ("2d", 172800.0),
     ("1.5h", 5400.0), ("0", 0.0), (" 30m ", 1800.0), (".5d", 43200.0)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-5", "1.5x", "2 h", "1e3", "nan", "inf", "1_000", "6H", "٣h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected seconds or a number with a unit"):
        parse_duration(text)


# --- bundled samples ----------------------------------------------------------------------


def test_sample_names_resolve_to_files() -> None:
    for name in SAMPLES:
        assert sample_path(name).is_file()
    with pytest.raises(ValueError, match="philly-sample, philly, tiresias-60"):
        sample_path("philly-2017")


def test_bundled_philly_sample_fits_four_eight_gpu_nodes() -> None:
    trace = load_trace(sample_path("philly-sample"))
    assert (trace.format, len(trace.jobs), trace.skipped) == ("philly", 300, 0)
    check_fits(trace, 32)
    span = trace.jobs[-1].submit_time
    offered = sum(j.num_gpus * j.duration for j in trace.jobs) / (32 * span)
    assert 1.0 < offered < 2.5, "the sample should queue on 32 GPUs, but drain"
    assert len({j.user for j in trace.jobs}) >= 4
    assert {1, 2, 4, 8} <= {j.num_gpus for j in trace.jobs}


def test_bundled_philly_sample_is_a_window_of_the_full_trace() -> None:
    sample = load_trace(sample_path("philly-sample"))
    full = load_trace(sample_path("philly"))
    assert len(full.jobs) == 52849
    assert max(j.num_gpus for j in full.jobs) == 32
    # The sample starts at 2017-10-28 22:02:12, 4,707,091 s after the full trace's first job.
    offset = 4_707_091.0
    window = load_trace(sample_path("philly"), start=offset, end=offset + sample.jobs[-1].submit_time + 1)

    def content(trace: Trace) -> list[tuple[float, str, int, float]]:
        return sorted((j.submit_time, j.user, j.num_gpus, j.duration) for j in trace.jobs)

    assert content(window) == content(sample)


def test_bundled_tiresias_sample() -> None:
    trace = load_trace(sample_path("tiresias-60"))
    assert len(trace.jobs) == 60
    assert sorted(j.num_gpus for j in trace.jobs) == [1] * 30 + [2] * 10 + [4] * 10 + [8] * 10
    assert {j.model for j in trace.jobs} == {
        "alexnet", "googlenet", "inception3", "inception4", "resnet101",
        "resnet152", "resnet50", "vgg11", "vgg16", "vgg19",
    }  # fmt: skip


# --- robustness: any input gives a Trace or a TraceError -----------------------------------


def load_bytes(data: bytes, suffix: str = ".csv") -> Trace | None:
    """Load ``data`` as a trace file; None when it is rejected with a TraceError."""
    folder = tempfile.mkdtemp()
    try:
        path = Path(folder) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            trace = load_trace(path)
        except TraceError:
            return None
        assert trace.jobs and all(isinstance(j, TraceJob) for j in trace.jobs)
        return trace
    finally:
        shutil.rmtree(folder)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_give_trace_or_trace_error(data: bytes) -> None:
    load_bytes(data)
    load_bytes(gzip.compress(data), ".csv.gz")


FIELD = st.one_of(
    st.sampled_from(["0", "1", "8", "-1", "1.5", "3600", "nan", "inf", "", " ", "1e999", "1_0", "x",
                     "2017-10-09 07:01:55", "2017-02-30 00:00:00", "a,b", '"', "\u00e9", "0.0"]),
    st.text(max_size=8),
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    rows=st.lists(st.lists(FIELD, min_size=0, max_size=12), max_size=6),
)
def test_random_rows_under_real_headers_give_trace_or_trace_error(fmt: str, rows: list[list[str]]) -> None:
    lines = [",".join(FORMATS[fmt])] + [",".join(row) for row in rows]
    trace = load_bytes("\n".join(lines).encode())
    if trace is not None:
        assert all(j.num_gpus >= 1 and j.duration > 0 for j in trace.jobs)
        assert trace.jobs[0].submit_time == 0.0
        assert [(j.submit_time, j.job_id) for j in trace.jobs] == sorted((j.submit_time, j.job_id) for j in trace.jobs)


REQUEST_FIELD = st.one_of(
    FIELD,
    st.sampled_from(["4", "16G", "1.5t", "512k", "yes", "no", "n[1-3]", "n[3-", "a&b", "a|b", "a b", "gpu:a100"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.lists(REQUEST_FIELD, min_size=13, max_size=13), max_size=4))
def test_random_request_columns_give_trace_or_trace_error(rows: list[list[str]]) -> None:
    header = "job_id,submit_time,user,num_gpus,duration,cpus,mem_per_node,mem_per_cpu,exclusive,gpu_type,nodelist,exclude,features"
    fixed = [[f"j{i}", "0", "u", "1", "5", *row[5:]] for i, row in enumerate(rows)]
    trace = load_bytes("\n".join([header] + [",".join(row) for row in fixed]).encode())
    if trace is not None:
        for j in trace.jobs:
            assert j.cpus >= 0 and j.mem_per_node >= 0 and j.mem_per_cpu >= 0
            assert not (j.mem_per_node and j.mem_per_cpu)
            assert all(j.features) and all(j.nodelist) and not set(j.nodelist) & set(j.exclude)
