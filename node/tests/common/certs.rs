//! Certificates for the TLS tests, made in-process: a CA, node certificates (naming their node
//! id, valid for 127.0.0.1 and localhost, usable to serve and as a client certificate) and
//! client certificates naming a role.

use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its key, both PEM.
#[derive(Clone, Debug)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own certificate, PEM.
    pub cert: String,
    serial: AtomicU64,
}

impl Ca {
    /// A new self-signed CA called `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate").pem();
        Self {
            issuer: Issuer::new(params, key),
            cert,
            serial: AtomicU64::new(1),
        }
    }

    fn sign(&self, common_name: &str, uris: &[String]) -> Pem {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI(uri.as_str().try_into().expect("a URI")));
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        params.serial_number = Some(serial.into());
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A certificate naming node `id`.
    pub fn node(&self, id: u64) -> Pem {
        self.sign(
            &format!("chainstore-node-{id}"),
            &[format!("chainstore://node/{id}")],
        )
    }

    /// A client certificate naming `role` (read, write, admin).
    pub fn role(&self, role: &str) -> Pem {
        self.sign(
            &format!("client-{role}"),
            &[format!("chainstore://role/{role}")],
        )
    }

    /// A certificate from this CA that names no chainstore identity.
    pub fn anonymous(&self) -> Pem {
        self.sign("somebody", &[])
    }
}
