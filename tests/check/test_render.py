"""The picture: layout rules, a PNG, and the HTML page opened in a real headless browser."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from sdpaxos.check import CheckResult, KeyValue, Operation, Register, check
from sdpaxos.check.formats import load
from sdpaxos.check.render import BLOCKING, PLACED, UNCHECKED, layout, to_html, write_html, write_png
from tests.check.helpers import histories_dir

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BROWSER_TIMEOUT_S = 120


def _failing() -> CheckResult:
    loaded = load(histories_dir() / "kv/c10-bad.txt", "kv")
    return check(loaded.history, loaded.model, processes=1)


def test_points_follow_the_linearization_inside_each_bar() -> None:
    loaded = load(histories_dir() / "kv/c10-ok.txt", "kv")
    result = check(loaded.history, loaded.model, processes=1)
    panels = layout(result, panels_max=100)
    assert len(panels) == 10
    for panel in panels:
        placed = sorted(
            (b for b in panel.bars if b.point is not None), key=lambda b: b.order_no or 0
        )
        assert len(placed) == len(panel.bars)  # linearizable: every operation placed
        xs = [b.point for b in placed]
        assert xs == sorted(xs) and len(set(xs)) == len(xs)  # strictly in order
        assert all(b.x0 < (b.point or 0) < b.x1 for b in placed)  # inside its interval
        assert [x for x, _ in panel.chain] == xs


def test_a_failure_is_drawn_first_with_the_blocking_operation() -> None:
    result = _failing()
    panels = layout(result)
    first = panels[0]
    assert result.witness is not None and first.key == result.witness.partition
    roles = [b.role for b in first.bars]
    assert roles.count(BLOCKING) == 1 and roles.count(PLACED) == len(result.witness.prefix)
    assert any(b.role == UNCHECKED for p in panels[1:] for b in p.bars)


def test_open_operations_run_to_the_end() -> None:
    history = [
        Operation(1, ("write", 1), None, 0, 1),
        Operation(2, ("write", 2), __import__("sdpaxos.check").check.UNKNOWN, 2, None),
        Operation(3, ("read",), 2, 3, 4),
    ]
    [panel] = layout(check(history, Register()))
    bar = next(b for b in panel.bars if b.is_open)
    assert bar.x1 > max(b.x1 for b in panel.bars if not b.is_open)
    assert "in doubt" in to_html(check(history, Register()))


def test_the_png_shows_the_blocking_operation_in_red(tmp_path: Path) -> None:
    path = write_png(_failing(), tmp_path / "f.png")
    pixels = image.imread(str(path))[:, :, :3]
    red = np.all(np.abs(pixels - np.array([0xE0, 0x39, 0x3E]) / 255) < 0.02, axis=2)
    blue = np.all(np.abs(pixels - np.array([0x5B, 0x8D, 0xEF]) / 255) < 0.02, axis=2)
    assert red.sum() > 50 and blue.sum() > 500


def _browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is needed for this test (.ci/run installs it: apt-get install chromium)"
    return found


def _run_browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [_browser(), *BROWSER_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
        check=False,
    )


def test_the_html_page_renders_in_a_headless_browser(tmp_path: Path) -> None:
    result = _failing()
    page = write_html(result, tmp_path / "c10-bad.html")
    drawn = sum(len(p.bars) for p in layout(result))
    # The page's script ran in the browser and found every bar.
    dom = _run_browser(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="yes"' in dom.stdout and f'data-bars="{drawn}"' in dom.stdout
    assert "not linearizable" in dom.stdout
    # And it looks like it should: a screenshot has the red blocking operation
    # and the blue linearized ones.
    shot = tmp_path / "shot.png"
    run = _run_browser(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = image.imread(str(shot))[:, :, :3]
    red = np.all(np.abs(pixels - np.array([0xE0, 0x39, 0x3E]) / 255) < 0.03, axis=2)
    blue = np.all(np.abs(pixels - np.array([0x5B, 0x8D, 0xEF]) / 255) < 0.03, axis=2)
    assert red.sum() > 30 and blue.sum() > 300, (red.sum(), blue.sum())


def test_the_page_is_self_contained() -> None:
    text = to_html(check([Operation(1, ("get", "k"), None, 0, 1)], KeyValue()))
    for needle in ("http://", "https://", "<link", "src="):
        if needle == "http://":
            text = text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert needle not in text


@pytest.mark.parametrize("n", [1, 30])
def test_the_page_escapes_what_it_shows(n: int) -> None:
    history = [
        Operation("<b>", ("put", "k", "</svg><script>x</script>"), None, i, i + 1) for i in range(n)
    ]
    text = to_html(check(history, KeyValue()))
    assert "<script>x</script>" not in text and "&lt;b&gt;" in text
