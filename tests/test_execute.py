"""tools/execute.py: what `make execute` keeps of a run's outputs."""

import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from execute import drop_progress_bars  # noqa: E402  (tools/execute.py)

WIDGET = "application/vnd.jupyter.widget-view+json"


def widget_output(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={WIDGET: {"model_id": "x"}, "text/plain": text})


def test_progress_bars_go_and_everything_else_stays():
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [
        widget_output("epoch 1/40:   0%|          | 0/163 [00:00<?, ?it/s]"),
        nbformat.v4.new_output("stream", name="stdout", text="epoch  1.00  train loss 6.738\n"),
        widget_output("IntSlider(value=3)"),  # a widget demo: the page hides it and shows a static figure
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("text"), cell])
    assert drop_progress_bars(nb) == 1
    assert [o.output_type for o in cell.outputs] == ["stream", "display_data"]
    assert cell.outputs[1].data["text/plain"] == "IntSlider(value=3)"
