"""Installs the top-level folders under one import package, ``threadspindle``.

The repository keeps ``runtime/``, ``agents/``, ``ingress/``, ``effects/``, ``app/`` and
``testkit/`` at its top (the layout the design asks for); installed, they are
``threadspindle.runtime`` and so on, so nothing named ``runtime`` or ``effects`` lands in
the user's ``site-packages``. Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

NAMESPACE = "threadspindle"
LAYERS = ("runtime", "agents", "ingress", "effects", "app", "testkit")

packages = [NAMESPACE]
package_dir = {NAMESPACE: "namespace"}
for layer in LAYERS:
    package_dir[f"{NAMESPACE}.{layer}"] = layer
    packages.append(f"{NAMESPACE}.{layer}")
    packages += [f"{NAMESPACE}.{layer}.{sub}" for sub in find_packages(layer)]

setup(packages=packages, package_dir=package_dir)
