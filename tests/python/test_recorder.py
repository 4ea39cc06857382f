"""kvtwin.Recorder: an engine's pool operations recorded as a pool trace with the engine's answers as
expectations. The engine is spec_allocator.py's plain-Python allocator; its recorded trace must
replay clean on the reference model, and with a planted divergence (an engine that answers one
allocation wrong) the replay must stop at exactly the line that recorded it, under kvtwin.replay
and under the `kvtwin replay` command alike.
"""

import random
import subprocess

import numpy as np
import pytest

import kvtwin
from spec_allocator import DoubleFree, NotWholePages, SpecAllocator, spec_geometry

MODEL = "llama-3.1-8b"
PAGE_SIZE = 4


def pool(mode="eager", pages=20):
    entry_bytes = kvtwin.layout(MODEL, tp=8, page_size=PAGE_SIZE)["sub_pools"][0]["entry_bytes"]
    total_bytes = entry_bytes * PAGE_SIZE * pages
    config = {"model": MODEL, "tp": 8, "page_size": PAGE_SIZE, "total_bytes": total_bytes, "mode": mode}
    return config, spec_geometry(entry_bytes, PAGE_SIZE, total_bytes)


ERRORS = {DoubleFree: "double_free", NotWholePages: "invalid_argument"}


def drive(engine, seed, steps=150):
    """A seeded serving-like workload on the engine's own methods (whatever records them)."""
    rng = random.Random(seed)
    live = []
    for _ in range(steps):
        roll = rng.random()
        try:
            if roll < 0.5 or not live:
                pages = engine.alloc(PAGE_SIZE * rng.randint(1, 3))
                if pages:
                    live.append(pages)
            elif roll < 0.85:
                engine.free(live.pop(rng.randrange(len(live))))
            elif roll < 0.9:
                engine.free([1])  # often a double free
            elif roll < 0.93:
                engine.alloc(PAGE_SIZE + 1)  # refused: not whole pages
            elif roll < 0.96 and engine.lazy:
                engine.flush()
            else:
                engine.translate([rng.randint(-1, PAGE_SIZE * 25) for _ in range(4)])
        except (DoubleFree, NotWholePages):
            pass


def test_a_wrapped_allocator_replays_clean(tmp_path):
    for mode in ("eager", "lazy"):
        config, (num_pages, min_page) = pool(mode)
        engine = SpecAllocator(num_pages, min_page, PAGE_SIZE, lazy=mode == "lazy")
        path = tmp_path / f"engine-{mode}.jsonl"
        with kvtwin.Recorder(path, config, errors=ERRORS, origin={"engine": "spec_allocator"}) as rec:
            rec.wrap(engine)
            drive(engine, seed=11)
            lines = rec.lines_written
        assert lines > 100
        assert engine.alloc.__func__ is SpecAllocator.alloc  # close() put the methods back
        trace = kvtwin.read_trace(path)
        assert trace["header"]["origin"] == {"producer": "kvtwin.Recorder", "engine": "spec_allocator"}
        kinds = {op["op"] for op in trace["ops"]} | {op["expect"].get("error") for op in trace["ops"]}
        assert {"alloc", "free", "translate", "double_free", "invalid_argument"} <= kinds
        report = kvtwin.replay(path)
        assert report["passed"], report.get("failure")
        assert report["ops"] == lines + 1  # the header's build, then every line
        assert report["checks"]["expect"] >= lines - 5  # lines without an expectation: frees, flushes


def test_decorated_methods_record_only_while_a_recorder_is_active(tmp_path):
    config, (num_pages, min_page) = pool()

    class Engine(SpecAllocator):
        @kvtwin.records("alloc")
        def alloc(self, tokens):
            return super().alloc(tokens)

        @kvtwin.records("free")
        def free(self, pages):
            return super().free(pages)

        @kvtwin.records("alloc_many")
        def alloc_many(self, sizes):
            # Calls the recorded alloc inside: recorded once, as alloc_many.
            if sum(sizes) // PAGE_SIZE > len(self.free_queue):
                return None
            return [self.alloc(n) for n in sizes]

    engine = Engine(num_pages, min_page, PAGE_SIZE)
    first = engine.alloc(8)  # no recorder: not recorded, and the trace must know it
    path = tmp_path / "decorated.jsonl"
    with kvtwin.Recorder(path, config, errors=ERRORS) as rec:
        rec.record("alloc", tokens=8, expect={"pages": first})  # the call made before recording began
        assert engine.alloc_many([4, 8]) == [[3], [4, 5]]
        engine.free(first)
        with pytest.raises(DoubleFree):
            engine.free(first)
    ops = kvtwin.read_trace(path)["ops"]
    assert [op["op"] for op in ops] == ["alloc", "alloc_many", "free", "free"]
    assert ops[1]["expect"] == {"pages": [[3], [4, 5]]}
    assert ops[3]["expect"]["error"] == "double_free"
    assert kvtwin.replay(path)["passed"]
    engine.alloc(4)  # the recorder is closed: a plain call again
    assert kvtwin.read_trace(path)["ops"] == ops


class PlantedDivergence(SpecAllocator):
    """Answers its `wrong_at`-th allocation with the pages in the wrong order, and is right otherwise."""

    def __init__(self, *args, wrong_at, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = 0
        self.wrong_at = wrong_at

    def alloc(self, tokens):
        pages = super().alloc(tokens)
        self.allocations += 1
        if self.allocations == self.wrong_at and pages and len(pages) > 1:
            return pages[::-1]
        return pages


def test_a_planted_divergence_fails_the_replay_at_its_line(tmp_path):
    config, (num_pages, min_page) = pool()
    engine = PlantedDivergence(num_pages, min_page, PAGE_SIZE, wrong_at=9)
    path = tmp_path / "diverged.jsonl"
    planted_line = None
    with kvtwin.Recorder(path, config, errors=ERRORS) as rec:
        rec.wrap(engine)
        rng = random.Random(3)
        live = []
        for _ in range(60):
            if rng.random() < 0.6 or not live:
                pages = engine.alloc(PAGE_SIZE * rng.randint(2, 3))
                if engine.allocations == engine.wrong_at:
                    planted_line = rec.last_line
                if pages:
                    live.append(pages)
            else:
                engine.free(live.pop(rng.randrange(len(live))))
    assert planted_line is not None and planted_line > 10
    report = kvtwin.replay(path)
    assert not report["passed"]
    assert (report["failure"]["line"], report["failure"]["check"]) == (planted_line, "expect"), report["failure"]
    assert report["ops"] == planted_line  # the build, and every line up to the planted one
    # The command line says the same, with the line and the command that reproduces it.
    done = subprocess.run([kvtwin.cli_path(), "replay", str(path), "--quiet"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1
    assert f"line {planted_line}" in done.stdout and "reproduce: kvtwin replay" in done.stdout


def test_one_call_per_operation_and_token_ids(tmp_path):
    config, _ = pool()
    model = kvtwin.Model(config)
    path = tmp_path / "calls.jsonl"
    with kvtwin.Recorder(path, config, ids="tokens") as rec:
        # An engine that speaks token ids: its answer is every token of its pages.
        tokens = [t for p in model.apply("alloc", tokens=8)["pages"] for t in range(p * 4, p * 4 + 4)]
        assert rec.alloc(8, answer=np.array(tokens)) == 2
        rec.free(tokens[:4], answer=[("full", 2, 1)])
        rec.translate(np.array([[8, 9], [10, 11]], dtype=np.int32), answer=[4, 5, 6, 7])
        rec.alloc(4096, answer=None)                   # no room
        rec.refused("free", DoubleFree("again"), tokens=tokens[:4])
        rec.refused("alloc", "invalid_argument", tokens=5)
        rec.flush()                                    # answer unknown: no expectation
        assert rec.lines_written == 7
        rec.sync()  # every line so far is in the file while recording goes on
        assert len(kvtwin.read_trace(path)["ops"]) == 7
    ops = kvtwin.read_trace(path)["ops"]
    assert ops[0] == {"op": "alloc", "tokens": 8, "expect": {"pages": [1, 2]}}
    assert ops[1] == {"op": "free", "tokens": [4, 5, 6, 7], "expect": {"moves": [["full", 2, 1]]}}
    assert ops[2] == {"op": "translate", "ids": [8, 9, 10, 11], "shape": [2, 2], "index_dtype": "int32",
                      "expect": {"ids": [4, 5, 6, 7]}}
    assert ops[3]["expect"] == {"no_room": True}
    assert ops[4]["expect"] == {"error": "internal", "message": "again"}  # DoubleFree not mapped here
    assert ops[5]["expect"]["error"] == "invalid_argument"
    assert "expect" not in ops[6]
    report = kvtwin.replay(path)
    # The unmapped exception is the first disagreement: the model answers double_free.
    assert (report["failure"]["line"], report["failure"]["check"]) == (6, "expect")


def test_token_answers_that_are_not_whole_pages_are_recorded_as_a_divergence(tmp_path):
    config, _ = pool()
    path = tmp_path / "torn.jsonl"
    with kvtwin.Recorder(path, config, ids="tokens") as rec:
        rec.alloc(8, answer=[4, 5, 6, 7, 8, 9, 11, 10])  # the second page's tokens out of order
    assert kvtwin.read_trace(path)["ops"][0]["expect"] == {"pages": [1, -1]}
    assert kvtwin.replay(path)["failure"]["line"] == 2


def test_the_recorder_refuses_what_a_trace_cannot_hold(tmp_path):
    config, _ = pool()
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.Recorder(tmp_path / "x.jsonl", dict(config, page_size=0))
    assert e.value.kind == "malformed" and str(e.value).startswith(str(tmp_path / "x.jsonl") + ":1")
    with kvtwin.Recorder(tmp_path / "y.jsonl", config) as rec:
        with pytest.raises(kvtwin.Error) as e:
            rec.record("alloc", tokens=-4)
        assert str(e.value).startswith(str(tmp_path / "y.jsonl") + ":2")
        with pytest.raises(kvtwin.Error):
            rec.wrap(object(), alloc="allocate")
    with pytest.raises(kvtwin.Error) as e:
        rec.record("alloc", tokens=4)
    assert "closed" in str(e.value)
