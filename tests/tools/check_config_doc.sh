#!/usr/bin/env bash
# docs/configuration.md must hold exactly what a program's config table prints.
#   check_config_doc.sh BINARY DOC [NAME [MARKDOWN_ENV]]
# NAME (default stratad) names the generated section; MARKDOWN_ENV (default
# STRATAD_MARKDOWN) is the variable that makes the binary print it.
set -euo pipefail
bin="$1"
doc="$2"
name="${3:-stratad}"
env_var="${4:-STRATAD_MARKDOWN}"
want="$(env "$env_var=1" "$bin")"
got="$(sed -n "/<!-- generated: $name -->/,/<!-- end generated: $name -->/p" "$doc" |
       sed '1d;$d')"
if [ "$want" != "$got" ]; then
    echo "docs/configuration.md is out of date with $name's config table:"
    diff <(echo "$got") <(echo "$want") || true
    echo "regenerate the section with: $env_var=1 $name"
    exit 1
fi
# --help comes from the same table: every key is in it.
help="$("$bin" --help)"
for key in $(echo "$want" | sed -n 's/^| `\([a-z_]*\)` .*/\1/p'); do
    flag="--${key//_/-}"
    if ! grep -q -- "$flag" <<<"$help"; then
        echo "$name --help does not mention $flag"
        exit 1
    fi
done
echo "1 passed, 0 failed"
