"""The one quantity parser (kubernetes.utils.parse_quantity, guarded where it is laxer than the API server)."""

from decimal import Decimal

import pytest

from operators.quantities import is_quantity, parse_quantity


@pytest.mark.parametrize("text, number", [
    ("2", 2), (2, 2), (0.5, Decimal("0.5")), ("500m", Decimal("0.5")), ("8Gi", 8 * 2**30), ("1e3", 1000),
    (".5", Decimal("0.5")), ("+2", 2), ("16M", 16 * 10**6), ("1Ki", 1024),
])
def test_kubernetes_quantities_parse(text, number):
    assert parse_quantity(text) == number and is_quantity(text)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "1_000", "-1", " 2", "lots", "", "2ki", "8GB", True, None, [2]])
def test_what_the_api_server_refuses_is_no_quantity(text):
    # Decimal (under kubernetes.utils.parse_quantity) takes NaN, Infinity, 1_000, -1 and blanks; Kubernetes does not.
    assert not is_quantity(text)
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(text)


def test_parsing_a_quantity_imports_no_kubernetes_client():
    # A DAG file's parse reads [training]'s quantity settings: importing the kubernetes package (its API client,
    # ~0.6 s) there made every parse slow (issue 48). Its parser's own module is loaded without the package.
    import subprocess
    import sys

    code = ("import sys; from operators.quantities import parse_quantity; "
            "assert parse_quantity('8Gi') == 8 * 2**30; print(sorted(m for m in sys.modules if m.startswith('kubernetes')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
