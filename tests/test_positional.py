"""Tests for transformer_book.positional (chapter 4): the sinusoidal table against its formula, the shift
rotation, the two layers that add positions, RoPE's relative property, and the error messages."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from transformer_book.multihead import MultiHeadAttention
from transformer_book.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    apply_rotary,
    shift_matrix,
    sinusoidal_encoding,
)

FAST = settings(max_examples=30, deadline=None)
even_d_model = st.integers(1, 32).map(lambda half: 2 * half)


@functools.cache
def sinusoidal_loop(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's formula term by term, float64 (cached: treat the result as read-only)."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


# --- sinusoidal_encoding ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("max_len", "d_model"), [(1, 2), (50, 128), (100, 6), (64, 512)])
def test_table_matches_the_formula_loop(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    assert table.shape == (max_len, d_model) and table.dtype == torch.float32
    # float32 angles: the error grows about linearly with the position (3e-6 at position 50).
    assert_close(table.double(), sinusoidal_loop(max_len, d_model), atol=1e-7 * max_len + 1e-6, rtol=0)


def test_table_small_case_by_hand():
    expected = [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)]
    assert_close(sinusoidal_encoding(3, 4), torch.tensor(expected))  # p / 100 = p / 10000^(2/4): the paper's base


def test_rows_have_length_sqrt_half_d_model_and_dot_depends_only_on_distance():
    table = sinusoidal_loop(120, 32)
    assert_close(table.norm(dim=1), torch.full((120,), 4.0, dtype=torch.float64))  # sqrt(32 / 2)
    dots = table @ table.T
    for k in range(-119, 120):
        diagonal = dots.diagonal(k)
        assert_close(diagonal, diagonal[:1].expand_as(diagonal))


@given(max_len=st.integers(1, 80), d_model=even_d_model)
@FAST
def test_table_shape_and_range(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    assert table.shape == (max_len, d_model)
    assert table.abs().max() <= 1.0
    assert_close(table[0], torch.tensor([0.0, 1.0]).repeat(d_model // 2))  # sin 0, cos 0


@pytest.mark.parametrize("d_model", [7, 1, 0, -4])
def test_odd_or_non_positive_d_model_is_refused(d_model):
    with pytest.raises(ValueError, match=rf"d_model must be (a positive even number|an int >= 1).*got {d_model}"):
        sinusoidal_encoding(10, d_model)
    with pytest.raises(ValueError, match="positive even number|int >= 1"):
        PositionalEncoding(d_model, 0.0, 10)
    with pytest.raises(ValueError, match="positive even number|int >= 1"):
        shift_matrix(1, d_model)


def test_empty_table_is_refused():
    with pytest.raises(ValueError, match="max_len must be an int >= 1; got 0"):
        sinusoidal_encoding(0, 8)


# --- the shift rotation R_k ---------------------------------------------------------------------------------


@given(pos=st.integers(0, 300), k=st.integers(-150, 150), d_model=even_d_model)
@FAST
def test_shift_matrix_moves_the_table(pos, k, d_model):
    pos = max(pos, -k)  # keep pos + k inside the table
    r_k = shift_matrix(k, d_model)
    exact = sinusoidal_loop(451, d_model)
    assert_close(r_k @ exact[pos], exact[pos + k], atol=1e-12, rtol=0)
    # and on the float32 table the model uses, to float32 precision
    table = sinusoidal_encoding(451, d_model).double()
    assert_close(r_k @ table[pos], table[pos + k], atol=1e-4, rtol=0)


def test_shift_matrix_is_block_diagonal_orthogonal_and_composes():
    d_model = 16
    r_3 = shift_matrix(3, d_model)
    assert r_3.shape == (d_model, d_model) and r_3.dtype == torch.float64
    off_blocks = r_3.clone()
    for i in range(0, d_model, 2):
        off_blocks[i : i + 2, i : i + 2] = 0
    assert off_blocks.abs().max() == 0
    assert_close(r_3.T @ r_3, torch.eye(d_model, dtype=torch.float64))
    assert_close(shift_matrix(3, d_model) @ shift_matrix(4, d_model), shift_matrix(7, d_model))
    assert_close(shift_matrix(-3, d_model), r_3.T)
    assert_close(shift_matrix(0, d_model), torch.eye(d_model, dtype=torch.float64))


# --- PositionalEncoding and LearnedPositionalEmbedding ------------------------------------------------------


@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 12),
    offset=st.integers(0, 8),
    d_model=even_d_model,
    learned=st.booleans(),
)
@FAST
def test_layers_add_the_rows_from_offset(batch, length, offset, d_model, learned):
    torch.manual_seed(0)
    max_len = 20
    layer = (LearnedPositionalEmbedding if learned else PositionalEncoding)(d_model, 0.1, max_len).eval()
    table = layer.embedding.weight if learned else sinusoidal_encoding(max_len, d_model)
    x = torch.randn(batch, length, d_model)
    out = layer(x, offset=offset)
    assert out.shape == x.shape
    assert_close(out, x + table[offset : offset + length])
    # an offset continues the sequence: the tail of a long call equals a short call with an offset
    if offset > 0:
        whole = layer(torch.cat([torch.zeros(batch, offset, d_model), x], dim=1))
        assert_close(whole[:, offset:], out)


def test_state_dict_keys_are_the_checkpoint_contract():
    assert list(PositionalEncoding(8, 0.1, 16).state_dict()) == []  # rebuilt from the formula
    assert [name for name, _ in PositionalEncoding(8, 0.1, 16).named_buffers()] == ["pe"]
    assert list(LearnedPositionalEmbedding(8, 0.1, 16).state_dict()) == ["embedding.weight"]


@pytest.mark.parametrize(("layer", "longest"), [(PositionalEncoding, 5000), (LearnedPositionalEmbedding, 512)])
def test_defaults_cover_their_lengths_and_drop_a_tenth(layer, longest):
    # What the defaults do, not their values: the sinusoidal table covers 5000 positions, the learned one 512,
    # and both drop the paper's P_drop = 0.1 of their output in training.
    module = layer(8)
    zeros = torch.zeros(8, longest, 8)
    with pytest.raises(ValueError, match=f"reaches position {longest + 1} but the encoding was built for max_len"):
        module(torch.zeros(1, longest + 1, 8))
    torch.manual_seed(0)
    kept, full = module.train()(zeros), module.eval()(zeros)
    dropped = (kept == 0) & (full != 0)
    assert 0.09 < dropped.sum() / (full != 0).sum() < 0.11


def test_dropout_acts_on_the_sum_in_training_mode_only():
    torch.manual_seed(0)
    layer = PositionalEncoding(64, dropout=0.5, max_len=32)
    x = torch.randn(4, 32, 64)
    expected = x + layer.pe
    out = layer.train()(x)
    zeros = out == 0
    assert 0.4 < zeros.float().mean() < 0.6
    assert_close(out[~zeros], 2 * expected[~zeros])
    assert_close(layer.eval()(x), expected)


@pytest.mark.parametrize("layer_class", [PositionalEncoding, LearnedPositionalEmbedding])
def test_too_long_input_gives_a_clear_error(layer_class):
    layer = layer_class(8, 0.0, 10)
    layer(torch.zeros(1, 10, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"reaches position 11 .* max_len=10.*larger max_len"):
        layer(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"reaches position 12 .* max_len=10"):
        layer(torch.zeros(1, 4, 8), offset=8)


@pytest.mark.parametrize("layer_class", [PositionalEncoding, LearnedPositionalEmbedding])
def test_bad_shapes_and_offsets_are_refused(layer_class):
    layer = layer_class(8, 0.0, 10)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\); got \(1, 5, 6\)"):
        layer(torch.zeros(1, 5, 6))
    with pytest.raises(ValueError, match=r"got \(5, 8\)"):
        layer(torch.zeros(5, 8))
    with pytest.raises(ValueError, match="offset .* cannot be negative; got -1"):
        layer(torch.zeros(1, 5, 8), offset=-1)


def test_learned_rows_that_are_never_used_get_no_gradient():
    layer = LearnedPositionalEmbedding(8, 0.0, 10)
    layer(torch.zeros(1, 4, 8)).sum().backward()
    grad = layer.embedding.weight.grad
    assert grad[:4].abs().min() > 0 and grad[4:].abs().max() == 0


# --- permutation equivariance (why positions are needed) ----------------------------------------------------


@given(length=st.integers(2, 8), seed=st.integers(0, 1000))
@FAST
def test_attention_is_permutation_equivariant_until_positions_are_added(length, seed):
    torch.manual_seed(seed)
    attention = MultiHeadAttention(16, 4).double().eval()
    x = torch.randn(2, length, 16, dtype=torch.float64)
    perm = torch.randperm(length)
    while torch.equal(perm, torch.arange(length)):
        perm = torch.randperm(length)
    with torch.no_grad():
        assert_close(attention(x[:, perm], x[:, perm], x[:, perm]), attention(x, x, x)[:, perm])
        pe = sinusoidal_encoding(length, 16).double()
        xp, xp_shuffled = x + pe, x[:, perm] + pe
        with_positions = attention(xp_shuffled, xp_shuffled, xp_shuffled)
        assert not torch.allclose(with_positions, attention(xp, xp, xp)[:, perm])


# --- RoPE ---------------------------------------------------------------------------------------------------


@given(m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(0, 2000), d_head=even_d_model)
@FAST
def test_rotary_scores_depend_only_on_the_offset(m, n, shift, d_head):
    torch.manual_seed(0)
    q, k = torch.randn(1, d_head, dtype=torch.float64), torch.randn(1, d_head, dtype=torch.float64)

    def score(a: int, b: int) -> torch.Tensor:
        return apply_rotary(q, torch.tensor([a])) @ apply_rotary(k, torch.tensor([b])).T

    assert_close(score(m, n), score(m + shift, n + shift))


def test_rotary_distinguishes_offsets_and_keeps_lengths():
    torch.manual_seed(0)
    q, k = torch.randn(1, 64, dtype=torch.float64), torch.randn(1, 64, dtype=torch.float64)
    scores = [(apply_rotary(q, torch.tensor([d])) @ k.T).item() for d in range(8)]
    assert len({round(s, 6) for s in scores}) == 8
    x = torch.randn(2, 3, 9, 64, dtype=torch.float64)  # (B, H, T, D_h)
    rotated = apply_rotary(x)
    assert rotated.shape == x.shape and rotated.dtype == x.dtype
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    assert_close(rotated[..., 0, :], x[..., 0, :])  # position 0 is not rotated


@given(position=st.integers(-50, 500), d_head=even_d_model)
@FAST
def test_rotary_is_the_transpose_of_the_shift_matrix(position, d_head):
    torch.manual_seed(0)
    x = torch.randn(1, d_head, dtype=torch.float64)
    assert_close(apply_rotary(x, torch.tensor([position]))[0], shift_matrix(position, d_head).T @ x[0])


def test_rotary_default_positions_and_dtype():
    x = torch.randn(2, 5, 8)
    assert_close(apply_rotary(x), apply_rotary(x, torch.arange(5)))
    assert apply_rotary(x).dtype == torch.float32
    assert apply_rotary(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_rotary_bad_inputs():
    with pytest.raises(ValueError, match=r"D_h\) must be a positive even number.*got 7"):
        apply_rotary(torch.zeros(3, 7))
    with pytest.raises(ValueError, match=r"positions must have shape \(T,\) = \(3,\).*got \(4,\)"):
        apply_rotary(torch.zeros(3, 8), torch.arange(4))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., T, D_h\); got \(8,\)"):
        apply_rotary(torch.zeros(8))


def test_rotary_moves_positions_to_the_device_of_x():
    """Positions built on the CPU for a tensor on another device are moved, not refused with PyTorch's raw error."""
    x = torch.zeros(2, 5, 8, device="meta")
    out = apply_rotary(x, torch.arange(5))
    assert out.device == x.device and out.shape == x.shape
    with pytest.raises(TypeError, match=r"positions must be a tensor of shape \(T,\); got list"):
        apply_rotary(torch.zeros(3, 8), [0, 1, 2])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(d_model=0, max_len=10), ValueError, r"d_model must be an int >= 1; got 0"),
        (dict(d_model=8, max_len=0), ValueError, r"max_len must be an int >= 1; got 0"),
        (dict(d_model=8.0, max_len=10), TypeError, r"d_model must be an int; got 8.0"),
        (dict(d_model=8, max_len=True), TypeError, r"max_len must be an int; got True"),
    ],
)
def test_learned_embedding_refuses_bad_sizes(kwargs, error, message):
    with pytest.raises(error, match=message):
        LearnedPositionalEmbedding(**kwargs)
