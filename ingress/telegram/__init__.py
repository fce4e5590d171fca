"""Telegram ingress: python-telegram-bot under trio-asyncio, long polling, updates -> actions."""
