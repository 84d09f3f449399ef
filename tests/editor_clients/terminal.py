"""A real terminal for a TUI under test: tmux runs the program, send-keys types, capture-pane reads
the screen (text, or with its colours as SGR escapes), and `screenshot` renders a captured screen
to PNG with headless Chromium (for the README).

    with Terminal(tmp_path, ["nvim", "file.py"], cols=100, rows=30) as term:
        term.keys(":EditApplyPreview", "Enter")
        term.wait_for("a accept")
        screenshot(term.screen(colors=True), 100, 30, tmp_path / "shot.png")
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import time
from pathlib import Path

WAIT_TIMEOUT_S = 60.0
# The terminal's default colours: Neovim's default dark scheme (NvimDarkGrey2 / NvimLightGrey2).
DEFAULT_FG, DEFAULT_BG = (224, 226, 234), (20, 22, 27)
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_ANSI16 = [(0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16), (36, 114, 200), (188, 63, 188), (17, 168, 205),
           (229, 229, 229), (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67), (59, 142, 234),
           (214, 112, 214), (41, 184, 219), (255, 255, 255)]


class Terminal:
    def __init__(self, workdir: Path, command: list[str], cols: int = 100, rows: int = 30, env: dict | None = None):
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux is missing: run `make install-editors` (apt-get install tmux)")
        self.socket = workdir / "tmux.sock"
        self.cols, self.rows = cols, rows
        env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        self._tmux("-f", "/dev/null", "new-session", "-d", "-s", "ui", "-x", str(cols), "-y", str(rows),
                   "-c", str(workdir), *env_args, "--", *map(str, command))

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), *args], check=True, capture_output=True,
                              text=True).stdout

    def keys(self, *keys: str) -> None:
        """tmux send-keys: literal text, or key names such as Enter and Escape."""
        for key in keys:
            literal = key not in ("Enter", "Escape", "Tab", "BSpace") and not key.startswith("C-")
            self._tmux("send-keys", "-t", "ui", *(["-l"] if literal else []), key)

    def screen(self, colors: bool = False) -> str:
        return self._tmux("capture-pane", "-p", "-t", "ui", *(["-e"] if colors else []))

    def wait_for(self, text: str, present: bool = True) -> str:
        """The screen once `text` is on it (or gone, with present=False)."""
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while time.monotonic() < deadline:
            screen = self.screen()
            if (text in screen) == present:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} {'never appeared' if present else 'stayed'} on the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _color(params: list[int], i: int) -> tuple[tuple[int, int, int] | None, int]:
    """The colour of an extended SGR (38/48;5;n or 38/48;2;r;g;b) at params[i]; and the next index."""
    if i + 1 < len(params) and params[i + 1] == 2 and i + 4 < len(params):
        return (params[i + 2], params[i + 3], params[i + 4]), i + 5
    if i + 1 < len(params) and params[i + 1] == 5 and i + 2 < len(params):
        n = params[i + 2]
        if n < 16:
            return _ANSI16[n], i + 3
        if n < 232:
            r, g, b = (n - 16) // 36, (n - 16) // 6 % 6, (n - 16) % 6
            return tuple(0 if c == 0 else 55 + 40 * c for c in (r, g, b)), i + 3
        gray = 8 + 10 * (n - 232)
        return (gray, gray, gray), i + 3
    return None, len(params)


def to_html(screen: str, cols: int, rows: int) -> str:
    """A captured screen (SGR escapes) as an HTML page of exactly `cols` x `rows` cells."""
    style = {"fg": None, "bg": None, "bold": False, "italic": False, "underline": False, "reverse": False}
    out_lines = []
    for line in screen.split("\n")[:rows]:
        parts, pos, used = [], 0, 0
        for match in list(_SGR.finditer(line)) + [None]:
            text = line[pos : match.start() if match else len(line)]
            if text:
                fg, bg = style["fg"] or DEFAULT_FG, style["bg"] or DEFAULT_BG
                if style["reverse"]:
                    fg, bg = bg, fg
                css = f"color:rgb{fg};background:rgb{bg}" + (";font-weight:bold" if style["bold"] else "") \
                    + (";font-style:italic" if style["italic"] else "") \
                    + (";text-decoration:underline" if style["underline"] else "")
                parts.append(f'<span style="{css}">{html.escape(text)}</span>')
                used += len(text)
            if match is None:
                break
            pos = match.end()
            params = [int(p) if p else 0 for p in match.group(1).split(";")]
            i = 0
            while i < len(params):
                p = params[i]
                if p == 0:
                    style = {k: (None if k in ("fg", "bg") else False) for k in style}
                elif p in (1, 3, 4, 7):
                    style[{1: "bold", 3: "italic", 4: "underline", 7: "reverse"}[p]] = True
                elif p in (22, 23, 24, 27):
                    style[{22: "bold", 23: "italic", 24: "underline", 27: "reverse"}[p]] = False
                elif 30 <= p <= 37 or 90 <= p <= 97:
                    style["fg"] = _ANSI16[p - 30 if p < 90 else p - 82]
                elif 40 <= p <= 47 or 100 <= p <= 107:
                    style["bg"] = _ANSI16[p - 40 if p < 100 else p - 92]
                elif p in (38, 48):
                    color, i = _color(params, i)
                    style["fg" if p == 38 else "bg"] = color
                    continue
                elif p == 39:
                    style["fg"] = None
                elif p == 49:
                    style["bg"] = None
                i += 1
        out_lines.append("".join(parts) + " " * max(0, cols - used))
    out_lines += [" " * cols] * (rows - len(out_lines))
    body = "\n".join(out_lines)
    return (f"<!doctype html><meta charset=utf-8><style>html,body{{margin:0;background:rgb{DEFAULT_BG}}}"
            f"pre{{margin:0;padding:8px;font:14px/18px 'DejaVu Sans Mono',monospace;color:rgb{DEFAULT_FG}}}</style>"
            f"<pre>{body}</pre>")


def screenshot(screen: str, cols: int, rows: int, png: Path, chromium: Path) -> Path:
    """Render a captured screen to `png` with headless Chromium (about 8.5 x 18 px a cell)."""
    page = png.with_suffix(".html")
    page.write_text(to_html(screen, cols, rows), encoding="utf-8")
    width, height = int(cols * 8.5) + 16, rows * 18 + 16
    subprocess.run([str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={png.parent / 'chromium-profile'}",
                    f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png
