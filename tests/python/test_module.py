"""The surface of the Python module kvtwin (docs/python.md): configurations and the catalogue, the
model (apply as a dict or keywords, answers, refusals that change nothing, tables, verify, the
bytes without a copy), translation over numpy arrays, the byte law, traces, replay, fuzz and check.

Where a C++ path exists twice (the CLI and the binding), the test compares the two outputs: the
binding must hand its arguments through and its answers back unchanged.
"""

import json
import os
import subprocess

import numpy as np
import pytest

import kvtwin

SOURCE = os.environ.get("KVTWIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS_EXAMPLE = os.path.join(SOURCE, "traces", "regress", "docs_example_free_compacts_and_double_free.jsonl")
# docs/traces.md's example pool: 16 pages of 4 tokens, page 0 below the floor, pages 1..15 usable.
CONFIG = {"model": "llama-3.1-8b", "tp": 8, "page_size": 4, "total_bytes": 1 << 20, "seed": 3}
ENTRY_BYTES = 16384  # 32 layers of K and V rows of 256 bytes (one head of 128, bf16)
ROW_BYTES = 256


def cli(*args):
    return subprocess.run([kvtwin.cli_path(), *args], capture_output=True, text=True, check=False)


# ---------------------------------------------------------------- configurations, catalogue, layout


def test_the_catalogue_and_its_shapes():
    names = [shape["name"] for shape in kvtwin.catalogue()]
    assert "llama-3.1-8b" in names and "deepseek-v3" in names
    assert kvtwin.model_shape("Llama-3.1-8B") == next(s for s in kvtwin.catalogue() if s["name"] == "llama-3.1-8b")
    listed = json.loads(cli("layout", "--list", "--json").stdout)["models"]
    assert kvtwin.catalogue() == listed
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.model_shape("llama-9")
    assert "llama-3.1-8b" in str(e.value)  # the message lists the catalogue


def test_pool_config_completes_and_checks_a_configuration():
    config = kvtwin.pool_config(CONFIG)
    assert config["model"] == kvtwin.model_shape("llama-3.1-8b")
    assert (config["mode"], config["tables_only"], config["tp"]) == ("eager", False, 8)
    assert kvtwin.pool_config(**CONFIG) == config
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.pool_config(CONFIG, total_bytes=1000)  # smaller than the reserved floor
    assert e.value.kind == "sizing" and "increase total_bytes" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.pool_config(CONFIG, page_sise=4)
    assert e.value.kind == "malformed" and "unknown field 'page_sise'" in str(e.value)


@pytest.mark.parametrize("model,tp,page_size", [("llama-3.1-8b", 1, 64), ("gpt-oss-20b", 2, 16),
                                                ("deepseek-v2-lite", 1, 1)])
def test_layout_is_what_kvtwin_layout_json_prints(model, tp, page_size):
    printed = cli("layout", "--model", model, "--tp", str(tp), "--page-size", str(page_size),
                  "--total-bytes", "1GiB", "--json")
    assert printed.returncode == 0, printed.stderr
    assert kvtwin.layout(model, tp=tp, page_size=page_size, total_bytes=1 << 30) == json.loads(printed.stdout)


def test_layout_takes_a_shape_dict_and_refuses_what_the_cli_refuses():
    shape = kvtwin.model_shape("qwen3-8b")
    assert kvtwin.layout(shape)["model"] == "qwen3-8b"
    assert kvtwin.layout("qwen3-8b", dtype="fp8")["dtype"] == "fp8"
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.layout("qwen3-8b", dtype="int4")
    assert str(e.value).startswith("dtype: ")
    with pytest.raises(kvtwin.Error):
        kvtwin.layout("qwen3-8b", page_size=0)


# ---------------------------------------------------------------- the model


def test_apply_takes_a_dict_a_name_with_fields_or_keywords_alone():
    a, b, c = kvtwin.Model(CONFIG), kvtwin.Model(CONFIG), kvtwin.Model(CONFIG)
    assert a.apply({"op": "alloc", "tokens": 8}) == {"pages": [1, 2]}
    assert b.apply("alloc", tokens=8) == {"pages": [1, 2]}
    assert c.apply(op="alloc", tokens=8) == {"pages": [1, 2]}
    assert a.digest() == b.digest() == c.digest()


def test_the_docs_example_answers_as_its_trace_expects():
    trace = kvtwin.read_trace(DOCS_EXAMPLE)
    model = kvtwin.Model(trace["header"]["config"])
    for op in trace["ops"]:
        expect = op["expect"]
        answer = model.try_apply(op)
        if "error" in expect:
            assert answer["error"] == expect["error"]
        else:
            assert answer == expect, op


EVERY_KIND_OF_ANSWER = [
    {"op": "alloc", "tokens": 8},                                   # pages
    {"op": "alloc", "tokens": 4096},                                # no_room
    {"op": "alloc_many", "tokens": [4, 4]},                         # pages, one list a request
    {"op": "free", "pages": [1]},                                   # moves
    {"op": "translate", "ids": [8, 9, -1]},                         # ids
    {"op": "batch", "batch": 0, "tokens": [8, 9, 12]},              # ok
    {"op": "rebind", "batch": 0},
    {"op": "split", "batch": 0, "at": 1, "into": [1, 2]},           # marks
    {"op": "write", "batch": 0, "layer": 0, "write_number": 1},
    {"op": "read", "layer": 0, "part": "v", "ids": [4, 5]},         # bytes and digest
    {"op": "page_table", "req_to_token": [[8, 9, 10, 11, 12, 13, 14, 15]], "req": [0], "seq_len": [6],
     "prior": [[0, 0, 0]]},                                         # table
    {"op": "capture", "graph": 0, "max_batch": 2, "max_pages": 4, "layer": 1, "query_heads": 2},
    {"op": "replay", "graph": 0, "requests": [[8, 9, 10, 11, 12]], "write_number": 2, "query_seed": 5},  # decode
    {"op": "remap_indices", "kv_indptr": [0, 2], "kv_indices": [8, 9, 77], "bs": 1},
    {"op": "alloc_many", "tokens": []},                             # an error
    {"op": "checkpoint"},
]


def without_data(answer):
    """An answer as a trace stores it: the bytes themselves left out, their size and digest kept."""
    out = {k: v for k, v in answer.items() if k != "data"}
    if "attention" in out:
        out["attention"] = without_data(out["attention"])
    return out


def test_every_kind_of_answer_is_in_trace_syntax(tmp_path):
    # The answers are built as Python objects directly; written as expectations and read back
    # through core/'s result_from_json and result_to_json, they must come back unchanged.
    model = kvtwin.Model(CONFIG)
    ops = []
    for op in EVERY_KIND_OF_ANSWER:
        answer = model.try_apply(op)
        if "data" in answer:
            assert kvtwin.bytes_result(answer["data"]) == without_data(answer)
        ops.append(dict(op, expect=without_data(answer)))
    assert {next(iter(op["expect"])) for op in ops} == {"pages", "no_room", "moves", "ids", "ok", "marks", "bytes",
                                                          "table", "loc", "error"}
    path = tmp_path / "answers.jsonl"
    kvtwin.write_trace(path, {"header": {"config": CONFIG}, "ops": ops})
    read_back = kvtwin.read_trace(path)["ops"]
    for mine, theirs in zip(ops, read_back):
        if "error" in mine["expect"]:
            assert theirs["expect"]["error"] == mine["expect"]["error"]
        else:
            assert theirs["expect"] == mine["expect"], mine["op"]
    assert kvtwin.replay(path)["passed"]


def test_a_refusal_raises_with_the_models_message_and_changes_nothing():
    model = kvtwin.Model(CONFIG)
    model.apply("alloc", tokens=12)
    model.apply("batch", batch=0, tokens=[4, 5])
    refusals = [
        ({"op": "free", "pages": [7]}, "double_free"),   # reason not_allocated
        ({"op": "alloc", "tokens": 5}, "invalid_argument"),
        ({"op": "write", "batch": 0, "layer": 0, "write_number": 1}, "unmarked_loc"),  # not rebound yet
        ({"op": "read", "layer": 99, "part": "k", "ids": [4]}, "out_of_range"),
        ({"op": "build", "config": dict(CONFIG, total_bytes=1000)}, "sizing"),
    ]
    for op, kind in refusals:
        digest, tables, pool = model.digest(), model.tables(), bytes(model.raw_bytes())
        with pytest.raises(kvtwin.Error) as e:
            model.apply(op)
        assert e.value.kind == kind, (op, e.value)
        refusal = {"error": kind, "message": str(e.value)}
        if e.value.reason:  # a reason code where the kind has several causes (docs/traces.md)
            refusal["reason"] = e.value.reason
        assert model.try_apply(op) == refusal
        assert (model.digest(), model.tables(), bytes(model.raw_bytes())) == (digest, tables, pool), op
    model.verify()


def test_an_error_message_is_the_one_kvtwin_replay_reports():
    model = kvtwin.Model(CONFIG)
    with pytest.raises(kvtwin.Error) as e:
        model.apply("free", pages=[3])
    trace = {"header": {"config": CONFIG}, "ops": [{"op": "free", "pages": [3], "expect": {"ok": True}}]}
    report = kvtwin.replay(trace)
    assert not report["passed"] and report["failure"]["line"] == 2
    assert str(e.value) in report["failure"]["message"]


def test_malformed_operations_and_python_values_are_refused_clearly():
    model = kvtwin.Model(CONFIG)
    with pytest.raises(kvtwin.Error) as e:
        model.apply("allocate", tokens=8)
    assert e.value.kind == "malformed" and "unknown operation 'allocate'; known: build, alloc" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.apply("alloc", tokens=-8)
    assert "field 'tokens' = -8 must not be negative" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.apply("alloc", tokens=2 ** 70)
    assert "too big for 64 bits" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.apply("alloc")
    assert "missing field 'tokens'" in str(e.value)
    with pytest.raises(TypeError):
        model.apply("free", pages={1, 2})  # a set has no order, so no trace syntax
    with pytest.raises(TypeError):
        model.apply(["alloc"])
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.Model().apply("alloc", tokens=4)
    assert "build" in str(e.value)


def test_numpy_values_and_arrays_are_accepted_as_fields():
    model = kvtwin.Model(CONFIG)
    assert model.apply("alloc", tokens=np.int64(8)) == {"pages": [1, 2]}
    assert model.apply("translate", ids=np.array([4, 5, -1], dtype=np.int32)) == {"ids": [4, 5, 0]}


def test_tables_start_as_spec_section_4_says():
    model = kvtwin.Model(CONFIG)
    (side,) = model.tables()["sides"]
    assert side["name"] == "full"
    assert side["v2p"] == [0] + [-1] * 16 and side["p2v"] == [0] + [-1] * 16
    assert side["free_queue"] == list(range(1, 16)) and side["watermark"] == 1
    assert side["holes"] == [] and side["allocated_pages"] == 0
    assert model.config == kvtwin.pool_config(CONFIG) and model.built
    assert not kvtwin.Model().built and kvtwin.Model().config is None
    with pytest.raises(kvtwin.Error):
        kvtwin.Model().tables()


def test_raw_bytes_is_a_read_only_view_without_a_copy():
    model = kvtwin.Model(CONFIG)
    model.apply("alloc", tokens=8)
    view = model.raw_bytes()
    assert view.dtype == np.uint8 and view.shape == (1 << 20,) and not view.flags.writeable
    assert not view.flags.owndata and not view.any()
    with pytest.raises(ValueError):
        view[0] = 1
    # A write after the view was taken shows through it: the view is the pool itself.
    model.apply("write", loc=[5], physical=True, tokens=[5], layer=0, write_number=1)
    row = model.apply("read", layer=0, part="k", ids=[5])
    assert row["bytes"] == ROW_BYTES and row["data"].any()
    assert np.array_equal(view[5 * ENTRY_BYTES:5 * ENTRY_BYTES + ROW_BYTES], row["data"])
    assert kvtwin.bytes_result(row["data"]) == {"bytes": row["bytes"], "digest": row["digest"]}
    assert np.array_equal(model.raw_bytes(5 * ENTRY_BYTES, ROW_BYTES), row["data"])
    assert "page 1" in model.describe_byte(5 * ENTRY_BYTES)
    # A rebuild gives a new pool; the old view still reads the old one's bytes.
    model.apply("build", config=CONFIG)
    assert not model.raw_bytes().any() and view[5 * ENTRY_BYTES:5 * ENTRY_BYTES + ROW_BYTES].any()
    with pytest.raises(kvtwin.Error) as e:
        model.raw_bytes(1 << 20, 1)
    assert e.value.kind == "out_of_range"
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.Model(CONFIG, tables_only=True).raw_bytes()
    assert e.value.kind == "unsupported"


def test_verify_names_nothing_on_a_sound_model():
    model = kvtwin.Model(CONFIG)
    model.apply("alloc", tokens=16)
    model.apply("free", pages=[2])
    assert model.verify() is None


# ---------------------------------------------------------------- translation over numpy arrays


def spec_translate(v2p, page_size, ids):
    """SPEC.md section 5, written out: the reference for the array calls below."""
    out = []
    for t in np.asarray(ids).reshape(-1).tolist():
        p = t // page_size
        out.append(0 if t < 0 or p >= len(v2p) else max(v2p[p] * page_size + t % page_size, 0))
    return np.array(out, dtype=np.int64).reshape(np.asarray(ids).shape)


@pytest.fixture
def translating():
    model = kvtwin.Model(CONFIG)
    model.apply("alloc", tokens=16)   # virtual pages 1..4 at physical 1..4
    model.apply("free", pages=[1])    # page 4 moves to 1
    v2p = model.tables()["sides"][0]["v2p"]
    return model, v2p


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_translate_one_and_two_dimensional_arrays(translating, dtype):
    model, v2p = translating
    ids = np.array([16, 17, 8, -1, 3, 1000, 12], dtype=dtype)
    out = model.translate(ids)
    assert out.dtype == np.int64 and np.array_equal(out, spec_translate(v2p, 4, ids))
    assert out.tolist() == model.apply("translate", ids=ids.tolist())["ids"]
    grid = np.arange(-2, 22, dtype=dtype).reshape(4, 6)
    assert np.array_equal(model.translate(grid), spec_translate(v2p, 4, grid))


def test_translate_strided_inputs_in_place_and_into_strided_outputs(translating):
    model, v2p = translating
    base = np.arange(0, 40, dtype=np.int64)
    strided = base[::3]
    assert np.array_equal(model.translate(strided), spec_translate(v2p, 4, strided))
    rows = np.arange(0, 48, dtype=np.int64).reshape(6, 8)[:, :5]  # row stride 8, 5 columns
    assert np.array_equal(model.translate(rows), spec_translate(v2p, 4, rows))
    reversed_ids = base[::-1]  # a layout the op cannot state: read by value
    assert np.array_equal(model.translate(reversed_ids), spec_translate(v2p, 4, reversed_ids))
    # In place: out is the ids array itself.
    in_place = np.array([16, 17, 5, -7], dtype=np.int64)
    expected = spec_translate(v2p, 4, in_place)
    assert model.translate(in_place, out=in_place) is in_place and np.array_equal(in_place, expected)
    # A strided slice of a bigger buffer; the elements between stay untouched.
    buffer = np.full(12, 99, dtype=np.int64)
    ids = np.array([16, 12, 0, 9], dtype=np.int32)
    model.translate(ids, out=buffer[::3])
    assert buffer[::3].tolist() == spec_translate(v2p, 4, ids).tolist()
    assert all(buffer[i] == 99 for i in range(12) if i % 3)


def test_translate_out_width_zero_fills_a_capture_stable_buffer(translating):
    model, v2p = translating
    stable = np.array([16, 17, 8, 777, 777, 777], dtype=np.int64)  # stale ids past the batch
    model.translate(stable[:3], out=stable, out_width=6)
    assert stable.tolist() == spec_translate(v2p, 4, [16, 17, 8]).tolist() + [0, 0, 0]
    fresh = model.translate(np.array([16], dtype=np.int32), out_width=4)
    assert fresh.tolist() == [spec_translate(v2p, 4, [16])[0], 0, 0, 0]


def test_translate_refuses_what_spec_section_5_refuses(translating):
    model, _ = translating
    ids = np.array([16, 17], dtype=np.int64)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(ids, out=np.zeros(2, dtype=np.int32))
    assert "int64 output" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(ids, out=np.zeros(3, dtype=np.int64))
    assert "shape" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(np.array([1.5, 2.0]))
    assert "int32 or int64" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(np.zeros((2, 2, 2), dtype=np.int64))
    assert "dimensions" in str(e.value)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(np.array([16, 2 ** 40], dtype=np.int64), out_width=1)
    assert "out_width" in str(e.value)
    overlapping = np.arange(6, dtype=np.int64)
    with pytest.raises(kvtwin.Error) as e:
        model.translate(overlapping[:3], out=overlapping[1:4])
    assert "overlaps" in str(e.value)


# ---------------------------------------------------------------- traces, replay


def test_reading_and_writing_a_trace_gives_back_the_canonical_bytes(tmp_path):
    trace = kvtwin.read_trace(DOCS_EXAMPLE)
    assert trace["header"]["seed"] == 7 and trace["lines"][0] == 2
    assert trace["ops"][0] == {"op": "alloc", "tokens": 8, "expect": {"pages": [1, 2]}}
    path = tmp_path / "copy.jsonl"
    kvtwin.write_trace(path, trace)
    again = kvtwin.read_trace(path)
    assert again == trace
    written = path.read_bytes()
    rewritten = tmp_path / "twice.jsonl"
    kvtwin.write_trace(rewritten, again)
    assert rewritten.read_bytes() == written
    with open(DOCS_EXAMPLE, "rb") as original:
        # Every line of the example, and the end line that tells a whole trace from a cut one.
        assert written.count(b"\n") == len([line for line in original.read().splitlines() if line.strip()]) + 1


def test_writing_a_trace_checks_every_line_as_the_reader_does(tmp_path):
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.write_trace(tmp_path / "bad.jsonl", {"header": {"config": CONFIG},
                                                    "ops": [{"op": "alloc", "tokens": 4}, {"op": "alloc"}]})
    assert str(e.value).startswith("ops[1]: missing field 'tokens'")
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.read_trace(tmp_path / "missing.jsonl")
    assert e.value.kind == "io"
    bad = os.path.join(SOURCE, "tests", "traces", "data", "bad", "unknown_op.jsonl")
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.read_trace(bad)
    assert e.value.kind == "malformed" and str(e.value).startswith(bad + ":")


def test_replay_reports_as_kvtwin_replay_json_does(tmp_path):
    report = kvtwin.replay(DOCS_EXAMPLE)
    written = tmp_path / "report.json"
    done = cli("replay", DOCS_EXAMPLE, "--quiet", "--json", str(written))
    assert done.returncode == 0, done.stdout + done.stderr
    assert report == json.loads(written.read_text())
    assert report["passed"] and report["ops"] == 10


def test_replay_stops_at_the_first_divergence_with_its_line(tmp_path):
    trace = kvtwin.read_trace(DOCS_EXAMPLE)
    trace["ops"][5]["expect"] = {"moves": [["full", 2, 1]]}  # the model moves 3 -> 1
    report = kvtwin.replay(trace)
    assert not report["passed"]
    assert (report["failure"]["line"], report["failure"]["check"]) == (7, "expect")
    assert report["ops"] == 7  # the header's build, and the lines up to the failing one
    path = tmp_path / "diverged.jsonl"
    kvtwin.write_trace(path, trace)
    from_file = kvtwin.replay(path)
    assert from_file["failure"] == report["failure"]
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.replay(path, backend="tpu")
    assert "tpu" in str(e.value)


# ---------------------------------------------------------------- fuzz, check


def test_fuzz_passes_on_the_model_and_reports_as_the_cli_does(tmp_path):
    report = kvtwin.fuzz(seed=5, cases=3, ops=60, config="gpt-oss-20b/ps4/lazy")
    assert report["passed"] and report["cases"] == 3 and report["ops"] == 3 * (60 + 1)  # a build a case
    written = tmp_path / "fuzz.json"
    done = cli("fuzz", "--seed", "5", "--cases", "3", "--ops", "60", "--config", "gpt-oss-20b/ps4/lazy", "--quiet",
               "--json", str(written))
    assert done.returncode == 0, done.stdout
    from_cli = json.loads(written.read_text())
    assert (report["passed"], report["seed"], report["backend"]) == (from_cli["passed"], from_cli["seed"], from_cli["backend"])
    assert (report["cases"], report["ops"]) == (from_cli["cases"], from_cli["ops"])


def test_fuzz_finds_a_planted_fault_and_its_shrunk_trace_reproduces_it(tmp_path):
    fault = "model_pairing_out_of_order"  # SPEC.md section 10, bug 11, planted in the model (which then runs alone)
    assert fault in kvtwin.planted_faults()
    report = kvtwin.fuzz(seed=1, cases=20, ops=60, config="llama-3.1-8b/ps4", fault=fault, out=tmp_path)
    assert not report["passed"], f"the planted fault {fault} went unnoticed"
    failure = report["failure"]
    assert failure["ops_after"] <= failure["ops_before"] and os.path.exists(failure["trace"])
    assert failure["reproduce"].startswith("kvtwin fuzz --seed 1 --case ")
    assert not kvtwin.replay(failure["trace"], fault=fault)["passed"]
    assert not kvtwin.replay(failure["shrunk_trace"], fault=fault)["passed"]
    assert kvtwin.replay(failure["shrunk_trace"])["passed"]  # the model alone agrees with the trace


def test_named_configurations():
    assert "llama-3.1-8b/ps4/lazy" in kvtwin.catalogue_config_names()
    config = kvtwin.named_config("gpt-oss-20b/ps4/lazy")
    assert (config["page_size"], config["mode"]) == (4, "lazy")
    assert kvtwin.Model(config).built
    with pytest.raises(kvtwin.Error):
        kvtwin.named_config("gpt-oss-20b/ps0")


def test_check_runs_the_gate_and_returns_its_report(tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    report = kvtwin.check(cases=1, random_cases=2, ops=20, jobs=1, samples_dir=empty, traces_dir=empty,
                          out=tmp_path / "failures")
    assert report["passed"] and report["exit_code"] == 0 and "kvtwin check: PASS" in report["output"]
    parts = {item["part"] for item in report["items"]}
    assert parts == {"properties", "regress", "requests"}
    assert all(item["state"] != "failed" for item in report["items"])
    with pytest.raises(kvtwin.Error) as e:
        kvtwin.check(backend="tpu")
    assert str(e.value) == "unknown backend 'tpu'; use auto, model, gpu or both"
