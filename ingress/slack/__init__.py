"""Slack: slack-bolt over Socket Mode, hosted under trio-asyncio (docs/slack-setup.md)."""
