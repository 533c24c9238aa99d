#!/usr/bin/env bash
# Installs the Debian packages pagellm needs, only those missing (non-interactive).
# Uses sudo when not root. CUDA is optional and never installed here: with nvcc at
# /usr/local/cuda/bin the CUDA backend is built too. Node and npm run the tests that use npm
# packages (tests/oracle: the OpenAI client the server test drives; `npm ci` there is run by
# that test); Debian's nodejs and npm are installed only when the commands are missing, since
# a NodeSource node (which bundles npm) conflicts with Debian's npm package.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc g++ python3 python3-lark
      libcriterion-dev libsentencepiece-dev sentencepiece libopenblas-dev
      libjansson-dev libxxhash-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev gnuplot-nox
      clang libclang-rt-14-dev libcurl4-openssl-dev python3-pytest python3-pip python3-setuptools
      python3-wheel libopenmpi-dev openmpi-bin)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
