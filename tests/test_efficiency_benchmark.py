"""benchmarks/efficiency_spread.py at its smallest: each program's line count is the same on every repeat
(and under load), and the table it prints names every cost."""

import pytest

from efficiency_spread import PROGRAMS, report, run

pytestmark = pytest.mark.sandbox  # every test here runs code in the sandbox


def test_line_counts_repeat_exactly_under_load_and_the_table_prints(capsys):
    results = run(repeats=2, load=1)
    assert list(results) == ["idle", "1 busy"]
    for result in results.values():
        for name in PROGRAMS:
            assert len({row["lines"] for row in result["rows"][name]}) == 1
        assert len(set(result["scores"]["lines"])) == 1 and result["scores"]["lines"][0] < 0.5
    lines = {result["rows"]["trial division"][0]["lines"] for result in results.values()}
    assert len(lines) == 1  # the load changed nothing
    report(results)
    printed = capsys.readouterr().out
    assert "widest CPU-time score deviation from its median" in printed and "trial division     lines" in printed
