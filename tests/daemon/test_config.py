"""Daemon config: defaults, validation errors that name the key, docs cover every key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attentived.daemon import config as C

DOC = Path(__file__).parents[2] / "docs" / "daemon.md"


def test_defaults_and_full_file(tmp_path):
    assert C.parse("").interval == 10.0 and C.parse("").hold_mode == "block"
    text = C.render_defaults()
    cfg = C.parse(text, "example.toml")
    assert cfg.as_dict() == C.Config().as_dict()
    p = tmp_path / "c.toml"
    p.write_text('interval = 2\npartitions = ["gpu", "a100"]\npolicy = "sjf+consolidate+backfill"\ndry_run = true\n')
    cfg = C.load(p)
    assert cfg.interval == 2.0 and cfg.partitions == ("gpu", "a100") and cfg.dry_run and cfg.source == str(p)
    assert C.parse('partitions = "a, b"').partitions == ("a", "b")
    assert C.parse('policy = "attentive"\nmodel = "/nope.pt"').policy == "attentive"


@pytest.mark.parametrize("text,message", [
    ('interval = "fast"', "interval: must be a number"),
    ("interval = 0", "interval: must be at least"),
    ("seed = 1.5", "seed: must be a whole number"),
    ("dry_run = 1", "dry_run: must be true or false"),
    ('hold_mode = "grab"', "hold_mode: must be one of block, attach"),
    ("partitions = [1]", "partitions: must be a list of names"),
    ('partitions = ["a;b"]', "partitions: 'a;b' is not a Slurm partition name"),
    ('policy = "fastest"', "policy: unknown policy 'fastest'"),
    ('policy = "attentive:fair=0.5"', "policy: policy 'attentive' has no parameter 'fair'; it takes fairness"),
    ('policy = "attentive:fairness=2"', "policy: policy 'attentive': fairness='2': must be a number from 0 to 1"),
    ('policy = "fifo:fairness=0.5"', "policy: policy 'fifo' has no parameter 'fairness'; it takes one_node"),
    ('policy = "attentive:model=/nope.pt"', "policy: policy 'attentive': model='/nope.pt': must be an existing model file"),
    ('fallback_policy = "portfolio:fairness=-1"', "fallback_policy: policy 'portfolio': fairness='-1'"),
    ('reservation_prefix = "x y"', "reservation_prefix"),
    ("priority_floor = 5000\npriority_ceiling = 100", "priority_ceiling"),
    ('metrics_address = "localhost;"', "metrics_address"),
    ("metrics_port = 70000", "metrics_port: must be at most"),
    ("intervall = 3", "unknown key 'intervall' (did you mean 'interval'?)"),
    ("[slurm]\nx = 1", "unknown table 'slurm'"),
    ("interval = ", "not valid TOML"),
    ('state_dir = ""', "state_dir"),
])
def test_errors_name_the_key(text, message):
    with pytest.raises(C.ConfigError) as info:
        C.parse(text, "/etc/attentived/config.toml")
    assert message in str(info.value) and str(info.value).startswith("/etc/attentived/config.toml: ")


def test_missing_files(tmp_path):
    with pytest.raises(C.ConfigError, match="no such config file"):
        C.load(tmp_path / "nope.toml")
    assert C.load(None, required=False).as_dict() == C.Config().as_dict() or Path(C.DEFAULT_PATH).exists()


def test_every_key_is_documented():
    doc = DOC.read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", doc, re.M))
    assert documented == {k.name for k in C.KEYS}, documented ^ {k.name for k in C.KEYS}


FIXTURES = Path(__file__).parent / "fixtures"


def test_slurm_settings_are_checked():
    from attentived.daemon.checks import check_slurm_config
    from attentived.daemon.scontrol_text import parse_config

    conf = parse_config((Path(__file__).parent / "fixtures" / "slurm-22.05" / "scontrol-show-config.txt").read_text())
    assert [f for f in check_slurm_config(conf) if f.level != "info"] == []  # the lab is set up as needed
    bad = dict(conf, SchedulerType="sched/backfill", PriorityType="priority/basic", PriorityWeightAge="2000000",
               GresTypes="(null)", SelectType="select/linear")
    found = {f.key: f for f in check_slurm_config(bad, priority_floor=1_000_000)}
    assert "backfill" in found["SchedulerType"].message and found["SchedulerType"].level == "warning"
    assert "priority/basic" in found["PriorityType"].message
    assert "2000000 >= priority_floor" in found["PriorityWeight*"].message
    assert found["GresTypes"].level == "error" and "SelectType" in found
    assert "disable_job_shrink" in found["SchedulerParameters"].message  # the lab's Slurm permits shrinking
    shrink = dict(conf, SchedulerParameters="disable_job_shrink,bf_interval=1")
    assert "SchedulerParameters" not in {f.key for f in check_slurm_config(shrink)}
    assert "TopologyPlugin" not in {f.key for f in check_slurm_config(conf)}  # the lab's topology/tree
    for none in ("topology/none", "topology/flat"):  # flat: what 25.05 and later run without one
        assert "TopologyPlugin" in {f.key for f in check_slurm_config(dict(conf, TopologyPlugin=none))}


def test_a_timeout_too_short_for_slurms_db_index_refusal_is_named():
    from attentived.daemon.checks import check_slurm_config
    from attentived.daemon.scontrol_text import parse_config

    def keys(version: str, timeout: float, storage: str = "accounting_storage/slurmdbd") -> set[str]:
        conf = parse_config((FIXTURES / f"slurm-{version}" / "scontrol-show-config.txt").read_text())
        return {f.key for f in check_slurm_config(dict(conf, AccountingStorageType=storage), command_timeout=timeout)}

    assert "command_timeout" in keys("22.05", 5)
    assert "command_timeout" not in keys("22.05", 6)
    assert "command_timeout" not in keys("22.05", 1, storage="accounting_storage/none")
    assert "command_timeout" not in keys("24.11", 1)  # 24.11 makes the index itself and never refuses


def test_a_model_named_twice_is_refused(tmp_path):
    model = tmp_path / "m.pt"
    model.write_bytes(b"x")
    with pytest.raises(C.ConfigError, match="policy: names a model .* and so does model"):
        C.parse(f'policy = "attentive:model={model}"\nmodel = "{model}"')
    assert C.parse(f'policy = "attentive:model={model}"').policy == f"attentive:model={model}"
