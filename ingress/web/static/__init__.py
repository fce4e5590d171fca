"""The web chat's static files (script, style sheet, icon): data shipped in the package,
read with ``importlib.resources``; a package only so setuptools installs it as one."""
