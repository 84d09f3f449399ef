"""bench.host_path times the blocks the scheduler would verify, and runs end to end."""

from bench import host_path
from engine.scheduler import CROWDED_BLOCK


def test_the_blocks_timed_are_the_schedulers():
    assert host_path.verify_block(1, 64) == 64
    assert host_path.verify_block(4, 64) == 64  # 256 rows: each its whole block
    assert host_path.verify_block(5, 64) == CROWDED_BLOCK
    assert host_path.verify_block(64, 16) == 16  # a crowd never lengthens a block


def test_it_prints_a_row_per_batch(capsys):
    assert host_path.main(["--sequences", "1", "5", "--steps", "2", "--copied", "0", "100", "--k", "64"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 64 |" in out and f"| 5 | {CROWDED_BLOCK} |" in out
    assert "| 100 |" in out
