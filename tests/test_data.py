"""Tests for transformer_book.data (chapter 9): download paths without the network, loading, tokenizer, batches."""

import gzip
import hashlib
import http.client
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest
import torch
from conftest import serve_http
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_book.data as data
import transformer_book.multi30k as multi30k
from transformer_book.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    SPLITS,
    UNK_ID,
    batch_by_tokens,
    decode,
    encode,
    encode_pairs,
    load_multi30k,
    load_tokenizer,
    normalize,
    padding_efficiency,
    save_tokenizer,
    token_buckets,
    train_tokenizer,
)
from transformer_book.multi30k import (
    DATA_ENV,
    MULTI30K_COMMIT,
    MULTI30K_FILES,
    MULTI30K_URL,
    DataError,
    download_multi30k,
)

# The shared copy of Multi30k: $TRANSFORMER_BOOK_DATA/multi30k, or ../shared/data/multi30k next to the repository.
_ENV_ROOT = os.environ.get(DATA_ENV)
SHARED_ROOT = Path(_ENV_ROOT) if _ENV_ROOT else Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED = SHARED_ROOT / "multi30k"
needs_data = pytest.mark.skipif(
    not all((SHARED / name).is_file() for name in MULTI30K_FILES),
    reason=f"Multi30k not found in {SHARED}: set {DATA_ENV} to a folder holding multi30k/ with the six files",
)

SAMPLE = [
    ("Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.", "Two young, White males are outside."),
    ("Ein kleines Mädchen klettert in ein Spielhaus aus Holz.", "A little girl climbing into a wooden playhouse."),
    ("Ein Mann  mit\xa0einem orangefarbenen Hut.\t", "A man in an orange hat."),
    ("Ein Hund rennt über saftig-grünes Gras!", "A dog runs on lush green grass!"),
    ("Eine Frau (32) liest „Die Zeit“ am Bahnhof?", "A woman (32) reads 'Die Zeit' at the station?"),
]


def _fake_gzip(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


# Small stand-ins for the six files: real gzip text, two lines each, so that loading works on them too.
FAKE_LINES = {
    name: [f"{name.split('.')[0]} {name.split('.')[1]} line {i}" for i in range(2)] for name in MULTI30K_FILES
}
FAKE_LINES["val.de.gz"] = ["Ein Mann\u2028mit Hut.", "Zwei Hunde."]  # a separator that splitlines() would cut
FAKE_LINES["val.en.gz"] = ["A man with a hat.", "Two dogs."]
FAKE = {name: _fake_gzip(lines) for name, lines in FAKE_LINES.items()}


@pytest.fixture
def fake_table(monkeypatch):
    """Point the module's checksum table at the fake files, with sha256 digests computed here."""
    table = {name: hashlib.sha256(content).hexdigest() for name, content in FAKE.items()}
    assert table != MULTI30K_FILES
    monkeypatch.setattr(multi30k, "MULTI30K_FILES", table)
    return table


def _put(folder: Path, names=tuple(FAKE)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(FAKE[name])
    return folder


class Network:
    """A stand-in for multi30k._fetch, serving the fake files. Call i uses modes[i] (the last mode repeats):
    'ok' writes the file, 'garbage' writes junk, 'down' raises URLError, and any exception instance is
    raised after half of the file has been written (a transfer that breaks off)."""

    def __init__(self, *modes):
        self.modes, self.calls = list(modes), []

    def __call__(self, url: str, dest: Path, *limits) -> None:
        mode = self.modes[min(len(self.calls), len(self.modes) - 1)]
        self.calls.append(url)
        assert url.startswith(MULTI30K_URL + "/"), url
        content = FAKE[url.rsplit("/", 1)[1]]
        if mode == "down":
            raise urllib.error.URLError("no network in this test")
        if mode == "garbage":
            dest.write_bytes(b"not the file you asked for")
        elif isinstance(mode, BaseException):
            dest.write_bytes(content[: len(content) // 2])
            raise mode
        else:
            dest.write_bytes(content)


@pytest.fixture(autouse=True)
def one_thread():
    """Batches are many small tensor operations: on a busy 2-core machine a second thread only adds waiting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)


def _parts(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def _is_verified(folder: Path, table: dict[str, str]) -> bool:
    return all(hashlib.sha256((folder / n).read_bytes()).hexdigest() == d for n, d in table.items())


# Transfers that break off: what urllib and http.client raise when the connection fails half way.
BREAKS = [
    http.client.IncompleteRead(b"partial", 1000),
    ConnectionResetError("connection reset by peer"),
    TimeoutError("the read operation timed out"),
    urllib.error.URLError("temporary failure in name resolution"),
]
BREAK_IDS = ["IncompleteRead", "ConnectionResetError", "TimeoutError", "URLError"]


# --- download: the local folder named by TRANSFORMER_BOOK_DATA -------------------------------------------


def test_download_is_pinned_to_one_commit():
    """The URLs name one commit of the dataset repository, never a branch that can move under the checksums."""
    assert len(MULTI30K_COMMIT) == 40 and all(c in "0123456789abcdef" for c in MULTI30K_COMMIT)
    assert MULTI30K_URL == f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw"
    assert "master" not in MULTI30K_URL and "main" not in MULTI30K_URL


def test_env_folder_is_used_and_never_downloads(tmp_path, monkeypatch, fake_table):
    _put(tmp_path / "multi30k")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    net = Network("down")
    monkeypatch.setattr(multi30k, "_fetch", net)
    assert download_multi30k(root=tmp_path / "ignored") == tmp_path / "multi30k"
    assert net.calls == []
    assert not (tmp_path / "ignored").exists()


def test_env_folder_missing_file_names_it(tmp_path, monkeypatch, fake_table):
    _put(tmp_path / "multi30k", [n for n in FAKE if n != "val.en.gz"])
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    net = Network("ok")
    monkeypatch.setattr(multi30k, "_fetch", net)
    with pytest.raises(DataError, match=r"val\.en\.gz does not exist.*TRANSFORMER_BOOK_DATA"):
        download_multi30k()
    assert net.calls == []


def test_env_folder_corrupt_file_is_reported_not_fetched(tmp_path, monkeypatch, fake_table):
    _put(tmp_path / "multi30k")
    (tmp_path / "multi30k" / "train.de.gz").write_bytes(b"truncated")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    net = Network("ok")
    monkeypatch.setattr(multi30k, "_fetch", net)
    with pytest.raises(DataError, match=r"train\.de\.gz is corrupt: its sha256 is [0-9a-f]{64}, expected"):
        download_multi30k()
    assert net.calls == []


def test_env_folder_is_loaded_line_by_line(tmp_path, monkeypatch, fake_table):
    """Pairs come from line i of both files, split at "\n" only (U+2028 inside a line does not split it)."""
    _put(tmp_path / "multi30k")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert load_multi30k("val") == list(zip(FAKE_LINES["val.de.gz"], FAKE_LINES["val.en.gz"]))
    assert load_multi30k("test2016", "en", "de")[1] == ("test_2016_flickr en line 1", "test_2016_flickr de line 1")


# --- download: the cache ----------------------------------------------------------------------------------


def test_download_into_empty_cache(tmp_path, monkeypatch, no_env, fake_table):
    net = Network("ok")
    monkeypatch.setattr(multi30k, "_fetch", net)
    folder = download_multi30k(tmp_path)
    assert folder == tmp_path / "multi30k"
    assert sorted(p.name for p in folder.iterdir()) == sorted(fake_table)
    assert _is_verified(folder, fake_table)
    assert net.calls == [f"{MULTI30K_URL}/{name}" for name in fake_table]


def test_verified_cache_is_not_fetched_again(tmp_path, monkeypatch, no_env, fake_table):
    _put(tmp_path / "multi30k")
    net = Network("down")
    monkeypatch.setattr(multi30k, "_fetch", net)
    assert download_multi30k(tmp_path) == tmp_path / "multi30k"
    assert net.calls == []


def test_default_root_is_the_user_cache(tmp_path, monkeypatch, no_env, fake_table):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(multi30k, "_fetch", Network("ok"))
    assert download_multi30k() == tmp_path / ".cache" / "transformer_book" / "multi30k"


def test_corrupt_cached_copy_is_refetched_once(tmp_path, monkeypatch, no_env, fake_table):
    folder = _put(tmp_path / "multi30k")
    damaged = folder / "val.de.gz"
    damaged.write_bytes(FAKE["val.de.gz"][:20])  # a copy that stopped half way
    net = Network("ok")
    monkeypatch.setattr(multi30k, "_fetch", net)
    download_multi30k(tmp_path)
    assert net.calls == [f"{MULTI30K_URL}/val.de.gz"]
    assert damaged.read_bytes() == FAKE["val.de.gz"]
    assert _parts(folder) == []


def test_corrupt_download_is_retried_once(tmp_path, monkeypatch, no_env, fake_table):
    folder = _put(tmp_path / "multi30k", [n for n in FAKE if n != "test_2016_flickr.en.gz"])
    net = Network("garbage", "ok")
    monkeypatch.setattr(multi30k, "_fetch", net)
    download_multi30k(tmp_path)
    assert net.calls == [f"{MULTI30K_URL}/test_2016_flickr.en.gz"] * 2
    assert _is_verified(folder, fake_table)
    assert _parts(folder) == []


def test_missing_pinned_commit_falls_back_to_the_branch(tmp_path, monkeypatch, no_env, fake_table):
    """A 404 at the pinned commit sends the next attempt to the `master` branch, whose bytes are checked the same."""
    folder = _put(tmp_path / "multi30k", [n for n in FAKE if n != "val.de.gz"])
    calls = []

    def fetch(url: str, dest: Path, *limits) -> None:
        calls.append(url)
        if url.startswith(MULTI30K_URL + "/"):
            raise urllib.error.HTTPError(url, 404, "Not Found", None, None)
        dest.write_bytes(FAKE[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(multi30k, "_fetch", fetch)
    download_multi30k(tmp_path)
    assert calls == [f"{MULTI30K_URL}/val.de.gz", f"{multi30k.MULTI30K_BRANCH_URL}/val.de.gz"]
    assert multi30k.MULTI30K_BRANCH_URL.endswith("/master/data/task1/raw")
    assert _is_verified(folder, fake_table)
    assert _parts(folder) == []


def test_corrupt_download_twice_raises_and_keeps_nothing(tmp_path, monkeypatch, no_env, fake_table):
    folder = _put(tmp_path / "multi30k", [n for n in FAKE if n != "val.en.gz"])
    net = Network("garbage")
    monkeypatch.setattr(multi30k, "_fetch", net)
    with pytest.raises(DataError, match=r"val\.en\.gz .* in 2 attempts \(wrong sha256 [0-9a-f]{64}; wrong sha256") as err:
        download_multi30k(tmp_path)
    assert f"The expected sha256 is {fake_table['val.en.gz']}" in str(err.value)
    assert len(net.calls) == multi30k.DOWNLOAD_ATTEMPTS == 2
    assert not (folder / "val.en.gz").exists()
    assert _parts(folder) == []


@pytest.mark.parametrize("error", BREAKS, ids=BREAK_IDS)
def test_broken_transfer_leaves_nothing_and_is_retried_once(tmp_path, monkeypatch, no_env, fake_table, error):
    folder = _put(tmp_path / "multi30k", [n for n in FAKE if n != "train.en.gz"])
    net = Network(error, "ok")
    after_each_attempt = []

    def fetch(url: str, dest: Path, *limits) -> None:
        try:
            net(url, dest)
        finally:
            after_each_attempt.append(sorted(p.name for p in folder.iterdir() if p.name.startswith(".train.en")))
            assert not (folder / "train.en.gz").exists(), "nothing gets the real name before it is checked"

    monkeypatch.setattr(multi30k, "_fetch", fetch)
    download_multi30k(tmp_path)
    assert net.calls == [f"{MULTI30K_URL}/train.en.gz"] * 2
    assert [len(names) for names in after_each_attempt] == [1, 1], "the broken half file must be gone before the retry"
    assert _is_verified(folder, fake_table)
    assert _parts(folder) == []


@pytest.mark.parametrize("error", BREAKS, ids=BREAK_IDS)
def test_broken_transfer_twice_names_file_and_env(tmp_path, monkeypatch, no_env, fake_table, error):
    folder = _put(tmp_path / "multi30k", [n for n in FAKE if n != "val.de.gz"])
    net = Network(error)
    monkeypatch.setattr(multi30k, "_fetch", net)
    with pytest.raises(DataError, match=rf"Could not download val\.de\.gz .* in 2 attempts \({type(error).__name__}") as err:
        download_multi30k(tmp_path)
    assert "set the environment variable TRANSFORMER_BOOK_DATA=DIR" in str(err.value)
    assert len(net.calls) == 2
    assert not (folder / "val.de.gz").exists()
    assert _parts(folder) == []


def test_the_error_counts_the_attempts_the_deadline_allowed(tmp_path, monkeypatch, no_env, fake_table):
    net = Network("down")

    def slow_failure(url, dest, *limits):
        time.sleep(0.3)  # past the whole deadline: no second attempt
        net(url, dest, *limits)

    monkeypatch.setattr(multi30k, "_DOWNLOAD_DEADLINE_S", 0.2)
    monkeypatch.setattr(multi30k, "_fetch", slow_failure)
    with pytest.raises(DataError, match=r"train\.de\.gz .* in 1 attempt \(URLError"):
        download_multi30k(tmp_path)
    assert len(net.calls) == 1


def test_load_multi30k_reads_the_data_variable_before_root(tmp_path, monkeypatch, fake_table):
    """load_multi30k's docstring: with TRANSFORMER_BOOK_DATA set, `root` is not used."""
    _put(tmp_path / "multi30k")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    monkeypatch.setattr(multi30k, "_fetch", Network("down"))
    assert data.load_multi30k("val", root=tmp_path / "elsewhere") == data.load_multi30k("val")
    assert not (tmp_path / "elsewhere").exists()
    assert "TRANSFORMER_BOOK_DATA" in data.load_multi30k.__doc__ and "root" in data.load_multi30k.__doc__


def test_no_network_and_no_copy_says_what_to_do(tmp_path, monkeypatch, no_env, fake_table):
    net = Network("down")
    monkeypatch.setattr(multi30k, "_fetch", net)
    with pytest.raises(DataError) as err:
        download_multi30k(tmp_path)
    message = str(err.value)
    assert message.startswith(f"Could not download train.de.gz from {MULTI30K_URL}/train.de.gz in 2 attempts")
    assert "no network in this test" in message
    assert "into a folder DIR/multi30k/ and set the environment variable TRANSFORMER_BOOK_DATA=DIR" in message
    assert len(net.calls) == 2
    assert _parts(tmp_path / "multi30k") == []
    assert not (tmp_path / "multi30k" / "train.de.gz").exists()


def test_local_write_error_is_not_retried(tmp_path, monkeypatch, no_env, fake_table):
    calls = []

    def disk_full(url: str, dest: Path, *limits) -> None:
        calls.append(url)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(multi30k, "_fetch", disk_full)
    with pytest.raises(DataError, match=r"Could not write the download of train\.de\.gz into .*No space left"):
        download_multi30k(tmp_path)
    assert len(calls) == 1
    assert _parts(tmp_path / "multi30k") == []


def test_fetch_is_the_only_network_access(tmp_path, monkeypatch, no_env):
    """With urlopen itself failing, the error is still a DataError naming the file."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("refused")

    monkeypatch.setattr(multi30k.urllib.request, "urlopen", refuse)
    with pytest.raises(DataError, match=r"train\.de\.gz"):
        download_multi30k(tmp_path)


class _Server(http.server.BaseHTTPRequestHandler):
    """Serves /full (the whole body) and /short (a body that stops before its announced Content-Length)."""

    body = bytes(range(256)) * 40

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body if self.path == "/full" else self.body[:1000])
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def local_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_copies_the_bytes(tmp_path, local_server):
    multi30k._fetch(f"{local_server}/full", tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == _Server.body


def test_fetch_reports_a_body_that_stops_short(tmp_path, local_server):
    """http.client itself ends a short body quietly; _fetch turns it into an error that is retried."""
    with pytest.raises(ConnectionError, match=f"stopped after 1000 of {len(_Server.body)} bytes"):
        multi30k._fetch(f"{local_server}/short", tmp_path / "f")
    assert isinstance(ConnectionError("x"), multi30k._TRANSFER_ERRORS)


# --- loading ------------------------------------------------------------------------------------------------


@pytest.fixture
def shared_env(monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(SHARED_ROOT))


@needs_data
@pytest.mark.parametrize(("split", "size"), [("train", 29000), ("val", 1014), ("test2016", 1000)])
def test_load_sizes(split, size, shared_env):
    pairs = load_multi30k(split)
    assert len(pairs) == size
    assert all(isinstance(de, str) and isinstance(en, str) and de and en for de, en in pairs)
    assert all(s == s.strip() for pair in pairs for s in pair)


@needs_data
def test_load_first_pair_and_direction(shared_env):
    de, en = load_multi30k("test2016")[0]
    assert de.startswith("Ein Mann mit einem orangefarbenen Hut")
    assert en.startswith("A man in an orange hat")
    assert load_multi30k("test2016", "en", "de")[0] == (en, de)
    with gzip.open(SHARED / f"{SPLITS['val']}.de.gz", "rt", encoding="utf-8") as f:
        assert load_multi30k("val")[5][0] == f.read().split("\n")[5].strip()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "test"}, r"split must be one of \['train', 'val', 'test2016'\]; got 'test'"),
        ({"split": "train", "src_lang": "fr"}, r"src_lang must be one of \['de', 'en'\]; got 'fr'"),
        ({"split": "train", "tgt_lang": "EN"}, r"tgt_lang must be one of"),
        ({"split": "train", "src_lang": "en", "tgt_lang": "en"}, r"must differ; both are 'en'"),
    ],
)
def test_load_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_multi30k(**kwargs)


# --- normal form and tokenizer --------------------------------------------------------------------------


def test_whitespace_list_is_pythons():
    matched = {chr(c) for c in range(0x110000) if data._WHITESPACE_RE.fullmatch(chr(c))}
    assert matched == {chr(c) for c in range(0x110000) if chr(c).isspace()}


def test_tokenizer_normalizer_agrees_on_every_whitespace(small_tokenizer):
    for c in range(0x110000):
        if chr(c).isspace():
            text = f" a{chr(c)}{chr(c)}b{chr(c)}"
            assert small_tokenizer.normalizer.normalize_str(text) == normalize(text) == "a b", hex(c)


def test_normalize():
    assert normalize("  Ein\tMann\xa0 läuft\u2028②.\n") == "Ein Mann läuft 2."
    assert normalize("") == ""
    with pytest.raises(TypeError, match="sentence must be a str; got int"):
        normalize(3)


@pytest.fixture(scope="module")
def small_tokenizer():
    if all((SHARED / name).is_file() for name in MULTI30K_FILES):
        with gzip.open(SHARED / "train.de.gz", "rt", encoding="utf-8") as f_de, gzip.open(
            SHARED / "train.en.gz", "rt", encoding="utf-8"
        ) as f_en:
            corpus = f_de.read().split("\n")[:1500] + f_en.read().split("\n")[:1500]
    else:  # numbers give enough distinct pieces for 600 tokens
        corpus = [f"Bild {i}: {i * 37 % 1000} Hunde und {i % 97} Katzen." for i in range(2000)]
    corpus += [s for pair in SAMPLE for s in pair]
    return train_tokenizer(corpus, vocab_size=600)


def test_special_ids(small_tokenizer):
    # The trained tokenizer and the package's named ids agree: each id names its own special token, and the
    # special tokens take the first ids, before every learned piece.
    ids = (PAD_ID, BOS_ID, EOS_ID, UNK_ID)
    assert [small_tokenizer.token_to_id(SPECIAL_TOKENS[i]) for i in ids] == list(ids)
    assert sorted(small_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS) == list(range(len(SPECIAL_TOKENS))) == sorted(ids)
    assert small_tokenizer.get_vocab_size() == 600
    assert all(i not in (PAD_ID, BOS_ID, EOS_ID) for de, en in SAMPLE for i in encode(small_tokenizer, de + en))


def test_round_trip_on_sample(small_tokenizer):
    for pair in SAMPLE:
        for sentence in pair:
            ids = encode(small_tokenizer, sentence)
            assert UNK_ID not in ids
            assert decode(small_tokenizer, ids) == normalize(sentence)
            assert decode(small_tokenizer, torch.tensor([BOS_ID, *ids, EOS_ID, PAD_ID])) == normalize(sentence)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.sampled_from("Ein Mann\t\xa0 läuft, hat einen Hund.\u2003!?-"), max_size=40))
def test_round_trip_property(small_tokenizer, text):
    assert small_tokenizer.normalizer.normalize_str(text) == normalize(text)
    assert decode(small_tokenizer, encode(small_tokenizer, text)) == normalize(text)


def test_unseen_character_becomes_unk(small_tokenizer):
    assert UNK_ID in encode(small_tokenizer, "Ein Mann mit 🎸.")
    assert decode(small_tokenizer, encode(small_tokenizer, "Ein Mann mit 🎸.")) == "Ein Mann mit ."


def test_tokenizer_bad_input(small_tokenizer):
    with pytest.raises(ValueError, match="vocab_size must be an int >= 5; got 4"):
        train_tokenizer(["a b"], vocab_size=4)
    with pytest.raises(TypeError, match="vocab_size must be an int; got '8000' of type str"):
        train_tokenizer(["a b"], vocab_size="8000")
    with pytest.raises(ValueError, match="sentences is empty: pass a non-empty iterable of str"):
        train_tokenizer([], vocab_size=100)
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a str; got 3 of type int"):
        train_tokenizer(["a", 3], vocab_size=100)
    with pytest.raises(TypeError, match="sentence must be a str; got list"):
        encode(small_tokenizer, ["Ein", "Mann"])
    with pytest.raises(ValueError, match=r"ids must be a 1-D tensor \(T,\); got shape \(1, 2\)"):
        decode(small_tokenizer, torch.tensor([[5, 6]]))


def test_training_is_deterministic():
    corpus = [s for pair in SAMPLE for s in pair] * 3
    assert train_tokenizer(corpus, 120).to_str() == train_tokenizer(corpus, 120).to_str()


def test_save_and_load(small_tokenizer, tmp_path):
    path = save_tokenizer(small_tokenizer, tmp_path / "sub" / "tok.json")
    assert path.is_file() and not path.with_name("tok.json.part").exists()
    loaded = load_tokenizer(path)
    for de, en in SAMPLE:
        assert encode(loaded, de) == encode(small_tokenizer, de)
        assert decode(loaded, encode(loaded, en)) == normalize(en)


def test_load_missing_and_malformed(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer file at .*nope\.json; train one"):
        load_tokenizer(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json is not a tokenizer JSON file"):
        load_tokenizer(tmp_path / "bad.json")


def test_load_rejects_other_special_ids(tmp_path):
    from tokenizers import Tokenizer, models

    other = Tokenizer(models.WordLevel({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}, unk_token="<unk>"))
    other.save(str(tmp_path / "other.json"))
    with pytest.raises(ValueError, match=r"special token '<pad>' has id 1, but this book fixes it at 0"):
        load_tokenizer(tmp_path / "other.json")


# --- pairs to examples ------------------------------------------------------------------------------------


def test_encode_pairs_layout(small_tokenizer):
    examples = encode_pairs(SAMPLE, small_tokenizer)
    assert len(examples) == len(SAMPLE)
    for (src, tgt), (de, en) in zip(examples, SAMPLE):
        assert src == encode(small_tokenizer, de) + [EOS_ID]
        assert tgt == [BOS_ID] + encode(small_tokenizer, en) + [EOS_ID]
    assert encode_pairs([("", "")], small_tokenizer) == [([EOS_ID], [BOS_ID, EOS_ID])]


def test_encode_pairs_drops_long_pairs(small_tokenizer):
    examples = encode_pairs(SAMPLE, small_tokenizer)
    limit = sorted(max(len(s), len(t) - 1) for s, t in examples)[2]
    kept = encode_pairs(SAMPLE, small_tokenizer, max_len=limit)
    assert kept == [e for e in examples if max(len(e[0]), len(e[1]) - 1) <= limit]
    assert 0 < len(kept) < len(examples)


def test_encode_pairs_bad_input(small_tokenizer):
    with pytest.raises(ValueError, match="max_len must be an int >= 2; got 1"):
        encode_pairs(SAMPLE, small_tokenizer, max_len=1)
    with pytest.raises(TypeError, match="max_len must be an int; got 24.0 of type float"):
        encode_pairs(SAMPLE, small_tokenizer, max_len=24.0)
    with pytest.raises(TypeError, match=r"pairs\[1\] must be a \(source, target\) pair of str"):
        encode_pairs([("a", "b"), ("only one",)], small_tokenizer)


# --- batches ------------------------------------------------------------------------------------------------


def _synthetic(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ls = int(torch.randint(1, 40, (1,), generator=g))
        lt = max(1, ls + int(torch.randint(-3, 4, (1,), generator=g)))  # translations have similar lengths
        out.append((list(range(4, 4 + ls)) + [EOS_ID], [BOS_ID] + list(range(4, 4 + lt)) + [EOS_ID]))
    return out


def _rows(batches) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(source ids, target ids to predict) of every row of every batch, padding removed, in batch order."""
    return [
        (tuple(s[s != PAD_ID].tolist()), tuple(t[t != PAD_ID].tolist()))
        for b in batches
        for s, t in zip(b.src, b.tgt_out)
    ]


def test_batches_deterministic_and_epoch_dependent():
    examples = _synthetic(600)
    a = batch_by_tokens(examples, 500, seed=3, epoch=2, pool_size=128)
    b = batch_by_tokens(examples, 500, seed=3, epoch=2, pool_size=128)
    assert _rows(a) == _rows(b)
    assert all(torch.equal(x.tgt_mask, y.tgt_mask) for x, y in zip(a, b))
    assert _rows(batch_by_tokens(examples, 500, seed=3, epoch=3, pool_size=128)) != _rows(a)
    assert _rows(batch_by_tokens(examples, 500, seed=4, epoch=2, pool_size=128)) != _rows(a)


def test_batches_cover_every_example_once_and_shift_targets():
    examples = _synthetic(300)
    batches = batch_by_tokens(examples, 400)
    expected = sorted((tuple(s), tuple(t[1:])) for s, t in examples)
    assert sorted(_rows(batches)) == expected
    for b in batches:
        assert torch.all(b.tgt_in[:, 0] == BOS_ID)
        assert b.num_tokens == int((b.tgt_out != PAD_ID).sum())


def test_unshuffled_batches_come_in_length_order():
    examples = _synthetic(300)
    widths = [max(b.src.size(1), b.tgt_in.size(1)) for b in batch_by_tokens(examples, 400, shuffle=False)]
    assert widths == sorted(widths)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=200),
    max_tokens=st.integers(30, 300),
    pool_size=st.integers(1, 64),
    shuffle=st.booleans(),
)
def test_token_buckets_budget_and_partition(sizes, max_tokens, pool_size, shuffle):
    groups = token_buckets(sizes, max_tokens, shuffle=shuffle, seed=1, epoch=0, pool_size=pool_size)
    assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
    assert all(g and len(g) * max(sizes[i] for i in g) <= max_tokens for g in groups)


def test_batch_budget_respected_in_tensors():
    examples = _synthetic(400)
    for b in batch_by_tokens(examples, 350, pool_size=64):
        assert b.src.size(0) * max(b.src.size(1), b.tgt_in.size(1)) <= 350


def test_bucketing_wastes_less_padding():
    examples = _synthetic(1000)
    bucketed = padding_efficiency(batch_by_tokens(examples, 800, pool_size=1000))
    random = padding_efficiency(batch_by_tokens(examples, 800, pool_size=1))
    assert bucketed > 0.9 > random


def test_batching_bad_input():
    examples = _synthetic(10)
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1; got 0"):
        batch_by_tokens(examples, 0)
    with pytest.raises(TypeError, match="max_tokens must be an int; got 4000.0 of type float"):
        batch_by_tokens(examples, 4000.0)
    with pytest.raises(TypeError, match="pool_size must be an int; got '16384' of type str"):
        batch_by_tokens(examples, 500, pool_size="16384")
    with pytest.raises(ValueError, match=r"max_tokens=5 is smaller than the longest example \(\d+ positions\)"):
        batch_by_tokens(examples, 5)
    with pytest.raises(ValueError, match="pool_size must be an int >= 1; got 0"):
        batch_by_tokens(examples, 500, pool_size=0)
    with pytest.raises(ValueError, match="there are no examples to batch"):
        batch_by_tokens([], 500)
    with pytest.raises(ValueError, match=r"examples\[1\] needs >= 1 source id and >= 2 target ids"):
        batch_by_tokens([([5, EOS_ID], [BOS_ID, EOS_ID]), ([5], [BOS_ID])], 500)
    with pytest.raises(ValueError, match="batches is empty"):
        padding_efficiency([])


class _Drip(http.server.BaseHTTPRequestHandler):
    """Announces a large body, then sends one byte every 0.2 s: a server that never quite stops."""

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        self.send_response(200)
        self.send_header("Content-Length", str(10**6))
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def drip_server():
    yield from serve_http(_Drip)


def test_a_server_that_drips_bytes_hits_the_deadline(tmp_path, drip_server, monkeypatch):
    monkeypatch.setattr(multi30k, "_DOWNLOAD_DEADLINE_S", 2)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="took longer than 2 s"):
        multi30k._fetch(f"{drip_server}/x", tmp_path / "f")
    assert time.monotonic() - start < 10


def test_a_server_that_drips_bytes_is_too_slow(tmp_path, drip_server, monkeypatch):
    monkeypatch.setattr(multi30k, "_RATE_GRACE_S", 1)
    with pytest.raises(TimeoutError, match="too slow to finish"):
        multi30k._fetch(f"{drip_server}/x", tmp_path / "f")
    assert isinstance(TimeoutError("x"), multi30k._TRANSFER_ERRORS)


def test_an_empty_data_variable_is_an_error_not_a_download(tmp_path, monkeypatch):
    monkeypatch.setenv(multi30k.DATA_ENV, "")
    monkeypatch.setattr(multi30k, "_fetch", lambda *args: pytest.fail("downloaded although the variable is set"))
    with pytest.raises(DataError, match="is set but empty"):
        download_multi30k(tmp_path)


def test_sigterm_during_a_download_leaves_no_part_file(tmp_path, drip_server):
    script = (
        "import sys\nfrom transformer_book import multi30k\n"
        "multi30k.MULTI30K_URL = sys.argv[1]\nmulti30k.MULTI30K_FILES = {'x.gz': '0' * 64}\n"
        "print('downloading', flush=True)\nmulti30k.download_multi30k(sys.argv[2])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != multi30k.DATA_ENV}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    child = subprocess.Popen([sys.executable, "-c", script, drip_server, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdout.readline().strip() == "downloading"
    folder = tmp_path / "multi30k"
    for _ in range(100):  # wait until the transfer has started writing its .part file
        if list(folder.glob(".*.part")):
            break
        time.sleep(0.05)
    assert list(folder.glob(".*.part")), "the download never started"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM  # ended by the signal itself, as without the download
    assert not list(folder.glob("*.part")) and not list(folder.glob(".*.part"))


def test_sigterm_in_the_clean_up_itself_leaves_no_part_file(tmp_path, monkeypatch):
    """The signal can land on any line: here just as the failed attempt's `finally` starts to remove its file."""
    def broken_transfer(url, dest, *args):
        dest.write_bytes(b"the first bytes")
        raise ConnectionError("the transfer broke off")

    real_unlink, unlinked = Path.unlink, []

    def unlink_after_a_sigterm(path, missing_ok=False):
        unlinked.append(path)
        if len(unlinked) == 1:  # the handler raises where the signal lands: before this first removal
            signal.raise_signal(signal.SIGTERM)  # the download's handler raises here
        real_unlink(path, missing_ok=missing_ok)

    class CallersHandler(Exception):
        """What the caller's own SIGTERM handler raises (the command line's raises KeyboardInterrupt)."""

    def callers_handler(signum, frame):
        raise CallersHandler(signum)

    monkeypatch.setattr(multi30k, "_fetch", broken_transfer)
    monkeypatch.setattr(multi30k, "MULTI30K_FILES", {"x.gz": "0" * 64})
    monkeypatch.setattr(Path, "unlink", unlink_after_a_sigterm)
    previous = signal.signal(signal.SIGTERM, callers_handler)
    try:
        with pytest.raises(CallersHandler) as stopped:  # no SystemExit from the library: the caller decides
            multi30k._download_verified("x.gz", tmp_path)
        assert signal.getsignal(signal.SIGTERM) is callers_handler  # the caller's handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)
    monkeypatch.undo()
    assert stopped.value.args == (signal.SIGTERM,)
    assert unlinked[0].suffix == ".part"  # the signal did land in the clean-up of a temporary file
    assert list(tmp_path.iterdir()) == []


def test_sigterm_during_a_download_goes_on_to_a_handler_that_returns(tmp_path, monkeypatch):
    def terminated_transfer(url, dest, *args):
        dest.write_bytes(b"the first bytes")
        signal.raise_signal(signal.SIGTERM)  # the download's handler raises here

    noted = []
    monkeypatch.setattr(multi30k, "_fetch", terminated_transfer)
    monkeypatch.setattr(multi30k, "MULTI30K_FILES", {"x.gz": "0" * 64})
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: noted.append(signum))
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM during the download of x.gz"):
            multi30k._download_verified("x.gz", tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert noted == [signal.SIGTERM] and list(tmp_path.iterdir()) == []


def test_special_tokens_typed_in_text_never_become_control_ids():
    # before: '</s>' and '<pad>' inside a sentence were encoded as EOS and PAD, cutting or masking the source
    tokenizer = data.train_tokenizer(["ein hund läuft", "a dog runs", "<x> / s"] * 40, vocab_size=60)
    typed = "ein </s> hund <pad> läuft <s>"
    controls = {PAD_ID, BOS_ID, EOS_ID}
    assert not controls & set(data.encode(tokenizer, typed))
    ((src, tgt),) = data.encode_pairs([(typed, typed)], tokenizer)
    assert not controls & set(src[:-1]) and not controls & set(tgt[1:-1])  # only the EOS and BOS the book adds
    assert data.decode(tokenizer, data.encode(tokenizer, "</s>")) != ""  # kept as the characters typed
