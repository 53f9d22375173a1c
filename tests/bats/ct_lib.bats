#!/usr/bin/env bats
# lib/bash/ct.sh, the one bash helper library: log and step lines (the format that
# ct_fleet.protocol.steplog parses), failing steps under set -e, exit handlers, ct_aws,
# ct_retry, ct_require, ct_tee_log, ct_mktemp.

load helpers

CT_LIB="$REPO_ROOT/lib/bash/ct.sh"
TIME_RE='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'

setup_file() { start_moto; }
teardown_file() { stop_moto; }
setup() { worker_setup; }

# ct BASH_CODE: run BASH_CODE in a fresh `set -euo pipefail` bash that sourced ct.sh.
ct() {
  bash -c 'set -euo pipefail; source "$1"; eval "$2"' my-script "$CT_LIB" "$1"
}

@test "ct_step: start and ok lines with tag and duration, the command's output between" {
  run ct 'CT_TAG=demo ct_step demo echo hello'
  [ "$status" -eq 0 ]
  assert_equal "${#lines[@]}" 3
  [[ ${lines[0]} =~ ^$TIME_RE\ \[demo\]\ step\ demo:\ start$ ]]
  assert_equal "${lines[1]}" hello
  [[ ${lines[2]} =~ ^$TIME_RE\ \[demo\]\ step\ demo:\ ok\ in\ [0-9]+s$ ]]
}

@test "ct_step: without CT_TAG the script's name is the tag; logs go to stderr" {
  run bash -c 'source "$1"; ct_step s true 2>&1 >/dev/null' my-step.sh "$CT_LIB"
  [[ ${lines[0]} =~ \[my-step.sh\]\ step\ s:\ start$ ]]
  run bash -c 'source "$1"; ct_log "a message" 2>/dev/null' my-step.sh "$CT_LIB"
  assert_equal "$output" ""
}

@test "ct_log: the time is UTC whatever the local zone, and the zone stays the script's" {
  local before after
  before=$(date -u +%s)
  run env TZ=Pacific/Kiritimati bash -c 'source "$1"; CT_TAG=t ct_log hi 2>&1; date +%z' my-script "$CT_LIB"
  after=$(date -u +%s)
  [ "$status" -eq 0 ]
  [[ ${lines[0]} =~ ^($TIME_RE)\ \[t\]\ hi$ ]]
  local logged
  logged=$(date -u -d "${BASH_REMATCH[1]}" +%s)
  ((logged >= before - 1 && logged <= after))
  assert_equal "${lines[1]}" +1400 # the script's own zone, not UTC, after the log line
}

@test "ct_step: set -e stops a failing step at once; its FAILED line and the script's status follow" {
  run ct 'f() { echo before; false; echo still-in-f; }; ct_step demo f; echo not-reached'
  [ "$status" -eq 1 ]
  assert_contains "$output" before
  refute_contains "$output" still-in-f
  refute_contains "$output" not-reached
  [[ ${lines[-1]} =~ ^$TIME_RE\ \[my-script\]\ step\ demo:\ FAILED\ \(exit\ 1\)\ after\ [0-9]+s$ ]]
  refute_contains "$output" "step demo: ok"
}

@test "ct_step: nested steps fail innermost first, each under its own tag, then the exit handlers" {
  run ct 'inner() { exit 7; }; outer() { CT_TAG=in ct_step inner inner; }
    bye() { echo "handler saw $CT_EXIT_STATUS"; }; ct_at_exit bye
    ct_step outer outer'
  [ "$status" -eq 7 ]
  assert_in_order "$output" "[in] step inner: start" "[in] step inner: FAILED (exit 7)" \
    "[my-script] step outer: FAILED (exit 7)" "handler saw 7"
}

@test "ct_step: under if/|| the FAILED line is logged and the status returned" {
  run ct 'f() { return 5; }; if ct_step demo f; then echo yes; else echo "no: $?"; fi'
  [ "$status" -eq 0 ]
  assert_contains "$output" "step demo: FAILED (exit 5)"
  assert_contains "$output" "no: 5"
}

@test "ct_step: a step name with a space or colon is refused" {
  run ct 'ct_step "two words" true'
  [ "$status" -eq 1 ]
  assert_contains "$output" "ERROR: ct_step: a step name has no spaces or colons"
}

@test "ct_step: counts the seconds a step takes" {
  run ct 'ct_step nap sleep 1.1'
  [ "$status" -eq 0 ]
  [[ $output =~ step\ nap:\ ok\ in\ ([0-9]+)s ]]
  [ "${BASH_REMATCH[1]}" -ge 1 ]
}

@test "ct_at_exit: handlers run on success too, with status 0, in order" {
  run ct 'a() { echo "a $CT_EXIT_STATUS"; }; b() { echo "b $CT_EXIT_STATUS"; }; ct_at_exit a; ct_at_exit b; echo body'
  [ "$status" -eq 0 ]
  assert_equal "$output" "$(printf 'body\na 0\nb 0')"
}

@test "ct_mktemp: its files and directories are gone when the script exits, also when a command failed" {
  export TMPDIR="$BATS_TEST_TMPDIR/tmp"
  mkdir -p "$TMPDIR"
  run ct 'f() { local d t; ct_mktemp d -d; ct_mktemp t; echo x >"$d/in"; echo "$d $t"; false; }; f; echo reached'
  [ "$status" -eq 1 ]
  [[ $output != *reached* ]]
  read -r dir file <<<"$output"
  [[ $dir == "$TMPDIR"/* && $file == "$TMPDIR"/* ]]
  [ ! -e "$dir" ] && [ ! -e "$file" ]
  run ct 'ct_mktemp t; echo "$t"'
  [ "$status" -eq 0 ] && [ ! -e "$output" ]
  [ -z "$(ls -A "$TMPDIR")" ]
}

@test "ct_die: an ERROR line, exit 1" {
  run ct 'ct_die "no such thing"; echo reached'
  [ "$status" -eq 1 ]
  [[ $output =~ ^$TIME_RE\ \[my-script\]\ ERROR:\ no\ such\ thing$ ]]
}

@test "the Python parser reads what ct_step writes (ct_fleet.protocol.steplog)" {
  run ct 'ok() { true; }; bad() { echo "the reason" >&2; return 3; }
    CT_TAG=t1 ct_step first ok; CT_TAG=t2 ct_step second bad'
  [ "$status" -eq 3 ]
  printf '%s\n' "$output" >"$BATS_TEST_TMPDIR/log"
  run python - "$REPO_ROOT/lib" "$BATS_TEST_TMPDIR/log" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ct_fleet.protocol import steplog
text = open(sys.argv[2]).read()
for s in steplog.steps(text.splitlines()):
    print(s.tag, s.name, s.event, s.status)
print(steplog.first_failure(text).describe().replace("after 0s", "after Ns"))
PY
  [ "$status" -eq 0 ]
  assert_equal "$output" "$(printf '%s\n' "t1 first start None" "t1 first ok None" "t2 second start None" \
    "t2 second failed 3" "step second FAILED (exit 3) after Ns: the reason")"
}

@test "ct_aws: without AWS_ENDPOINT_URL no --endpoint-url is passed (real AWS)" {
  run env -u AWS_ENDPOINT_URL bash -c 'source "$1"; set -x; ct_aws --version' x "$CT_LIB"
  [ "$status" -eq 0 ]
  assert_contains "$output" "+ aws --region us-east-1 --version"
  refute_contains "$output" "--endpoint-url"
}

@test "ct_aws: passes --endpoint-url and --region; reaches moto even for sqs, which CLI v1 sends to AWS" {
  run ct "set -x; ct_aws sqs create-queue --queue-name lb-bats-$TEST_ID --query QueueUrl --output text"
  [ "$status" -eq 0 ]
  assert_contains "$output" "+ aws --endpoint-url $MOTO_URL --region us-east-1 sqs create-queue"
  # Only moto hands out queue URLs on its own address.
  assert_equal "$(printf '%s\n' "${lines[@]}" | grep '^http')" "$MOTO_URL/123456789012/lb-bats-$TEST_ID"
}

@test "ct_retry: retries, then gives up after its attempts" {
  run ct 'ct_retry 3 0 false'
  [ "$status" -eq 1 ]
  assert_contains "$output" "attempt 2/3 failed"
  assert_contains "$output" "giving up after 3 attempts: false"
  run ct 'tries=0; f() { tries=$((tries + 1)); ((tries >= 2)); }; ct_retry 3 0 f; echo "took $tries"'
  [ "$status" -eq 0 ]
  assert_contains "$output" "took 2"
}

@test "ct_require: names the missing variable and CT_REQUIRE_HINT" {
  run ct 'A=1; CT_REQUIRE_HINT="from fleet.env"; ct_require A B'
  [ "$status" -eq 1 ]
  assert_contains "$output" "ERROR: B is not set (from fleet.env)"
}

@test "ct_tee_log: output goes to the file once, also from a script started under it" {
  local log="$BATS_TEST_TMPDIR/tee/log"
  run ct "ct_tee_log '$log'; echo one; bash -c 'source \"\$1\"; ct_tee_log \"\$2\"; echo two' x '$CT_LIB' '$log'"
  [ "$status" -eq 0 ]
  sleep 0.2 # tee flushes after the script ends
  assert_equal "$(cat "$log")" "$(printf 'one\ntwo')"
}

# --- ct_install_aws_cli: AWS's bundle stands in as a local zip, fetched by a stub curl ----

# aws_bundle: a zip laid out as AWS's awscliv2.zip, whose aws/install records its
# arguments and puts an `aws` in --bin-dir that answers --version as v2 does.
aws_bundle() {
  local dir="$BATS_TEST_TMPDIR/bundle"
  mkdir -p "$dir/aws"
  cat >"$dir/aws/install" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
printf '%s\n' "$*" >>"$STUB_DIR/aws-install.calls"
while (($#)); do
  [[ $1 == --bin-dir ]] && bin=$2
  shift
done
mkdir -p "$bin"
printf '#!/bin/sh\necho aws-cli/2.99.0 bundle-stub\n' >"$bin/aws"
chmod +x "$bin/aws"
SH
  chmod +x "$dir/aws/install"
  (cd "$dir" && zip -qr "$BATS_TEST_TMPDIR/awscliv2.zip" aws)
}

# curl_stub FAILURES: a curl that fails (exit 6, as for an unresolved host) its first
# FAILURES calls, then writes the bundle to its -o file.
curl_stub() {
  aws_bundle
  make_stub curl "n=\$(wc -l <\"\$STUB_DIR/curl.calls\")
((n > $1)) || { echo 'curl: (6) Could not resolve host' >&2; exit 6; }
while ((\$#)); do [[ \$1 == -o ]] && cp '$BATS_TEST_TMPDIR/awscliv2.zip' \"\$2\"; shift; done"
  make_stub sleep # ct_retry's pauses, not waited for
}

@test "ct_install_aws_cli: retries a failed download, then installs v2 (--update) where asked" {
  curl_stub 2
  local bin="$BATS_TEST_TMPDIR/usr/bin" dest="$BATS_TEST_TMPDIR/usr/aws-cli"
  run ct "ct_install_aws_cli '$bin' '$dest'"
  [ "$status" -eq 0 ]
  assert_equal "$(calls curl | wc -l)" 3
  assert_contains "$(calls curl)" "https://awscli.amazonaws.com/awscli-exe-linux-$(uname -m).zip"
  assert_equal "$(calls sleep)" "$(printf '10\n10')"
  assert_in_order "$output" "attempt 1/3 failed" "attempt 2/3 failed" "aws-cli/2.99.0 bundle-stub"
  assert_equal "$(calls aws-install)" "--update --bin-dir $bin --install-dir $dest"
  assert_not_called apt-get
}

@test "ct_install_aws_cli: three failed downloads fail it, with nothing installed" {
  curl_stub 3
  run ct "ct_install_aws_cli '$BATS_TEST_TMPDIR/bin2' '$BATS_TEST_TMPDIR/aws-cli'"
  [ "$status" -eq 1 ]
  assert_contains "$output" "giving up after 3 attempts: curl"
  assert_equal "$(calls curl | wc -l)" 3
  assert_not_called aws-install
  [ ! -e "$BATS_TEST_TMPDIR/bin2/aws" ]
}

@test "ct_install_aws_cli: a missing unzip is installed with apt first (stock Ubuntu)" {
  curl_stub 0
  # A system without unzip: the commands the function and ct.sh use, and the stubs.
  local sys="$BATS_TEST_TMPDIR/sys" tool
  mkdir -p "$sys"
  for tool in bash env date mktemp rm cp ln wc uname mkdir chmod cat; do
    ln -s "$(command -v "$tool")" "$sys/$tool"
  done
  make_stub apt-get "[[ \$* != *install* ]] || ln -s '$(command -v unzip)' '$STUB_BIN/unzip'"
  PATH="$STUB_BIN:$sys" run ct "ct_install_aws_cli '$BATS_TEST_TMPDIR/bin' '$BATS_TEST_TMPDIR/aws-cli'"
  [ "$status" -eq 0 ]
  local apt="-y -q -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold"
  assert_equal "$(calls apt-get)" "$(printf '%s\n' "$apt update" "$apt install --no-install-recommends unzip")"
  assert_contains "$output" "aws-cli/2.99.0 bundle-stub"
}
