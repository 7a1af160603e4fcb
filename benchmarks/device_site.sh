#!/usr/bin/env bash
# For a GPU machine that cannot reach PyPI and whose Python lacks spaCy (an image with torch, CuPy,
# Triton, h5py and numpy, as the lent device machines have): spaCy, thinc, the serve extra
# (FastAPI, uvicorn) and what they need beside that image, at the versions of this checkout's
# .venv, unpacked for CPython 3.12 on x86-64, stripped, in one tarball of about 13 MB.
#
#   bash benchmarks/device_site.sh .dev/site312.tar.xz      # here, where pip reaches PyPI
#   # there: tar xJf .dev/site312.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
#   #        python3 -m pip install --no-deps --no-index --no-build-isolation -e .   # entry points
#   #        OUT=$OUT PYTHON=python3 bash benchmarks/device_check.sh
set -euo pipefail

TARBALL="${1:?the tarball to write, e.g. .dev/site312.tar.xz}"
VENV_PIP="${VENV_PIP:-.venv/bin/pip}"
PACKAGES="spacy thinc blis catalogue cloudpathlib confection cymem murmurhash preshed pydantic pydantic_core
smart_open spacy-legacy spacy-loggers srsly wasabi weasel typing-inspection annotated-types platformdirs
fastapi starlette uvicorn opentelemetry-api typing_extensions"

pins=()
for name in $PACKAGES; do
    version=$("$VENV_PIP" show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$version" ] || { echo "$name is not installed in $VENV_PIP's environment: make install" >&2; exit 1; }
    pins+=("$name==$version")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV_PIP" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$work/wheels" "${pins[@]}"
mkdir "$work/site"
for wheel in "$work"/wheels/*.whl; do
    unzip -q -o "$wheel" -d "$work/site"
done
rm -rf "$work/site/spacy/tests" "$work/site/thinc/tests"
find "$work/site" -name "*.so" -exec strip --strip-unneeded {} +
mkdir -p "$(dirname "$TARBALL")"
tar cJf "$TARBALL" -C "$work/site" .
echo "$TARBALL: $(du -h "$TARBALL" | cut -f1), ${#pins[@]} packages"
