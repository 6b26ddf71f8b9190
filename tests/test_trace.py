"""The denoising-trace renderers: colour scale, terminal, HTML and PNG output."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from diffugrpo_plugin.sampling.trace import (
    NEVER,
    SCALE,
    UNDECIDED,
    TraceRow,
    render_ansi,
    render_html,
    render_png,
    step_colour,
)

ROW = TraceRow(prompt="Q: ", tokens=["def", " f", "<x>", "\n"], steps=[2, 0, 1, NEVER], total_steps=3)


def test_colour_scale_runs_from_first_to_last_anchor():
    assert step_colour(0, 5) == SCALE[0]
    assert step_colour(4, 5) == SCALE[-1]
    assert step_colour(2, 5) == SCALE[2]  # the middle step lands on the middle anchor
    midway = step_colour(1, 9)  # fraction 1/8 -> halfway between anchors 0 and 1
    assert midway == tuple(round((a + b) / 2) for a, b in zip(SCALE[0], SCALE[1]))
    assert step_colour(NEVER, 5) == UNDECIDED
    assert step_colour(0, 1) == SCALE[0]


def test_ansi_colours_every_token_by_its_step():
    text = render_ansi([ROW])
    coloured = re.findall(r"\x1b\[48;2;(\d+);(\d+);(\d+)m\x1b\[38;2;\d+;\d+;\d+m(.*?)\x1b\[0m", text, flags=re.DOTALL)
    assert [token for *_, token in coloured] == ["def", " f", "<x>", "\u21b5\n"]
    assert [tuple(map(int, rgb)) for *rgb, _ in coloured] == [SCALE[-1], SCALE[0], SCALE[2], UNDECIDED]
    assert text.startswith("\x1b[2mQ: \x1b[0m") and "unmask step: 0" in text


class _SpanCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.spans, self.sliders, self._open = [], [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and attrs.get("class") == "tok":
            self._open = attrs
        if tag == "input":
            self.sliders.append(attrs)

    def handle_data(self, data):
        if self._open is not None:
            self.spans.append((self._open["title"], data))
            self._open = None


def test_html_page_shows_steps_and_escapes_tokens():
    page = render_html([ROW], title="t <1>")
    assert "<x>" not in page.split("<body>")[1].split("<script>")[0]  # token text is escaped
    collector = _SpanCollector()
    collector.feed(page)
    assert collector.spans == [("step 2", "def"), ("step 0", " f"), ("step 1", "<x>"), ("never decided", "\u21b5\n")]
    assert collector.sliders[0]["max"] == "2" and collector.sliders[0]["data-row"] == "0"
    assert "<title>t &lt;1&gt;</title>" in page


def test_png_heatmap_is_written(tmp_path):
    path = tmp_path / "trace.png"
    render_png([ROW, TraceRow("", ["a"], [0], 1)], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rows_need_one_step_per_token():
    with pytest.raises(ValueError, match="one step per token"):
        TraceRow("", ["a", "b"], [0], 1)
