"""The Discord ingress: discord.py hosted in trio via trio-asyncio (``host``); gateway
events and slash commands become runtime actions (``bot``) by pure rules (``translate``);
``settings`` says where Discord is and who may drive agents.

Nothing is imported here, so ``ingress.discord.translate`` (used by the console too) does
not pull in discord.py.
"""
