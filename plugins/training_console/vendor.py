"""Third-party browser code the pages use, served from the installed Python package that ships it (never copied
into the repository): plotly.js, as the `plotly` PyPI wheel ships it (requirements.txt pins the version)."""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import re
from pathlib import Path


def plotly_js() -> Path:
    """plotly.min.js of the installed `plotly` package (found without importing it); FileNotFoundError naming the
    fix when the package is missing."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    raise FileNotFoundError("plotly.min.js not found: install the pinned `plotly` package (requirements.txt) in the "
                            "API server's environment")


# plotly.js adds <style> elements of its own: an empty one it fills through the CSSOM (which a CSP allows), and, at
# load, one with the CSS of its map library. A CSP without 'unsafe-inline' admits exactly these by their hashes.
_STYLE_TEXT = re.compile(r"""createElement\("style"\);[^;]{0,200}?\.textContent='([^'\\]*)'""")


@functools.cache
def plotly_inline_style_hashes() -> tuple[str, ...]:
    """CSP hash sources ('sha256-...') of the style elements the installed plotly.js inserts; () without plotly."""
    try:
        source = plotly_js().read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    texts = ["", *(match.group(1) for match in _STYLE_TEXT.finditer(source))]
    return tuple(f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'" for text in texts)
