"""The one error every dataset tool raises: a one-line message naming the file."""

from dlbench.cellrun import CellError


class DatasetError(CellError):
    """Bad or missing dataset input; the message names the file and what is wrong."""
