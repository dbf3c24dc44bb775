"""The kubelet's certificates, signed by the cluster's CA: its serving one (the API server checks it, with
--kubelet-certificate-authority, when it proxies `logs`, `exec` and `attach` to the node) and its client one."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def issue_serving_certificate(ca_cert: Path, ca_key: Path, cert_out: Path, key_out: Path, node: str,
                              address: str) -> None:
    _issue(ca_cert, ca_key, cert_out, key_out, node, ExtendedKeyUsageOID.SERVER_AUTH, address)


def issue_client_certificate(ca_cert: Path, ca_key: Path, cert_out: Path, key_out: Path, node: str) -> None:
    """The kubelet's identity towards the API server: system:node:<name> in system:nodes (the Node authorizer)."""
    _issue(ca_cert, ca_key, cert_out, key_out, node, ExtendedKeyUsageOID.CLIENT_AUTH)


def _issue(ca_cert: Path, ca_key: Path, cert_out: Path, key_out: Path, node: str, usage,
           address: str = "127.0.0.1") -> None:
    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    sans = [x509.DNSName(node), x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(address))]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(signer, hashes.SHA256()))
    key_out.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    key_out.chmod(0o600)
    cert_out.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
