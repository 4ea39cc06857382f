"""kvtwin.Recorder: a real engine's pool operations, recorded as a pool trace kvtwin can replay.

An engine's allocator answers alloc, free, translate, ... in its own way. The Recorder writes each
call as one line of a pool trace (docs/traces.md) with the engine's own answer as the line's
expectation, so that ``kvtwin replay TRACE`` (or ``kvtwin.replay``) plays the same operations on
the reference model and stops at the first line where the engine and the model disagree.

Three ways to feed it (docs/python.md has a whole example):

* one call per operation: ``rec.alloc(16, answer=pages)``, ``rec.free(pages=[3])``, or any
  operation in trace syntax: ``rec.record("translate", ids=[...], expect={"ids": [...]})``;
* wrapping an allocator object's methods by name: ``rec.wrap(allocator, alloc="allocate")``;
* decorating the engine's methods: ``@kvtwin.records("alloc")``, recorded while a recorder is
  active (``with kvtwin.Recorder(path, config):``) and a plain call otherwise.

How a method's arguments and return value become a trace line is an Adapter: the defaults read
alloc(tokens) -> pages or None (no room), alloc_many(list of tokens) -> list of pages or None,
free(ids) and free_swa(ids) -> moves or None (None: the engine does not say; the line gets no
expectation), flush() -> moves or None, translate(ids) -> ids. With ``ids="tokens"`` the engine
speaks token ids: alloc answers and free arguments are token ids, turned into the trace's pages
(a page whose tokens are not ``v * page_size + 0 .. page_size - 1`` is recorded as page -1, which
replays as a divergence on that line). An exception the method raises is recorded as an expected
error of the kind ``errors`` maps its class to (or its ``kind`` attribute, as kvtwin.Error has;
else ``internal``), and raised again.

Calls are recorded in the order they complete, one at a time (a lock covers the call and its
line); a recorded method called from inside another recorded call is not recorded again.
"""

import functools
import inspect
import threading

from . import _native
from ._errors import Error

_active = []
_active_lock = threading.Lock()
_local = threading.local()


def _values(ids):
    """A flat list of Python ints from a list, a numpy array or a torch tensor."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, int):
        return [ids]
    flat = []
    for value in ids:
        if isinstance(value, (list, tuple)):
            flat.extend(int(v) for v in value)
        else:
            flat.append(int(value))
    return flat


def _first(args, kwargs, names, what):
    if args:
        return args[0]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    raise TypeError(f"kvtwin.Recorder: cannot find the {what} among the arguments; give it first, or as one of "
                    f"{', '.join(names)}, or record with an Adapter that says where it is")


def _moves(value):
    if value is None:
        return None
    return {"moves": [[str(m[0]), int(m[1]), int(m[2])] for m in value]}


class Adapter:
    """How one engine call becomes one trace operation.

    ``op`` is the operation's trace name; ``fields(recorder, args, kwargs)`` returns its fields
    (read before the call, since an engine may consume its arguments); ``expect(recorder, value)``
    returns the expected result in trace syntax from what the call returned, or None for a line
    without an expectation.
    """

    def __init__(self, op, fields=None, expect=None):
        self.op = op
        self.fields = fields or (lambda recorder, args, kwargs: dict(kwargs))
        self.expect = expect or (lambda recorder, value: value if isinstance(value, dict) else None)

    def __repr__(self):
        return f"kvtwin.Adapter({self.op!r})"


def _alloc_fields(rec, args, kwargs):
    return {"tokens": int(_first(args, kwargs, ("tokens", "need_size", "num_tokens", "n"), "token count"))}


def _alloc_expect(rec, value):
    if value is None or value is False:
        return {"no_room": True}
    return {"pages": rec._pages(_values(value))}


def _alloc_many_fields(rec, args, kwargs):
    return {"tokens": _values(_first(args, kwargs, ("tokens", "sizes"), "token counts"))}


def _alloc_many_expect(rec, value):
    if value is None or value is False:
        return {"no_room": True}
    return {"pages": [rec._pages(_values(one)) for one in value], "many": True}


def _free_fields(rec, args, kwargs):
    if "pages" in kwargs:
        return {"pages": _values(kwargs["pages"])}
    if "tokens" in kwargs:
        return {"tokens": _values(kwargs["tokens"])}
    ids = _values(_first(args, kwargs, ("ids", "indices", "free_index"), "ids to free"))
    return {"tokens" if rec.ids == "tokens" else "pages": ids}


def _translate_fields(rec, args, kwargs):
    ids = _first(args, kwargs, ("ids", "tokens", "loc"), "ids to translate")
    fields = {"ids": _values(ids)}
    shape = getattr(ids, "shape", None)
    if shape is not None and len(shape) == 2:
        fields["shape"] = [int(shape[0]), int(shape[1])]
    dtype = str(getattr(ids, "dtype", ""))
    if dtype.endswith("int32"):
        fields["index_dtype"] = "int32"
    return fields


def _translate_expect(rec, value):
    return None if value is None else {"ids": _values(value)}


#: The adapters of the operations an allocator usually has, by trace name.
DEFAULT_ADAPTERS = {
    "alloc": Adapter("alloc", _alloc_fields, _alloc_expect),
    "alloc_many": Adapter("alloc_many", _alloc_many_fields, _alloc_many_expect),
    "free": Adapter("free", _free_fields, lambda rec, value: _moves(value)),
    "free_swa": Adapter("free_swa", _free_fields, lambda rec, value: _moves(value)),
    "flush": Adapter("flush", lambda rec, args, kwargs: {}, lambda rec, value: _moves(value)),
    "translate": Adapter("translate", _translate_fields, _translate_expect),
}


def _adapter(op):
    if isinstance(op, Adapter):
        return op
    return DEFAULT_ADAPTERS.get(op) or Adapter(op)


class Recorder:
    """Writes a pool trace of an engine's operations, each with the engine's answer as its expectation.

    ``Recorder(path, config)``: ``config`` is the pool's configuration in trace syntax (a dict:
    model, tp, page_size, total_bytes, mode, ...; see kvtwin.pool_config), the pool the engine's
    allocator manages. ``ids`` is "pages" or "tokens" (what the engine's ids are), ``errors`` maps
    exception classes to error kinds, ``origin`` is free-form provenance for the header.
    """

    def __init__(self, path, config, *, ids="pages", errors=None, seed=0, origin=None):
        if ids not in ("pages", "tokens"):
            raise Error(f"ids is '{ids}'; use \"pages\" or \"tokens\"", "invalid_argument")
        header = {"config": config, "seed": seed, "origin": {"producer": "kvtwin.Recorder", **(origin or {})}}
        self._writer = _native.TraceWriter(path, header)
        self.config = self._writer.config
        self.page_size = self.config["page_size"]
        self.ids = ids
        self._errors = list((errors or {}).items())
        self._lock = threading.RLock()
        self._wrapped = []
        self.last_line = None

    # ------------------------------------------------------------------ state

    @property
    def path(self):
        return self._writer.path

    @property
    def lines_written(self):
        """Operation lines written so far (the header not counted)."""
        return self._writer.lines_written

    @property
    def closed(self):
        return self._writer.closed

    @staticmethod
    def current():
        """The recorder the ``@kvtwin.records`` methods record to: the innermost ``with`` one, or None."""
        with _active_lock:
            return _active[-1] if _active else None

    def __enter__(self):
        with _active_lock:
            _active.append(self)
        return self

    def __exit__(self, *exc_info):
        with _active_lock:
            if self in _active:
                _active.remove(self)
        self.close()
        return False

    def sync(self):
        """Publishes the lines recorded so far as a whole trace under its name, so that they survive
        the process crashing (a checkpoint: the file is only ever a whole trace).
        (``flush()`` records the flush operation.)"""
        with self._lock:
            self._writer.flush()

    def close(self):
        """Puts every wrapped method back and closes the trace."""
        self.unwrap()
        self._writer.close()

    # ------------------------------------------------------------------ one call per operation

    def record(self, op, expect=None, **fields):
        """Writes one operation in trace syntax (a name with fields, or a dict) and returns its line."""
        line = dict(op) if isinstance(op, dict) else {"op": op}
        line.update(fields)
        with self._lock:
            self.last_line = self._writer.append(line, expect)
            return self.last_line

    def alloc(self, tokens, answer):
        """alloc(tokens) that answered ``answer``: the engine's pages (or tokens), or None for no room."""
        return self._record_call(DEFAULT_ADAPTERS["alloc"], (tokens,), {}, value=answer)

    def alloc_many(self, tokens, answer):
        return self._record_call(DEFAULT_ADAPTERS["alloc_many"], (tokens,), {}, value=answer)

    def free(self, ids, answer=None):
        """free(ids): ``answer`` is the compaction's moves [(sub_pool, src, dst), ...], or None when unknown."""
        return self._record_call(DEFAULT_ADAPTERS["free"], (ids,), {}, value=answer)

    def free_swa(self, ids, answer=None):
        return self._record_call(DEFAULT_ADAPTERS["free_swa"], (ids,), {}, value=answer)

    def flush(self, answer=None):
        return self._record_call(DEFAULT_ADAPTERS["flush"], (), {}, value=answer)

    def translate(self, ids, answer):
        return self._record_call(DEFAULT_ADAPTERS["translate"], (ids,), {}, value=answer)

    def refused(self, op, error, **fields):
        """An operation the engine refused: ``error`` is the exception it raised, or an error kind."""
        kind = error if isinstance(error, str) else self.error_kind(error)
        message = "" if isinstance(error, str) else str(error)
        return self.record(op, {"error": kind, "message": message}, **fields)

    def error_kind(self, exc):
        """The trace's error kind for an exception an engine raised."""
        for cls, kind in self._errors:
            if isinstance(exc, cls):
                return kind
        kind = getattr(exc, "kind", None)
        return kind if isinstance(kind, str) else "internal"

    # ------------------------------------------------------------------ wrapping an engine

    def wrap(self, allocator, methods=None, **renames):
        """Records the allocator's methods from now on, by name; returns the allocator.

        ``methods`` maps method names to operations (trace names or Adapters); without it every
        method named like a default operation (alloc, alloc_many, free, free_swa, flush, translate)
        is recorded. Keywords rename: ``wrap(a, alloc="allocate")`` records a.allocate as alloc.
        close() (or unwrap()) puts the methods back.
        """
        mapping = dict(methods) if methods else {}
        if not methods:
            for op in DEFAULT_ADAPTERS:
                if op not in renames and callable(getattr(allocator, op, None)):
                    mapping[op] = op
        for op, method in renames.items():
            mapping[method] = op
        for method, op in mapping.items():
            original = getattr(allocator, method, None)
            if not callable(original):
                raise Error(f"wrap: {type(allocator).__name__} has no method '{method}'", "invalid_argument")
            had_own = method in getattr(allocator, "__dict__", {})
            adapter = _adapter(op)
            setattr(allocator, method, self._recording(original, adapter, bound=True))
            self._wrapped.append((allocator, method, had_own, original))
        return allocator

    def unwrap(self):
        """Puts every method wrap() replaced back."""
        while self._wrapped:
            allocator, method, had_own, original = self._wrapped.pop()
            if had_own:
                setattr(allocator, method, original)
            else:
                delattr(allocator, method)

    def records(self, op):
        """A decorator that records a function (or method) to this recorder."""
        adapter = _adapter(op)

        def decorate(fn):
            return self._recording(fn, adapter, bound=not _is_method(fn))

        return decorate

    # ------------------------------------------------------------------ the recording itself

    def _recording(self, fn, adapter, bound):
        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            return self._call(fn, adapter, args if bound else args[1:], kwargs, args, kwargs)

        return recorded

    def _call(self, fn, adapter, op_args, op_kwargs, call_args, call_kwargs):
        if getattr(_local, "depth", 0) > 0 or self.closed:
            return fn(*call_args, **call_kwargs)
        with self._lock:
            fields = adapter.fields(self, op_args, op_kwargs)  # before the call: it may consume them
            _local.depth = 1
            try:
                value = fn(*call_args, **call_kwargs)
            except Exception as exc:
                self._write(adapter.op, fields, {"error": self.error_kind(exc), "message": str(exc)})
                raise
            finally:
                _local.depth = 0
            self._write(adapter.op, fields, adapter.expect(self, value))
            return value

    def _record_call(self, adapter, args, kwargs, value):
        with self._lock:
            return self._write(adapter.op, adapter.fields(self, args, kwargs), adapter.expect(self, value))

    def _write(self, op, fields, expect):
        self.last_line = self._writer.append({"op": op, **fields}, expect)
        return self.last_line

    def _pages(self, ids):
        """The trace's pages of an answer: the ids themselves, or the pages of whole-page token runs."""
        if self.ids == "pages":
            return ids
        ps = self.page_size
        pages = []
        for start in range(0, len(ids), ps):
            run = ids[start:start + ps]
            page = run[0] // ps if run[0] >= 0 else -1
            pages.append(page if run == list(range(page * ps, page * ps + ps)) else -1)
        return pages


def _is_method(fn):
    params = list(inspect.signature(fn).parameters)
    return bool(params) and params[0] in ("self", "cls")


def records(op):
    """Decorates an engine method so that its calls are recorded while a Recorder is active.

    ``@kvtwin.records("alloc")`` on ``def alloc(self, tokens)``: inside ``with kvtwin.Recorder(...):``
    every call is written to that recorder's trace; outside one, the method runs as it is. A first
    parameter named ``self`` (or ``cls``) is not an operation argument.
    """
    adapter = _adapter(op)

    def decorate(fn):
        method = _is_method(fn)

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            recorder = Recorder.current()
            if recorder is None:
                return fn(*args, **kwargs)
            return recorder._call(fn, adapter, args[1:] if method else args, kwargs, args, kwargs)

        return recorded

    return decorate
