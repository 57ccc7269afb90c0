#!/usr/bin/env bash
# docs/configuration.md must hold exactly what stratad's config table prints.
set -euo pipefail
stratad="$1"
doc="$2"
want="$(STRATAD_MARKDOWN=1 "$stratad")"
got="$(sed -n '/<!-- generated: stratad -->/,/<!-- end generated: stratad -->/p' "$doc" |
       sed '1d;$d')"
if [ "$want" != "$got" ]; then
    echo "docs/configuration.md is out of date with stratad's config table:"
    diff <(echo "$got") <(echo "$want") || true
    echo "regenerate the section with: STRATAD_MARKDOWN=1 stratad"
    exit 1
fi
# --help comes from the same table: every key is in it.
help="$("$stratad" --help)"
for key in $(echo "$want" | sed -n 's/^| `\([a-z_]*\)` .*/\1/p'); do
    flag="--${key//_/-}"
    if ! grep -q -- "$flag" <<<"$help"; then
        echo "stratad --help does not mention $flag"
        exit 1
    fi
done
echo "1 passed, 0 failed"
