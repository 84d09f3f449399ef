"""The speed benchmarks' speculation settings, named as their tables name them (bench.common.Mode)."""

import pytest

from bench.common import Mode


def test_a_mode_is_read_from_its_name():
    assert Mode.parse("plain") == Mode("none", 1, False)
    assert Mode.parse("lookup K=64 +prediction") == Mode("lookup", 64, True)
    assert Mode.parse("hybrid K=16 +prediction") == Mode("hybrid", 16, True)
    assert Mode.parse("ngram-earliest K=16") == Mode("ngram-earliest", 16, False)


@pytest.mark.parametrize("name", ["lookup", "lookup K=65", "lookup K=1", "lookup K=16 prediction", "K=16"])
def test_a_bad_name_is_refused(name):
    with pytest.raises(ValueError, match="a mode is"):
        Mode.parse(name)
