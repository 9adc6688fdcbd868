"""The book's pretrained translator (the companion distribution in pretrained/): its files are the ones its record
names, it loads with no network, it still makes the translations and the BLEU its record states, and the
command line and `Translator.pretrained()` use it, or say how to install it when it is missing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import sacrebleu
from conftest import needs_data
from safetensors import safe_open

from transformer_book import data
from transformer_book.hashing import file_sha256
from transformer_book.run import cli
from transformer_book.run import translate as translate_module
from transformer_book.run.translate import Translator, paired_bootstrap, pretrained_checkpoint, pretrained_record

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "pretrained" / "src" / "transformer_book_pretrained"
RECORD = json.loads((PACKAGE / "record.json").read_text(encoding="utf-8"))
SAMPLE = 60  # test sentences translated again with beam search (the whole split takes minutes)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("the pretrained translator tried to reach the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator.pretrained("cpu")


def test_the_installed_distribution_is_the_repository_folder():
    assert pretrained_checkpoint() == PACKAGE / "checkpoint"
    assert pretrained_record() == RECORD


def test_every_file_has_the_sha256_and_size_its_record_names():
    shipped = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*")
                     if p.is_file() and p.name != "record.json" and p.suffix != ".py" and "__pycache__" not in p.parts)
    assert shipped == sorted(RECORD["files"]), "record.json does not list exactly the files shipped"
    for name, digest in RECORD["files"].items():
        assert file_sha256(PACKAGE / name) == digest, f"{name} is not the file record.json vouches for"
        assert (PACKAGE / name).stat().st_size == RECORD["bytes"][name]


def test_the_weights_are_the_cpu_run_in_float16():
    assert RECORD["preset"] == "cpu" and RECORD["direction"] == "de-en" and RECORD["stored_as"] == "float16"
    assert RECORD["test_split"] == "test_2016_flickr" and RECORD["test_sentences"] == 1000
    with safe_open(PACKAGE / "checkpoint" / "model.safetensors", "pt") as weights:
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}
    assert dtypes == {"F16"}, f"model.safetensors holds {dtypes}, not float16 alone"


def test_it_loads_with_no_network_and_translates(no_network, translator):
    english = translator.translate("Ein Mann fährt Fahrrad.")
    assert english.isascii() and "man" in english.lower(), english


@needs_data
def test_it_still_makes_the_test_translations_its_record_scores(translator):
    pairs = data.load_multi30k("test2016")
    stored = (PACKAGE / "test2016.beam.txt").read_text(encoding="utf-8").splitlines()
    assert len(stored) == len(pairs) == RECORD["test_sentences"]
    # the record's test BLEU is that of the stored translations...
    assert round(sacrebleu.corpus_bleu(stored, [[t for _, t in pairs]]).score, 2) == RECORD["test_bleu_beam"]
    # ...and the weights make them again (a float rounding on another CPU may flip a rare near tie)
    again = translator.translate([s for s, _ in pairs[:SAMPLE]], RECORD["beam_size"],
                                 length_penalty=RECORD["length_penalty"])
    same = sum(a == b for a, b in zip(again, stored))
    assert same >= 0.95 * SAMPLE, f"only {same} of {SAMPLE} test translations are the ones record.json scored"


@needs_data
def test_its_greedy_test_bleu_is_the_one_recorded(translator):
    pairs = data.load_multi30k("test2016")
    result = translate_module.evaluate(translator, pairs, beam_size=1)
    assert result["bleu"] == pytest.approx(RECORD["test_bleu_greedy"], abs=0.3)


def test_translate_without_checkpoint_uses_it(tmp_path):
    result = subprocess.run([sys.executable, "-m", "transformer_book", "translate", "Zwei Hunde spielen im Schnee."],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "dog" in result.stdout.lower(), result.stdout
    assert "pretrained" in result.stderr and f"{RECORD['test_bleu_beam']:.1f}" in result.stderr


def test_a_missing_distribution_names_the_install_line(monkeypatch, capsys):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")
    monkeypatch.setattr(resources, "files", missing)
    with pytest.raises(FileNotFoundError, match=r'pip install "transformer-book\[pretrained\]"'):
        Translator.pretrained()
    assert cli.main(["translate", "Ein Hund."]) == 2
    assert 'pip install "transformer-book[pretrained]"' in capsys.readouterr().err


def test_average_needs_a_checkpoint(capsys):
    assert cli.main(["translate", "--average", "2", "Ein Hund."]) == 2
    assert "--average and --allow-fewer need --checkpoint" in capsys.readouterr().err


REFERENCES = ["a man rides a bike .", "two dogs play in the snow .", "a woman reads a book in the park ."] * 40


def test_paired_bootstrap_calls_identical_outputs_noise():
    result = paired_bootstrap(REFERENCES, list(REFERENCES), REFERENCES)
    assert result["difference"] == 0.0 and result["p_value"] == 1.0


def test_paired_bootstrap_tells_a_real_difference_from_noise():
    weak = [r if i % 3 else "a man" for i, r in enumerate(REFERENCES)]
    strong = [r if i % 12 else "a man" for i, r in enumerate(REFERENCES)]
    result = paired_bootstrap(weak, strong, REFERENCES)
    assert result["difference"] > 0 and result["p_value"] < 0.05
    low, high = result["other_interval"]
    assert low <= result["bleu_other"] <= high
    nearly = [r if i not in (0, 5) else "a man" for i, r in enumerate(REFERENCES)]
    assert paired_bootstrap(nearly, list(REFERENCES), REFERENCES)["p_value"] > 0.05


def test_paired_bootstrap_refuses_outputs_of_different_lengths():
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap(REFERENCES[:-1], REFERENCES, REFERENCES)


def test_the_distribution_ships_every_file_its_record_names():
    import fnmatch
    import tomllib

    config = tomllib.loads((REPO_ROOT / "pretrained" / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["transformer_book_pretrained"]
    left_out = [name for name in [*RECORD["files"], "record.json"] if not any(fnmatch.fnmatch(name, p) for p in patterns)]
    assert not left_out, f"pretrained/pyproject.toml's package-data leaves out {left_out}"
