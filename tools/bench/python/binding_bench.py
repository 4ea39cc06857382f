"""kvtwin_python_bench: what the Python binding costs over the C++ model, measured side by side in one
run (issue 14's targets: under 2 microseconds of binding overhead an operation; translating 1M ids
from numpy at least half the speed of the C++ call).

  per-op    tables-only pool, alloc(16 tokens) then free(its page), repeated: Model.apply from
            Python (keywords, and a dict) against sim::Model::apply called in a C++ loop
            (kvtwin_bench_baseline, cpp_baseline.cpp). Overhead = (Python - C++) / operations.
  translate 1,048,576 virtual token ids of live pages, int64 and int32 numpy arrays, through
            Model.translate (a fresh int64 array, and in place), each against sim::Model::apply of
            the same translate op in C++. Speed ratio = C++ time / Python time (1.0: no overhead).

Times are the process's CPU time on both sides (time.process_time, CLOCK_PROCESS_CPUTIME_ID): on a
shared machine wall time counts other processes' turns. Each figure is the best of several
repetitions. Run it from a Release build:
build/default/tools/bench/kvtwin_python_bench (a script that sets PYTHONPATH and the interpreter).
"""

import json
import sys
import time

import numpy as np

import kvtwin
import kvtwin_bench_baseline as cpp

CONFIG = {"model": "llama-3.1-8b", "tp": 8, "page_size": 16, "total_bytes": 1 << 30, "tables_only": True}
PAGE_TOKENS = 16
ROUNDS = 100_000          # alloc + free pairs a repetition
IDS = 1 << 20             # translated ids
LIVE_TOKENS = 3000 * 16   # allocated before translating
REPEATS = 5


def best(fn, repeats=REPEATS):
    return min(fn() for _ in range(repeats))


def python_alloc_free(form):
    model = kvtwin.Model(CONFIG)
    apply = model.apply
    start = time.process_time()
    if form == "keywords":
        for _ in range(ROUNDS):
            pages = apply("alloc", tokens=PAGE_TOKENS)["pages"]
            apply("free", pages=pages)
    else:
        for _ in range(ROUNDS):
            pages = apply({"op": "alloc", "tokens": PAGE_TOKENS})["pages"]
            apply({"op": "free", "pages": pages})
    return time.process_time() - start


def python_translate(ids, in_place, reps=3):
    model = kvtwin.Model(CONFIG)
    model.apply("alloc", tokens=LIVE_TOKENS)
    buffers = [ids.copy() for _ in range(reps)] if in_place else None
    start = time.process_time()
    for i in range(reps):
        if in_place:
            model.translate(buffers[i], out=buffers[i])
        else:
            model.translate(ids)
    return (time.process_time() - start) / reps


def main():
    config_json = json.dumps(CONFIG)
    print(f"kvtwin_python_bench: kvtwin {kvtwin.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}")
    print(f"pool: {CONFIG['model']} tp {CONFIG['tp']}, page size {CONFIG['page_size']}, "
          f"{CONFIG['total_bytes'] >> 20} MiB, tables only; best of {REPEATS}")

    ops = 2 * ROUNDS
    cpp_s = best(lambda: cpp.alloc_free_seconds(config_json, PAGE_TOKENS, ROUNDS))
    rows = [("C++ sim::Model::apply", cpp_s)]
    for form in ("keywords", "dict"):
        rows.append((f"Python Model.apply ({form})", best(lambda form=form: python_alloc_free(form))))
    print(f"\nper operation: {ROUNDS} x (alloc {PAGE_TOKENS} tokens, free its page)")
    print(f"  {'path':32} {'us/op':>8} {'overhead us/op':>15} {'ratio':>7}")
    for name, seconds in rows:
        per_op = seconds / ops * 1e6
        overhead = (seconds - cpp_s) / ops * 1e6
        print(f"  {name:32} {per_op:8.3f} {overhead:15.3f} {seconds / cpp_s:7.2f}")

    # Deterministic ids over the live tokens (and a few past them, to the sink).
    ids64 = (np.arange(IDS, dtype=np.int64) * 7919) % (LIVE_TOKENS + 64) + PAGE_TOKENS
    ids32 = ids64.astype(np.int32)
    print(f"\ntranslate {IDS} ids: Model.translate from Python against the same translate op in C++")
    print(f"  {'ids':22} {'C++ ms':>8} {'Python ms':>10} {'Mids/s':>8} {'speed vs C++':>13}")
    speeds = {}
    for name, ids, int32, in_place in (("int64, fresh output", ids64, False, False),
                                       ("int32, fresh output", ids32, True, False),
                                       ("int64, in place", ids64, False, True)):
        cpp_t = best(lambda: cpp.translate_seconds(config_json, LIVE_TOKENS, ids64, 3, int32, in_place) / 3)
        py_t = best(lambda: python_translate(ids, in_place))
        speeds[name] = cpp_t / py_t
        print(f"  {name:22} {cpp_t * 1e3:8.2f} {py_t * 1e3:10.2f} {IDS / py_t / 1e6:8.1f} {cpp_t / py_t:13.2f}")

    keyword_overhead = (rows[1][1] - cpp_s) / ops * 1e6
    translate_speed = min(speeds.values())
    print(f"\nbinding overhead per operation: {keyword_overhead:.2f} us (target < 2); "
          f"translate speed vs C++: {translate_speed:.2f} at worst (target >= 0.5)")


if __name__ == "__main__":
    main()
