#!/usr/bin/env bash
# `make packages`: self-contained bundles of nodeagent and coordinator (PyInstaller one-dir:
# the interpreter, the standard library and every dependency under /opt/NAME), then each
# as .deb and .rpm (nfpm) in dist/.
#   VERSION   package version (default: the project's)     DIST  output directory (dist)
#   --reuse-bundles  package the bundles already built instead of building them again
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh

export VERSION="${VERSION:-$(.venv/bin/python -c 'import nodeagent; print(nodeagent.__version__)')}"
case "$(uname -m)" in
  x86_64) export ARCH=amd64 ;;
  aarch64) export ARCH=arm64 ;;
  *) echo "error: unsupported machine $(uname -m)" >&2; exit 2 ;;
esac
BUILD=build/packaging  # the nfpm configs name the files built here
DIST="${DIST:-dist}"
reuse=false
[[ "${1:-}" == --reuse-bundles ]] && reuse=true

bundle() {  # NAME [pyinstaller options...]
  local name=$1; shift
  if $reuse && [[ -x "$BUILD/bundle/$name/$name" ]]; then return; fi
  # --paths .: the project is installed editable, which PyInstaller's analysis cannot follow.
  .venv/bin/pyinstaller --noconfirm --onedir --strip --log-level WARN --name "$name" \
    --paths . --distpath "$BUILD/bundle" --workpath "$BUILD/work" --specpath "$BUILD/work" \
    --exclude-module hypothesis --exclude-module pytest --exclude-module _pytest \
    --exclude-module pip --exclude-module setuptools \
    "$@" "packaging/${name}_main.py"
}

# Maintainer scripts: one set, specialised per package (its name, how it runs, and its
# ready() check from packaging/NAME/ready.sh).
scripts() {  # NAME RUN-ARGS
  mkdir -p "$BUILD/scripts/$1"
  for script in postinstall preremove postremove; do
    sed -e "s|@NAME@|$1|g" -e "s|@BIN@|/opt/$1/$1|g" -e "s|@RUN@|$2|g" \
      -e "/@READY@/r packaging/$1/ready.sh" -e "/@READY@/d" \
      "packaging/scripts/$script.sh" > "$BUILD/scripts/$1/$script.sh"
  done
}

# The two bundles side by side (each its own work and spec files under --workpath): most of a
# build is one process analysing imports, so two take little longer than one.
bundle nodeagent --collect-submodules nodeagent --collect-submodules pyroute2 & agent=$!
bundle coordinator --collect-submodules coordinator & coordinator=$!
wait "$agent"
wait "$coordinator"
scripts nodeagent run
scripts coordinator serve

mkdir -p "$DIST"
for name in nodeagent coordinator; do
  for packager in deb rpm; do
    .venv/bin/nfpm package --config "packaging/$name.nfpm.yaml" --packager "$packager" \
      --target "$DIST/"
  done
done
