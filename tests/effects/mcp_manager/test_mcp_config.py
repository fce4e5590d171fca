"""The manager's configuration as ``spindle run``/``spindle mcp`` build it from Spindle's
settings (``ingress/config.py``), and its refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from effects.mcp_manager import ProcessManagerConfig, config_from_settings
from ingress.config import load_settings


def test_config_from_spindle_settings(tmp_path: Path) -> None:
    toml = tmp_path / "spindle.toml"
    toml.write_text(
        f"""
data_dir = "{tmp_path / "data"}"

[runtime]
allowed_roots = ["{tmp_path}", "~"]

[mcp]
port = 9911
token = "a-long-enough-operator-token"
keep_on_shutdown = true
max_processes_per_thread = 3
ring_buffer_lines = 200
"""
    )
    settings = load_settings(toml)
    config = config_from_settings(settings)
    assert config.port == 9911 and config.host == "127.0.0.1"
    assert config.token == "a-long-enough-operator-token"
    assert config.data_dir == tmp_path / "data"
    assert config.allowed_roots == (
        Path(os.path.realpath(tmp_path)),
        Path(os.path.realpath(os.path.expanduser("~"))),
    )
    assert config.keep_on_shutdown is True
    assert config.max_processes_per_thread == 3
    assert config.ring_buffer_lines == 200
    assert config_from_settings(settings, port=0).port == 0


def test_no_token_in_settings_means_the_generated_one(tmp_path: Path) -> None:
    toml = tmp_path / "spindle.toml"
    toml.write_text(f'data_dir = "{tmp_path}"\n')
    config = config_from_settings(load_settings(toml))
    assert config.token is None  # read, or made, in <data_dir>/mcp-token at start-up


@pytest.mark.parametrize(
    "fields",
    [{"host": "0.0.0.0"}, {"host": "192.168.1.2"}, {"port": 70000}, {"ring_buffer_chars": 0}],
)
def test_bad_configurations_are_refused(fields: dict) -> None:
    with pytest.raises(ValueError):
        ProcessManagerConfig(**fields)
