"""kvtwin.Error: how kvtwin's operating errors reach Python.

kvtwin reports bad input (a double free, an unmarked write loc, a malformed trace line, a pool
that cannot be built) as an error value with a kind a program can switch on and a message a person
can act on. In Python that value is this exception: ``str(e)`` is kvtwin's message, word for word,
and ``e.kind`` its kind as traces name it (``"double_free"``, ``"malformed"``, ...; docs/traces.md).

This file has no native code, so the C++ half of the module can import it while it raises.
"""


class Error(Exception):
    """An operating error from kvtwin. ``kind`` names it as traces do; ``str()`` is the message."""

    def __init__(self, message, kind="internal"):
        super().__init__(message)
        self.message = message
        self.kind = kind

    def __repr__(self):
        return f"kvtwin.Error({self.message!r}, kind={self.kind!r})"
