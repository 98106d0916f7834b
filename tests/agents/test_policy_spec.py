"""Policy names with parameters (``NAME:KEY=VALUE``): parsing, canonical names, repeats."""

from __future__ import annotations

import pytest

from attentived.agents.registry import ALL, UnknownPolicy, expand, make_policy, own_parameters, parameters, parse_name
from attentived.agents.spec import BadPolicyName


def test_canonical_names_sort_keys_and_write_numbers_plainly(tmp_path):
    model = tmp_path / "m.pt"
    model.write_bytes(b"x")
    assert parse_name("portfolio:fairness=0.50").name == "portfolio:fairness=0.5"
    assert parse_name("portfolio: fairness = 1 ").name == "portfolio:fairness=1"
    spec = parse_name(f"attentive:model={model},fairness=.25")
    assert spec.name == f"attentive:fairness=0.25,model={model}"
    assert spec.kwargs() == {"fairness": 0.25, "model": str(model)}
    assert parse_name("sjf+consolidate").name == "sjf+consolidate" and parse_name("fifo").params == ()
    assert parse_name("genetic:evaluations=050").name == "genetic:evaluations=50"  # whole numbers too
    assert parse_name("fifo:pack=1").name == "fifo:pack=1" and parse_name("fifo:pack=0").name == "fifo:pack=0"


def test_which_policies_take_which_parameters():
    assert set(own_parameters("portfolio")) == {"fairness", "protect"}  # no search, so no evaluations
    assert set(own_parameters("annealing")) == {"fairness", "protect", "evaluations"}
    assert set(own_parameters("genetic+first-fit+backfill")) == {"fairness", "protect", "evaluations"}  # the order's
    assert set(own_parameters("attentive")) == {"fairness", "protect", "model"}
    assert set(own_parameters("deeprm")) == {"protect", "model"}
    assert own_parameters("sjf+consolidate") == {} and own_parameters("nope") is None
    assert set(parameters("sjf+consolidate")) == {"one_node", "pack"} and parameters("nope") is None
    assert set(parameters("attentive")) == {"fairness", "protect", "model", "one_node", "pack"}


@pytest.mark.parametrize("text,message", [
    ("portfolio:fairness=1.5", "policy 'portfolio': fairness='1.5': must be a number from 0 to 1"),
    ("portfolio:fairness=nan", "must be a number from 0 to 1"),
    ("portfolio:fairness=0.1,fairness=0.2", "fairness given twice"),
    ("portfolio:fairness", "'fairness' is not KEY=VALUE"),
    ("portfolio:speed=3", "policy 'portfolio' has no parameter 'speed'; it takes fairness (a number from 0 to 1), protect"),
    ("tiresias:fairness=0.5", "policy 'tiresias' has no parameter 'fairness'; it takes one_node (0 or 1), pack (0 or 1)"),
    ("sjf:one_node=2", "policy 'sjf': one_node='2': must be 0 or 1"),
    ("sjf:pack=yes", "policy 'sjf': pack='yes': must be 0 or 1"),
    ("deeprm:fairness=0.5", "policy 'deeprm' has no parameter 'fairness'; it takes protect"),
    ("annealing:evaluations=0", "policy 'annealing': evaluations='0': must be a whole number >= 1"),
    ("genetic:evaluations=2.5", "must be a whole number >= 1"),
    ("portfolio:evaluations=500", "policy 'portfolio' has no parameter 'evaluations'"),
])
def test_bad_parameters_say_what_is_accepted(text, message):
    with pytest.raises(BadPolicyName) as e:
        parse_name(text)
    assert message in str(e.value)


def test_an_unknown_policy_with_parameters_is_unknown():
    with pytest.raises(UnknownPolicy, match="unknown policy 'nope'"):
        parse_name("nope:fairness=0.5")


def test_a_policy_named_twice_is_an_error_and_all_brings_each_once():
    with pytest.raises(BadPolicyName, match="policy portfolio:fairness=0.5 given twice"):
        expand(["portfolio:fairness=0.5", "portfolio:fairness=0.50"])
    names = expand(["sjf", "all", "portfolio:fairness=0.2"])
    assert names[0] == "sjf" and names.count("sjf") == 1 and names[-1] == "portfolio:fairness=0.2"
    assert set(ALL) <= set(names)


def test_built_policies_carry_the_canonical_name():
    assert make_policy("portfolio:fairness=0.50").name == "portfolio:fairness=0.5"
    assert make_policy("sjf+consolidate+backfill").name == "sjf+consolidate+backfill"


def test_a_search_budget_scales_its_clock_and_patience_and_the_default_is_unchanged():
    default, named = make_policy("annealing").chooser, make_policy("annealing:evaluations=100").chooser
    assert (named.max_evaluations, named.budget_ms, named.patience) == (100, 50.0, 60)
    assert (default.max_evaluations, default.budget_ms, default.patience) == (100, 50.0, 60)
    big = make_policy("genetic:evaluations=1000,fairness=1").chooser
    assert (big.max_evaluations, big.budget_ms, big.patience, big.fairness) == (1000, 500.0, 600, 1.0)
