#!/usr/bin/env bash
# Build llama.cpp's llama-server (continuous batching) from the llama.cpp source vendored in the
# llama-cpp-python sdist on PyPI, once per version and flags, into a cache; then copy it into the venv.
#   scripts/dev/build_llama_server.sh PYTHON VERSION "CMAKE FLAGS" DEST
set -euo pipefail
python=$1 version=$2 flags=$3 dest=$4
key=$(echo "$flags" | cksum | cut -d' ' -f1)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/utu/llama-server-$version-$key
if [ ! -x "$cache/llama-server" ]; then
    echo "building llama-server from llama.cpp (llama-cpp-python $version sdist), once: 5-8 minutes on 2 cores..."
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$python" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
        "llama-cpp-python==$version" -d "$work"
    tar xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
    src="$work/llama_cpp_python-$version/vendor/llama.cpp"
    command -v cmake >/dev/null || "$python" -m pip install --disable-pip-version-check -q cmake==4.2.1
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    # No web UI and no prebuilt UI download (no network here), no HTTPS, static: one self-contained binary.
    # shellcheck disable=SC2086
    cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release $flags \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >"$work/configure.log" \
        || { tail -20 "$work/configure.log"; exit 1; }
    cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" \
        || { tail -40 "$work/build.log"; exit 1; }
    mkdir -p "$cache"
    cp "$work/build/bin/llama-server" "$cache/llama-server.tmp"
    mv "$cache/llama-server.tmp" "$cache/llama-server"
fi
cp "$cache/llama-server" "$dest"
