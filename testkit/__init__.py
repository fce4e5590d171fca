"""The test kit shared by tests and benchmarks: fake model servers, fake chat platforms,
fake agents, fake Discord. Nothing here is used by the bot in production."""
