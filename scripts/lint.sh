#!/bin/bash
# make lint: formatting, static analysis, banned functions, complexity (docs/STYLE.md R6, R13, R15).
set -u
cd "$(dirname "$0")/.."
rc=0
files=$(git ls-files '*.c' '*.h')
echo "lint: clang-format"
clang-format --dry-run --Werror $files || rc=1
echo "lint: banned functions"
if git grep -nE '\b(strcpy|strcat|sprintf|vsprintf|gets|strtok|atoi|atol|sscanf)\s*\(' -- '*.c' '*.h'; then
    echo "banned functions found (docs/STYLE.md R6)"; rc=1
fi
echo "lint: raw malloc/free outside common/core/mem.c"
if git grep -nE '\b(malloc|calloc|realloc|free)\s*\(' -- '*.c' ':!common/core/mem.c' ':!tests/**' |
    grep -vE 'cJSON_free|_free\(|mesh_free'; then
    echo "use mesh_malloc/mesh_free (docs/STYLE.md R6)"; rc=1
fi
echo "lint: cppcheck"
cppcheck --quiet --error-exitcode=1 --enable=warning,portability --inline-suppr \
    --suppress=missingIncludeSystem -D_GNU_SOURCE -Icommon common initcontainer sidecar injector || rc=1
if command -v pmccabe >/dev/null; then
    echo "lint: complexity (pmccabe, modified McCabe > 30 is an error)"
    over=$(pmccabe $(git ls-files 'common/*.c' 'initcontainer/*.c' 'sidecar/*.c' 'injector/*.c') 2>/dev/null | awk '$1 > 30')
    if [ -n "$over" ]; then echo "$over"; rc=1; fi
fi
[ $rc -eq 0 ] && echo "lint: clean"
exit $rc
