"""A headless Chromium, driven over the DevTools protocol on a pipe: the standard library
only (no websocket client, no browser driver package).

`--remote-debugging-pipe` makes Chromium read commands on its descriptor 3 and write replies
and events on 4, each a JSON message ended by a NUL byte. `open_page` loads a page in a fresh
browser (its own profile directory), waits for the load event, evaluates an expression in the
page and returns it with every console message, uncaught exception and log entry of level
error seen on the way. Chromium is looked for on PATH (Debian's `chromium-headless-shell` or
`chromium`); `find_browser` is None without one, and a test skips.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

# Starts the browser with the pipe's ends as its descriptors 3 and 4 (a shell's `3<&N` takes
# N below 10 only, and the pipe's descriptors may be higher).
_ON_FDS_3_AND_4 = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageVisit:
    """What loading a page showed: the expression's value, a screenshot, and every complaint."""

    value: Any = None
    screenshot_png: bytes = b""
    console: list[dict] = field(default_factory=list)  # Runtime.consoleAPICalled params
    exceptions: list[dict] = field(default_factory=list)  # Runtime.exceptionThrown params
    log_errors: list[dict] = field(default_factory=list)  # Log.entryAdded, level error

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries, one line each."""
        lines = [
            f"console.{c['type']}: {[a.get('value', a.get('description')) for a in c['args']]}"
            for c in self.console
            if c["type"] in ("error", "assert")
        ]
        lines += [f"exception: {e['exceptionDetails'].get('text')}" for e in self.exceptions]
        lines += [f"log: {e['entry'].get('text')} {e['entry'].get('url')}" for e in self.log_errors]
        return lines


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int, timeout_s: float) -> None:
        self.write_fd, self.read_fd = write_fd, read_fd
        self.deadline = time.monotonic() + timeout_s
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and wait for its reply (events met on the way are kept)."""
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self.receive())

    def receive(self) -> dict:
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


def open_page(
    browser: str, page: Path, expression: str, profile: Path, timeout_s: float = 60
) -> PageVisit:
    """Load `page` (a file) in a fresh headless browser and evaluate `expression` once loaded."""
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    args = [
        "--headless",
        "--remote-debugging-pipe",
        "--no-sandbox",  # a container's root user has no sandbox to drop into
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1280,1024",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    fds = (to_browser_r, from_browser_w)
    with (profile.parent / "browser.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _ON_FDS_3_AND_4, *map(str, fds), browser, *args],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = _Pipe(to_browser_w, from_browser_r, timeout_s)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.events.clear()  # only what this page does counts
        pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        pipe.wait_for("Page.loadEventFired")
        result = pipe.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=session,
        )
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
        visit = PageVisit(
            value=result["result"].get("value"),
            screenshot_png=base64.b64decode(shot["data"]),
        )
        for event in pipe.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                visit.console.append(params)
            elif method == "Runtime.exceptionThrown":
                visit.exceptions.append(params)
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                visit.log_errors.append(params)
        if "exceptionDetails" in result:
            visit.exceptions.append(result)
        with contextlib.suppress(RuntimeError, TimeoutError):
            pipe.send("Browser.close")  # it may close the pipe before it answers
        return visit
    finally:
        os.close(to_browser_w)
        os.close(from_browser_r)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
