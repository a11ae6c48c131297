//! TLS for the worker protocol: the worker's self-signed identity, and
//! clients that pin its certificate by SHA-256 fingerprint (trust on first
//! use, recorded in a known-workers file, or given explicitly).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The worker's certificate and key, and its shared secret.
pub struct Identity {
    /// DER certificate.
    pub cert: CertificateDer<'static>,
    /// PKCS#8 key.
    pub key: PrivatePkcs8KeyDer<'static>,
    /// The secret clients must present.
    pub secret: String,
}

impl Identity {
    /// Loads the identity from `dir` (`cert.der`, `key.der`, `secret`),
    /// creating what is missing: a fresh self-signed certificate for
    /// `names` and a random 32-byte secret. Files are created readable by
    /// the owner only.
    pub fn load_or_create(dir: &Path, names: &[String]) -> std::io::Result<Identity> {
        std::fs::create_dir_all(dir)?;
        let (cp, kp, sp) = (
            dir.join("cert.der"),
            dir.join("key.der"),
            dir.join("secret"),
        );
        if !cp.exists() || !kp.exists() {
            let ck = rcgen::generate_simple_self_signed(names.to_vec())
                .map_err(|e| std::io::Error::other(format!("generating a certificate: {e}")))?;
            private_write(&kp, &ck.key_pair.serialize_der())?;
            private_write(&cp, ck.cert.der())?;
        }
        if !sp.exists() {
            private_write(&sp, random_secret().as_bytes())?;
        }
        let secret = secret_of(&sp, &std::fs::read(&sp)?)?;
        Ok(Identity {
            cert: CertificateDer::from(std::fs::read(&cp)?),
            key: PrivatePkcs8KeyDer::from(std::fs::read(&kp)?),
            secret,
        })
    }

    /// The certificate's fingerprint, as clients pin it.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert)
    }

    /// A rustls server configuration for this identity.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )?;
        Ok(Arc::new(cfg))
    }
}

/// The secret in file `p`'s `bytes`: UTF-8 text, trimmed, of at least 16
/// printable characters (an empty secret would let in any client that
/// sends none; 16 NUL bytes are no secret either).
fn secret_of(p: &Path, bytes: &[u8]) -> std::io::Result<String> {
    let bad = |why: String| {
        std::io::Error::other(format!(
            "{}: {why} (delete the file and a random one of 64 characters is made)",
            p.display()
        ))
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|e| bad(format!("the secret is not UTF-8 text ({e})")))?;
    let secret = text.trim();
    if let Some(c) = secret.chars().find(|c| c.is_control()) {
        return Err(bad(format!(
            "the secret holds the control character {c:?}; it must be printable text"
        )));
    }
    let n = secret.chars().count();
    if n < 16 {
        return Err(bad(format!(
            "the secret is {n} characters; at least 16 are needed"
        )));
    }
    Ok(secret.to_string())
}

fn private_write(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p)?;
    f.write_all(bytes)
}

/// 32 random bytes from the OS, as hex.
pub fn random_secret() -> String {
    let mut b = [0u8; 32];
    provider()
        .secure_random
        .fill(&mut b)
        .expect("the OS random number generator");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compares secrets in time independent of where they differ.
pub fn secrets_match(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `sha256:` and the hex SHA-256 of a DER certificate.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    format!("sha256:{}", crate::proto::content_hash(cert.as_ref()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where the client finds the fingerprint to expect.
#[derive(Clone, Debug)]
pub enum Pin {
    /// This exact fingerprint.
    Exact(String),
    /// The one recorded for `host:port` in this file; recorded there on
    /// first use.
    KnownWorkers {
        /// The file.
        file: PathBuf,
        /// `host:port`.
        key: String,
    },
}

impl Pin {
    /// The known-workers file in the user's configuration folder
    /// (`$ROCMC_KNOWN_WORKERS`, else `~/.config/rocmc/known_workers`).
    pub fn default_for(host_port: &str) -> Pin {
        let file = std::env::var_os("ROCMC_KNOWN_WORKERS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home =
                    std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
                home.join(".config/rocmc/known_workers")
            });
        Pin::KnownWorkers {
            file,
            key: host_port.to_string(),
        }
    }
}

/// Verifies the worker's certificate by fingerprint (names and chains mean
/// nothing for a self-signed certificate), then its handshake signature.
#[derive(Debug)]
pub struct PinVerifier {
    pin: Pin,
    /// What happened, for the client to report: a first use, a mismatch.
    pub outcome: Mutex<Option<PinOutcome>>,
}

/// What pinning concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum PinOutcome {
    /// The fingerprint matched.
    Matched,
    /// Nothing was recorded: this one was recorded now.
    FirstUse(String),
    /// Nothing was recorded and the file could not be written: refused,
    /// since the next connection could not detect another certificate.
    Unrecorded {
        /// Presented.
        got: String,
        /// Why the file could not be written.
        why: String,
    },
    /// It differs from the pinned one.
    Mismatch {
        /// Pinned.
        expected: String,
        /// Presented.
        got: String,
    },
}

impl PinVerifier {
    /// A verifier for `pin`.
    pub fn new(pin: Pin) -> Arc<PinVerifier> {
        Arc::new(PinVerifier {
            pin,
            outcome: Mutex::new(None),
        })
    }

    fn check(&self, got: String) -> PinOutcome {
        match &self.pin {
            Pin::Exact(want) if *want == got => PinOutcome::Matched,
            Pin::Exact(want) => PinOutcome::Mismatch {
                expected: want.clone(),
                got,
            },
            Pin::KnownWorkers { file, key } => {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                let recorded = text.lines().find_map(|l| {
                    let mut it = l.split_whitespace();
                    (it.next() == Some(key.as_str())).then(|| it.next().unwrap_or("").to_string())
                });
                match recorded {
                    Some(r) if r == got => PinOutcome::Matched,
                    Some(r) => PinOutcome::Mismatch { expected: r, got },
                    None => {
                        if let Some(dir) = file.parent() {
                            let _ = std::fs::create_dir_all(dir);
                        }
                        let line = format!("{key} {got}\n");
                        let ok = std::fs::OpenOptions::new()
                            .append(true)
                            .create(true)
                            .open(file)
                            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
                        match ok {
                            Ok(()) => PinOutcome::FirstUse(got),
                            Err(e) => PinOutcome::Unrecorded {
                                got,
                                why: e.to_string(),
                            },
                        }
                    }
                }
            }
        }
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let outcome = self.check(fingerprint(end_entity));
        let ok = matches!(outcome, PinOutcome::Matched | PinOutcome::FirstUse(_));
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        if ok {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "certificate fingerprint mismatch".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A rustls client configuration pinning with `v`.
pub fn client_config(v: Arc<PinVerifier>) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(v)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_printable_text_of_sixteen_characters_or_more() {
        let p = Path::new("/state/secret");
        assert_eq!(
            secret_of(p, b" 0123456789abcdef\n").unwrap(),
            "0123456789abcdef"
        );
        let short = secret_of(p, "ééééééééé".as_bytes())
            .unwrap_err()
            .to_string();
        assert!(short.contains("9 characters"), "{short}");
        let nul = secret_of(p, &[0u8; 16]).unwrap_err().to_string();
        assert!(nul.contains("control character"), "{nul}");
        let binary = secret_of(p, &[0xff; 32]).unwrap_err().to_string();
        assert!(
            binary.starts_with("/state/secret: the secret is not UTF-8"),
            "{binary}"
        );
    }
}
