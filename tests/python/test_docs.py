"""tests/python/test_docs.py — the Python code of the documentation runs:
every ```python block of docs/tutorial.md, docs/python.md and README.md, in order, as
one script per page (in a fresh interpreter, in a temporary directory),
which must exit 0. The pages check their own results against NumPy."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("EIN_SRCDIR") or os.path.dirname(os.path.dirname(HERE))


def blocks(page):
    with open(os.path.join(SRC, page if page == "README.md" else os.path.join("docs", page))) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("page", ["tutorial.md", "python.md", "README.md"])
def test_page_runs(page, tmp_path):
    if not os.path.exists(os.path.join(SRC, page if page == "README.md" else
                                       os.path.join("docs", page))):
        pytest.skip("no docs/%s under %s" % (page, SRC))
    code = blocks(page)
    assert code, "docs/%s has no python block" % page
    script = tmp_path / "page.py"
    script.write_text("\n".join(code))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, "docs/%s failed:\n%s\n%s" % (page, r.stdout[-3000:],
                                                          r.stderr[-3000:])
