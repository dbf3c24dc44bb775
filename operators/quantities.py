"""Resource quantities ('16Gi', '500m', 2): the one parser every backend and the spec use.

It is the kubernetes client's ``kubernetes.utils.parse_quantity`` (one spec serves every backend, and Kubernetes'
own notation is what users write), guarded where it is laxer than the API server: it hands the text to Python's
Decimal, which also takes NaN, Infinity, '1_000', negative numbers and surrounding blanks. Pure: no I/O, no client
(the kubernetes package is a dependency of the cncf-kubernetes provider, so the docker backend may use it too).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def parse_quantity(value: Any) -> Decimal:
    """The quantity as a number (bytes, cores); ValueError when Kubernetes would refuse it."""
    # lazy: kubernetes client, imported only where a quantity is parsed (the SDK's local mode imports this module)
    from kubernetes.utils import parse_quantity as parse

    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value)
    if not text or text != text.strip() or "_" in text or text.startswith("-"):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        number = parse(text)
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
