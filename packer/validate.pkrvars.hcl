# Values for `packer validate` (bin/test run_packer): the required build_id and an
# incremental source so that validation needs no AWS access. Not used by real builds.
build_id   = "validate-0000"
source_ami = "ami-0123456789abcdef0"
