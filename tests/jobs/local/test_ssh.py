"""Tests of `jobs.local.ssh`: the `/etc/ssh` an MPI job's emulated hosts share, made with the real ssh-keygen (the
MPI jobs of tests/jobs/sagemaker and tests/jobs/kubernetes run sshd and mpirun over it)."""

import os
import stat

from absl.testing import absltest

from jobs.local import ssh


class WriteSetupTest(absltest.TestCase):

    def test_one_job_key_trusted_by_every_host_and_the_configurations_that_name_it(self):
        directory = os.path.join(self.create_tempdir().full_path, "ssh")
        authorized = os.path.join(ssh.ETC_SSH, "authorized_keys")
        ssh.write_setup(directory, "job-1", authorized_keys=authorized,
                        identity=os.path.join(ssh.ETC_SSH, ssh.KEY_NAME))
        self.assertEqual(0o700, stat.S_IMODE(os.stat(directory).st_mode))
        for name in (ssh.KEY_NAME, ssh.HOST_KEY_NAME):
            with open(os.path.join(directory, name + ".pub")) as f:
                self.assertRegex(f.read(), r"^ssh-ed25519 \S+ job-1$")
        with open(os.path.join(directory, ssh.KEY_NAME + ".pub")) as f, \
                open(os.path.join(directory, "authorized_keys")) as g:
            self.assertEqual(f.read(), g.read())  # every host trusts the job's one key
        with open(os.path.join(directory, "ssh_config")) as f:
            self.assertIn("IdentityFile %s" % os.path.join(ssh.ETC_SSH, ssh.KEY_NAME), f.read())
        with open(os.path.join(directory, "sshd_config")) as f:
            sshd_config = f.read()
        self.assertIn("AuthorizedKeysFile %s" % authorized, sshd_config)
        self.assertIn("HostKey %s" % os.path.join(ssh.ETC_SSH, ssh.HOST_KEY_NAME), sshd_config)

    def test_an_existing_directory_is_refused(self):
        directory = self.create_tempdir().full_path
        with self.assertRaises(FileExistsError):
            ssh.write_setup(directory, "job-1", authorized_keys="/etc/ssh/authorized_keys")


if __name__ == "__main__":
    absltest.main()
