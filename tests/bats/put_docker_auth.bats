#!/usr/bin/env bats
# bin/put-docker-org-auth-ssm against a moto server with the real AWS CLI.

setup_file() {
  export MOTO_PORT
  MOTO_PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >/dev/null 2>&1 &
  echo $! >"$BATS_FILE_TMPDIR/moto.pid"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$MOTO_PORT/moto-api/" >/dev/null && break; sleep 0.1; done
}

teardown_file() {
  kill "$(cat "$BATS_FILE_TMPDIR/moto.pid")" 2>/dev/null || true
}

setup() {
  export AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
  SCRIPT="$BATS_TEST_DIRNAME/../../bin/put-docker-org-auth-ssm"
  ENV_FILE="$BATS_TEST_TMPDIR/.env"
  printf 'DOCKER_ORG_NAME=acme\nDOCKER_ORG_PAT="pat with spaces $x"\n' >"$ENV_FILE"
}

@test "stores the name as String and the PAT as SecureString, exactly" {
  run "$SCRIPT" --env-file "$ENV_FILE"
  [ "$status" -eq 0 ]
  [[ $output != *"pat with spaces"* ]]
  run aws --endpoint-url "$AWS_ENDPOINT_URL" ssm get-parameter --name /linuxbench/docker-org-pat --with-decryption \
    --query 'Parameter.[Type,Value]' --output text
  [ "$output" = $'SecureString\tpat with spaces $x' ]
  run aws --endpoint-url "$AWS_ENDPOINT_URL" ssm get-parameter --name /linuxbench/docker-org-name --query 'Parameter.[Type,Value]' --output text
  [ "$output" = $'String\tacme' ]
}

@test "dry run prints the commands without the secret" {
  run "$SCRIPT" --dry-run --env-file "$ENV_FILE"
  [ "$status" -eq 0 ]
  [[ $output == *"put-parameter --name /linuxbench/docker-org-pat --type SecureString"* ]]
  [[ $output != *"pat with spaces"* ]]
}

@test "parameter names must stay under /linuxbench/docker-org-" {
  DOCKER_ORG_PAT_SSM_PARAM=/linuxbench/other run "$SCRIPT" --env-file "$ENV_FILE"
  [ "$status" -eq 2 ]
  [[ $output == *"must stay under /linuxbench/docker-org-"* ]]
}

@test "missing values and unknown flags exit 2" {
  printf 'DOCKER_ORG_NAME=acme\n' >"$ENV_FILE"
  run "$SCRIPT" --env-file "$ENV_FILE"
  [ "$status" -eq 2 ]
  run "$SCRIPT" --bogus
  [ "$status" -eq 2 ]
}
