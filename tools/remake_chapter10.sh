#!/usr/bin/env bash
# Chapter 10's page re-made on a machine with a GPU (CONTRIBUTING.md says when). Two steps:
#
#   tools/remake_chapter10.sh wheels WHEELS      here, with `make setup` done and a package index in reach: the
#                                                book's wheel and those of the notebook runner, into WHEELS
#   tools/remake_chapter10.sh run DATA WHEELS OUT   on the GPU machine, in a copy of this repository: installs the
#                                                wheels beside that machine's PyTorch, executes chapter 10 with the
#                                                gpu preset, and writes the notebook, the run's record.json and the
#                                                log into OUT. DATA is a folder holding multi30k/.
#
# Then, here: copy OUT/10_training_on_gpu.ipynb to chapters/ and OUT/record.json to
# chapters/records/gpu-<card>.json, and run nbval on the chapter and `make book`.
# TRANSFORMER_BOOK_PRESET=smoke and PYTHON=.venv/bin/python rehearse `run` on a machine without a GPU.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

case "${1:-}" in
wheels)
  wheels="$(realpath -m "${2:?usage: $0 wheels WHEELS}")"
  mkdir -p "$wheels"
  pip=("$here/.venv/bin/python" -m pip download --quiet --dest "$wheels" --only-binary=:all:
       --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
  # nbclient runs the notebook in an ipykernel; myst-nb's glue (without the Sphinx it needs only to build
  # the book) and docutils store the numbers the page quotes; ipywidgets draws the progress bars.
  "${pip[@]}" nbformat nbclient ipykernel ipywidgets docutils
  "${pip[@]}" --no-deps myst-nb
  (cd "$here" && .venv/bin/python -m build --wheel --outdir "$wheels" . >/dev/null)
  ls "$wheels"
  ;;
run)
  data="$(realpath "${2:?usage: $0 run DATA WHEELS OUT}")"
  wheels="$(realpath "${3:?usage: $0 run DATA WHEELS OUT}")"
  out="$(realpath -m "${4:?usage: $0 run DATA WHEELS OUT}")"
  python="${PYTHON:-python3}"
  [[ "$python" == */* ]] && python="$(realpath "$python")"  # a relative path must survive the cd below
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$out"
  # The machine's own packages stay (its PyTorch above all): only the wheels of packages it lacks, and the
  # book's, go into a folder of their own, ahead of the machine's on the path.
  mapfile -t missing < <("$python" - "$wheels" <<'PY'
import importlib.metadata, pathlib, sys
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        print(wheel)
    else:
        if name == "transformer_book":
            print(wheel)
PY
)
  "$python" -m pip install --quiet --no-index --no-deps --target "$work/site" "${missing[@]}"
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" PATH="$work/site/bin:$PATH"
  "$python" -c "import torch, transformer_book, nbclient, ipykernel; from myst_nb import glue
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'book', transformer_book.__version__)"
  mkdir "$work/repo"
  (cd "$here" && tar --exclude=./.venv --exclude=./.git --exclude=./_build --exclude=./chapters/runs -cf - .) |
    tar -xf - -C "$work/repo"
  cd "$work/repo"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1 || true
  start=$SECONDS
  TRANSFORMER_BOOK_DATA="$data" TRANSFORMER_BOOK_PRESET="${TRANSFORMER_BOOK_PRESET:-gpu}" \
    "$python" tools/execute.py chapters/10_training_on_gpu.ipynb 2>&1 | tee "$out/execute.log"
  echo "executed in $((SECONDS - start)) s" | tee -a "$out/execute.log"
  cp chapters/10_training_on_gpu.ipynb "$out/"
  cp chapters/runs/multi30k-*/record.json "$out/"
  ;;
*)
  sed -n '2,13p' "$0"
  exit 2
  ;;
esac
