"""``report``: the quick set of every experiment, on one self-contained HTML page.

Why one page: a result is only worth something with the machine, the versions
and the commit that produced it, and a page with its plots embedded (base64
PNG) can be attached to an issue or mailed without losing any of them. Each
experiment also leaves its own ``results.json``, ``results.md`` and plots in a
subdirectory of ``--out``.
"""

from __future__ import annotations

import base64
import html
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import Context
from bench.experiments.parts import PARTS, part

#: Distributions whose versions the page lists (those installed).
PACKAGES = ("sdpaxos", "msgpack", "cryptography", "uvloop", "matplotlib", "prometheus_client")


def machine() -> dict[str, Any]:
    """Where and with what the numbers were measured."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if dirty:
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "packages": versions,
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run(ctx: Context) -> int:
    """The simulator's quick set; with ``--engine runtime``, the runtime's quick
    set too (real processes, in ``runtime/<experiment>/``)."""
    status = 0
    parts: list[tuple[str, int]] = []
    engines = ("sim", "runtime") if ctx.engine_name == "runtime" else ("sim",)
    for engine in engines:
        for name in PARTS:
            where = name if engine == "sim" else f"runtime/{name}"
            sub = Context(
                name,
                ctx.out / where,
                quick=True,
                engine_name=engine,
                protocols=ctx.protocols,
                seed=ctx.seed,
                quiet=ctx.quiet,
            )
            code = part(name)(sub)
            parts.append((where, code))
            status = max(status, code)
    page = render(ctx.out, machine(), parts)
    path = ctx.out / "report.html"
    path.write_text(page, encoding="utf-8")
    ctx.progress(f"wrote {path}")
    return status


def render(out: Path, info: dict[str, Any], parts: list[tuple[str, int]]) -> str:
    """The page: the machine, then each experiment's Markdown with its plots inlined."""
    body = [
        "<h1>sdpaxos benchmark report (quick set)</h1>",
        "<h2>Machine and versions</h2>",
        "<table>",
    ]
    for key, value in info.items():
        if key == "packages":
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        body.append(f"<tr><th>{html.escape(key)}</th><td>{html.escape(str(value))}</td></tr>")
    body.append("</table>")
    for name, code in parts:
        md_path = out / name / "results.md"
        verdict = "ok" if code == 0 else f"exit status {code} (something was flagged)"
        anchor = name.replace("/", "-")
        title = f"{name.split('/')[-1]} (runtime engine)" if "/" in name else name
        body.append(f"<h2 id='{anchor}'>{html.escape(title)}: {html.escape(verdict)}</h2>")
        if md_path.exists():
            body.append(markdown_to_html(md_path.read_text(encoding="utf-8"), out / name))
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:90%}th{background:#f3f3f3;text-align:left}img{max-width:100%}"
    )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>sdpaxos benchmarks</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def _inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def markdown_to_html(text: str, base: Path) -> str:
    """The subset of Markdown the experiments write: headings, pipe tables, list
    items, images (embedded as base64) and paragraphs."""
    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if not table:
            return
        out.append("<table>")
        for i, cells in enumerate(table):
            tag = "th" if i == 0 else "td"
            out.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells) + "</tr>")
        out.append("</table>")
        table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                table.append(cells)
            continue
        flush()
        image = _IMAGE.fullmatch(stripped)
        if image:
            path = base / image.group(2)
            if path.exists():
                data = base64.b64encode(path.read_bytes()).decode()
                alt = html.escape(image.group(1))
                out.append(f"<p><img alt='{alt}' src='data:image/png;base64,{data}'></p>")
            continue
        if stripped.startswith("#"):
            level = min(6, len(stripped) - len(stripped.lstrip("#")) + 1)
            out.append(f"<h{level}>{_inline(stripped.lstrip('#').strip())}</h{level}>")
        elif stripped.startswith("- "):
            out.append(f"<ul><li>{_inline(stripped[2:])}</li></ul>")
        elif stripped:
            out.append(f"<p>{_inline(stripped)}</p>")
    flush()
    return "\n".join(out)
