# Plugin requirements for Packer >= 1.7, kept apart from worker-ami.pkr.hcl because
# Packer 1.6.6 (Debian's package, amazon-ebs built in) rejects a `packer {}` block.
# Install once per machine with current Packer, then build ../ as usual:
#   packer init packer/plugins
# bin/build-ami does this itself when it finds Packer >= 1.7.
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
  }
}
