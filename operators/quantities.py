"""Resource quantities ('16Gi', '500m', 2): the one parser every backend and the spec use.

It is the kubernetes client's ``kubernetes.utils.parse_quantity`` (one spec serves every backend, and Kubernetes'
own notation is what users write), guarded where it is laxer than the API server: it hands the text to Python's
Decimal, which also takes NaN, Infinity, '1_000', negative numbers and surrounding blanks. Pure: no I/O, no client
(the kubernetes package is a dependency of the cncf-kubernetes provider, so the docker backend may use it too).

The parser's module (kubernetes/utils/quantity.py, which imports only `decimal`) is loaded from its file, not through
`kubernetes.utils`: importing the package runs kubernetes/__init__.py, which imports the whole API client (~0.6 s,
the largest part of a DAG file's parse, which reads [training]'s quantity settings).
"""

from __future__ import annotations

import functools
import importlib.util
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable


@functools.cache
def _kubernetes_parse_quantity() -> Callable[[Any], Decimal]:
    """kubernetes.utils.quantity.parse_quantity, without importing the kubernetes package (its client)."""
    package = importlib.util.find_spec("kubernetes")  # finds the package's folder; runs none of its code
    folders = (package.submodule_search_locations or []) if package else []
    source = next((Path(f) / "utils" / "quantity.py" for f in folders if (Path(f) / "utils" / "quantity.py").is_file()),
                  None)
    spec = importlib.util.spec_from_file_location("_kubernetes_quantity", source) if source else None
    if spec is None or spec.loader is None:  # a kubernetes release that moved the module: the package's own import
        # lazy: the kubernetes client, only where a quantity is parsed and the module above is not where it was
        from kubernetes.utils import parse_quantity

        return parse_quantity
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_quantity


def parse_quantity(value: Any) -> Decimal:
    """The quantity as a number (bytes, cores); ValueError when Kubernetes would refuse it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value)
    if not text or text != text.strip() or "_" in text or text.startswith("-"):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        number = _kubernetes_parse_quantity()(text)
    except (ValueError, ArithmeticError):
        raise ValueError(f"{value!r} is not a quantity") from None
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a quantity")
    return number


def is_quantity(value: Any) -> bool:
    """A Kubernetes resource quantity: 2, 500m, 1.5, 8Gi, 1e3."""
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True
