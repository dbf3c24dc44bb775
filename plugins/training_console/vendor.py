"""Third-party browser code the pages use, served from the installed Python package that ships it (never copied
into the repository): plotly.js, as the `plotly` PyPI wheel ships it (requirements.txt pins the version)."""

from __future__ import annotations

import importlib.util
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
