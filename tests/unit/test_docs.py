"""The documentation builds, with every warning an error."""

from __future__ import annotations

from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "doc" / "source"


def test_docs_build_without_warnings(tmp_path):
    application = pytest.importorskip("sphinx.application")
    app = application.Sphinx(
        str(DOC),
        str(DOC),
        str(tmp_path / "html"),
        str(tmp_path / "doctrees"),
        "html",
        warningiserror=True,
        status=None,
    )
    app.build()
    assert app.statuscode == 0
    page = (tmp_path / "html" / "configuration.html").read_text()
    # the reference is generated from the options themselves
    assert (
        "enabled_mdev_types" in page and "failed_device_retry_interval" in page
    )
    # the release notes (reno, from git) are rendered in the docs
    notes = (tmp_path / "html" / "releasenotes.html").read_text()
    assert "one durable write" in notes and "nova.virt.vgpu_libvirt" in notes


def test_the_readme_is_valid_restructuredtext():
    """The README is the package's long description (PyPI renders it):
    no malformed table or other docutils warning."""
    import io

    core = pytest.importorskip("docutils.core")
    readme = DOC.parents[1] / "README.rst"
    warnings = io.StringIO()
    core.publish_string(
        readme.read_text(),
        writer="null",
        settings_overrides={"warning_stream": warnings, "report_level": 2},
    )
    assert warnings.getvalue() == ""
