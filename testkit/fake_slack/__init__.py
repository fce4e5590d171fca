"""A local fake Slack (Web API + a Socket Mode WebSocket on 127.0.0.1, threads, Block Kit
buttons and selects, acks recorded, 429 ``Retry-After`` and 5xx injection) that the real
slack-bolt and slack-sdk talk to."""

from threadspindle.testkit.fake_slack.server import APP_TOKEN, BOT_TOKEN, FakeSlack
from threadspindle.testkit.fake_slack.world import BOT_USER, TEAM, SlackMessage

__all__ = ["APP_TOKEN", "BOT_TOKEN", "BOT_USER", "TEAM", "FakeSlack", "SlackMessage"]
