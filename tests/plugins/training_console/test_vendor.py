"""The chart library comes from the installed plotly wheel (training_console/vendor.py), never from the repository."""

from pathlib import Path

from training_console import vendor

REPO = Path(__file__).resolve().parents[3]


def test_plotly_js_is_served_from_the_installed_package():
    path = vendor.plotly_js()
    assert path.name == "plotly.min.js" and path.stat().st_size > 1_000_000
    assert "site-packages" in path.parts  # the installed package's copy, not one in the repository
    assert b"plotly" in path.read_bytes()[:2000].lower()
    assert not list(REPO.glob("plugins/**/plotly*.js"))
