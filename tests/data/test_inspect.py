"""``python -m soft_spatial.data.inspect PATH`` (`soft_spatial.data.inspect`): the layout a download
is, its counts per category and sub-category, and one parsed record."""

from __future__ import annotations

from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.inspect import main as inspect_main


def test_inspect_cli(fixture_set: FixtureSet, capsys):
    inspect_main([str(fixture_set.omnispatial)])
    out = capsys.readouterr().out
    assert "layout: omnispatial-release" in out and "records: 10" in out
    assert "  Perspective_Taking: 3\n    Egocentric: 1\n    Allocentric: 1\n    Hypothetical: 1" in out
    assert "  id: 0_0" in out and "  option B: right" in out and "  answer: B (right)" in out
    inspect_main([str(fixture_set.mindcube), "--benchmark", "mindcube"])
    out = capsys.readouterr().out
    assert "layout: mindcube-raw" in out and "records: 6" in out
    assert "  among: 2\n  around: 2\n  rotation: 1\n  translation: 1" in out
    assert "image 2: " + str(fixture_set.mindcube / "other_all_image/among/group001/left.png") in out
