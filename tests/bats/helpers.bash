# shellcheck shell=bash
# Shared by the bats tests of the worker scripts (worker/*.sh, lib/ct_fleet/cloud/shims/shutdown).
#
# - A real moto server, empty for each .bats file (start_moto in setup_file, stop_moto in
#   teardown_file): the whole run's one (setup_suite.bash), reset, or the file's own
#   otherwise. The real AWS CLI talks to it over HTTP. Nothing AWS is faked.
# - A fresh LB_HOME per test (worker_setup in setup), so tests never share files.
# - Only what cannot run here (shutdown, docker, apt-get, useradd, usermod, sudo...) is
#   replaced by recording stubs on PATH: each appends its argv, one line per call, to
#   $STUB_DIR/<name>.calls (and stdin to <name>.stdin when asked).
#
# Usage in a .bats file:
#   load helpers
#   setup_file() { start_moto; make_bucket; }
#   teardown_file() { stop_moto; }
#   setup() { worker_setup; }

# shellcheck disable=SC2034  # WORKER_DIR, SHIM_DIR, LB_ROOT_DIR...: used by the .bats files
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORKER_DIR="$REPO_ROOT/worker"
SHIM_DIR="$REPO_ROOT/lib/ct_fleet/cloud/shims"
# The venv holding the AWS CLI, moto and python (bin/test puts it first on PATH too).
TEST_VENV="${CT_FLEET_TEST_VENV:-${CT_FLEET_VENV:-$REPO_ROOT/.venv}}"
TEST_REGION=us-east-1
TEST_BUCKET=ct-bats-fleet-results

# Everything a worker script reads from its environment or fleet.env: cleared per test
# so a developer's shell (or an earlier test) cannot leak into a run.
WORKER_VARS=(
  LB_HOME LB_ROOT LB_ETC LB_LOG LB_EXTRA LB_SETUP_ENV LB_VENV LB_VENV_PROVIDED LB_SHUTDOWN LB_NO_SHUTDOWN
  LB_SITE LB_SITE_CACHE LB_CODE_CACHE SETTING_REQUIREMENTS SETTING_WHEEL_KEYS
  LB_PYTHON CT_TAG CT_LOG_FILE CT_FLEET_VENV CT_IMDS_ENDPOINT
  INSTANCE_ID FLEET_ID BUCKET CODE_SHA SECRET_NAMES SECRET_PREFIX SECRETS_WAIT
  SETTINGS WORKER_USER WORKER_SETUP EXTRA_SRC_KEYS WORK_DIR UV_CACHE_DIR
  DOCKER_ORG_NAME DOCKER_ORG_PAT DOCKER_ORG_NAME_SSM_PARAM DOCKER_ORG_PAT_SSM_PARAM
  DOCKER_REGISTRY DOCKER_CONFIG LB_WORKER_DOCKER_CONFIG
  AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION
)

aws_test_env() {
  export PATH="$TEST_VENV/bin:$PATH"
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION="$TEST_REGION"
  export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
  unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION
}

free_port() {
  python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start a moto server on a free loopback port; exports MOTO_PID, MOTO_URL, AWS_ENDPOINT_URL.
# Under the suite's server (setup_suite.bash) a file gets that one, emptied (moto's reset),
# instead: each file's own cost 1.5 s of CPU (moto's import, then each service's models),
# and a reset server answers as a new one would. MOTO_PID is then unset: the file's
# stop_moto leaves the suite's server running.
start_moto() {
  aws_test_env
  if [[ -n ${CT_BATS_SUITE_MOTO_URL:-} ]]; then
    unset MOTO_PID
    export MOTO_URL=$CT_BATS_SUITE_MOTO_URL AWS_ENDPOINT_URL=$CT_BATS_SUITE_MOTO_URL
    curl -sf -X POST -o /dev/null "$MOTO_URL/moto-api/reset" && return 0
    echo "the suite's moto server at $MOTO_URL does not answer" >&2
    return 1
  fi
  # Found, not imported: importing it costs half a second per file.
  python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("moto.server") is None)' 2>/dev/null || {
    echo "moto is not importable by $(command -v python): run bin/ensure-venv test" >&2
    return 1
  }
  local log="${BATS_FILE_TMPDIR:-$BATS_SUITE_TMPDIR}/moto.log" port attempt
  for attempt in 1 2 3; do
    port=$(free_port)
    # fd 3 closed: bats waits for it, and a background server would hold it open.
    MOTO_EC2_LOAD_DEFAULT_AMIS=false python -m moto.server -H 127.0.0.1 -p "$port" >"$log" 2>&1 3>&- &
    export MOTO_PID=$! MOTO_URL="http://127.0.0.1:$port"
    export AWS_ENDPOINT_URL="$MOTO_URL"
    for _ in $(seq 150); do
      curl -s -o /dev/null "$MOTO_URL/moto-api/" && return 0
      kill -0 "$MOTO_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill "$MOTO_PID" 2>/dev/null || true
    echo "moto did not start on port $port (attempt $attempt):" >&2
    cat "$log" >&2
  done
  return 1
}

# SIGKILL: moto holds everything in memory, and its orderly exit costs 0.6 s of CPU.
stop_moto() {
  [[ -n ${MOTO_PID:-} ]] || return 0
  kill -9 "$MOTO_PID" 2>/dev/null || true
  wait "$MOTO_PID" 2>/dev/null || true
}

# The real AWS CLI against the test's moto server, for setting up and checking state.
awsm() {
  aws --endpoint-url "$MOTO_URL" --region "$TEST_REGION" "$@"
}

# awspy CODE [ARG...]: set up or check moto state with many calls in one process (tests/bats/boto.py).
awspy() {
  TEST_REGION=$TEST_REGION python "$REPO_ROOT/tests/bats/boto.py" "$@"
}

make_bucket() {
  awspy 'aws("s3").create_bucket(Bucket=args[0])' "${1:-$TEST_BUCKET}"
}

# s3_put FILE KEY [BUCKET] / s3_get KEY [BUCKET] (object to stdout) / s3_exists KEY [BUCKET]
s3_put() {
  awspy 'aws("s3").upload_file(args[0], args[2], args[1])' "$1" "$2" "${3:-$TEST_BUCKET}"
}

s3_get() {
  awspy '
import sys
sys.stdout.buffer.write(aws("s3").get_object(Bucket=args[1], Key=args[0])["Body"].read())
' "$1" "${2:-$TEST_BUCKET}"
}

s3_exists() {
  awspy 'aws("s3").head_object(Bucket=args[1], Key=args[0])' "$1" "${2:-$TEST_BUCKET}" >/dev/null 2>&1
}

# ssm_secrets NAME VALUE [NAME VALUE...]: SecureStrings, as the controller writes
# per-instance secrets (one process for all of them).
ssm_secrets() {
  awspy '
for name, value in zip(args[::2], args[1::2], strict=True):
    aws("ssm").put_parameter(Name=name, Value=value, Type="SecureString", Overwrite=True)
' "$@"
}

ssm_secret() {
  ssm_secrets "$1" "$2"
}

# put_bundle PREFIX INDEX OF NAME VALUE [NAME VALUE...]: this instance's INDEX-th secrets
# parameter of OF under PREFIX, as services/secrets.py writes it.
put_bundle() {
  local param="$1/$INSTANCE_ID/secrets" index=$2 of=$3
  shift 3
  ((index == 0)) || param+=".$index"
  awspy '
import json
name, of, pairs = args[0], int(args[1]), args[2:]
bundle = json.dumps({"of": of, "secrets": dict(zip(pairs[::2], pairs[1::2]))})
aws("ssm").put_parameter(Name=name, Value=bundle, Type="SecureString", Overwrite=True)
' "$param" "$of" "$@"
}

# Per test: a fresh LB_HOME and stub dir, nothing inherited. Exports TEST_ID (unique in
# the file), INSTANCE_ID (as the local instance runner does) and the stub paths.
worker_setup() {
  unset "${WORKER_VARS[@]}"
  aws_test_env
  export TEST_ID="t${BATS_TEST_NUMBER}"
  export INSTANCE_ID="i-0bats${BATS_TEST_NUMBER}"
  export LB_HOME="$BATS_TEST_TMPDIR/home"
  export STUB_DIR="$BATS_TEST_TMPDIR/calls"
  STUB_BIN="$BATS_TEST_TMPDIR/bin"
  mkdir -p "$LB_HOME/etc/linuxbench" "$STUB_DIR" "$STUB_BIN"
  export PATH="$STUB_BIN:$PATH"
  FLEET_ENV="$LB_HOME/etc/linuxbench/fleet.env"
  LB_ROOT_DIR="$LB_HOME/opt/linuxbench"
  LOG_FILE="$LB_HOME/var/log/linuxbench-bootstrap.log"
}

# fleet_env KEY=VALUE...: append settings to fleet.env as the user-data writes them.
fleet_env() {
  local kv
  for kv in "$@"; do
    printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}" >>"$FLEET_ENV"
  done
}

# another_instance: LB_HOME becomes a second instance of this machine, with the same
# fleet.env and none of the first instance's files.
another_instance() {
  export LB_HOME="$BATS_TEST_TMPDIR/second"
  mkdir -p "$LB_HOME/etc/linuxbench"
  cp "$FLEET_ENV" "$LB_HOME/etc/linuxbench/"
}

# make_stub NAME [CODE]: a recording stub first on PATH. It appends its argv (one line)
# to $STUB_DIR/NAME.calls, then runs CODE (default: exit 0). CODE is shell text run by
# the stub, e.g. 'cat >>"$STUB_DIR/docker.stdin"' or 'exit 3'.
make_stub() {
  local name=$1 code=${2:-exit 0}
  # shellcheck disable=SC2016  # $* and $STUB_DIR expand when the stub runs
  printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$*" >>"$STUB_DIR/%s.calls"\n%s\n' "$name" "$code" >"$STUB_BIN/$name"
  chmod +x "$STUB_BIN/$name"
}

# calls NAME: the recorded argv lines of a stub (empty when never called).
calls() {
  cat "$STUB_DIR/$1.calls" 2>/dev/null || true
}

assert_not_called() {
  if [[ -s $STUB_DIR/$1.calls ]]; then
    printf 'expected %s not to be called, got:\n%s\n' "$1" "$(calls "$1")" >&2
    return 1
  fi
}

assert_contains() {
  [[ $1 == *"$2"* ]] && return 0
  printf 'expected to find: %s\nin:\n%s\n' "$2" "$1" >&2
  return 1
}

refute_contains() {
  [[ $1 != *"$2"* ]] && return 0
  printf 'expected NOT to find: %s\nin:\n%s\n' "$2" "$1" >&2
  return 1
}

assert_equal() {
  [[ $1 == "$2" ]] && return 0
  printf 'expected: %q\nactual:   %q\n' "$2" "$1" >&2
  return 1
}

# assert_in_order TEXT PATTERN...: each fixed string occurs, each after the previous one.
assert_in_order() {
  local text=$1 pattern rest
  shift
  rest=$text
  for pattern in "$@"; do
    if [[ $rest != *"$pattern"* ]]; then
      printf 'expected, in order: %s\nmissing or out of order: %s\nin:\n%s\n' "$*" "$pattern" "$text" >&2
      return 1
    fi
    rest=${rest#*"$pattern"}
  done
}

# make_tarball DIR OUT: a gzipped tarball of DIR's contents, as `git archive` lays it out.
make_tarball() {
  tar -czf "$2" -C "$1" .
}

# upload_code SHA [DIR]: put a code artifact at artifacts/SHA.tar.gz holding DIR (default:
# a tree with a marker file naming the SHA).
upload_code() {
  local sha=$1 dir=${2:-} tarball="$BATS_TEST_TMPDIR/$1.tar.gz"
  if [[ -z $dir ]]; then
    dir="$BATS_TEST_TMPDIR/code-$sha"
    mkdir -p "$dir"
    echo "code at $sha" >"$dir/MARKER"
  fi
  make_tarball "$dir" "$tarball"
  s3_put "$tarball" "artifacts/$sha.tar.gz"
}

# A 40-hex fake commit SHA, unique per test and label.
fake_sha() {
  printf '%s' "$BATS_TEST_FILENAME:$BATS_TEST_NUMBER:${1:-}" | sha1sum | cut -c1-40
}

