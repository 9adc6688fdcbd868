"""Tests of transformer_book.model (chapter 6): equivalence with PyTorch, properties, bad inputs."""

import dataclasses
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer_book.interop import to_torch_transformer
from transformer_book.kvcache import new_cache
from transformer_book.model import (
    LAYER_NORM_EPS,
    FeedForward,
    LayerNorm,
    Transformer,
    TransformerConfig,
    layer_norm,
)

PAD_ID = 0
SMALL = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=16, num_heads=4, num_encoder_layers=2,
             num_decoder_layers=2, d_ff=32, max_len=32)


def small_model(**overrides) -> Transformer:
    return Transformer(TransformerConfig(**{**SMALL, **overrides}))


def random_tokens(batch: int, length: int, vocab: int, lengths: list[int] | None = None) -> torch.Tensor:
    """Token ids in 1..vocab-1, right-padded with PAD_ID after lengths[i] tokens."""
    tokens = torch.randint(1, vocab, (batch, length))
    if lengths is not None:
        tokens[torch.arange(length) >= torch.tensor(lengths)[:, None]] = PAD_ID
    return tokens


# ---------------------------------------------------------------- LayerNorm and FeedForward


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 7)])
def test_layer_norm_formula_matches_torch(dtype, shape):
    """The written-out formula `layer_norm` against torch.nn.LayerNorm: values and all three gradients."""
    torch.manual_seed(0)
    reference = nn.LayerNorm(shape[-1]).to(dtype)
    with torch.no_grad():
        reference.weight.normal_()
        reference.bias.normal_()
    weight = reference.weight.detach().clone().requires_grad_(True)
    bias = reference.bias.detach().clone().requires_grad_(True)
    x = (4.0 + 3.0 * torch.randn(shape)).to(dtype)
    x_ours, x_ref = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y, y_ref = layer_norm(x_ours, weight, bias), reference(x_ref)
    assert_close(y, y_ref)
    upstream = torch.randn_like(y)
    y.backward(upstream)
    y_ref.backward(upstream)
    assert_close(x_ours.grad, x_ref.grad)
    assert_close(weight.grad, reference.weight.grad)
    assert_close(bias.grad, reference.bias.grad)
    assert reference.eps == LAYER_NORM_EPS


def test_layer_norm_formula_is_not_compared_with_itself():
    """The formula differs from nn.LayerNorm when its epsilon or its variance is wrong: the check can fail."""
    torch.manual_seed(0)
    reference = nn.LayerNorm(5)
    x = 0.01 * torch.randn(3, 5)  # small variance, where epsilon matters
    with pytest.raises(AssertionError):
        assert_close(layer_norm(x, reference.weight, reference.bias, eps=1e-3), reference(x))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_layer_norm_module_computes_the_formula(dtype):
    """The module runs PyTorch's fused kernel; it must compute what `layer_norm` writes out, gradients included."""
    torch.manual_seed(0)
    module = LayerNorm(7).to(dtype)
    with torch.no_grad():
        module.weight.normal_()
        module.bias.normal_()
    x = (4.0 + 3.0 * torch.randn(2, 5, 7)).to(dtype).requires_grad_(True)
    assert_close(module(x), layer_norm(x, module.weight, module.bias, module.eps))
    (grad_module,) = torch.autograd.grad(module(x).pow(3).sum(), x)
    (grad_formula,) = torch.autograd.grad(layer_norm(x, module.weight, module.bias).pow(3).sum(), x)
    assert_close(grad_module, grad_formula)
    assert module.eps == LAYER_NORM_EPS


def test_feed_forward_is_position_wise():
    torch.manual_seed(0)
    ffn = FeedForward(8, 16, dropout=0.0)
    x = torch.randn(2, 5, 8)
    changed = x.clone()
    changed[:, 2] += 1.0
    moved = (ffn(changed) - ffn(x)).abs().amax(dim=(0, 2))
    assert moved[2] > 0
    assert torch.all(moved[[0, 1, 3, 4]] == 0)


# ---------------------------------------------------------------- equivalence with torch.nn.Transformer


def compare_with_torch(norm_first: bool, src: torch.Tensor, tgt_in: torch.Tensor) -> None:
    """Our model and to_torch_transformer(our model) must agree in float64, eval mode."""
    torch.manual_seed(1)
    ours = small_model(norm_first=norm_first, num_encoder_layers=3).double().eval()
    theirs = to_torch_transformer(ours).eval()
    assert isinstance(theirs, nn.Transformer) and theirs.batch_first
    length = tgt_in.size(1)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    src_mask = (src != PAD_ID)[:, None, None, :]
    tgt_mask = (tgt_in != PAD_ID)[:, None, None, :] & causal
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch's nested-tensor prototype notice
        x_src, x_tgt = ours.embed(src, ours.src_embed), ours.embed(tgt_in, ours.tgt_embed)
        memory = ours.encoder(x_src, src_mask)
        memory_ref = theirs.encoder(x_src, src_key_padding_mask=src == PAD_ID)
        out = ours.decoder(x_tgt, memory, src_mask, tgt_mask)
        out_ref = theirs(
            x_src, x_tgt, src_key_padding_mask=src == PAD_ID, tgt_mask=~causal,
            tgt_key_padding_mask=tgt_in == PAD_ID, memory_key_padding_mask=src == PAD_ID,
        )
        logits = ours(src, tgt_in, src_mask, tgt_mask)
    real = src != PAD_ID  # PyTorch's inference fast path may write zeros at padded memory positions
    assert_close(memory[real], memory_ref[real], rtol=0, atol=1e-12)
    assert_close(out, out_ref, rtol=0, atol=1e-12)
    assert_close(logits, ours.generator(out_ref), rtol=0, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
def test_equivalence_with_torch_transformer_padded(norm_first):
    torch.manual_seed(0)
    src = random_tokens(4, 9, 40, lengths=[9, 6, 3, 8])
    tgt_in = random_tokens(4, 7, 40, lengths=[7, 7, 4, 5])
    compare_with_torch(norm_first, src, tgt_in)


@pytest.mark.parametrize("norm_first", [False, True])
def test_equivalence_with_torch_transformer_no_padding(norm_first):
    torch.manual_seed(0)
    compare_with_torch(norm_first, random_tokens(3, 6, 40), random_tokens(3, 5, 40))


@settings(max_examples=12, deadline=None)
@given(
    data=st.data(),
    batch=st.integers(1, 4),
    src_len=st.integers(1, 8),
    tgt_len=st.integers(1, 8),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equivalence_with_torch_transformer_over_shapes_and_padding(data, batch, src_len, tgt_len, norm_first, seed):
    """The same comparison over random batch sizes, lengths and padding (every row keeps one real token)."""
    src_lengths = data.draw(st.lists(st.integers(1, src_len), min_size=batch, max_size=batch), label="src_lengths")
    tgt_lengths = data.draw(st.lists(st.integers(1, tgt_len), min_size=batch, max_size=batch), label="tgt_lengths")
    torch.manual_seed(seed)
    src = random_tokens(batch, src_len, 40, lengths=src_lengths)
    tgt_in = random_tokens(batch, tgt_len, 40, lengths=tgt_lengths)
    compare_with_torch(norm_first, src, tgt_in)


@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_copy_has_final_norms_only_for_pre_norm(norm_first):
    theirs = to_torch_transformer(small_model(norm_first=norm_first))
    expected = nn.LayerNorm if norm_first else nn.Identity
    assert isinstance(theirs.encoder.norm, expected) and isinstance(theirs.decoder.norm, expected)


def test_equivalence_fails_when_weights_differ():
    """The comparison can fail: perturb one weight of the copy and the outputs part."""
    torch.manual_seed(0)
    ours = small_model().double().eval()
    theirs = to_torch_transformer(ours).eval()
    with torch.no_grad():
        theirs.decoder.layers[1].linear2.weight[0, 0] += 1e-3
    x_src = torch.randn(2, 5, 16, dtype=torch.float64)
    x_tgt = torch.randn(2, 4, 16, dtype=torch.float64)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    with torch.no_grad():
        out = ours.decoder(x_tgt, ours.encoder(x_src), None, causal)
        out_ref = theirs(x_src, x_tgt, tgt_mask=~causal)
    with pytest.raises(AssertionError):
        assert_close(out, out_ref, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- properties over shapes and masks


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    src_len=st.integers(1, 7),
    tgt_len=st.integers(1, 7),
    heads_and_width=st.sampled_from([(1, 8), (2, 8), (4, 16), (2, 12)]),
    tie=st.booleans(),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_logits_shape_and_padding_invariance(batch, src_len, tgt_len, heads_and_width, tie, norm_first, seed):
    num_heads, d_model = heads_and_width
    torch.manual_seed(seed)
    tgt_vocab = 40 if tie else 23
    model = small_model(d_model=d_model, num_heads=num_heads, d_ff=2 * d_model, tie_embeddings=tie,
                        tgt_vocab_size=tgt_vocab, norm_first=norm_first).eval()
    lengths = torch.randint(1, src_len + 1, (batch,)).tolist()
    src = random_tokens(batch, src_len, 40, lengths)
    tgt_in = random_tokens(batch, tgt_len, tgt_vocab)
    with torch.no_grad():
        logits = model(src, tgt_in)
        # More padding on the right of the source changes nothing for any target position.
        longer = torch.cat([src, torch.full((batch, 3), PAD_ID)], dim=1)
        logits_longer = model(longer, tgt_in)
    assert logits.shape == (batch, tgt_len, tgt_vocab)
    assert torch.isfinite(logits).all()
    assert_close(logits_longer, logits, atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(tgt_len=st.integers(2, 8), norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_decoder_is_causal(tgt_len, norm_first, seed):
    torch.manual_seed(seed)
    model = small_model(norm_first=norm_first).eval()
    t = int(torch.randint(0, tgt_len - 1, ()))
    src = random_tokens(2, 5, 40)
    tgt_in = random_tokens(2, tgt_len, 40)
    changed = tgt_in.clone()
    changed[:, t + 1 :] = random_tokens(2, tgt_len - t - 1, 40)
    with torch.no_grad():
        a, b = model(src, tgt_in), model(src, changed)
    assert torch.equal(a[:, : t + 1], b[:, : t + 1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_cross_attention_reads_queries_from_the_decoder_and_keys_values_from_memory(norm_first):
    """Forward pre-hooks record each cross_attn's (query, key, value): key and value are the memory Z itself,
    and the first layer's queries do not depend on Z (they come from the decoder's own stream)."""
    torch.manual_seed(0)
    model = small_model(norm_first=norm_first).eval()
    src, tgt_in = random_tokens(3, 6, 40, lengths=[6, 4, 2]), random_tokens(3, 5, 40)
    src_mask = (src != PAD_ID)[:, None, None, :]

    def inputs(memory: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        seen = []
        hooks = [layer.cross_attn.register_forward_pre_hook(lambda module, args: seen.append(args[:3]))
                 for layer in model.decoder.layers]
        with torch.no_grad():
            model.decode(tgt_in, memory, src_mask)
        for hook in hooks:
            hook.remove()
        return seen

    with torch.no_grad():
        memory = model.encode(src, src_mask)
    first, perturbed = inputs(memory), inputs(memory + torch.randn_like(memory))
    assert len(first) == len(model.decoder.layers)
    assert all(key is memory and value is memory for _, key, value in first)
    assert torch.equal(first[0][0], perturbed[0][0]), "layer 0's queries must not depend on the memory"
    assert not torch.equal(first[1][0], perturbed[1][0]), "layer 1's queries see the memory through layer 0"


ONE_AT_A_TIME = [(i, i + 1) for i in range(8)]
PREFIX_THEN_STEPS = [(0, 5), (5, 6), (6, 7), (7, 8)]
CHUNKS = [(0, 3), (3, 7), (7, 8)]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("spans", [ONE_AT_A_TIME, PREFIX_THEN_STEPS, CHUNKS], ids=["steps", "prefix", "chunks"])
def test_cached_decoding_matches_full_pass(norm_first, spans):
    """Decoding the target in pieces with a cache equals one uncached pass, however it is cut.

    A piece of several new tokens must be causal inside itself: token i sees the cache and new tokens 0..i.
    """
    torch.manual_seed(0)
    model = small_model(norm_first=norm_first).eval()
    src = random_tokens(3, 6, 40, lengths=[6, 4, 2])
    tgt_in = random_tokens(3, 8, 40)
    with torch.no_grad():
        src_mask = (src != PAD_ID)[:, None, None, :]
        memory = model.encode(src, src_mask)
        full = model.decode(tgt_in, memory, src_mask)
        cache = new_cache(model)
        pieces = [model.decode(tgt_in[:, a:b], memory, src_mask, cache=cache) for a, b in spans]
    assert len(cache) == 2 and len(cache[0].self_attn) == 8
    assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- initialisation, tying, parameter names


def test_tied_embeddings_share_one_tensor_and_untied_do_not():
    tied, untied = small_model(), small_model(tie_embeddings=False, tgt_vocab_size=30)
    assert tied.generator.weight is tied.src_embed.weight is tied.tgt_embed.weight
    assert untied.generator.weight is not untied.tgt_embed.weight
    assert untied.src_embed.weight is not untied.tgt_embed.weight
    assert untied.generator.weight.shape == (30, 16)


def test_initialisation_scales():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(2000, 2000, d_model=64, num_heads=4, num_encoder_layers=1,
                                          num_decoder_layers=1, d_ff=128))
    # Embedding std d_model^-0.5, so that after the sqrt(d_model) scale the embeddings have unit variance.
    assert abs(model.src_embed.weight.std().item() * math.sqrt(64) - 1) < 0.02
    # Xavier uniform: bound sqrt(6 / (fan_in + fan_out)).
    weight = model.encoder.layers[0].feed_forward.linear1.weight  # (128, 64)
    bound = math.sqrt(6 / (64 + 128))
    assert weight.abs().max() <= bound and weight.abs().max() > 0.95 * bound


def test_parameter_names_are_stable():
    """Checkpoints of the long training run depend on these names."""
    keys = set(small_model().state_dict())
    for key in (
        "src_embed.weight", "tgt_embed.weight", "generator.weight",
        "encoder.layers.0.self_attn.q_proj.weight", "encoder.layers.1.feed_forward.linear2.bias",
        "encoder.layers.0.norm2.weight", "decoder.layers.1.cross_attn.out_proj.weight",
        "decoder.layers.0.self_attn.v_proj.bias", "decoder.layers.0.norm3.bias",
    ):
        assert key in keys, key
    assert not any("positional" in k for k in keys), "the positional encoding is not saved"
    pre_norm_keys = set(small_model(norm_first=True).state_dict())
    assert pre_norm_keys - keys == {"encoder.norm.weight", "encoder.norm.bias", "decoder.norm.weight",
                                    "decoder.norm.bias"}


def test_base_model_parameter_count():
    with torch.device("meta"):
        base = Transformer(TransformerConfig(37000, 37000))
    assert sum(p.numel() for p in base.parameters()) == 63_082_496


# ---------------------------------------------------------------- bad configurations


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_heads": 6}, r"d_model \(512\) must be divisible by num_heads \(6\)"),
        ({"d_model": 30, "num_heads": 4}, r"d_model \(30\) must be divisible by num_heads \(4\)"),
        ({"d_model": 15, "num_heads": 5}, r"d_model must be even"),
        ({"tgt_vocab_size": 100}, r"src_vocab_size \(37000\) must equal tgt_vocab_size \(100\)"),
        ({"d_model": 0}, r"d_model must be an int >= 1; got 0"),
        ({"num_heads": 0}, r"num_heads must be an int >= 1; got 0"),
        ({"num_heads": -8}, r"num_heads must be an int >= 1; got -8"),
        ({"num_encoder_layers": 0}, r"num_encoder_layers must be an int >= 1; got 0"),
        ({"num_decoder_layers": -1}, r"num_decoder_layers must be an int >= 1; got -1"),
        ({"d_ff": 0}, r"d_ff must be an int >= 1; got 0"),
        ({"max_len": 0}, r"max_len must be an int >= 1; got 0"),
        ({"src_vocab_size": 0, "tgt_vocab_size": 0}, r"src_vocab_size must be an int >= 1; got 0"),
        ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\) \(0.0 switches it off\); got 1.0"),
        ({"dropout": -0.1}, r"dropout must be a number in \[0, 1\).*; got -0.1"),
        ({"pad_id": 37000}, r"pad_id \(37000\) must be a token id in both vocabularies: .* reserves for padding"),
        ({"pad_id": -1}, r"pad_id must be an int >= 0; got -1"),
    ],
)
def test_bad_config_is_refused_with_a_clear_message(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{"src_vocab_size": 37000, "tgt_vocab_size": 37000, **overrides})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 512.0}, r"d_model must be an int; got 512.0 of type float"),
        ({"num_heads": True}, r"num_heads must be an int"),
        ({"dropout": "0.1"}, r"dropout must be a number in \[0, 1\).*; got '0.1' of type str"),
    ],
)
def test_config_with_wrong_types_is_refused(overrides, message):
    with pytest.raises(TypeError, match=message):
        TransformerConfig(**{"src_vocab_size": 37000, "tgt_vocab_size": 37000, **overrides})


def test_untied_model_accepts_different_vocabularies():
    model = small_model(tie_embeddings=False, tgt_vocab_size=25)
    logits = model(random_tokens(2, 4, 40), random_tokens(2, 3, 25))
    assert logits.shape == (2, 3, 25)


# ---------------------------------------------------------------- bad inputs


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return small_model().eval()


@pytest.mark.parametrize(
    ("src", "error", "message"),
    [
        (torch.ones(2, 5), TypeError, r"src must hold integer token ids \(torch.long\); got dtype torch.float32"),
        (torch.ones(2, 5, dtype=torch.bool), TypeError, r"src must hold integer token ids"),
        (torch.ones(5, dtype=torch.long), ValueError, r"src must have shape \(B, T\); got \(5,\)"),
        (torch.ones(2, 5, 1, dtype=torch.long), ValueError, r"src must have shape \(B, T\)"),
        (torch.ones(2, 0, dtype=torch.long), ValueError, r"src is empty, shape \(2, 0\)"),
        (torch.ones(1, 33, dtype=torch.long), ValueError, r"max_len=32"),
    ],
)
def test_bad_source_is_refused(model, src, error, message):
    with pytest.raises(error, match=message):
        model(src, torch.ones(src.shape[0] if src.dim() else 1, 3, dtype=torch.long))


@pytest.mark.parametrize(
    ("tgt", "error", "message"),
    [
        (torch.ones(2, 3), TypeError, r"tgt must hold integer token ids"),
        (torch.ones(2, 3, 4, dtype=torch.long), ValueError, r"tgt must have shape \(B, T\)"),
        (torch.ones(2, 0, dtype=torch.long), ValueError, r"tgt is empty, shape \(2, 0\)"),
        (torch.ones(2, 40, dtype=torch.long), ValueError, r"reaches position 40 .* max_len=32"),
    ],
)
def test_bad_target_is_refused(model, tgt, error, message):
    with pytest.raises(error, match=message):
        model(torch.ones(2, 4, dtype=torch.long), tgt)


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        (torch.tensor([[1, 40, 2]]), torch.tensor([[1, 2]]),
         r"src holds token ids from 1 to 40, but the vocabulary has 40 tokens \(ids 0 \.\. 39\)"),
        (torch.tensor([[1, -1, 2]]), torch.tensor([[1, 2]]), r"src holds token ids from -1 to 2"),
        (torch.tensor([[1, 2]]), torch.tensor([[1, 99]]),
         r"tgt holds token ids from 1 to 99, but the vocabulary has 40 tokens"),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused(model, src, tgt, message):
    with pytest.raises(ValueError, match=message):
        model(src, tgt)


def test_decode_checks_the_target_vocabulary_of_an_untied_model():
    model = small_model(tie_embeddings=False, tgt_vocab_size=25).eval()
    memory = model.encode(random_tokens(1, 4, 40))
    with pytest.raises(ValueError, match=r"tgt holds token ids from .* the vocabulary has 25 tokens"):
        model.decode(torch.tensor([[1, 30]]), memory)


def test_int32_tokens_are_accepted(model):
    src, tgt = random_tokens(2, 4, 40), random_tokens(2, 3, 40)
    with torch.no_grad():
        assert_close(model(src.int(), tgt.int()), model(src, tgt))


@pytest.mark.parametrize("training", [False, True])
def test_torch_copy_keeps_the_mode_of_the_model(training):
    """A copy of an eval() model must not come back with its dropout switched on."""
    ours = small_model(dropout=0.1).train(training)
    theirs = to_torch_transformer(ours)
    assert theirs.training == training
    assert all(module.training == training for module in theirs.modules())


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_mask_in_the_recurrent_layout_is_refused(norm_first):
    """A (B, T_src) mask broadcasts as query x key when B equals the lengths: it must be refused, not misread."""
    torch.manual_seed(0)
    net = small_model(norm_first=norm_first).eval()
    src, tgt_in = random_tokens(5, 5, 40, lengths=[5, 4, 3, 5, 2]), random_tokens(5, 5, 40)
    flat = src != PAD_ID  # (B, T_src), chapter 2's layout
    message = r"src_mask must have shape \(B, 1, 1, T_src\) with T_src = 5; got \(5, 5\); build it with padding_mask"
    with pytest.raises(ValueError, match=message):
        net(src, tgt_in, src_mask=flat)
    with pytest.raises(ValueError, match=message):
        net.encode(src, flat)
    memory = net.encode(src)
    with pytest.raises(ValueError, match=message):
        net.decode(tgt_in, memory, flat)
    with pytest.raises(ValueError, match=r"T_src = 5; got \(5, 1, 1, 4\)"):
        net.decode(tgt_in, memory, flat[:, None, None, :4])
    with pytest.raises(TypeError, match=r"src_mask must be a boolean tensor .* got list"):
        net.encode(src, [[True] * 5] * 5)


def test_a_model_or_copy_of_the_wrong_object_is_a_type_error_naming_the_argument():
    # The package review: a dict of sizes, or another module, failed deep inside with an AttributeError.
    with pytest.raises(TypeError, match=r"config must be a TransformerConfig, .*; got dict"):
        Transformer({"src_vocab_size": 40, "tgt_vocab_size": 40})
    with pytest.raises(TypeError, match=r"model must be this book's Transformer \(chapter 6\); got Linear"):
        to_torch_transformer(nn.Linear(2, 2))


def _copy_of_class(cls: type) -> type:
    """A second class with the same fields and defaults, as a notebook makes when it defines (or re-runs) the class."""
    return dataclasses.make_dataclass(
        cls.__name__, [(f.name, f.type, dataclasses.field(default=f.default)) for f in dataclasses.fields(cls)]
    )


def test_a_config_of_a_notebook_s_own_copy_of_the_class_is_accepted():
    # Chapter 6's notebook defines TransformerConfig again; a class check refused its configs ("got
    # TransformerConfig") and broke the chapter's cells that mix its classes with the package's.
    sizes = {"src_vocab_size": 40, "tgt_vocab_size": 40, "d_model": 32, "num_heads": 4, "num_encoder_layers": 1,
             "num_decoder_layers": 1, "d_ff": 64, "dropout": 0.0}
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**sizes)).eval()
    torch.manual_seed(0)
    copy = Transformer(_copy_of_class(TransformerConfig)(**sizes)).eval()
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))
    assert_close(copy(src, tgt), model(src, tgt))
    assert isinstance(to_torch_transformer(copy), nn.Transformer)


def test_an_odd_head_size_works_in_the_base_model_and_is_refused_only_where_rotary_needs_pairs():
    # The probe's TransformerConfig(d_model=18, num_heads=2), heads of 9 features, is not refused on purpose: the
    # base model's sinusoidal encoding pairs features across d_model (even here), and nothing splits a head in two.
    model = small_model(d_model=18, num_heads=2).eval()
    src = torch.randint(3, 40, (2, 5))
    assert model(src, src).isfinite().all()
    from transformer_book.layers import RotaryMultiHeadAttention  # rotary rotates pairs within each head
    with pytest.raises(ValueError, match=r"head size d_model / num_heads = 18 / 2 must be even, because rotary"):
        RotaryMultiHeadAttention(18, 2)


def test_a_padding_mask_on_another_device_than_the_source_is_refused_by_name():
    model, src = small_model().eval(), torch.randint(3, 40, (2, 5))
    mask = (src != PAD_ID)[:, None, None, :].to("meta")  # (B, 1, 1, T_src)
    with pytest.raises(ValueError, match=r"mask is on the device meta, but the attention's inputs are on cpu"):
        model(src, src, src_mask=mask)
