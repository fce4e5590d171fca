"""Configuration of the WhatsApp connection: the Cloud API credentials, where the Graph API
is, where Spindle's webhook listens, and who may drive agents. See docs/whatsapp-setup.md.

``base_url`` defaults to Meta's Graph API; tests point it at ``testkit.fake_whatsapp``. The
webhook listens on ``webhook_host:webhook_port`` (loopback by default): Meta reaches it
through the user's HTTPS reverse proxy or tunnel.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from threadspindle.agents import check_agents
from threadspindle.effects.whatsapp_platform import GRAPH_API
from threadspindle.ingress.discord.settings import SLASH_AGENTS
from threadspindle.ingress.transcribe import TranscriptionConfig
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["SEEN_FILE", "WhatsAppSettings", "whatsapp_settings_from_config"]

SEEN_FILE = "whatsapp-seen.sqlite"  # in the data directory: the message ids handled


class WhatsAppSettings(Frozen):
    token: str  # the access token (a system user's, for a lasting one)
    app_secret: str  # signs every webhook delivery (X-Hub-Signature-256)
    verify_token: str  # what Meta's verification handshake must show
    phone_number_id: str
    base_url: str = GRAPH_API
    webhook_host: str = "127.0.0.1"
    webhook_port: int = 8443  # 0: any free port (tests)
    webhook_path: str = "/whatsapp/webhook"
    allowed_wa_ids: tuple[str, ...] = ()
    allowed_group_ids: tuple[str, ...] = ()
    default_workdir: str = "~"
    agents: tuple[str, ...] = SLASH_AGENTS
    queue_suffix: str = " queue"
    # No edits: the least time between two messages of one streamed answer.
    min_message_interval_s: float = 2.0
    throttle_wait_s: float = 1.0  # a throttled call without Retry-After waits this long
    refusal_interval_s: float = 600.0  # a refused user is told at most this often
    deliveries_remembered: int = 4096  # message ids kept in memory to drop redeliveries
    # Every id handled, kept on disk as long as a message is taken (``seen.py``): a
    # captured signed delivery replayed later, even after a restart, is dropped by it.
    # None: memory only (``deliveries_remembered`` ids, forgotten at a restart).
    seen_path: str | None = None
    # A message sent longer ago than this is dropped (and its id need not be kept longer).
    # 24 h: WhatsApp's customer-service window, past which nothing could be answered in
    # that chat anyway; Meta's retries after a short outage are well inside.
    max_message_age_s: float = 24 * 3600.0
    # The webhook faces the internet and reads a body before its signature can be checked:
    # a client that sends it too slowly is answered 408 after ``body_timeout_s``, one that
    # sends nothing for ``read_timeout_s`` is disconnected (hypercorn's read timeout), and
    # at most ``bodies_read_at_once`` bodies are read at a time (503 past that: Meta
    # retries). Meta sends a delivery (a few KiB) at once.
    body_timeout_s: float = 10.0
    read_timeout_s: int = 30
    bodies_read_at_once: int = 32
    # Connections held open at once; a new one past this is closed at once
    # (``effects/connection_cap.py``): a flood of them costs the webhook, not the process.
    max_connections: int = Field(default=256, ge=1)
    # Images, videos and documents sent to the agent at most this large (read into memory
    # before they are saved; a larger one is refused with a reply).
    attachment_max_bytes: int = 25 * 1024 * 1024
    # Voice messages are transcribed here (None: voice messages are refused with a reply).
    transcription: TranscriptionConfig | None = None

    _agents_known = field_validator("agents")(check_agents)

    def is_allowed(self, wa_id: str) -> bool:
        """Allow-listed wa_ids only. No list: nobody."""
        return wa_id in self.allowed_wa_ids

    def serves_group(self, group_id: str) -> bool:
        return group_id in self.allowed_group_ids


def whatsapp_settings_from_config(config: Any) -> WhatsAppSettings:
    """The connection's settings from the ``spindle`` configuration (``app.config.Settings``:
    its ``[whatsapp]`` section and the first allowed root as the default workdir). Raises
    ``ValueError`` when a credential is missing."""
    section = config.whatsapp
    secrets = config.whatsapp_secrets()
    missing = [name for name, value in secrets.items() if not value]
    if not section.phone_number_id:
        missing.append("phone_number_id")
    if missing:
        raise ValueError("WhatsApp needs " + ", ".join(missing) + " (see docs/whatsapp-setup.md)")
    roots = list(config.runtime.allowed_roots) or ["~"]
    return WhatsAppSettings(
        token=secrets["token"],
        app_secret=secrets["app_secret"],
        verify_token=secrets["verify_token"],
        phone_number_id=section.phone_number_id,
        base_url=section.base_url,
        webhook_host=section.webhook_host,
        webhook_port=section.webhook_port,
        webhook_path=section.webhook_path,
        allowed_wa_ids=tuple(section.allowed_wa_ids),
        allowed_group_ids=tuple(section.allowed_group_ids),
        default_workdir=roots[0],
        min_message_interval_s=max(section.min_message_interval_s, 0.0),
        transcription=config.transcription.config(),
        seen_path=str(config.data_path / SEEN_FILE),
    )
