import numpy as np
import pytest

from utils.check import CheckFailed, assert_close, poisoned, rel_l2_error, tolerance_for


def test_rel_l2_error_matches_definition(rng):
    ref = rng.standard_normal(1000)
    out = ref + 1e-3 * rng.standard_normal(1000)
    expect = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel_l2_error(out, ref) == pytest.approx(expect)


def test_assert_close_passes_within_tolerance(rng):
    ref = rng.standard_normal((37, 199))
    out = (ref * (1 + 1e-7)).astype(np.float32)
    assert assert_close(out, ref) < 1e-5


def test_assert_close_fails_and_names_worst_element(rng):
    ref = rng.standard_normal((8, 8)).astype(np.float32)
    out = ref.copy()
    out[3, 5] += 10
    with pytest.raises(CheckFailed, match=r"at \(3, 5\)"):
        assert_close(out, ref)


def test_unwritten_nan_fails_even_with_loose_tolerance(rng):
    ref = rng.standard_normal(100).astype(np.float32)
    out = poisoned(100, np.float32, xp=np)
    out[:99] = ref[:99]
    with pytest.raises(CheckFailed, match="1 of 100 elements are NaN"):
        assert_close(out, ref, tol=1.0)


def test_shape_mismatch_fails():
    with pytest.raises(CheckFailed, match="shape"):
        assert_close(np.zeros((2, 3)), np.zeros((3, 2)))


def test_exact_tolerance_catches_one_ulp():
    ref = np.arange(10, dtype=np.float32)
    out = ref.copy()
    out[4] = np.nextafter(out[4], np.float32(100))
    with pytest.raises(CheckFailed):
        assert_close(out, ref, dtype="exact")


def test_tolerances_are_ordered_by_precision():
    assert tolerance_for(np.float32) < tolerance_for("tf32") < tolerance_for("bfloat16")
    with pytest.raises(ValueError, match="no default tolerance"):
        tolerance_for(np.int8)


def test_poisoned_ints_use_a_sentinel_outside_common_ranges():
    assert (poisoned(4, np.int8, xp=np) == -128).all()      # symmetric int8 codes are within ±127
    assert (poisoned(4, np.uint8, xp=np) == 255).all()
    assert (poisoned(4, np.int32, xp=np, fill=7) == 7).all()
