"""The explorer under ipywidgets 7.7, the version Google Colab ships.

``make install`` puts ipywidgets 7.7.1 (and ``ipython_genutils``, which it imports) into ``.venv-ipywidgets7`` with
``pip install --target --no-deps``; this test starts a real Jupyter kernel with that folder first on
``PYTHONPATH``, so ``import ipywidgets`` finds 7.7.1 while everything else is the project's environment. In the
kernel it builds the explorer, displays it and moves every control, as a student on Colab would. It checks the
widget messages a browser would receive (protocol 2.x of ipywidgets 7, a new PNG with each change), and that
nothing went to stderr and no warning came from ``mha_lib``.

(ipywidgets 7.7.1 itself warns that ``ipykernel.comm.Comm`` is deprecated under this environment's ipykernel 7;
Colab's older ipykernel does not, and Python hides those warnings in a notebook anyway. They are not ours.)
"""

from __future__ import annotations

from pathlib import Path

from conftest import IPYWIDGETS7_DIR as ENV_DIR
from conftest import run_in_kernel

KERNEL_CODE = r"""
import json, os, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ipywidgets
    from mha_lib.display.widgets import BUILTIN_SENTENCES, STAGES, WIDTHS, attention_explorer, head_choices

    explorer = attention_explorer()
    display(explorer)
    c, pictures, captions = explorer.controls, set(), []

    def look():
        picture = bytes(explorer.image.value)
        assert picture.startswith(b"\x89PNG"), picture[:8]
        pictures.add(picture)
        captions.append(explorer.caption.value)

    for d_model in WIDTHS:
        c["d_model"].value = d_model
        assert [v for _, v in c["num_heads"].options] == head_choices(d_model)
        for heads in head_choices(d_model):
            c["num_heads"].value = heads
            look()
            assert f'data-heads="{heads}"' in explorer.caption.value
    for name, values in [("sentence", list(BUILTIN_SENTENCES.values())), ("stage", STAGES),
                         ("causal", [False, True]), ("scaled", [False, True]), ("temperature", [0.1, 10.0, 1.0])]:
        for value in values:
            c[name].value = value
            look()
print(json.dumps({
    "version": ipywidgets.__version__, "module": ipywidgets.__file__, "redraws": explorer.redraw_count,
    "pictures": len(pictures), "changes": len(captions),
    "ours": [f"{w.category.__name__}: {w.message}" for w in caught if "mha_lib" in w.filename],
    "theirs": sorted({f"{w.category.__name__} in {os.path.basename(w.filename)}" for w in caught
                      if "mha_lib" not in w.filename}),
}))
"""


def test_explorer_works_with_ipywidgets_7(ipywidgets7_kernel):
    messages, result = run_in_kernel(ipywidgets7_kernel, KERNEL_CODE)

    assert result["version"].startswith("7.7."), result
    assert Path(result["module"]).resolve().is_relative_to(ENV_DIR.resolve())
    assert result["ours"] == [], result["ours"]
    assert result["redraws"] == 1 + result["changes"] + 3  # the first picture; 3 width changes redraw too
    assert result["pictures"] > 30

    # what the browser would receive: ipywidgets 7's protocol, and a PNG (a binary buffer) with each change
    opened = [m for m in messages if m["msg_type"] == "comm_open"]
    assert opened and {m["metadata"]["version"].split(".")[0] for m in opened} == {"2"}
    updates = [m for m in messages if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"]
    images = [m for m in updates if m.get("buffers") and m["content"]["data"].get("buffer_paths") == [["value"]]]
    # (a redraw whose picture equals the previous one sends nothing: traitlets only report changes)
    assert result["pictures"] <= len(images) <= result["redraws"], (len(images), result)
    print(f"ipywidgets {result['version']}: {result['redraws']} redraws, {len(images)} PNG updates sent; "
          f"warnings not from mha_lib: {result['theirs']}")
