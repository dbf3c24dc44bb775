"""Certificates of the local control plane: one CA, serving certificates for 127.0.0.1, client certificates
per component, and the service-account signing key. Written once per cluster directory."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# name -> (common name, organisation, serving?)
CERTIFICATES = {
    "etcd": ("etcd", None, True),
    "apiserver": ("kube-apiserver", None, True),
    "apiserver-etcd-client": ("kube-apiserver-etcd-client", None, False),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters", False),
    "kwok-serving": ("kwok-node", None, True),
    "admin": ("training-admin", "system:masters", False),
    "controller-manager": ("system:kube-controller-manager", None, False),
    "scheduler": ("system:kube-scheduler", None, False),
    # kwok plays every kubelet: it patches pod and node status, leases and events of all nodes.
    "kwok": ("kwok-controller", "system:masters", False),
}
SERVING_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"]
SERVING_IPS = ["127.0.0.1", "10.96.0.1"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def issue_client_certificate(directory: Path, name: str, common_name: str, organisation: str | None = None) -> None:
    """A client certificate `<name>.crt/.key` signed by the cluster's CA: a user the API server knows by CN/O."""
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    key = _key()
    cert = (x509.CertificateBuilder().subject_name(_name(common_name, organisation)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_key(directory / f"{name}.key", key)
    (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_pki(directory: Path) -> None:
    """Create every key and certificate under `directory` (skipped when the CA already exists)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.crt").exists():
        return
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=365)
    ca_key = _key()
    ca_name = _name("training-local-ca")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    _write_key(directory / "ca.key", ca_key)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, (cn, org, serving) in CERTIFICATES.items():
        key = _key()
        usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if serving \
            else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if serving:
            sans = [x509.DNSName(n) for n in SERVING_NAMES] + [x509.IPAddress(ipaddress.ip_address(i))
                                                                for i in SERVING_IPS]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_key(directory / f"{name}.key", key)
        (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    # The service-account token signer (RS256 is what every client library verifies).
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
