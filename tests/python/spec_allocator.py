"""A small page allocator written from SPEC.md section 4 in plain Python: the engine the Python tests
put under the reference model (test_oracle.py) and under the Recorder (test_recorder.py).

It is written from the contract, not from sim/: one sub-pool growing up from the low end, the
free virtual pages a FIFO queue, eager compaction right after a free (4.1) or holes and flush()
(4.2), and translation (section 5). Its geometry comes from SPEC.md section 3's arithmetic on the
entry size alone. Answers are what an engine would hand back: alloc -> virtual pages or None (no
room), free/flush -> the page moves [(sub_pool, src, dst)], translate -> physical token ids.

BrokenPairing is the deliberately wrong variant: its compaction pairs survivors with holes in
reverse order (SPEC.md section 10, bug 11); it agrees with the contract until a free leaves two
or more holes to fill at once.
"""

from collections import deque


class DoubleFree(Exception):
    """Freeing a page that is not allocated (the engine's own exception)."""


class NotWholePages(ValueError):
    """An allocation that is not a whole number of pages."""


def spec_geometry(entry_bytes, page_size, total_bytes):
    """SPEC.md section 3 for one sub-pool: (num_pages, min_page_index)."""
    reserved_floor = max(entry_bytes, page_size * entry_bytes)
    max_slots = total_bytes // entry_bytes
    min_slot_index = -(-reserved_floor // entry_bytes)
    num_pages = max_slots // page_size
    min_page_index = -(-min_slot_index // page_size)
    assert num_pages > min_page_index, "the pool cannot be built"
    return num_pages, min_page_index


class SpecAllocator:
    """SPEC.md section 4, one grow-up side. Token ids are t = v * page_size + slot."""

    def __init__(self, num_pages, min_page_index, page_size, lazy=False):
        self.page_size = page_size
        self.num_pages = num_pages
        self.min_page = min_page_index
        self.lazy = lazy
        # v2p[num_virtual + 1], p2v[num_pages + 1]: all -1 but the sink row 0; virtual ids are the
        # owner side's page ids, so num_virtual = num_pages.
        self.v2p = [-1] * (num_pages + 1)
        self.p2v = [-1] * (num_pages + 1)
        self.v2p[0] = self.p2v[0] = 0
        self.free_queue = deque(range(min_page_index, num_pages))
        self.watermark = min_page_index  # occupied [min_page, wm)
        self.holes = set()               # lazy mode: freed pages inside [min_page, wm)

    # -- allocation (SPEC 4)
    def alloc(self, tokens):
        if tokens % self.page_size != 0:
            raise NotWholePages(f"{tokens} tokens is not a whole number of pages of {self.page_size}")
        k = tokens // self.page_size
        if k == 0:
            return []
        gap_pages = self.num_pages - self.watermark
        if k > len(self.free_queue) or k - min(k, len(self.holes)) > gap_pages:
            return None  # no room, nothing changed
        physical = sorted(self.holes)[:k]  # lazy: holes first, ascending
        for p in physical:
            self.holes.discard(p)
        rest = k - len(physical)
        physical += list(range(self.watermark, self.watermark + rest))
        self.watermark += rest
        virtual = [self.free_queue.popleft() for _ in range(k)]
        for v, p in zip(virtual, physical):
            self.v2p[v] = p
            self.p2v[p] = v
        return virtual

    def free(self, pages):
        vs = sorted(set(pages))
        bad = [v for v in vs if not 0 < v < len(self.v2p) - 1 or self.v2p[v] < 0]
        if bad:
            raise DoubleFree(f"double free or never allocated: pages {bad}")
        freed = sorted(self.v2p[v] for v in vs)
        for v in vs:
            self.p2v[self.v2p[v]] = -1
            self.v2p[v] = -1
        self.free_queue.extend(vs)  # appended at the back, ascending
        if self.lazy:
            self.holes.update(freed)
            return []
        return self._compact(freed)

    def flush(self):
        holes = sorted(self.holes)
        self.holes.clear()
        return self._compact(holes)

    # -- compaction (SPEC 4.1)
    def _compact(self, freed):
        new_wm = self.watermark - len(freed)
        survivors = [p for p in range(new_wm, self.watermark) if p not in freed]
        holes = [p for p in freed if p < new_wm]
        moves = []
        for src, dst in self.pair(survivors, holes):
            v = self.p2v[src]
            self.v2p[v] = dst
            self.p2v[dst] = v
            self.p2v[src] = -1
            moves.append(("full", src, dst))
        self.watermark = new_wm
        return moves

    def pair(self, survivors, holes):
        return list(zip(survivors, holes))  # both ascending, in order

    # -- translation (SPEC 5)
    def translate(self, ids):
        ps = self.page_size
        out = []
        for t in ids:
            if t < 0 or t // ps >= len(self.v2p):
                out.append(0)
            else:
                out.append(max(self.v2p[t // ps] * ps + t % ps, 0))
        return out

    def tables(self):
        return {
            "v2p": list(self.v2p),
            "p2v": list(self.p2v),
            "free_queue": list(self.free_queue),
            "watermark": self.watermark,
            "holes": sorted(self.holes),
            "allocated_pages": sum(1 for p in self.v2p[1:-1] if p >= 0),
        }


class BrokenPairing(SpecAllocator):
    """Pairs compaction survivors with holes in reverse order (SPEC.md section 10, bug 11)."""

    def pair(self, survivors, holes):
        return list(zip(survivors, reversed(holes)))
