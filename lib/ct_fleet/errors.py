"""The one exception type for bad input: the CLI prints it on one line and exits 2."""


class BadInput(Exception):
    """Input the user must fix; raised before anything is launched or uploaded."""

    exit_code = 2


def plain(message: str) -> str:
    """A message of Inspect's as its terminal shows it: its errors carry rich markup
    ([bold]OPENAI_API_KEY[/bold]) and an "ERROR: " of their own."""
    from rich.errors import MarkupError
    from rich.text import Text

    try:
        text = Text.from_markup(message).plain
    except MarkupError:  # brackets that are not markup: the message as it is
        text = message
    return text.strip().removeprefix("ERROR: ")
