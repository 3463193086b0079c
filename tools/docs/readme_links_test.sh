#!/usr/bin/env bash
# Every relative link in the repository's markdown files leads somewhere: for each
# *.md file git knows (tracked, or new and not ignored; without git, every one in
# the tree; bazel-* output links and third_party/'s subfolders left out),
# every link [text](target) or ![alt](target) whose target is not a URL
#   - names a file or folder that exists (relative to the linking file; a leading /
#     is the repository root), and
#   - when it has a #anchor and leads to a markdown file, that file has a heading
#     whose GitHub slug is the anchor: the heading's text without markup, lowercase,
#     every character but letters, digits, spaces, '-' and '_' dropped, spaces as
#     '-', and -1, -2, ... after the second and later headings of the same slug.
# Links inside fenced code blocks and `code spans` are not links and are skipped.
# Prints each broken link as file:line: target: why, then how many links it checked;
# exits 1 when any is broken, except those listed in KNOWN_BROKEN below. bash, grep,
# sed and awk only (no python).
#
# The repository root: $LOOM_REPO_ROOT if set, else the folder above this script
# (symlinks resolved: under `bazel test` the runfiles link leads to the source tree,
# which is why the sh_test is local) that holds WORKSPACE, else `git rev-parse`.
set -uo pipefail

find_root() {
  if [[ -n "${LOOM_REPO_ROOT:-}" ]]; then
    echo "$LOOM_REPO_ROOT"
    return
  fi
  local dir
  dir="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
  while [[ "$dir" != "/" ]]; do
    if [[ -f "$dir/WORKSPACE" && -d "$dir/tools/docs" ]]; then
      echo "$dir"
      return
    fi
    dir="$(dirname "$dir")"
  done
  git -C "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" rev-parse --show-toplevel 2>/dev/null
}

ROOT="$(find_root)"
if [[ -z "$ROOT" || ! -f "$ROOT/WORKSPACE" ]]; then
  echo "readme_links_test: cannot find the repository root (set LOOM_REPO_ROOT)" >&2
  exit 2
fi
cd "$ROOT" || exit 2

# Letters beyond ASCII count as letters in slugs where a UTF-8 locale exists.
SLUG_LOCALE=C
if locale -a 2>/dev/null | grep -qiE '^c\.utf-?8$'; then
  SLUG_LOCALE="$(locale -a | grep -iE '^c\.utf-?8$' | head -n 1)"
fi

# Links known to be broken, as "FILE TARGET", reported but not failed: files this
# change could not edit. Remove an entry once its link is fixed (the test says so).
KNOWN_BROKEN=()
declare -A KNOWN=()
for entry in "${KNOWN_BROKEN[@]}"; do KNOWN[$entry]=0; done

# report FILE LINE TARGET WHY: one broken link, unless it is a known one.
report() {
  if [[ -n "${KNOWN["$1 $3"]+set}" ]]; then
    KNOWN["$1 $3"]=1
    echo "$1:$2: $3: $4 (known, in KNOWN_BROKEN)"
    return
  fi
  echo "$1:$2: $3: $4"
  broken=$((broken + 1))
}

# The markdown files git knows (tracked, or new and not ignored), else a walk of the tree.
list_markdown() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- '*.md'
  else
    find . \( -name '.git' -o -name 'bazel-*' -o -name 'node_modules' \) -prune \
      -o -type f -name '*.md' -print | sed 's|^\./||' | sort
  fi
}
FILES=()
while IFS= read -r f; do
  case "$f" in
    bazel-*|*/external/*|third_party/*/*) continue ;;
  esac
  [[ -f "$f" ]] && FILES+=("$f")
done < <(list_markdown)

# AWK_SCAN MODE FILE: MODE "links" prints LINE<TAB>TARGET for every link outside
# code; MODE "headings" prints the text of every ATX heading outside code, and the
# name or id of every <a name=...> / id="..." anchor prefixed by a tab.
AWK_SCAN='
function strip_code(s) { gsub(/`[^`]*`/, "", s); return s }
/^[ \t]*(```|~~~)/ { fence = !fence; next }
fence { next }
mode == "links" {
  s = strip_code($0)
  while (match(s, /\]\([^)]*\)/)) {
    t = substr(s, RSTART + 2, RLENGTH - 3)
    s = substr(s, RSTART + RLENGTH)
    sub(/^[ \t]+/, "", t); sub(/[ \t]+("[^"]*"|'"'"'[^'"'"']*'"'"')?[ \t]*$/, "", t)
    sub(/^</, "", t); sub(/>$/, "", t)
    print FNR "\t" t
  }
  next
}
mode == "headings" {
  if (match($0, /^##*[ \t]/) && RLENGTH - 1 <= 6) {
    h = substr($0, RLENGTH + 1)
    sub(/[ \t]+#+[ \t]*$/, "", h); sub(/^[ \t]+/, "", h); sub(/[ \t]+$/, "", h)
    print h
  }
  s = $0
  while (match(s, /(name|id)="[^"]*"/)) {
    a = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
    sub(/^[a-z]*="/, "", a); sub(/"$/, "", a)
    print "\t" a
  }
}
'

# slugs FILE: the anchors FILE's headings give, one a line.
slugs() {
  awk -v mode=headings "$AWK_SCAN" "$1" |
    LC_ALL="$SLUG_LOCALE" sed -E '
      /^\t/ { s/^\t//; b }
      s/!?\[([^]]*)\]\([^)]*\)/\1/g
      s/<[^>]*>//g
      s/[`*]//g
      y/ABCDEFGHIJKLMNOPQRSTUVWXYZ/abcdefghijklmnopqrstuvwxyz/
      s/[^[:alnum:] _-]//g
      s/ /-/g' |
    awk '{ n = seen[$0]++; if (n) print $0 "-" n; else print $0 }'
}

# normalize PATH: PATH with . and .. resolved; fails when it leaves the root.
normalize() {
  local IFS=/ part out=()
  for part in $1; do
    case "$part" in
      ''|.) ;;
      ..) ((${#out[@]})) || return 1; unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  echo "${out[*]}"
}

declare -A ANCHORS=()  # "file<TAB>slug" -> 1, filled per target file on demand
declare -A SCANNED=()
has_anchor() {
  local file="$1" anchor="$2" s
  if [[ -z "${SCANNED[$file]:-}" ]]; then
    SCANNED[$file]=1
    while IFS= read -r s; do ANCHORS["$file"$'\t'"$s"]=1; done < <(slugs "$file")
  fi
  [[ -n "${ANCHORS["$file"$'\t'"$anchor"]:-}" ]]
}

checked=0
broken=0
for file in "${FILES[@]}"; do
  dir="$(dirname "$file")"
  while IFS=$'\t' read -r line target; do
    # URLs (http:, https:, mailto:, ...) are not this test's business.
    if [[ -z "$target" || "$target" =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]]; then
      continue
    fi
    checked=$((checked + 1))
    path="${target%%#*}"
    anchor=""
    [[ "$target" == *"#"* ]] && anchor="${target#*#}"
    path="${path%%\?*}"
    path="${path//%20/ }"
    if [[ -z "$path" ]]; then
      resolved="$file"
    elif [[ "$path" == /* ]]; then
      resolved="$(normalize "$path")" || resolved=""
    else
      resolved="$(normalize "$dir/$path")" || resolved=""
    fi
    if [[ -z "$resolved" && -n "$path" ]]; then
      report "$file" "$line" "$target" "leads outside the repository"
      continue
    fi
    if [[ ! -e "$resolved" ]]; then
      report "$file" "$line" "$target" "$resolved does not exist"
      continue
    fi
    if [[ -n "$anchor" && -f "$resolved" && "$resolved" == *.md ]]; then
      if ! has_anchor "$resolved" "$anchor"; then
        report "$file" "$line" "$target" "$resolved has no heading with the anchor #$anchor"
      fi
    fi
  done < <(awk -v mode=links "$AWK_SCAN" "$file")
done

for entry in "${!KNOWN[@]}"; do
  if [[ "${KNOWN[$entry]}" == 0 ]]; then
    echo "readme_links_test: KNOWN_BROKEN lists \"$entry\", which is no longer broken: remove it"
  fi
done
echo "readme_links_test: checked $checked relative links in ${#FILES[@]} markdown files; $broken broken"
((broken == 0))
