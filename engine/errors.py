"""Errors that the command line turns into one line and exit code 2 (bad input) or 3."""


class InputError(Exception):
    """Bad input from the user: a file, key or field that is missing or malformed."""


class EngineFailure(Exception):
    """The engine could not do what it was asked although the input was valid."""
