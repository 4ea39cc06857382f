#!/usr/bin/env python3
"""torch_peer: the same pool operations as gpu_bench, written with PyTorch indexing.

Same geometry (Llama-3.1-8B's token-major pool: 32 layers, 8 KV heads, head dim 128, bf16,
128 KiB entries, page size 16 = 2 MiB envelopes) and the same timing method (CUDA events around R
back-to-back calls, median of 7 trials, after warm-up), so that the two are comparable:

  write      per-layer as_strided views of the token-major pool; view[loc] = rows, one call per
             layer and part (loc: a prefill's consecutive slots; *_scattered: random slots)
  read       view[loc], one call per layer and part
  write_layer  the write door for one layer: k_view[loc] = k; v_view[loc] = v (two index_put_)
  move       env[dst] = env[src] on the page-envelope view
  translate  (v2p[t // ps] * ps + t % ps).clamp_(min=0)

Usage: torch_peer.py OUT.json [--quick]. Writes one JSON object per line, like gpu_bench.
"""
import json
import sys

import torch

LAYERS, HEADS, HEAD_DIM, ITEM = 32, 8, 128, 2
ROW = HEADS * HEAD_DIM * ITEM          # 2 KiB
ENTRY = LAYERS * 2 * ROW               # 128 KiB
PAGE_SIZE = 16
PAGE_BYTES = PAGE_SIZE * ENTRY         # 2 MiB


def time_us(call, reps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    trials = []
    for _ in range(7):
        start.record()
        for _ in range(reps):
            call()
        stop.record()
        stop.synchronize()
        trials.append(1000.0 * start.elapsed_time(stop) / reps)
    trials.sort()
    return trials[len(trials) // 2]


def reps_for(nbytes):
    return 200 if nbytes < (64 << 20) else 20 if nbytes < (1 << 30) else 5


def main():
    out_path = sys.argv[1]
    quick = len(sys.argv) > 2 and sys.argv[2] == "--quick"
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(20261129)
    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    rows = []

    copy_bytes = 4 << 30
    a = torch.full((copy_bytes,), 0x5A, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    rows.append(("copy", 1, 2 * copy_bytes, time_us(lambda: b.copy_(a), 5)))
    del a, b
    torch.cuda.empty_cache()

    slots = 16384 if quick else 131072
    pool_u8 = torch.full((slots * ENTRY,), 0x3C, dtype=torch.uint8, device=dev)
    pool = pool_u8.view(torch.bfloat16)
    elems_per_entry = ENTRY // ITEM
    # Per-layer views: shape (slots, heads, head_dim), strides (E/is, head_dim, 1).
    views = []
    for layer in range(LAYERS):
        for part in range(2):
            offset = (layer * 2 * ROW + part * ROW) // ITEM
            views.append(pool.as_strided((slots, HEADS, HEAD_DIM), (elems_per_entry, HEAD_DIM, 1), offset))

    sizes = [1, 64, 512, 4096] if quick else [1, 16, 64, 256, 512, 4096, 16384, 65536]
    for scattered, n in [(s, n) for s in (False, True) for n in sizes]:
        suffix = "_scattered" if scattered else ""
        if scattered:  # one token of each of n requests
            loc = (torch.randperm(slots - 1, generator=gen, device=dev)[:n] + 1).to(torch.int64)
        else:  # a prefill: consecutive slots of consecutive pages
            pages_needed = (n + PAGE_SIZE - 1) // PAGE_SIZE
            first = 1 + int(torch.randint(0, slots // PAGE_SIZE - pages_needed - 1, (1,), generator=gen, device=dev))
            loc = torch.arange(first * PAGE_SIZE, first * PAGE_SIZE + n, device=dev, dtype=torch.int64)
        src_rows = [torch.full((n, HEADS, HEAD_DIM), 0.5 + i, dtype=torch.bfloat16, device=dev) for i in range(2 * LAYERS)]

        def write():
            for v, r in zip(views, src_rows):
                v[loc] = r

        def read():
            for v in views:
                v[loc]

        nbytes = 2 * n * ENTRY
        rows.append(("write" + suffix, n, nbytes, time_us(write, reps_for(nbytes))))
        rows.append(("read" + suffix, n, nbytes, time_us(read, reps_for(nbytes))))
        del src_rows
        torch.cuda.empty_cache()

    # The write door for one layer: two index_put_ calls (K and V of the middle layer).
    layer = LAYERS // 2
    for scattered, n in [(s, n) for s in (False, True) for n in [1, 16, 64, 256]]:
        if scattered:
            loc = (torch.randperm(slots - 1, generator=gen, device=dev)[:n] + 1).to(torch.int64)
        else:
            loc = torch.arange(PAGE_SIZE, PAGE_SIZE + n, device=dev, dtype=torch.int64)
        k = torch.full((n, HEADS, HEAD_DIM), 0.5, dtype=torch.bfloat16, device=dev)
        v = torch.full((n, HEADS, HEAD_DIM), 1.5, dtype=torch.bfloat16, device=dev)
        k_view, v_view = views[2 * layer], views[2 * layer + 1]

        def write_layer():
            k_view[loc] = k
            v_view[loc] = v

        name = "write_layer_scattered" if scattered else "write_layer"
        rows.append((name, n, 2 * n * 2 * ROW, time_us(write_layer, 1000)))

    pages = slots * ENTRY // PAGE_BYTES
    env = pool_u8.view(pages, PAGE_BYTES)
    for m in ([1, 8, 16, 64] if quick else [1, 8, 16, 32, 128, 512, 2048]):
        picked = torch.randperm(pages - 1, generator=gen, device=dev)[: 2 * m] + 1
        src, dst = picked[:m].clone(), picked[m:].clone()

        def move():
            env[dst] = env[src]

        nbytes = 2 * m * PAGE_BYTES
        rows.append(("move", m, nbytes, time_us(move, reps_for(nbytes))))

    v2p = torch.randperm(pages + 1, generator=gen, device=dev).to(torch.int64)
    v2p[0] = 0
    for n in [64, 4096, 65536, 1 << 20]:
        t = torch.randint(0, pages * PAGE_SIZE, (n,), generator=gen, device=dev, dtype=torch.int64)

        def translate():
            (v2p[t // PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE).clamp_(min=0)

        nbytes = n * 8 * 3
        rows.append(("translate", n, nbytes, time_us(translate, reps_for(nbytes))))

    ceiling = rows[0][2] / (rows[0][3] * 1e-6)
    with open(out_path, "w") as f:
        for op, n, nbytes, us in rows:
            gbps = nbytes / (us * 1e-6) / 1e9
            print(f"{op:22s} {n:9d} {nbytes:14d} {us:12.2f} {gbps:10.1f} {100 * gbps * 1e9 / ceiling:7.1f}%", flush=True)
            f.write(json.dumps({"impl": "torch", "op": op, "n": n, "bytes": nbytes, "us": us,
                                "ceiling_bytes_per_s": ceiling}) + "\n")


if __name__ == "__main__":
    main()
