"""tools/execute.py: what `make execute` keeps of a run's outputs."""

import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from execute import WIDGET_STATE, drop_progress_bars, drop_unused_widget_state  # noqa: E402  (tools/execute.py)

WIDGET = "application/vnd.jupyter.widget-view+json"
CHAPTERS = sorted((Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb"))


def widget_output(text: str, model_id: str = "x") -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={WIDGET: {"model_id": model_id}, "text/plain": text})


def model(name: str, **state) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "state": state}


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



def test_the_state_of_widgets_no_output_shows_goes():
    bar = widget_output("epoch 1/40:   0%|          | 0/163 [00:00<?, ?it/s]", "bar")
    slider = widget_output("IntSlider(value=3)", "slider")
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [bar, slider]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {WIDGET_STATE: {"version_major": 2, "version_minor": 0, "state": {
        "bar": model("HBoxModel", children=["IPY_MODEL_label", "IPY_MODEL_progress"], layout="IPY_MODEL_bar_layout"),
        "label": model("HTMLModel", value="epoch 1/40"), "progress": model("FloatProgressModel", max=163.0),
        "bar_layout": model("LayoutModel"),
        "slider": model("IntSliderModel", value=3, layout="IPY_MODEL_slider_layout"),
        "slider_layout": model("LayoutModel"),
    }}}
    assert drop_progress_bars(nb) == 1
    assert drop_unused_widget_state(nb) == 4  # the bar and the three models it names
    assert set(nb.metadata["widgets"][WIDGET_STATE]["state"]) == {"slider", "slider_layout"}
    cell.outputs = []  # no widget shown at all: the metadata entry goes
    assert drop_unused_widget_state(nb) == 2 and "widgets" not in nb.metadata


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_keeps_the_state_of_widgets_it_does_not_show(path):
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert drop_unused_widget_state(nb) == 0, (
        f"{path.name} keeps the saved state of widgets that no output shows (the page would carry it): "
        f"re-run it with `make execute NB={path.relative_to(path.parents[1])}`, which drops it")
