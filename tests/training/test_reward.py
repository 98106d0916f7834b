"""The fairness term's mean over users: its power decides how much of the signal goes to
the worst-off user (training/reward.py)."""

from __future__ import annotations

import math

import pytest

from attentived.training.reward import RewardWeights, power_mean


def test_the_power_mean_at_two_is_the_root_mean_square_with_missing_users_at_zero():
    assert power_mean([3.0, 4.0], 4, 2.0) == math.sqrt((9.0 + 16.0) / 4)
    assert power_mean([], 3, 8.0) == 0.0


def test_equal_waits_give_the_same_potential_at_any_power():
    for p in (1.0, 2.0, 8.0, 16.0):
        assert power_mean([5.0, 5.0, 5.0], 3, p) == pytest.approx(5.0)


def test_one_user_waiting_fades_with_the_number_of_users_as_the_root_of_the_power():
    # One user waits an hour among 16: the RMS counts a quarter of it, the 8th-power mean 71%.
    assert power_mean([3600.0], 16, 2.0) == pytest.approx(900.0)
    assert power_mean([3600.0], 16, 8.0) == pytest.approx(3600.0 / 16 ** (1 / 8))


def test_a_higher_power_gives_the_worst_off_user_more_of_the_signal():
    """A user's share of the derivative goes as their mean wait to the power p - 1."""
    def share_of_worst(p: float) -> float:
        waits = [8.0, 4.0, 4.0, 4.0, 2.0]
        eps = 1e-6
        gains = [power_mean(waits[:i] + [w + eps] + waits[i + 1:], 5, p) - power_mean(waits, 5, p)
                 for i, w in enumerate(waits)]
        return gains[0] / sum(gains)

    assert share_of_worst(2.0) == pytest.approx(8 / (8 + 4 + 4 + 4 + 2), rel=1e-4)
    assert share_of_worst(8.0) == pytest.approx(8**7 / (8**7 + 3 * 4**7 + 2**7), rel=1e-4)
    assert share_of_worst(8.0) > 0.9 > 0.4 > share_of_worst(2.0)


@pytest.mark.parametrize("power", [0.5, 17.0])
def test_a_power_outside_one_to_sixteen_is_refused(power):
    with pytest.raises(ValueError, match=r"fairness_power must be in \[1, 16\]"):
        RewardWeights(fairness_power=power)
