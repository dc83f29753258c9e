#!/usr/bin/env bash
# Every tg-* command answers --help (exit 0, a usage line on stdout) and
# refuses an unknown option (non-zero exit, a usage line on stderr) without
# doing anything else. Arguments: the tools' paths.
set -u
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for tool in "$@"; do
  name=$(basename "$tool")
  if ! timeout 20 "$tool" --help >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL $name --help: exit status $? (stderr: $(head -c 300 "$tmp/err"))"; failed=1
  elif ! grep -qi '^usage' "$tmp/out"; then
    echo "FAIL $name --help: no usage line on stdout (got: $(head -c 300 "$tmp/out"))"; failed=1
  else
    echo "ok   $name --help"
  fi
  # Run in an empty directory so a tool that took the option for a path
  # would leave evidence behind.
  (cd "$tmp" && mkdir -p cwd && cd cwd && timeout 20 "$tool" --no_such_option=1 >"$tmp/out" 2>"$tmp/err")
  status=$?
  if [[ $status -eq 0 || $status -eq 124 ]]; then
    echo "FAIL $name --no_such_option=1: exit status $status, expected a usage error"; failed=1
  elif ! grep -qi 'usage' "$tmp/err"; then
    echo "FAIL $name --no_such_option=1: no usage line on stderr (got: $(head -c 300 "$tmp/err"))"; failed=1
  elif [[ -n "$(ls -A "$tmp/cwd")" ]]; then
    echo "FAIL $name --no_such_option=1: wrote $(ls -A "$tmp/cwd")"; failed=1
  else
    echo "ok   $name --no_such_option=1 (exit $status)"
  fi
  rm -rf "$tmp/cwd"
done
exit $failed
