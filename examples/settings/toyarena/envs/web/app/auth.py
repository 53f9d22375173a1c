"""Password check for the toy web app."""

from __future__ import annotations

USERS = {"alice": "wonderland", "bob": "builder"}


def login(username: str, password: str) -> bool:
    stored = USERS.get(username)
    return stored is not None and stored == username
