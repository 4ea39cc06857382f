"""The reference model as an oracle in pytest: a plain-Python allocator written from SPEC.md section 4
(spec_allocator.py) answers a seeded workload operation by operation next to kvtwin.Model, and every
answer and every table must agree; a deliberately broken variant must be caught, at the first free
whose compaction it pairs wrongly.

The workload is a function of its seed (printed first) and replays exactly; a failure names the
seed, the step and both answers.
"""

import random

import pytest

import kvtwin
from spec_allocator import BrokenPairing, DoubleFree, SpecAllocator, spec_geometry

MODEL = "llama-3.1-8b"  # at TP 8 one KV head per rank: a single sub-pool, 16 KiB entries


def pool(page_size, mode, pages=16):
    entry_bytes = kvtwin.layout(MODEL, tp=8, page_size=page_size)["sub_pools"][0]["entry_bytes"]
    total_bytes = entry_bytes * page_size * pages + entry_bytes // 2  # not a whole number of pages
    config = {"model": MODEL, "tp": 8, "page_size": page_size, "total_bytes": total_bytes, "mode": mode,
              "tables_only": True}
    num_pages, min_page = spec_geometry(entry_bytes, page_size, total_bytes)
    return config, num_pages, min_page


class Workload:
    """Seeded operations in trace syntax: allocations, frees (some of them double), flushes and
    translations, drawn from what the answers so far left live."""

    def __init__(self, seed, page_size, lazy):
        self.rng = random.Random(seed)
        self.page_size = page_size
        self.lazy = lazy
        self.live = []   # allocations believed live, a list of pages each
        self.freed = []  # pages freed at least once

    def next_op(self):
        rng, ps = self.rng, self.page_size
        roll = rng.random()
        if roll < 0.45 or not self.live:
            return {"op": "alloc", "tokens": ps * rng.randint(0, 4)}
        if roll < 0.80:
            victims = rng.sample(range(len(self.live)), k=min(len(self.live), rng.randint(1, 3)))
            return {"op": "free", "pages": sorted(p for i in victims for p in self.live[i])}
        if roll < 0.85 and self.freed:
            return {"op": "free", "pages": [rng.choice(self.freed)]}  # a double free, or a page reused since
        if roll < 0.92 and self.lazy:
            return {"op": "flush"}
        return {"op": "translate", "ids": [rng.randint(-2, ps * 30) for _ in range(rng.randint(1, 6))]}

    def observe(self, op, answer):
        if op["op"] == "alloc" and answer.get("pages"):
            self.live.append(answer["pages"])
        elif op["op"] == "free" and "error" not in answer:
            self.freed.extend(op["pages"])
            self.live = [a for a in self.live if not set(a) & set(op["pages"])]


def engine_answer(engine, op):
    """The plain-Python allocator's answer in trace syntax."""
    try:
        if op["op"] == "alloc":
            pages = engine.alloc(op["tokens"])
            return {"no_room": True} if pages is None else {"pages": pages}
        if op["op"] == "free":
            return {"moves": [list(m) for m in engine.free(op["pages"])]}
        if op["op"] == "flush":
            return {"moves": [list(m) for m in engine.flush()]}
        if op["op"] == "translate":
            return {"ids": engine.translate(op["ids"])}
    except DoubleFree:
        return {"error": "double_free"}
    raise AssertionError(f"the workload made an op the engine lacks: {op}")


def first_divergence(engine, page_size, mode, seed, steps=400):
    """Plays the workload on the engine and on the model; the first step where they differ, or None."""
    config, _, _ = pool(page_size, mode)
    model = kvtwin.Model(config)
    work = Workload(seed, page_size, mode == "lazy")
    for step in range(steps):
        op = work.next_op()
        expected = model.try_apply(op)
        if "error" in expected:
            expected = {"error": expected["error"]}  # errors compare by kind, as traces do
        got = engine_answer(engine, op)
        if got != expected:
            return step, op, got, expected
        mine = engine.tables()
        theirs = {k: v for k, v in model.tables()["sides"][0].items() if k != "name"}
        if mine != theirs:
            return step, op, mine, theirs
        model.verify()
        work.observe(op, got)
    return None


@pytest.mark.parametrize("mode", ["eager", "lazy"])
@pytest.mark.parametrize("page_size", [1, 4, 16])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spec_allocator_agrees_with_the_model_op_by_op(seed, page_size, mode):
    print(f"seed {seed}, page size {page_size}, {mode}")
    config, num_pages, min_page = pool(page_size, mode)
    engine = SpecAllocator(num_pages, min_page, page_size, lazy=mode == "lazy")
    # The geometry computed from SPEC.md section 3 is the model's.
    assert engine.tables() == {k: v for k, v in kvtwin.Model(config).tables()["sides"][0].items() if k != "name"}
    divergence = first_divergence(engine, page_size, mode, seed)
    assert divergence is None, f"seed {seed}: step {divergence[0]} {divergence[1]}: engine {divergence[2]}, " \
                               f"model {divergence[3]}"


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_broken_compaction_pairing_is_caught_at_its_first_wrong_free(seed, page_size):
    print(f"seed {seed}, page size {page_size}")
    _, num_pages, min_page = pool(page_size, "eager")
    engine = BrokenPairing(num_pages, min_page, page_size)
    divergence = first_divergence(engine, page_size, "eager", seed)
    assert divergence is not None, f"seed {seed}: the reversed pairing went unnoticed"
    step, op, got, expected = divergence
    # It is caught where it first matters: a free whose compaction fills two or more holes, so
    # the reversed pairing moves pages to other places than the model does.
    assert op["op"] == "free", f"step {step}: {op}"
    assert len(expected["moves"]) >= 2 and sorted(got["moves"]) != sorted(expected["moves"])
