# shellcheck shell=bash
# Once per bats run (bats reads this file before the first .bats file of this directory):
# one moto server for every file, each of which empties it in setup_file (start_moto in
# helpers.bash) rather than starting a server of its own.

setup_suite() {
  load helpers
  start_moto
  export CT_BATS_SUITE_MOTO_URL=$MOTO_URL CT_BATS_SUITE_MOTO_PID=$MOTO_PID
  unset MOTO_PID MOTO_URL AWS_ENDPOINT_URL
}

teardown_suite() {
  load helpers
  MOTO_PID=${CT_BATS_SUITE_MOTO_PID:-} stop_moto
}
