"""docs/python.md's examples run as they are written: every ```python block of the page, in order, in
one namespace (a later block may use what an earlier one defined), and then every test_* function
the blocks defined. A page whose examples no longer work fails here, naming the block.
"""

import os
import re

import pytest

SOURCE = os.environ.get("KVTWIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join(SOURCE, "docs", "python.md")


def python_blocks():
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((line, match.group(1)))
    return blocks


def test_the_page_has_an_oracle_and_a_recording_example():
    code = "".join(block for _, block in python_blocks())
    assert "def test_my_allocator_answers_as_the_model_does" in code
    assert "kvtwin.Recorder(" in code and "recorder.wrap(" in code


def test_every_example_on_the_page_runs(capsys):
    namespace = {"__name__": "docs_python_md"}
    blocks = python_blocks()
    assert len(blocks) >= 4
    for line, block in blocks:
        try:
            exec(compile(block, f"{PAGE}:{line}", "exec"), namespace)
        except Exception as e:
            pytest.fail(f"docs/python.md, the block at line {line}: {type(e).__name__}: {e}")
    tests = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
    assert tests, "the oracle example defines a test"
    for test in tests:
        test()
