"""Make the book's pretrained translator from a finished run of `train`, the way chapter 10 makes its own.

Chapter 10's choices, on the weights as they will ship (every weight rounded to float16): the best epoch or
the average of the last snapshots, chosen by greedy BLEU on the validation set; beam search's alpha chosen on
the validation set from chapter 10's grid; then BLEU on test_2016_flickr, greedy and with the preset's beam.
sacreBLEU's paired bootstrap says which of those choices are within noise. Written into OUT (by default the
companion distribution's package folder, pretrained/src/transformer_book_pretrained):

  checkpoint/      a checkpoint folder that load_checkpoint reads: float16 weights, tokenizer, sealed record
  record.json      the run that made it, the choices and their bootstrap, test BLEU, SHA-256 of every file
  test2016.*.txt   the test translations behind the BLEU (beam and greedy), one line per source sentence

Run (a few minutes on a 2-core CPU): .venv/bin/python tools/make_pretrained.py RUN_DIR [--out OUT]
"""
import argparse
import copy
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from transformer_book import __version__, data
from transformer_book.hashing import file_sha256
from transformer_book.run.checkpoint import average_checkpoints, load_checkpoint, save_checkpoint
from transformer_book.run.presets import in_direction
from transformer_book.run.runfolder import last_snapshots
from transformer_book.run.translate import Translator, evaluate, paired_bootstrap

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "pretrained" / "src" / "transformer_book_pretrained"
LENGTH_PENALTIES = (0.6, 1.0, 1.4, 1.8, 2.2)  # chapter 10's grid for beam search's alpha
TEST_SPLIT = "test2016"
MULTI30K_TERMS = ("trained on Multi30k (Elliott et al., 2016), whose English captions come from Flickr30k: "
                  "for non-commercial research and education")


def rounded_to_float16(model: torch.nn.Module) -> torch.nn.Module:
    """The model with every weight rounded to float16 (kept in float32): what the shipped file holds."""
    with torch.no_grad():
        for weight in model.parameters():
            weight.copy_(weight.half().float())
    return model


def cpu_name() -> str:
    """The CPU's model name, as lscpu prints it."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def bootstrap(baseline: dict, other: dict, pairs: list[tuple[str, str]]) -> dict:
    """paired_bootstrap of two evaluate() results on the same pairs, rounded for the record."""
    test = paired_bootstrap(baseline["hypotheses"], other["hypotheses"], [tgt for _, tgt in pairs])
    interval = test["other_interval"]
    return {"bleu_baseline": round(test["bleu_baseline"], 2), "bleu_other": round(test["bleu_other"], 2),
            "difference": round(test["difference"], 2), "p_value": round(test["p_value"], 4),
            "other_interval": None if interval is None else [round(x, 2) for x in interval],
            "within_noise": test["p_value"] > 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a finished run folder of `train` (holds best/ and snapshots/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write checkpoint/ and record.json")
    parser.add_argument("--trained-with", default=None,
                        help="the commit whose code trained the run (default: this checkout's)")
    parser.add_argument("--note", default=None, help="anything the record should say about the run's conditions")
    parser.add_argument("--sentences", type=int, default=None,
                        help="score only the first N sentences of each split, to try the tool (the book's record "
                             "scores them all)")
    args = parser.parse_args()
    started = time.perf_counter()
    best_model, best = load_checkpoint(args.run / "best")
    record = load_checkpoint(args.run / "last")[1].record  # the whole run's (best/ holds it as of its epoch)
    preset = record.preset
    if record.stopped is not None or record.train_state.epoch < preset["epochs"]:
        sys.exit(f"error: {args.run} is not a finished run (stopped: {record.stopped}, epoch "
                 f"{record.train_state.epoch} of {preset['epochs']}); finish it with the same train command")
    snapshots = last_snapshots(args.run / "snapshots", preset["average_last"])
    average_model, _ = average_checkpoints(snapshots)
    candidates = {
        "best epoch": Translator.from_loaded(rounded_to_float16(best_model).eval(), best, "cpu"),
        f"average of last {len(snapshots)}": Translator.from_loaded(rounded_to_float16(average_model).eval(), best,
                                                                    "cpu"),
    }
    direction = preset["direction"]
    val_pairs = in_direction(data.load_multi30k("val"), direction)[: args.sentences]
    test_pairs = in_direction(data.load_multi30k(TEST_SPLIT), direction)[: args.sentences]
    beam = preset["beam_size"]

    val_greedy = {name: evaluate(t, val_pairs, beam_size=1) for name, t in candidates.items()}
    chosen = max(val_greedy, key=lambda name: val_greedy[name]["bleu"])
    other = next(name for name in candidates if name != chosen)
    scores = ", ".join(f"{name} {r['bleu']:.2f}" for name, r in val_greedy.items())
    print(f"validation greedy BLEU: {scores}; chosen: {chosen}", flush=True)
    val_beam = {a: evaluate(candidates[chosen], val_pairs, beam, a) for a in LENGTH_PENALTIES}
    alpha = max(val_beam, key=lambda a: val_beam[a]["bleu"])
    scores = ", ".join(f"{a} {r['bleu']:.2f}" for a, r in val_beam.items())
    print(f"validation beam {beam} BLEU by alpha: {scores}; chosen: {alpha}", flush=True)
    test = {(name, b): evaluate(candidates[name], test_pairs, b, alpha) for name in (chosen, other) for b in (1, beam)}
    print("test BLEU: " + ", ".join(f"{n} beam {b} {r['bleu']:.2f}" for (n, b), r in test.items()), flush=True)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(candidates[chosen].model).half()
    save_checkpoint(out / "checkpoint", half, None, record, args.run / "tokenizer.json")
    shipped = Translator.from_checkpoint(out / "checkpoint", "cpu")
    sample = [src for src, _ in test_pairs[:100]]
    if shipped.translate(sample, beam, length_penalty=alpha) != test[chosen, beam]["hypotheses"][:100]:
        sys.exit("error: the saved float16 checkpoint translates differently from the weights it was made from")
    for b, name in ((beam, "beam"), (1, "greedy")):
        (out / f"test2016.{name}.txt").write_text("\n".join(test[chosen, b]["hypotheses"]) + "\n", encoding="utf-8")

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    state = record.train_state
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "record.json" and p.suffix != ".py")
    made = {
        "what": f"the book's own run of the {preset['name']} preset (seed {preset['seed']}), {direction}",
        "made_by": f"python -m transformer_book train --preset {preset['name']}, then tools/make_pretrained.py",
        "preset": preset["name"], "seed": preset["seed"], "direction": direction,
        "machine": cpu_name(), "torch": torch.__version__, "transformer_book": __version__,
        "trained_with_commit": args.trained_with or commit, "made_with_commit": commit,
        "arithmetic": "float32" if record.amp == "None" else record.amp, "amp_rates": record.amp_rates,
        "steps": state.step, "epochs": state.epoch, "train_minutes": round(state.train_seconds / 60, 1),
        "target_tokens_per_s": round(state.tokens_seen / state.train_seconds),
        "weights": chosen, "stored_as": "float16", "parameters": sum(p.numel() for p in half.parameters()),
        "val_bleu_greedy": {name: round(r["bleu"], 2) for name, r in val_greedy.items()},
        "val_bleu_beam": {str(a): round(r["bleu"], 2) for a, r in val_beam.items()},
        "beam_size": beam, "length_penalty": alpha, "test_split": data.SPLITS[TEST_SPLIT],
        "test_sentences": len(test_pairs),
        "test_bleu_beam": round(test[chosen, beam]["bleu"], 2),
        "test_bleu_greedy": round(test[chosen, 1]["bleu"], 2),
        "test_bleu_beam_lowercase": round(test[chosen, beam]["bleu_lowercase"], 2),
        "test_bleu_other_weights_beam": round(test[other, beam]["bleu"], 2),
        "signature": test[chosen, beam]["signature"],
        "bootstrap": {
            f"validation greedy: {other} against {chosen}": bootstrap(val_greedy[chosen], val_greedy[other], val_pairs),
            **{f"validation beam: alpha {a} against {alpha}": bootstrap(val_beam[alpha], val_beam[a], val_pairs)
               for a in LENGTH_PENALTIES if a != alpha},
            f"test beam: {other} against {chosen}": bootstrap(test[chosen, beam], test[other, beam], test_pairs),
        },
        "note": args.note,
        "terms": MULTI30K_TERMS,
        "files": {str(p.relative_to(out)): file_sha256(p) for p in files},
        "bytes": {str(p.relative_to(out)): p.stat().st_size for p in files},
    }
    (out / "record.json").write_text(json.dumps(made, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out} in {(time.perf_counter() - started) / 60:.1f} min: test BLEU {made['test_bleu_beam']:.2f} "
          f"(beam {beam}, alpha {alpha}), {made['test_bleu_greedy']:.2f} greedy")


if __name__ == "__main__":
    main()
