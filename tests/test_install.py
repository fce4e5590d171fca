"""``pip install .`` into a clean venv beside the distributions that own the names our
folders have (issue 12): ``runtime``, ``ingress``, ``effects`` and ``testkit`` are all taken
on the package index (``spindle`` is not there). Installed, Spindle must put nothing but
``threadspindle/`` (and its ``spindle`` command) into ``site-packages``, leave the others'
files as they were, import, and run.

The four are installed from the index with ``--no-deps``: only their files matter here (and
their own dependencies cannot all be had: ``testkit`` needs ``fudge``, which no longer
builds; ``effects`` wants ``typing_extensions<4``, older than pydantic allows). Spindle is
installed from this repository with its dependencies, as a user would; pip's cache makes a
second run quicker. The venv is made without pip (the test's pip installs into it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from tests.package_tree import ROOT

OTHERS = ("runtime", "ingress", "effects", "testkit")

# Run inside the new venv: every file of every distribution, as its RECORD lists it, is
# there with the recorded hash (no install overwrote another's), and where each top-level
# name comes from.
_INSPECT = textwrap.dedent(
    """
    import base64, hashlib, importlib.metadata as md, importlib.util, json, sys
    report = {}
    for name in sys.argv[1:]:
        dist = md.distribution(name)
        changed, paths = [], []
        for f in dist.files or ():
            paths.append(str(f))
            if f.hash is None:
                continue
            digest = hashlib.new(f.hash.mode, f.locate().read_bytes()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
                changed.append(str(f))
        report[name] = {"paths": paths, "changed": changed}
    tops = ("runtime", "ingress", "effects", "testkit", "threadspindle")
    report["origins"] = {top: importlib.util.find_spec(top).origin for top in tops}
    print(json.dumps(report))
    """
)


def _pip(python: Path, *args: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.timeout(1200)
def test_pip_install_beside_the_distributions_named_like_our_folders(tmp_path: Path) -> None:
    home = tmp_path / "venv"
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    _pip(python, "--no-deps", *OTHERS)
    _pip(python, str(ROOT))

    # Away from the repository: nothing of it on the path but what was installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 120}
    out = subprocess.run([python, "-c", _INSPECT, "threadspindle", *OTHERS], **run)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)

    # Spindle's files: its package, its metadata and its command; nothing else.
    ours = report["threadspindle"]["paths"]
    strays = [
        p
        for p in ours
        if not p.startswith(("threadspindle/", "threadspindle-")) and not p.endswith("/bin/spindle")
    ]
    assert strays == [], strays
    assert any(p.endswith("/bin/spindle") for p in ours)
    for name in ("threadspindle", *OTHERS):
        assert report[name]["changed"] == [], (name, report[name]["changed"])
    # Every top-level name is still the other distribution's file.
    site = report["origins"]["threadspindle"].rsplit("/threadspindle/", 1)[0]
    for name in OTHERS:
        origin = report["origins"][name]
        relative = os.path.relpath(origin, site)
        assert relative in report[name]["paths"], (name, origin)

    # Spindle imports and runs; so do the two others whose dependencies are there.
    code = (
        "import threadspindle.app.app, threadspindle.ingress.console, "
        "threadspindle.effects.render, threadspindle.agents, threadspindle.runtime.live.registry, "
        "threadspindle.testkit.fake_chat; import runtime, ingress; "
        "print(threadspindle.app.app.__file__, runtime.__file__, ingress.__file__)"
    )
    out = subprocess.run([python, "-c", code], **run)
    assert out.returncode == 0, out.stderr
    app_file, runtime_file, ingress_file = out.stdout.split()
    assert "/site-packages/threadspindle/app/app.py" in app_file
    assert runtime_file.endswith("/site-packages/runtime.py")
    assert ingress_file.endswith("/site-packages/ingress.py")
    out = subprocess.run([home / "bin" / "spindle", "--help"], **run)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: spindle")
    # The config template is package data: `spindle init` writes it.
    config = tmp_path / "config.toml"
    out = subprocess.run([home / "bin" / "spindle", "--config", str(config), "init"], **run)
    assert out.returncode == 0, out.stderr
    assert "[runtime]" in config.read_text()
