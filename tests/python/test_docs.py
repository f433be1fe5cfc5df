"""The documentation runs as written: every ```python block of docs/python.md, and the
Python program of the README's "Use it from Python" section, executed in a fresh namespace."""
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


DOC_BLOCKS = re.findall(r"```python\n(.*?)```", read("docs/python.md"), re.S)


def readme_program():
    section = read("README.md").split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    return re.search(r"python3 - <<'PY'\n(.*?)\nPY\n", section, re.S).group(1)


@pytest.mark.parametrize("block", range(len(DOC_BLOCKS)))
def test_docs_python_blocks_run(block):
    exec(compile(DOC_BLOCKS[block], f"docs/python.md block {block}", "exec"), {})


def test_readme_python_section_runs():
    exec(compile(readme_program(), "README.md: Use it from Python", "exec"), {})


def test_there_is_something_to_run():
    assert len(DOC_BLOCKS) >= 4
