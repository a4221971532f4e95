"""The installable package list in pyproject.toml covers every package folder (a wheel install
must not lose a subpackage that the editable install finds by path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info < (3, 11):
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)
import tomllib  # noqa: E402


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    remap = {v: k for k, v in cfg["package-dir"].items()}  # folder -> package name
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        top = rel.parts[0]
        if top not in remap:
            continue
        found.add(".".join((remap[top], *rel.parts[1:])))
    assert found, "no package folders found"
    assert found == listed, f"missing: {sorted(found - listed)}; stale: {sorted(listed - found)}"
