"""The Pareto front and a fairness knob's curve against the other policies."""

from __future__ import annotations

import pytest

from attentived.simulator.pareto import curves, pareto_front, versus


def test_pareto_front_keeps_exactly_the_undominated():
    points = {"a": (1.0, 9.0), "b": (2.0, 5.0), "c": (3.0, 5.0), "d": (4.0, 1.0), "e": (4.0, 2.0), "f": (2.0, 5.0)}
    # c is dominated by b (same wait, slower), e by d; b and f tie and both stay
    assert pareto_front(points) == ["a", "b", "d", "f"]
    assert pareto_front({}) == []


def test_curves_group_fairness_settings_by_the_rest_of_the_name(tmp_path):
    model = tmp_path / "m.pt"
    model.write_bytes(b"x")
    names = ["fifo", "portfolio:fairness=0", "portfolio:fairness=1", "portfolio:fairness=0.5", "genetic:fairness=1",
             f"attentive:fairness=0,model={model}", f"attentive:fairness=1,model={model}"]
    got = curves(names)
    assert got["portfolio"] == {0.0: "portfolio:fairness=0", 0.5: "portfolio:fairness=0.5", 1.0: "portfolio:fairness=1"}
    assert list(got[f"attentive:model={model}"]) == [0.0, 1.0]
    assert "genetic" not in got  # one setting is a point, not a curve


def test_versus_names_the_covering_settings_or_the_shortfall():
    pts = {"k:fairness=0": (1.0, 10.0), "k:fairness=1": (2.0, 4.0), "fast": (1.5, 12.0), "fair": (1.8, 3.0)}
    curve = {0.0: "k:fairness=0", 1.0: "k:fairness=1"}
    by = {v.other: v for v in versus(curve, pts)}
    assert set(by) == {"fast", "fair"}
    assert by["fast"].covering == (0.0,) and by["fast"].describe() == "W in {0}"
    fair = by["fair"]
    assert fair.covering == () and fair.closest == 1.0
    assert fair.ratios == pytest.approx((2.0 / 1.8, 4.0 / 3.0))
    assert "closest W=1" in fair.describe() and "max_user_wait x1.33" in fair.describe()


def test_a_knob_is_not_compared_with_its_own_default_setting():
    from attentived.simulator.pareto import knobs

    pts = {"portfolio": (1.5, 5.0), "portfolio:fairness=0": (1.0, 9.0), "portfolio:fairness=1": (2.0, 4.0),
           "sjf": (1.2, 9.5)}
    ((base, (curve, rivals)),) = knobs(pts).items()
    assert base == "portfolio" and list(curve) == [0.0, 1.0]
    assert [v.other for v in rivals] == ["sjf"] and rivals[0].covering == (0.0,)
