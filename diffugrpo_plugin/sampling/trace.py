"""Pictures of a denoising trace: the step at which each completion token was unmasked.

Tokens are coloured by step on one colour scale (early = dark purple, late = yellow), so the
order of unmasking shows at a glance: left to right for block-wise LLaDA, easy tokens first
for Dream's entropy ranking. Three renderings of the same :class:`TraceRow` list:

* :func:`render_ansi`: 24-bit colour for a terminal;
* :func:`render_html`: a standalone page with a step slider that replays the unmasking;
* :func:`render_png`: a heatmap (positions x prompts) through matplotlib.

No torch: rows carry plain lists (``unmask_step[b].tolist()``).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

NEVER = -1  # step value of a position the sampler never decided (after EOS, padding)

# Anchors of the colour scale (matplotlib's viridis at 0, .25, .5, .75, 1), linearly interpolated.
SCALE = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
UNDECIDED = (90, 90, 90)
MASK_GLYPH = "\u2591"  # shown in place of a token that is still masked


@dataclass(frozen=True)
class TraceRow:
    """One completion: its prompt text, its tokens as text, and each token's unmask step."""

    prompt: str
    tokens: list[str]
    steps: list[int]
    total_steps: int  # the row's number of denoising steps (colour scale runs 0 .. total_steps - 1)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.steps):
            raise ValueError(
                f"a trace row needs one step per token; got {len(self.tokens)} tokens and {len(self.steps)} steps"
            )


def step_colour(step: int, total_steps: int) -> tuple[int, int, int]:
    """RGB of a step on the scale: step 0 -> first anchor, ``total_steps - 1`` -> last anchor."""
    if step == NEVER:
        return UNDECIDED
    fraction = step / (total_steps - 1) if total_steps > 1 else 0.0
    position = min(max(fraction, 0.0), 1.0) * (len(SCALE) - 1)
    low = min(int(position), len(SCALE) - 2)
    weight = position - low
    return tuple(round(a + (b - a) * weight) for a, b in zip(SCALE[low], SCALE[low + 1]))


def _text_colour(background: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on light backgrounds, white on dark ones (relative luminance)."""
    luminance = 0.2126 * background[0] + 0.7152 * background[1] + 0.0722 * background[2]
    return (0, 0, 0) if luminance > 140 else (255, 255, 255)


def _visible(token: str) -> str:
    """Whitespace-only tokens would show as nothing: make line breaks and tabs visible."""
    return token.replace("\n", "\u21b5\n").replace("\t", "\u2192   ")


def render_ansi(rows: list[TraceRow]) -> str:
    """Every row's prompt, then its tokens on a background coloured by unmask step, and a legend."""
    blocks = []
    for row in rows:
        coloured = []
        for token, step in zip(row.tokens, row.steps):
            background = step_colour(step, row.total_steps)
            foreground = _text_colour(background)
            coloured.append(
                f"\x1b[48;2;{background[0]};{background[1]};{background[2]}m"
                f"\x1b[38;2;{foreground[0]};{foreground[1]};{foreground[2]}m{_visible(token)}\x1b[0m"
            )
        blocks.append(f"\x1b[2m{row.prompt}\x1b[0m" + "".join(coloured))
    total = max((row.total_steps for row in rows), default=1)
    legend = "".join(
        f"\x1b[48;2;{c[0]};{c[1]};{c[2]}m  \x1b[0m"
        for c in (step_colour(s, total) for s in range(0, total, max(1, total // 16)))
    )
    return "\n\n".join(blocks) + f"\n\nunmask step: 0 {legend} {total - 1}\n"


def render_html(rows: list[TraceRow], title: str = "Denoising trace") -> str:
    """A standalone HTML page: coloured tokens (hover shows the step) and a slider replaying the steps."""
    sections = []
    for index, row in enumerate(rows):
        spans = []
        for token, step in zip(row.tokens, row.steps):
            background = step_colour(step, row.total_steps)
            foreground = _text_colour(background)
            label = "never decided" if step == NEVER else f"step {step}"
            spans.append(
                f'<span class="tok" data-step="{step}" data-text="{html.escape(_visible(token))}" '
                f'title="{label}" style="background:rgb{background};color:rgb{foreground}">'
                f"{html.escape(_visible(token))}</span>"
            )
        last = max(row.total_steps - 1, 0)
        sections.append(
            f'<section><h2>Completion {index + 1}</h2><pre class="prompt">{html.escape(row.prompt)}</pre>'
            f'<label>after step <input type="range" min="0" max="{last}" value="{last}" data-row="{index}"> '
            f"<output>{last}</output> of {last}</label>"
            f'<pre class="completion" id="row-{index}">{"".join(spans)}</pre></section>'
        )
    return HTML_PAGE.format(title=html.escape(title), sections="\n".join(sections), mask=json.dumps(MASK_GLYPH))


HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
pre {{ font-family: monospace; white-space: pre-wrap; }}
.prompt {{ color: #777; }}
.tok.masked {{ background: #ddd !important; color: #999 !important; }}
</style></head><body>
<h1>{title}</h1>
<p>Each completion token is coloured by the denoising step that unmasked it (dark = early, yellow = late).
Hover a token for its step; move a slider to see the completion after that step.</p>
{sections}
<script>
const MASK = {mask};
document.querySelectorAll('input[type=range]').forEach(slider => {{
  slider.addEventListener('input', () => {{
    const step = Number(slider.value);
    slider.nextElementSibling.textContent = step;
    document.querySelectorAll('#row-' + slider.dataset.row + ' .tok').forEach(span => {{
      const hidden = Number(span.dataset.step) > step || Number(span.dataset.step) < 0;
      span.classList.toggle('masked', hidden);
      span.textContent = hidden ? MASK : span.dataset.text;
    }});
  }});
}});
</script></body></html>
"""


def render_png(rows: list[TraceRow], path: str) -> None:
    """A heatmap of unmask steps (one line per completion, one column per position) saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    width = max((len(row.steps) for row in rows), default=1)
    grid = np.full((len(rows), width), np.nan)
    for index, row in enumerate(rows):
        decided = [float(step) if step != NEVER else np.nan for step in row.steps]
        grid[index, : len(decided)] = decided
    figure, axes = plt.subplots(figsize=(max(6.0, width / 8), 1.0 + 0.5 * len(rows)))
    image = axes.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    axes.set_xlabel("completion position")
    axes.set_ylabel("completion")
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([str(index + 1) for index in range(len(rows))])
    figure.colorbar(image, ax=axes, label="unmask step")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
