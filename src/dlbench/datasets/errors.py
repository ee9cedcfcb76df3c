"""The one error every dataset tool raises: a one-line message naming the file."""

from dlbench.cellrun import CellError


def printable(text: str) -> str:
    """``text`` as valid UTF-8: bytes of a file name that are not UTF-8 (held by Python as
    lone surrogates, ``os.fsdecode``) shown as ``\\xe9``. Messages go into failure markers,
    result JSON and result tables, whose UTF-8 encoders refuse lone surrogates."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        raw = text.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


class DatasetError(CellError):
    """Bad or missing dataset input; the message names the file and what is wrong."""

    def __init__(self, message: object = "") -> None:
        super().__init__(printable(str(message)))
