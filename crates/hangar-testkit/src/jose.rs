//! The Tower double's own JWTs (written apart from hangar's, so the two check each other): it
//! signs passports with EdDSA or ES256 and verifies hangar's sandbox tokens against a JWKS.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};

use crate::error::TestkitError;

/// The algorithm the double signs passports with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassportAlg {
    EdDsa,
    Es256,
}

#[derive(Clone)]
enum KeyKind {
    Ed(ed25519_dalek::SigningKey),
    Es(p256::ecdsa::SigningKey),
}

/// A signing key and the `kid` it goes by.
#[derive(Clone)]
pub(crate) struct Signer {
    key: KeyKind,
    pub kid: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("kid", &self.kid).finish()
    }
}

fn random32() -> Result<[u8; 32], TestkitError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)
        .map_err(|e| TestkitError::io("randomness", std::io::Error::other(e.to_string())))?;
    Ok(b)
}

impl Signer {
    /// A fresh key.
    pub fn generate(alg: PassportAlg, kid: &str) -> Result<Signer, TestkitError> {
        let key = match alg {
            PassportAlg::EdDsa => KeyKind::Ed(ed25519_dalek::SigningKey::from_bytes(&random32()?)),
            PassportAlg::Es256 => loop {
                if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&random32()?) {
                    break KeyKind::Es(k);
                }
            },
        };
        Ok(Signer {
            key,
            kid: kid.to_owned(),
        })
    }

    pub fn alg(&self) -> &'static str {
        match self.key {
            KeyKind::Ed(_) => "EdDSA",
            KeyKind::Es(_) => "ES256",
        }
    }

    pub fn public_jwk(&self) -> Value {
        match &self.key {
            KeyKind::Ed(k) => json!({"kty": "OKP", "crv": "Ed25519",
                "x": B64.encode(k.verifying_key().as_bytes()), "kid": self.kid, "alg": "EdDSA", "use": "sig"}),
            KeyKind::Es(k) => {
                let p = k.verifying_key().to_encoded_point(false);
                json!({"kty": "EC", "crv": "P-256",
                    "x": B64.encode(p.x().map(|x| x.to_vec()).unwrap_or_default()),
                    "y": B64.encode(p.y().map(|y| y.to_vec()).unwrap_or_default()),
                    "kid": self.kid, "alg": "ES256", "use": "sig"})
            }
        }
    }

    /// A JWT of `claims`.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let sig = match &self.key {
            KeyKind::Ed(k) => {
                use ed25519_dalek::Signer as _;
                k.sign(input.as_bytes()).to_bytes().to_vec()
            }
            KeyKind::Es(k) => {
                use p256::ecdsa::signature::Signer as _;
                let s: p256::ecdsa::Signature = k.sign(input.as_bytes());
                s.to_bytes().to_vec()
            }
        };
        format!("{input}.{}", B64.encode(sig))
    }
}

/// Verifies a JWT against `jwks` and returns its claims (the reason when it does not verify).
pub(crate) fn verify(token: &str, jwks: &Value) -> Result<Value, String> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let [h, p, s] = parts.as_slice() else {
        return Err("not a compact JWS".into());
    };
    let dec = |x: &str| B64.decode(x).map_err(|_| "not base64url".to_owned());
    let header: Value = serde_json::from_slice(&dec(h)?).map_err(|_| "header not JSON")?;
    let claims: Value = serde_json::from_slice(&dec(p)?).map_err(|_| "claims not JSON")?;
    let sig = dec(s)?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kid = header.get("kid").and_then(Value::as_str);
    let input = format!("{h}.{p}");
    let keys = jwks
        .get("keys")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for k in keys {
        if kid.is_some() && k.get("kid").and_then(Value::as_str) != kid {
            continue;
        }
        let coord = |n: &str| {
            k.get(n)
                .and_then(Value::as_str)
                .and_then(|v| B64.decode(v).ok())
                .unwrap_or_default()
        };
        let ok = match (alg, k.get("kty").and_then(Value::as_str)) {
            ("EdDSA", Some("OKP")) => {
                let x: Result<[u8; 32], _> = coord("x").try_into();
                let sig: Result<[u8; 64], _> = sig.clone().try_into();
                match (x, sig) {
                    (Ok(x), Ok(sig)) => ed25519_dalek::VerifyingKey::from_bytes(&x)
                        .map(|vk| {
                            vk.verify_strict(
                                input.as_bytes(),
                                &ed25519_dalek::Signature::from_bytes(&sig),
                            )
                            .is_ok()
                        })
                        .unwrap_or(false),
                    _ => false,
                }
            }
            ("ES256", Some("EC")) => {
                use p256::ecdsa::signature::Verifier as _;
                let (x, y) = (coord("x"), coord("y"));
                if x.len() != 32 || y.len() != 32 {
                    false
                } else {
                    let point = p256::EncodedPoint::from_affine_coordinates(
                        x.as_slice().into(),
                        y.as_slice().into(),
                        false,
                    );
                    match (
                        p256::ecdsa::VerifyingKey::from_encoded_point(&point),
                        p256::ecdsa::Signature::from_slice(&sig),
                    ) {
                        (Ok(vk), Ok(sig)) => vk.verify(input.as_bytes(), &sig).is_ok(),
                        _ => false,
                    }
                }
            }
            _ => false,
        };
        if ok {
            return Ok(claims);
        }
    }
    Err(format!(
        "no key in the set verifies it (alg {alg:?}, kid {kid:?})"
    ))
}

/// `application/x-www-form-urlencoded` into pairs.
pub(crate) fn form(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn both_algorithms_round_trip_and_forms_decode() {
        for alg in [PassportAlg::EdDsa, PassportAlg::Es256] {
            let k = Signer::generate(alg, "k1").unwrap();
            let t = k.sign(&json!({"sub": "x"}));
            let jwks = json!({"keys": [k.public_jwk()]});
            assert_eq!(verify(&t, &jwks).unwrap()["sub"], "x");
            let other = Signer::generate(alg, "k1").unwrap();
            assert!(verify(&other.sign(&json!({})), &jwks).is_err());
        }
        assert_eq!(
            form(b"a=b%3Ac&grant_type=urn%3Aietf+x&e="),
            vec![
                ("a".into(), "b:c".into()),
                ("grant_type".into(), "urn:ietf x".into()),
                ("e".into(), String::new())
            ]
        );
    }
}
