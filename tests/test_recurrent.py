"""Tests for transformer_book.recurrent (chapter 1): RNN, LSTM and GRU cells, the sequence layer, helpers."""

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.recurrent import (
    GRUCell,
    LSTMCell,
    RecurrentLayer,
    RNNCell,
    input_gradient_norms,
    load_torch_weights,
    make_recall_batch,
    make_shifted_recall_batch,
    with_spectral_radius,
)

CELLS = {
    "rnn": (RNNCell, nn.RNN, nn.RNNCell),
    "lstm": (LSTMCell, nn.LSTM, nn.LSTMCell),
    "gru": (GRUCell, nn.GRU, nn.GRUCell),
}
ONE_STATE = ("rnn", "gru")  # cells whose state is h alone; the LSTM carries (h, c)


def _pair(kind: str, d_in: int, d_hid: int, seed: int = 0):
    """Our layer and PyTorch's, float64, with the same weights."""
    ours_cls, torch_cls, _ = CELLS[kind]
    torch.manual_seed(seed)
    reference = torch_cls(d_in, d_hid, batch_first=True).double()
    ours = RecurrentLayer(ours_cls(d_in, d_hid)).double()
    load_torch_weights(ours.cell, reference)
    return ours, reference


@pytest.mark.parametrize("kind", CELLS)
def test_output_shapes(kind):
    layer = RecurrentLayer(CELLS[kind][0](5, 7))
    outputs, state = layer(torch.randn(3, 4, 5))
    assert outputs.shape == (3, 4, 7)
    final_h = state if kind in ONE_STATE else state[0]
    assert final_h.shape == (3, 7)
    assert torch.equal(outputs[:, -1], final_h), "the last output is the final hidden state"


@pytest.mark.parametrize("kind", CELLS)
def test_matches_torch_float64(kind):
    ours, reference = _pair(kind, 4, 6)
    x = torch.randn(2, 9, 4, dtype=torch.float64)
    outputs, state = ours(x)
    ref_outputs, ref_state = reference(x)
    assert_close(outputs, ref_outputs)
    if kind in ONE_STATE:
        assert_close(state, ref_state[0])
    else:
        assert_close(state[0], ref_state[0][0])
        assert_close(state[1], ref_state[1][0])


@pytest.mark.parametrize("kind", CELLS)
def test_matches_torch_with_initial_state(kind):
    ours, reference = _pair(kind, 3, 5, seed=1)
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    h0 = torch.randn(2, 5, dtype=torch.float64)
    if kind in ONE_STATE:
        outputs, _ = ours(x, h0)
        ref_outputs, _ = reference(x, h0.unsqueeze(0))
    else:
        c0 = torch.randn(2, 5, dtype=torch.float64)
        outputs, _ = ours(x, (h0, c0))
        ref_outputs, _ = reference(x, (h0.unsqueeze(0), c0.unsqueeze(0)))
    assert_close(outputs, ref_outputs)


@pytest.mark.parametrize("kind", CELLS)
def test_single_step_matches_torch_cell(kind):
    ours_cls, _, torch_cell_cls = CELLS[kind]
    torch.manual_seed(2)
    reference = torch_cell_cls(3, 4).double()
    cell = ours_cls(3, 4).double()
    load_torch_weights(cell, reference)
    x_t = torch.randn(5, 3, dtype=torch.float64)
    state = cell.initial_state(5, x_t)
    if kind in ONE_STATE:
        state = torch.randn(5, 4, dtype=torch.float64)  # a nonzero state exercises every weight
        assert_close(cell(x_t, state), reference(x_t, state))
    else:
        h, c = cell(x_t, state)
        ref_h, ref_c = reference(x_t, state)
        assert_close(h, ref_h)
        assert_close(c, ref_c)


@pytest.mark.parametrize("kind", CELLS)
def test_gradient_reaches_every_input_step(kind):
    torch.manual_seed(3)
    layer = RecurrentLayer(CELLS[kind][0](3, 4)).double()
    x = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    outputs, _ = layer(x)
    outputs[:, -1].sum().backward()
    per_step = x.grad.abs().sum(dim=(0, 2))  # (T,)
    assert torch.all(per_step > 0), f"no gradient reached some steps: {per_step.tolist()}"
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())


def test_wrong_rank_is_rejected():
    layer = RecurrentLayer(RNNCell(5, 4))
    with pytest.raises(ValueError, match=r"\(B, T, D_in\).*got shape \(7, 5\).*unsqueeze\(0\)"):
        layer(torch.randn(7, 5))


@pytest.mark.parametrize("kind", CELLS)
def test_wrong_input_size_is_rejected(kind):
    layer = RecurrentLayer(CELLS[kind][0](5, 4))
    with pytest.raises(ValueError, match=r"D_in=3 .*input_size=5.*input_size=3"):
        layer(torch.randn(2, 6, 3))


def test_wrong_hidden_size_is_rejected():
    rnn = RecurrentLayer(RNNCell(5, 4))
    with pytest.raises(ValueError, match=r"\(2, 4\), got \(2, 6\).*state=None.*hidden_size=6"):
        rnn(torch.randn(2, 3, 5), torch.zeros(2, 6))
    lstm = RecurrentLayer(LSTMCell(5, 4))
    with pytest.raises(ValueError, match=r"^h must have shape .*\(2, 4\), got \(2, 6\)"):
        lstm(torch.randn(2, 3, 5), (torch.zeros(2, 6), torch.zeros(2, 4)))
    with pytest.raises(ValueError, match=r"^c must have shape .*\(2, 4\), got \(2, 3\)"):
        lstm(torch.randn(2, 3, 5), (torch.zeros(2, 4), torch.zeros(2, 3)))


def test_gru_state_of_the_wrong_shape_is_rejected():
    gru = RecurrentLayer(GRUCell(5, 4))
    with pytest.raises(ValueError, match=r"^state must have shape .*\(2, 4\), got \(2, 6\).*hidden_size=6"):
        gru(torch.randn(2, 3, 5), torch.zeros(2, 6))
    with pytest.raises(TypeError, match=r"state must be a tensor of shape \(2, 4\), got tuple"):
        gru(torch.randn(2, 3, 5), (torch.zeros(2, 4), torch.zeros(2, 4)))


def test_gru_update_gate_interpolates_between_old_state_and_candidate():
    """With the update gate forced to 1 the state is carried unchanged; forced to 0 it is the candidate alone."""
    torch.manual_seed(8)
    cell = GRUCell(3, 4).double()
    x_t, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    with torch.no_grad():
        cell.bias_hh[4:8] = 1e4  # update-gate block: z = 1
    assert_close(cell(x_t, h), h)
    with torch.no_grad():
        cell.bias_hh[4:8] = -1e4  # z = 0: h_t = n_t, which does not depend on z
        candidate = cell(x_t, h)
        cell.bias_hh[4:8] = 0.0
    assert candidate.abs().max() < 1, "the candidate is a tanh"
    assert not torch.allclose(cell(x_t, h), candidate), "with z in (0, 1) the old state is mixed in"


def test_gru_float32_matches_torch():
    torch.manual_seed(9)
    reference = nn.GRU(8, 16, batch_first=True)
    ours = RecurrentLayer(GRUCell(8, 16))
    load_torch_weights(ours.cell, reference)
    x = torch.randn(4, 20, 8)
    assert_close(ours(x)[0], reference(x)[0])  # float32 tolerance: rtol 1.3e-6, atol 1e-5


def test_load_torch_weights_refuses_an_lstm_for_a_gru():
    with pytest.raises(ValueError, match=r"weight_ih_l0 has shape \(16, 3\), but the cell needs \(12, 3\)"):
        load_torch_weights(GRUCell(3, 4), nn.LSTM(3, 4))


def test_lstm_state_must_be_a_pair():
    with pytest.raises(TypeError, match=r"state must be an LSTM state, a tuple \(h, c\); got .* of type Tensor"):
        RecurrentLayer(LSTMCell(5, 4))(torch.randn(2, 3, 5), torch.zeros(2, 4))


def test_empty_sequence_and_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match=r"T=0"):
        RecurrentLayer(RNNCell(2, 3))(torch.randn(1, 0, 2))
    with pytest.raises(ValueError, match=r"hidden_size must be an int >= 1; got 0"):
        LSTMCell(2, 0)


@pytest.mark.parametrize("kind", CELLS)
@pytest.mark.parametrize("shape", [(), (2,), (1, 3, 2)])
def test_cell_input_of_the_wrong_rank_is_rejected(kind, shape):
    cell = CELLS[kind][0](2, 3)
    x_t = torch.randn(shape)
    dims = len(shape)
    pattern = (
        rf"x_t must have shape \(B, input_size\) = \(B, 2\) \(2 dims\), got shape {re.escape(str(tuple(shape)))} "
        rf"\({dims} dims\).*x_t.unsqueeze\(0\).*RecurrentLayer"
    )
    with pytest.raises(ValueError, match=pattern) as error:
        cell(x_t, cell.initial_state(1, torch.zeros(1, 2)))
    assert "build the cell with input_size" not in str(error.value), "a rank error is not fixed by input_size"


@pytest.mark.parametrize("kind", CELLS)
def test_cell_input_of_the_wrong_size_is_rejected(kind):
    cell = CELLS[kind][0](2, 3)
    with pytest.raises(ValueError, match=r"x_t has 5 features .*input_size=2; build the cell with input_size=5"):
        cell(torch.randn(4, 5), cell.initial_state(4, torch.zeros(4, 2)))


def test_state_with_the_wrong_batch_size_or_rank_is_rejected():
    cell = RNNCell(2, 3)
    x_t = torch.randn(4, 2)
    with pytest.raises(ValueError, match=r"\(4, 3\), got \(1, 3\); give the state one row per sequence .*B = 4"):
        cell(x_t, torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\(4, 3\), got \(\); pass state=None .* a tensor of shape \(4, 3\)"):
        cell(x_t, torch.tensor(0.0))
    with pytest.raises(TypeError, match=r"state must be a tensor of shape \(4, 3\), got tuple"):
        cell(x_t, (torch.zeros(4, 3), torch.zeros(4, 3)))


def test_load_torch_weights_checks_shapes():
    with pytest.raises(ValueError, match=r"weight_ih_l0 has shape \(4, 3\), but the cell needs \(4, 5\)"):
        load_torch_weights(RNNCell(5, 4), nn.RNN(3, 4))
    with pytest.raises(ValueError, match=r"bias_ih_l0 has shape None"):
        load_torch_weights(RNNCell(3, 4), nn.RNN(3, 4, bias=False))


@pytest.mark.parametrize("module", [nn.RNN(3, 4, nonlinearity="relu"), nn.RNNCell(3, 4, nonlinearity="relu")])
def test_load_torch_weights_refuses_a_relu_rnn(module):
    with pytest.raises(ValueError, match=r"nonlinearity='relu', but RNNCell computes tanh"):
        load_torch_weights(RNNCell(3, 4), module)


@pytest.mark.parametrize(
    ("cell", "module"),
    [(GRUCell(3, 4), nn.GRU(3, 4, bidirectional=True)), (RNNCell(3, 4), nn.RNN(3, 4, num_layers=2)),
     (LSTMCell(3, 4), nn.LSTM(3, 4, num_layers=2, bidirectional=True))],
)
def test_load_torch_weights_refuses_several_layers_or_directions(cell, module):
    with pytest.raises(ValueError, match=r"num_layers=\d, bidirectional=\w+, but the cell is one layer"):
        load_torch_weights(cell, module)


def test_with_spectral_radius():
    torch.manual_seed(4)
    weight = torch.randn(6, 6, dtype=torch.float64)
    for radius in (0.5, 1.0, 2.5):
        scaled = with_spectral_radius(weight, radius)
        assert_close(torch.linalg.eigvals(scaled).abs().max().item(), radius)
    with pytest.raises(ValueError, match=r"square matrix \(D, D\), got shape \(2, 3\)"):
        with_spectral_radius(torch.randn(2, 3), 1.0)
    with pytest.raises(ValueError, match=r"radius must be a finite number > 0 \(for example 0.9, where gradients vanish.*\); got 0"):
        with_spectral_radius(weight, 0)


@pytest.mark.parametrize("radius", [float("nan"), float("inf")])
def test_with_spectral_radius_refuses_nan_and_infinity(radius):
    with pytest.raises(ValueError, match=rf"radius must be a finite number > 0 .*; got {radius}"):
        with_spectral_radius(torch.randn(4, 4), radius)


@pytest.mark.parametrize(
    "weight",
    [torch.zeros(4, 4), torch.triu(torch.randn(5, 5), diagonal=1), torch.tensor([[0.0, 1.0], [0.0, 0.0]]).double()],
    ids=["zero", "strictly-upper-triangular", "nilpotent-2x2"],
)
def test_with_spectral_radius_refuses_a_matrix_without_nonzero_eigenvalues(weight):
    with pytest.raises(ValueError, match=r"spectral radius 0: all its eigenvalues are zero.*nonzero eigenvalue"):
        with_spectral_radius(weight, 0.9)


def test_input_gradient_norms_by_distance():
    torch.manual_seed(5)
    layer = RecurrentLayer(RNNCell(3, 4)).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    readout = torch.randn(4, dtype=torch.float64)
    norms = input_gradient_norms(layer, x, readout)
    x_leaf = x.clone().requires_grad_(True)
    (layer(x_leaf)[0][:, -1] @ readout).sum().backward()
    expected = x_leaf.grad.norm(dim=(0, 2))  # indexed by t
    assert norms.shape == (5,)
    assert_close(norms, expected.flip(0))  # indexed by distance T - t
    with pytest.raises(ValueError, match=r"readout must have shape \(4,\).*got \(3,\); build it with torch.randn\(4"):
        input_gradient_norms(layer, x, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, D_in\), got \(5, 3\).*x.unsqueeze\(0\)"):
        input_gradient_norms(layer, x[0], readout)


def test_gradient_vanishes_and_explodes_with_spectral_radius():
    torch.manual_seed(6)
    x = torch.randn(4, 40, 3, dtype=torch.float64)
    readout = torch.randn(8, dtype=torch.float64)
    ratios = {}
    for radius in (0.5, 3.0):
        torch.manual_seed(7)
        cell = RNNCell(3, 8).double()
        with torch.no_grad():
            cell.weight_hh.copy_(with_spectral_radius(cell.weight_hh, radius))
        norms = input_gradient_norms(RecurrentLayer(cell), x, readout)
        ratios[radius] = (norms[30] / norms[0]).item()
    assert ratios[0.5] < 1e-4
    assert ratios[3.0] > 1.0


def test_make_recall_batch():
    tokens, targets = make_recall_batch(8, 5, 11, torch.Generator().manual_seed(0))
    assert tokens.shape == (8, 6) and targets.shape == (8,)
    assert tokens.dtype == torch.int64
    assert torch.equal(targets, tokens[:, 0])
    assert 0 <= int(tokens.min()) and int(tokens.max()) < 11
    again, _ = make_recall_batch(8, 5, 11, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again), "the same generator seed must give the same batch"
    with pytest.raises(ValueError, match=r"distance must be an int >= 1; got 0"):
        make_recall_batch(8, 0, 11)


def test_make_shifted_recall_batch():
    tokens, query, targets = make_shifted_recall_batch(64, 3, 8, 11, torch.Generator().manual_seed(0))
    assert tokens.shape == (64, 8) and query.shape == (64,) and targets.shape == (64,)
    assert bool((query >= 3).all()) and bool((query < 8).all())
    assert torch.equal(targets, tokens[torch.arange(64), query - 3])
    assert len(set((query - 3).tolist())) > 1, "the target's absolute position must vary"
    with pytest.raises(ValueError, match=r"seq_len must be larger than distance.*seq_len=4 and distance=4.*seq_len=8"):
        make_shifted_recall_batch(2, 4, 4, 11)
    with pytest.raises(ValueError, match=r"seq_len must be an int >= 1; got 0"):
        make_shifted_recall_batch(2, 4, 0, 11)


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(sorted(CELLS)),
    batch_size=st.integers(1, 4),
    seq_len=st.integers(1, 6),
    d_in=st.integers(1, 5),
    d_hid=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_property_matches_torch_for_any_shape(kind, batch_size, seq_len, d_in, d_hid, seed):
    ours, reference = _pair(kind, d_in, d_hid, seed=seed)
    x = torch.randn(batch_size, seq_len, d_in, dtype=torch.float64)
    outputs, _ = ours(x)
    ref_outputs, _ = reference(x)
    assert outputs.shape == (batch_size, seq_len, d_hid)
    assert_close(outputs, ref_outputs)
    # Causality: changing the last input step leaves every earlier output unchanged.
    x_changed = x.clone()
    x_changed[:, -1] += 1.0
    changed, _ = ours(x_changed)
    assert_close(changed[:, :-1], outputs[:, :-1], rtol=0, atol=0)
