"""The one exception type users can cause."""


class RawrclError(Exception):
    """An error caused by user input (bad file, bad option, missing data).

    The message names the file or option and the reason, on one line. The CLI prints it to stderr
    and exits with :attr:`exit_code`; library callers may catch it.
    """

    exit_code: int = 1
