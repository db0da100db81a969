"""tests/property_examples.py: the fast loop's share of each property's examples."""
from __future__ import annotations

import re

import pytest
from hypothesis import settings

from .property_examples import FLOOR, SCALE, _scale, examples


def test_the_whole_suite_draws_every_example():
    assert [examples(n, 1.0) for n in (1, 10, 40, 300)] == [1, 10, 40, 300]


def test_a_scaled_run_draws_its_share_but_no_fewer_than_the_floor_nor_more_than_all():
    assert examples(300, 0.25) == 75
    assert examples(200, 0.25) == 50
    assert examples(40, 0.25) == FLOOR       # 10: the floor
    assert examples(12, 0.25) == FLOOR
    assert examples(5, 0.25) == 5            # never more than the test's own count


def test_the_profile_draws_the_scaled_default():
    assert settings.default.max_examples == examples(100, SCALE)
    assert settings.default.deadline is None


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "a quarter", "nan"])
def test_a_bad_scale_is_refused_with_what_was_given(text):
    with pytest.raises(ValueError, match=re.escape(f"ZEPS_EXAMPLES must be a number in (0, 1], "
                                                   f"got '{text}'")):
        _scale(text)


def test_a_good_scale_is_read():
    assert _scale("0.25") == 0.25 and _scale("1") == 1.0
