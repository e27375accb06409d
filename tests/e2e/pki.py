"""A throwaway PKI made with the openssl command at test time: a CA, a server
certificate for 127.0.0.1/localhost, client certificates, and a rogue CA whose
certificates nothing trusts."""
import os
import subprocess


class Pki:
    def __init__(self, directory):
        self.dir = directory
        self.ca = self._ca("ca", "/CN=idemproxy test CA")
        self.rogue_ca = self._ca("rogue-ca", "/CN=rogue CA")
        self.server = self.issue("server", "/CN=localhost",
                                 "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                 "extendedKeyUsage=serverAuth")
        self.alice = self.issue("alice", "/O=Acme/CN=alice", "extendedKeyUsage=clientAuth")
        self.bob = self.issue("bob", "/O=Acme/CN=bob", "extendedKeyUsage=clientAuth")
        self.mallory = self.issue("mallory", "/O=Acme/CN=alice", "extendedKeyUsage=clientAuth",
                                  ca="rogue-ca")  # claims alice's name, signed by a rogue CA

    def path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.dir)

    def _ca(self, name, subject):
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                      "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
                      "-subj", subject)
        return self.path(name + ".pem")

    def issue(self, name, subject, extensions, ca="ca"):
        """Returns (cert_path, key_path)."""
        with open(self.path(name + ".ext"), "w") as f:
            f.write(extensions + "\n")
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject)
        self._openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
                      ca + ".key", "-CAcreateserial", "-out", name + ".pem", "-days", "2",
                      "-extfile", name + ".ext")
        return self.path(name + ".pem"), self.path(name + ".key")
