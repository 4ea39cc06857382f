"""kvtwin.Error: how kvtwin's operating errors reach Python.

kvtwin reports bad input (a double free, an unmarked write loc, a malformed trace line, a pool
that cannot be built) as an error value with a kind a program can switch on and a message a person
can act on. In Python that value is this exception: ``str(e)`` is kvtwin's message, word for word,
``e.kind`` its kind as traces name it (``"double_free"``, ``"malformed"``, ...; docs/traces.md), and
``e.reason`` the refusal's reason code where the kind has several causes (``"not_allocated"``,
``"already_left_window"``, ...; ``""`` otherwise).

This file has no native code, so the C++ half of the module can import it while it raises.
"""


class Error(Exception):
    """An operating error from kvtwin. ``kind`` names it as traces do; ``str()`` is the message."""

    def __init__(self, message, kind="internal", reason=""):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.reason = reason

    def __repr__(self):
        if self.reason:
            return f"kvtwin.Error({self.message!r}, kind={self.kind!r}, reason={self.reason!r})"
        return f"kvtwin.Error({self.message!r}, kind={self.kind!r})"
