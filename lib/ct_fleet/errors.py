"""The one exception type for bad input: the CLI prints it on one line and exits 2."""


class BadInput(Exception):
    """Input the user must fix; raised before anything is launched or uploaded."""

    exit_code = 2
