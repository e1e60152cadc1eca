"""SSH between emulated hosts: the keys and configurations of an image's `/etc/ssh`, installed on each host.

MPI jobs start their ranks over SSH (`mpirun` on the first host), as a
SageMaker `mpi` job or a Kubernetes MPIJob does: every host runs `sshd` and
trusts the job's one key. `write_setup` makes that `/etc/ssh` once per job
(the image's part); `install_etc_ssh` gives it to a host.
"""

import os
import shutil
import subprocess
from typing import Optional

from jobs.local import hosts as hosts_lib

SSH = "ssh"
KEY_NAME = "id_ed25519"
HOST_KEY_NAME = "ssh_host_ed25519_key"
SSHD_PRIVSEP_DIR = "/run/sshd"
SSHD_CONFIG = """\
Port 22
HostKey /etc/ssh/{host_key}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
PrintMotd no
Subsystem sftp internal-sftp
"""
SSH_CLIENT_CONFIG = """\
Host *
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
"""
ETC_SSH = "/etc/ssh"


def ssh_keygen(path: str, comment: str) -> None:
    """Writes a new ed25519 key pair without passphrase at `path` and `path.pub`."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)


def write_setup(directory: str, comment: str, authorized_keys: str, identity: Optional[str] = None) -> None:
    """An image's `/etc/ssh` for a job's hosts: a host key, a client key, sshd and client configurations.

    Args:
      directory: created (mode 0700); becomes each host's `/etc/ssh`.
      comment: the keys' comment (the job's name).
      authorized_keys: where sshd reads the keys it accepts.
      identity: the key the ssh client offers (None: the client's default
        files in `~/.ssh`).
    """
    os.makedirs(directory, mode=0o700)
    for name in (KEY_NAME, HOST_KEY_NAME):
        ssh_keygen(os.path.join(directory, name), comment)
    shutil.copy(os.path.join(directory, KEY_NAME + ".pub"), os.path.join(directory, "authorized_keys"))
    with open(os.path.join(directory, "sshd_config"), "w") as f:
        f.write(SSHD_CONFIG.format(host_key=HOST_KEY_NAME, authorized_keys=authorized_keys))
    with open(os.path.join(directory, "ssh_config"), "w") as f:
        f.write(SSH_CLIENT_CONFIG + ("  IdentityFile %s\n" % identity if identity else ""))


def install_etc_ssh(source: str, network: hosts_lib.HostNetwork, host: hosts_lib.Host) -> None:
    """Gives `host` the ssh set-up of `write_setup` in `source` as its `/etc/ssh`."""
    etc_ssh = os.path.join(network.etc_dir(host), SSH)
    shutil.copytree(source, etc_ssh)
    os.chmod(os.path.join(etc_ssh, HOST_KEY_NAME), 0o600)
    os.chmod(os.path.join(etc_ssh, KEY_NAME), 0o600)
