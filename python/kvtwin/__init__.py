"""kvtwin from Python: the reference model as an oracle, traces, replay, fuzzing, and a recorder for
real engines' pool operations. docs/python.md shows it whole.

    import kvtwin
    m = kvtwin.Model(model="llama-3.1-8b", tp=8, page_size=4, total_bytes=1 << 20)
    m.apply("alloc", tokens=8)              # {'pages': [1, 2]}
    m.apply({"op": "free", "pages": [1]})   # {'moves': [['full', 2, 1]]}

Everything speaks trace syntax (docs/traces.md): operations, answers, configurations and reports
are dicts with the names the trace files use. Operating errors raise kvtwin.Error with kvtwin's
own message and its kind (``e.kind == "double_free"``); a refused operation changes nothing.

Importing kvtwin does not import numpy; the calls that take or give arrays (Model.translate,
Model.raw_bytes, a read's "data") need it.
"""

from ._errors import Error
from ._native import (
    Model,
    TraceWriter,
    __version__,
    bytes_result,
    catalogue,
    catalogue_config_names,
    gpu_available,
    layout,
    model_shape,
    named_config,
    planted_faults,
    pool_config,
    read_trace,
    replay,
    write_trace,
)
from .checks import check, cli_path, fuzz
from .recorder import DEFAULT_ADAPTERS, Adapter, Recorder, records

__all__ = [
    "Adapter",
    "DEFAULT_ADAPTERS",
    "Error",
    "Model",
    "Recorder",
    "TraceWriter",
    "__version__",
    "bytes_result",
    "catalogue",
    "catalogue_config_names",
    "check",
    "cli_path",
    "fuzz",
    "gpu_available",
    "layout",
    "model_shape",
    "named_config",
    "planted_faults",
    "pool_config",
    "read_trace",
    "records",
    "replay",
    "write_trace",
]
