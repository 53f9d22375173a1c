"""URL table for the toy web app."""

ROUTES = {
    "/": "index",
    "/login": "login",
}


def index() -> str:
    return "welcome"
