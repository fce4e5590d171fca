"""The web chat: a page on 127.0.0.1 that is one more chat platform (docs/web.md)."""
