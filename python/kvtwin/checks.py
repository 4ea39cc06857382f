"""kvtwin.fuzz() and kvtwin.check(): the fuzzer and the gate, with their reports as dicts.

fuzz() runs in this process (python/src/checks_binding.cpp binds traces/fuzz.h). check() runs the
built ``kvtwin check --json``: the gate's logic (work items, threads, request-trace slices, the
table) lives only in the CLI (tools/kvtwin/cmd_check.cpp), so the CLI is the one code path and
this returns exactly the report it writes. The CLI is found at $KVTWIN_CLI, else next to the
package (an installed package carries it in kvtwin/bin/), else in the build tree it came from.
"""

import json
import os
import subprocess
import tempfile

from . import _native
from ._errors import Error


def fuzz(*, seed=1, cases=100, config="random", ops=200, backend="model", fault="", out=None, case=None,
         shard_index=0, shard_count=1):
    """Seeded swarm fuzzing, as ``kvtwin fuzz --cases N``; returns the ``kvtwin fuzz --json`` report.

    Every case derives from ``seed`` and its index. A failing case is shrunk; the report's
    ``failure`` holds the check, the message, the command that reproduces it and ``shrunk_trace``
    (a trace dict that ``kvtwin.replay`` or ``kvtwin.write_trace`` take). With ``out`` the trace is
    also written there, and ``failure["replay"]`` is the ``kvtwin replay`` command.
    """
    if out is not None:
        out = os.fspath(out)
    return _native.fuzz(seed=seed, cases=cases, config=config, ops=ops, backend=backend, fault=fault, out=out,
                        case=case, shard_index=shard_index, shard_count=shard_count)


def cli_path():
    """The kvtwin CLI that check() runs."""
    given = os.environ.get("KVTWIN_CLI")
    if given:
        return given
    installed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kvtwin")
    if os.path.exists(installed):
        return installed
    try:
        from ._build_paths import KVTWIN_CLI
    except ImportError:
        KVTWIN_CLI = None
    if KVTWIN_CLI and os.path.exists(KVTWIN_CLI):
        return KVTWIN_CLI
    raise Error("the kvtwin CLI was not found; build the 'kvtwin' target, or set KVTWIN_CLI to its path", "io")


def check(*, cwd=None, **options):
    """Runs the gate, ``kvtwin check``, and returns the report ``kvtwin check --json`` writes.

    Keyword options are the CLI's, with underscores: ``check(cases=2, random_cases=4, ops=50,
    backend="model", jobs=1)``; ``True`` gives a bare flag. The report also carries
    ``exit_code`` (0 passed, 1 a check failed) and ``output`` (the table the CLI printed). Bad
    options raise kvtwin.Error with the CLI's message.
    """
    cli = cli_path()
    with tempfile.TemporaryDirectory(prefix="kvtwin-check-") as scratch:
        report_path = os.path.join(scratch, "report.json")
        args = [cli, "check", "--json", report_path, "--quiet"]
        for key, value in options.items():
            if value is None or value is False:
                continue
            flag = "--" + key.replace("_", "-")
            args += [flag] if value is True else [flag, str(os.fspath(value) if hasattr(value, "__fspath__") else value)]
        done = subprocess.run(args, capture_output=True, text=True, cwd=cwd, check=False)
        if done.returncode == 2:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            message = lines[-1] if lines else "kvtwin check refused its options"
            prefix = "kvtwin check: error: "
            raise Error(message[len(prefix):] if message.startswith(prefix) else message, "invalid_argument")
        if done.returncode not in (0, 1) or not os.path.exists(report_path):
            raise Error(f"kvtwin check ended with status {done.returncode}: {done.stderr.strip()}", "internal")
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
    report["exit_code"] = done.returncode
    report["output"] = done.stdout
    return report
