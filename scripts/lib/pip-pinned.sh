# Sourced by the install scripts of the PyPI tools the project pins in a requirements file.
#
# pip_pinned_venv NAME VENV REQ: makes VENV (python3 -m venv) and installs REQ into it, unless VENV
# was made from this very REQ (a copy of it kept as VENV/.requirements); a changed pin reinstalls.

pip_pinned_venv() {
  local name="$1" venv="$2" req="$3"
  local stamp="$venv/.requirements"
  if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$stamp"; then
    printf '== %s: %s\n' "$name" "$(grep -v '^#' "$req" | tr '\n' ' ')" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
  fi
}
