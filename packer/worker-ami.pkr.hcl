# The ct-fleet worker AMI: Docker + compose plugin, Python 3.13 + uv (root and ubuntu),
# git, AWS CLI v2, the environment Docker images every setting's compose files name (pulled
# from images_file, which bin/build-ami writes, or built here by bin/build-images for the
# settings that make their own) and a uv wheel cache at /opt/uv-cache. See docs/ami.md.
#
# Two kinds of build, chosen by `source_ami`:
#   fresh        source_ami = ""         start from the newest stock Ubuntu 22.04 (Canonical)
#   incremental  source_ami = "ami-..."  start from the current worker AMI; only images whose
#                                        registry digest changed are pulled again
#
# Written for Packer 1.6.6 (amazon-ebs built in), and valid for current Packer once the
# amazon plugin is installed (`packer init packer/plugins`). Run it through bin/build-ami,
# which reads and rotates the AMI id in SSM; by hand:
#   packer build -var build_id=manual-$(date +%s) -var source_ami=ami-... packer

variable "region" {
  type        = string
  default     = "us-east-1"
  description = "Region to build in; the AMI stays in this region."
}

variable "source_ami" {
  type        = string
  default     = ""
  description = "AMI to start from: the current worker AMI (incremental), or empty for stock Ubuntu 22.04 (fresh)."
}

variable "build_id" {
  type        = string
  description = "Unique id of this build. Tags the builder instance (CtFleetBuildId) so a safety net can terminate it."
}

variable "ssm_param" {
  type        = string
  default     = "/linuxbench/worker-ami-id"
  description = "SSM parameter that will hold this AMI's id (tagged CtFleetAmiParam: rotation keeps one AMI per parameter)."
}

variable "launched_by" {
  type        = string
  default     = "packer"
  description = "LaunchedBy tag of the builder instance: the scoped operator policy requires it at launch and allows termination only on a match."
}

variable "ami_name_prefix" {
  type    = string
  default = "linuxbench-worker"
}

variable "instance_type" {
  type        = string
  default     = "m6i.2xlarge"
  description = "Builder instance type; network bandwidth dominates the image pulls."
}

variable "volume_size" {
  type        = number
  default     = 200
  description = "Root volume in GiB: the OS plus every environment image."
}

variable "volume_iops" {
  type        = number
  default     = 3000
  description = "gp3 IOPS (3000 is the free baseline; Packer 1.6.6 needs it explicit)."
}

variable "volume_throughput" {
  type        = number
  default     = 125
  description = "gp3 throughput in MiB/s (125 is the free baseline; Packer 1.6.6 needs it explicit)."
}

variable "subnet_id" {
  type        = string
  default     = ""
  description = "Subnet for the builder; empty picks the default VPC."
}

variable "ssh_source_cidrs" {
  type        = list(string)
  default     = ["0.0.0.0/0"]
  description = "CIDRs allowed to SSH to the builder (Packer's temporary key pair and security group); narrow to your egress IP/32."
}

variable "iam_instance_profile" {
  type        = string
  default     = ""
  description = "Instance profile of the builder (e.g. linuxbench-worker) so it can read Docker registry auth from SSM; empty pulls anonymously."
}

variable "ubuntu_owner" {
  type        = string
  default     = "099720109477"
  description = "Canonical's account, owner of the stock Ubuntu AMIs used by fresh builds."
}

variable "ubuntu_name_pattern" {
  type    = string
  default = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
}

variable "images_file" {
  type        = string
  default     = ""
  description = "File listing the Docker images to pull in; empty means images.txt beside this template. bin/build-ami writes it from the settings' compose files."
}

variable "build_settings" {
  type        = string
  default     = ""
  description = "Settings (space-separated) whose own images the builder builds offline with bin/build-images, from the repo's files."
}

variable "local_images" {
  type        = string
  default     = ""
  description = "The images build_settings make (space-separated): kept and recorded, never pulled."
}

variable "python_requirements" {
  type        = string
  default     = ""
  description = "Dependencies to warm the uv cache with (a requirements .txt/.lock, setup.cfg or pyproject.toml); empty means the repo's requirements.lock, else its setup.cfg."
}

variable "manifest_path" {
  type        = string
  default     = ""
  description = "Where the manifest post-processor writes; empty means manifest.json beside this template."
}

variable "python_version" {
  type    = string
  default = "3.13"
}

variable "uv_version" {
  type    = string
  default = "0.13.8"
}

variable "pull_parallelism" {
  type        = number
  default     = 4
  description = "Docker images pulled at once."
}

variable "docker_org_name_param" {
  type    = string
  default = "/linuxbench/docker-org-name"
}

variable "docker_org_pat_param" {
  type    = string
  default = "/linuxbench/docker-org-pat"
}

variable "docker_registry" {
  type        = string
  default     = ""
  description = "Registry the private images are pulled from (host[:port]); empty means Docker Hub."
}

locals {
  build_kind    = var.source_ami == "" ? "fresh" : "incremental"
  stamp         = formatdate("YYYYMMDD-hhmmss", timestamp())
  ami_name      = "${var.ami_name_prefix}-${local.stamp}"
  images_file   = var.images_file == "" ? "${path.root}/images.txt" : var.images_file
  repo_lock     = "${path.root}/../requirements.lock"
  requirements  = var.python_requirements != "" ? var.python_requirements : (fileexists(local.repo_lock) ? local.repo_lock : "${path.root}/../setup.cfg")
  manifest_path = var.manifest_path == "" ? "${path.root}/manifest.json" : var.manifest_path
  stage         = "/tmp/ct-fleet-ami"

  # Tags on the AMI and on its snapshots. bin/build-ami (lib/ct_fleet/ami/) finds the
  # snapshots by CtFleetBuildId and sweeps older AMIs by CtFleetAmiParam + Component.
  image_tags = {
    Name            = local.ami_name
    ManagedBy       = "ct-fleet"
    Component       = "worker-ami"
    BuildKind       = local.build_kind
    CtFleetBuildId  = var.build_id
    CtFleetAmiParam = var.ssm_param
    SourceAmi       = "{{ .SourceAMI }}"
    SourceAmiName   = "{{ .SourceAMIName }}"
    UbuntuRelease   = "22.04"
    PackerBuildTime = local.stamp
  }
}

source "amazon-ebs" "worker" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id == "" ? null : var.subnet_id
  ssh_username  = "ubuntu"
  ssh_timeout   = "10m"
  ami_name      = local.ami_name

  ami_description = "ct-fleet worker (${local.build_kind} build ${var.build_id})"

  iam_instance_profile = var.iam_instance_profile == "" ? null : var.iam_instance_profile

  # Incremental: the current worker AMI. Fresh: source_ami is empty and the filter
  # below picks the newest Canonical Ubuntu 22.04 at build time (not at validate time).
  source_ami = var.source_ami == "" ? null : var.source_ami

  dynamic "source_ami_filter" {
    for_each = var.source_ami == "" ? [var.ubuntu_name_pattern] : []
    content {
      filters = {
        name                = source_ami_filter.value
        root-device-type    = "ebs"
        virtualization-type = "hvm"
      }
      owners      = [var.ubuntu_owner]
      most_recent = true
    }
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.volume_size
    volume_type           = "gp3"
    iops                  = var.volume_iops
    throughput            = var.volume_throughput
    delete_on_termination = true
  }

  # If Packer dies without cleaning up, an OS shutdown terminates the builder instead of
  # leaving a stopped instance; bin/build-ami also terminates it by CtFleetBuildId.
  shutdown_behavior = "terminate"

  # Packer opens SSH to these CIDRs on a temporary security group for the build's
  # life (Packer 1.6.6 lacks temporary_security_group_source_public_ip).
  temporary_security_group_source_cidrs = var.ssh_source_cidrs

  # Snapshotting a large root volume outlasts the default wait of ~10 minutes.
  aws_polling {
    delay_seconds = 15
    max_attempts  = 240
  }

  run_tags = {
    Name           = "ct-fleet-ami-builder"
    ManagedBy      = "ct-fleet"
    LaunchedBy     = var.launched_by
    Component      = "worker-ami-builder"
    CtFleetBuildId = var.build_id
  }
  run_volume_tags = {
    Name           = "ct-fleet-ami-builder"
    ManagedBy      = "ct-fleet"
    CtFleetBuildId = var.build_id
  }
  tags          = local.image_tags
  snapshot_tags = local.image_tags
}

build {
  sources = ["source.amazon-ebs.worker"]

  # The stage mirrors the repo (packer/scripts/ beside lib/bash/), so the scripts find
  # their library at the same relative path on the builder as in a checkout.
  provisioner "shell" {
    inline = ["rm -rf ${local.stage}", "mkdir -p ${local.stage}/packer/scripts ${local.stage}/lib/bash ${local.stage}/requirements ${local.stage}/bin ${local.stage}/examples/settings"]
  }

  # What bin/build-images needs to build the settings' own images on the builder, at
  # their places in the repo (build_settings; packer/scripts/build-images.sh runs it).
  provisioner "file" {
    sources     = ["${path.root}/../bin/build-images", "${path.root}/../bin/ensure-docker", "${path.root}/../bin/lib.sh"]
    destination = "${local.stage}/bin/"
  }

  provisioner "file" {
    source      = "${path.root}/../examples/settings/"
    destination = "${local.stage}/examples/settings/"
  }

  provisioner "file" {
    source      = "${path.root}/scripts/"
    destination = "${local.stage}/packer/scripts/"
  }

  provisioner "file" {
    source      = "${path.root}/../lib/bash/ct.sh"
    destination = "${local.stage}/lib/bash/ct.sh"
  }

  provisioner "file" {
    source      = local.images_file
    destination = "${local.stage}/images.txt"
  }

  provisioner "file" {
    source      = local.requirements
    destination = "${local.stage}/requirements/${basename(local.requirements)}"
  }

  provisioner "shell" {
    execute_command = "sudo -E env {{ .Vars }} bash '{{ .Path }}'"
    environment_vars = [
      "AWS_REGION=${var.region}",
      "AWS_DEFAULT_REGION=${var.region}",
      "BUILD_ID=${var.build_id}",
      "BUILD_KIND=${local.build_kind}",
      "SOURCE_AMI=${var.source_ami}",
      "IMAGES_FILE=${local.stage}/images.txt",
      "REQUIREMENTS_DIR=${local.stage}/requirements",
      "PYTHON_VERSION=${var.python_version}",
      "UV_VERSION=${var.uv_version}",
      "PULL_PARALLELISM=${var.pull_parallelism}",
      "DOCKER_ORG_NAME_PARAM=${var.docker_org_name_param}",
      "DOCKER_ORG_PAT_PARAM=${var.docker_org_pat_param}",
      "DOCKER_REGISTRY=${var.docker_registry}",
      "AMI_STAGE=${local.stage}",
      "BUILD_SETTINGS=${var.build_settings}",
      "LOCAL_IMAGES=${var.local_images}",
    ]
    inline = ["bash ${local.stage}/packer/scripts/provision.sh"]
  }

  post-processor "manifest" {
    output     = local.manifest_path
    strip_path = true
    custom_data = {
      build_id   = var.build_id
      build_kind = local.build_kind
      source_ami = var.source_ami
      region     = var.region
      ami_name   = local.ami_name
    }
  }
}
