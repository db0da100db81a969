"""Headless Chromium driven over the Chrome DevTools Protocol, for the dashboard's browser test.

A real browser (Debian's ``chromium``) runs the page's JavaScript against the real broker; the
test reads what the page shows (``evaluate``) and keeps a screenshot. ``websocket-client`` speaks
the protocol; only 127.0.0.1 is used.
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def find_chromium() -> Optional[str]:
    """The Chromium executable on PATH, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page; ``close()`` ends it."""

    def __init__(self, executable: str, width: int = 1360, height: int = 1000,
                 timeout: float = 30.0):
        import websocket

        self.profile = tempfile.mkdtemp(prefix="zeps-chromium-")
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--mute-audio",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._id = 0
        try:
            port = self._devtools_port(timeout)
            page_ws = self._page_socket(port, timeout)
            self.ws = websocket.create_connection(page_ws, timeout=timeout, suppress_origin=True)
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        """Chromium writes ``DevToolsActivePort`` (its port) in the profile once it listens."""
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"chromium did not open its DevTools port within {timeout}s")

    @staticmethod
    def _page_socket(port: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            if time.monotonic() > deadline:
                raise TimeoutError("chromium has no page target")
            time.sleep(0.05)

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result (events meanwhile are dropped)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression!r} raised in the page: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0,
                 check: Callable[[Any], bool] = bool) -> Any:
        """Evaluate ``expression`` until ``check(value)`` holds; its value. An expression that
        raises (the page is still loading) counts as not yet; TimeoutError after ``timeout``
        seconds, with the last value or error."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
                if check(value):
                    return value
            except RuntimeError as exc:
                value = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still {value!r} after {timeout}s")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the window if it is longer)."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        width = int(self.evaluate("document.documentElement.scrollWidth"))
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def number(text: str) -> Optional[int]:
    """A number as the dashboard prints it ("12,345") -> 12345; "—" -> None."""
    t = re.sub(r"[,\s]", "", text or "")
    return None if t in ("", "—") else int(t)
