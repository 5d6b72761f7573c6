#!/usr/bin/env bash
# A compiled build of the overlay core and the simulator's network, for evaluation runs only
# (issue 18, item 3): the same source, compiled to C extension modules with mypyc, out of tree.
#
#     docs/bench/build_compiled_sim.sh [BUILD_DIR]        # default /tmp/overlay-compiled
#     cd /tmp/overlay-compiled && PYTHONPATH=$PWD <repo>/.venv/bin/python -m poolD simulate overlay ...
#     (with SIM_VENV: that venv's python)
#
# (From BUILD_DIR, or running a script by path: `python -m` puts the current directory first on
# sys.path, so run from the repository it would import the pure source.)
# BUILD_DIR gets a copy of the project's packages (so that it can go first on PYTHONPATH and
# shadow the tree) in which the modules listed in COMPILED are replaced by extension modules
# built from the very same .py files. The daemons and the test suite never see it: they run the
# pure-Python source. mypy (which ships mypyc) is installed into a separate build venv
# (MYPYC_VENV, default /tmp/mypyc-venv), not into the project's venv: nothing at run time
# depends on it. It needs gcc and the Python headers (Debian: gcc, python3-dev; a pyenv Python
# has its own headers). The build venv must use the same CPython as .venv (the ABI).
# SIM_VENV names another venv to build for (default <repo>/.venv), e.g. one made with Debian's
# /usr/bin/python3.11, with its own MYPYC_VENV.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-/tmp/overlay-compiled}
venv=${MYPYC_VENV:-/tmp/mypyc-venv}
sim_venv=${SIM_VENV:-$repo/.venv}
python=$(readlink -f "$sim_venv/bin/python")
COMPILED=(
    common/overlay/ids.py
    common/overlay/leafset.py
    common/overlay/table.py
    common/overlay/node.py
    sim/network.py
)
if [[ ! -x $venv/bin/mypyc ]]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q "mypy==${MYPY_VERSION:-2.4.1}" setuptools
fi
abi='import sys, sysconfig; print(sys.version, sysconfig.get_config_var("EXT_SUFFIX"))'
if [[ $("$venv/bin/python" -c "$abi") != $("$python" -c "$abi") ]]; then
    echo "$venv runs another Python than $sim_venv: give each its own MYPYC_VENV" >&2
    exit 1
fi
# mypy runs pydantic's plugin (without it every model's defaulted field reads as required): the
# build venv sees the project venv's packages, the same versions, through a .pth file.
site=$(readlink -f "$("$sim_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')")
"$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' |
    xargs -I{} sh -c "echo '$site' > {}/project-venv.pth"
rm -rf "$build" && mkdir -p "$build"
# The packages, as committed or changed in the work tree (no caches, no tests).
(cd "$repo" && tar -cf - --exclude=__pycache__ common sim poolD faultD llic) | (cd "$build" && tar -xf -)
cd "$build"
# Only the compiled modules are checked (follow_imports = silent): the rest stays interpreted.
cat >mypy.ini <<'INI'
[mypy]
plugins = pydantic.mypy
follow_imports = silent
INI
# mypy type-checks the compiled modules against the project venv's packages (pydantic, ...).
"$venv/bin/mypyc" --config-file mypy.ini --explicit-package-bases --python-executable "$sim_venv/bin/python" \
    "${COMPILED[@]}" >build.log 2>&1 || {
    cat build.log >&2
    exit 1
}
for f in "${COMPILED[@]}"; do
    rm "$f"  # the extension module alone: no doubt about which one is imported
done
[[ ${KEEP_C:-0} == 1 ]] || rm -rf build  # KEEP_C=1 keeps the generated C (build/) to read
echo "built: ${COMPILED[*]} -> $build"
