#!/usr/bin/env python3
"""Soak benchmark: `kvtwin fuzz --seconds N` on the model, its memory sampled, flatness asserted.

A long fuzzing run must not grow: every case builds its pool, plays its operations and lets them
go. This starts `kvtwin fuzz --backend model --seconds N`, samples the process's resident set
(VmRSS in /proc/PID/status) every --interval seconds, writes the curve to OUT/soak.csv, prints it
at ten points, and fails (exit 1) when the peak of the second half exceeds the peak of the first
fifth by more than --tolerance-mib. It is a benchmark, not a test: it needs minutes to mean
anything, and nothing in the test suite waits on the clock.

    tools/bench/soak.py --seconds 3600                       # an hour, build/default's kvtwin
    tools/bench/soak.py --seconds 120 --kvtwin build/cpu/tools/kvtwin --out build/soak

Linux only (/proc). The fuzz run's own output goes to OUT/fuzz.log, its report to OUT/fuzz.json.
"""
import argparse
import os
import re
import subprocess
import sys
import time


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kvtwin", default=os.path.join(root, "build", "default", "tools", "kvtwin"))
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=os.path.join(root, "build", "soak"))
    p.add_argument("--tolerance-mib", type=float, default=8.0)
    p.add_argument("fuzz_args", nargs="*", help="more kvtwin fuzz options (after --)")
    a = p.parse_args()
    if a.seconds < 10:
        sys.exit("soak: give --seconds 10 or more (the first fifth is the baseline)")
    os.makedirs(a.out, exist_ok=True)
    cmd = [a.kvtwin, "fuzz", "--backend", "model", "--seconds", str(a.seconds), "--seed", str(a.seed), "--quiet",
           "--out", os.path.join(a.out, "failures"), "--json", os.path.join(a.out, "fuzz.json")] + a.fuzz_args
    print("soak: " + " ".join(cmd), flush=True)
    with open(os.path.join(a.out, "fuzz.log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        start = time.monotonic()
        samples = []  # (seconds, rss KiB)
        while proc.poll() is None:
            rss = rss_kib(proc.pid)
            if rss is not None:
                samples.append((time.monotonic() - start, rss))
            time.sleep(a.interval)
        code = proc.wait()
    with open(os.path.join(a.out, "soak.csv"), "w") as f:
        f.write("seconds,rss_kib\n")
        for t, r in samples:
            f.write(f"{t:.1f},{r}\n")
    log_text = open(os.path.join(a.out, "fuzz.log")).read()
    if code != 0:
        sys.exit(f"soak: kvtwin fuzz exited {code}; see {a.out}/fuzz.log\n{log_text[-2000:]}")
    if len(samples) < 10:
        sys.exit("soak: too few samples")
    cases = re.search(r"^(\d+) cases, (\d+) ops", log_text, re.M)
    n = len(samples)
    first = max(r for _, r in samples[: max(1, n // 5)])
    second_half = max(r for _, r in samples[n // 2:])
    growth_mib = (second_half - first) / 1024.0
    curve = " ".join(f"{samples[min(n - 1, i * n // 10)][1] / 1024:.1f}" for i in range(11))
    print(f"soak: {samples[-1][0]:.0f} s, {cases.group(1) if cases else '?'} cases, "
          f"{cases.group(2) if cases else '?'} ops; RSS MiB at each tenth: {curve}")
    print(f"soak: peak RSS first fifth {first / 1024:.1f} MiB, second half {second_half / 1024:.1f} MiB, "
          f"growth {growth_mib:+.1f} MiB (tolerance {a.tolerance_mib} MiB); curve in {a.out}/soak.csv")
    if growth_mib > a.tolerance_mib:
        print("soak: FAIL: memory grows over the run")
        return 1
    print("soak: PASS: flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
