"""StopTrimmer: streamed text cut before the first stop string (no server needed)."""

from engine.server.generation import StopTrimmer


def feed(stop, pieces):
    t = StopTrimmer(tuple(stop))
    out = "".join(t.push(p) for p in pieces)
    return out + ("" if t.stopped else t.flush()), t.stopped


def test_no_stop_passes_everything():
    assert feed([], ["ab", "c"]) == ("abc", False)


def test_stop_inside_one_piece():
    assert feed(["END"], ["abcENDxyz"]) == ("abc", True)


def test_stop_split_across_pieces_is_held_back():
    t = StopTrimmer(("END",))
    assert t.push("ab") == ""  # len("END") - 1 = 2 characters are always held back
    assert t.push("cE") == "ab"
    assert t.push("ND!") == "c" and t.stopped


def test_earliest_of_several_stops_wins():
    assert feed(["zz", "b"], ["a", "bzz"]) == ("a", True)


def test_prefix_of_stop_at_the_end_is_flushed():
    assert feed(["END"], ["abcEN"]) == ("abcEN", False)
