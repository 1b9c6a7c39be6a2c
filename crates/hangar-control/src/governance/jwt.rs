//! JSON Web Tokens by hand (RFC 7515's compact form, RFC 7519's claims), just what passports
//! need: hangar signs its sandbox tokens with EdDSA (Ed25519, RFC 8037) and verifies Tower's
//! passports signed with EdDSA or ES256 (P-256, RFC 7518 §3.4) against a JWKS (RFC 7517). No
//! `none`, no HMAC, no algorithm taken from anywhere but the key's own type.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::Signer as _;
use p256::ecdsa::signature::Verifier as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The largest token read (a passport is a few hundred bytes).
const MAX_TOKEN: usize = 16 * 1024;

pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

fn unb64(what: &str, s: &str) -> Result<Vec<u8>, String> {
    B64.decode(s)
        .map_err(|_| format!("its {what} is not base64url"))
}

/// An Ed25519 signing key with its key id (the RFC 7638 thumbprint of its public JWK).
#[derive(Clone)]
pub struct EdKey {
    key: ed25519_dalek::SigningKey,
    kid: String,
}

impl std::fmt::Debug for EdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdKey").field("kid", &self.kid).finish()
    }
}

impl EdKey {
    /// The key from its 32-byte seed (RFC 8032's private key, JWK `d`).
    pub fn from_seed(seed: &[u8; 32]) -> EdKey {
        let key = ed25519_dalek::SigningKey::from_bytes(seed);
        let x = b64(key.verifying_key().as_bytes());
        EdKey {
            kid: okp_thumbprint(&x),
            key,
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public JWK (with `kid`, `alg` and `use`).
    pub fn public_jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "x": b64(self.key.verifying_key().as_bytes()),
               "kid": self.kid, "alg": "EdDSA", "use": "sig"})
    }

    /// `header.payload.signature` over these exact bytes.
    pub fn sign_compact(&self, header: &[u8], payload: &[u8]) -> String {
        let input = format!("{}.{}", b64(header), b64(payload));
        let sig = self.key.sign(input.as_bytes());
        format!("{input}.{}", b64(&sig.to_bytes()))
    }

    /// A JWT of these claims, its header `{"alg":"EdDSA","typ":"JWT","kid":...}`.
    pub fn sign_jwt(&self, claims: &Value) -> String {
        let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": self.kid});
        self.sign_compact(header.to_string().as_bytes(), claims.to_string().as_bytes())
    }
}

/// RFC 7638's thumbprint of an Ed25519 public key (`x` in base64url): SHA-256 of the JWK's
/// required members in lexical order, no spaces.
pub fn okp_thumbprint(x: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    b64(&Sha256::digest(canonical.as_bytes()))
}

/// A verified token: its header and payload.
#[derive(Clone, Debug)]
pub struct Verified {
    pub header: Value,
    pub payload: Vec<u8>,
}

impl Verified {
    /// The payload as a JSON object (a JWT's claims).
    pub fn claims(&self) -> Result<Value, String> {
        match serde_json::from_slice(&self.payload) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err("its claims are not a JSON object".into()),
        }
    }
}

/// Checks `token`'s signature against the keys of `jwks` (`{"keys": [...]}`): the key named by
/// the header's `kid` if it has one, else every key of the header's algorithm. The reason says
/// what is wrong, for a person.
pub fn verify(token: &str, jwks: &Value) -> Result<Verified, String> {
    if token.len() > MAX_TOKEN {
        return Err(format!("it is longer than {MAX_TOKEN} bytes"));
    }
    let mut parts = token.trim().split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("it is not a compact JWS (three base64url parts)".into());
    };
    let header: Value = serde_json::from_slice(&unb64("header", h)?)
        .map_err(|_| "its header is not JSON".to_owned())?;
    let payload = unb64("payload", p)?;
    let sig = unb64("signature", s)?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or("its header names no algorithm")?;
    if alg != "EdDSA" && alg != "ES256" {
        return Err(format!(
            "it is signed with {alg:?}; only EdDSA and ES256 are accepted"
        ));
    }
    let kid = header.get("kid").and_then(Value::as_str);
    let keys: Vec<&Value> = jwks
        .get("keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().collect())
        .unwrap_or_default();
    let candidates: Vec<&Value> = keys
        .into_iter()
        .filter(|k| kid.is_none_or(|kid| k.get("kid").and_then(Value::as_str) == Some(kid)))
        .filter(|k| key_alg(k) == Some(alg))
        .collect();
    if candidates.is_empty() {
        return Err(match kid {
            Some(kid) => format!("no {alg} key with kid {kid:?} is in the key set"),
            None => format!("no {alg} key is in the key set"),
        });
    }
    let input = format!("{h}.{p}");
    for k in candidates {
        if check_signature(alg, k, input.as_bytes(), &sig).is_ok() {
            return Ok(Verified { header, payload });
        }
    }
    Err("its signature does not verify against the key set".into())
}

/// The JWS algorithm a JWK's type implies (its own `alg`, when present, must agree).
fn key_alg(k: &Value) -> Option<&'static str> {
    let implied = match (
        k.get("kty").and_then(Value::as_str),
        k.get("crv").and_then(Value::as_str),
    ) {
        (Some("OKP"), Some("Ed25519")) => "EdDSA",
        (Some("EC"), Some("P-256")) => "ES256",
        _ => return None,
    };
    match k.get("alg").and_then(Value::as_str) {
        Some(a) if a != implied => None,
        _ => Some(implied),
    }
}

fn coord(k: &Value, name: &str, len: usize) -> Result<Vec<u8>, ()> {
    let v = k.get(name).and_then(Value::as_str).ok_or(())?;
    let b = B64.decode(v).map_err(|_| ())?;
    if b.len() == len { Ok(b) } else { Err(()) }
}

fn check_signature(alg: &str, k: &Value, input: &[u8], sig: &[u8]) -> Result<(), ()> {
    match alg {
        "EdDSA" => {
            let x: [u8; 32] = coord(k, "x", 32)?.try_into().map_err(|_| ())?;
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&x).map_err(|_| ())?;
            let sig: [u8; 64] = sig.try_into().map_err(|_| ())?;
            vk.verify_strict(input, &ed25519_dalek::Signature::from_bytes(&sig))
                .map_err(|_| ())
        }
        "ES256" => {
            let x = coord(k, "x", 32)?;
            let y = coord(k, "y", 32)?;
            let point = p256::EncodedPoint::from_affine_coordinates(
                x.as_slice().into(),
                y.as_slice().into(),
                false,
            );
            let vk = p256::ecdsa::VerifyingKey::from_encoded_point(&point).map_err(|_| ())?;
            let sig = p256::ecdsa::Signature::from_slice(sig).map_err(|_| ())?;
            vk.verify(input, &sig).map_err(|_| ())
        }
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    // RFC 8037 A.1: the Ed25519 key; A.3: its thumbprint; A.4: a signature over a text payload.
    const D: &str = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A";
    const X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    const ED_JWS: &str = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";
    // RFC 7515 A.3: an ES256 JWS and the public key.
    const ES_JWS: &str = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q";

    fn rfc_key() -> EdKey {
        EdKey::from_seed(&B64.decode(D).unwrap().try_into().unwrap())
    }

    fn es_jwks() -> Value {
        json!({"keys": [{"kty": "EC", "crv": "P-256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]})
    }

    #[test]
    fn ed25519_matches_rfc_8037() {
        let k = rfc_key();
        assert_eq!(k.public_jwk()["x"], X);
        assert_eq!(k.kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
        assert_eq!(
            k.sign_compact(br#"{"alg":"EdDSA"}"#, b"Example of Ed25519 signing"),
            ED_JWS
        );
        let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": X}]});
        let v = verify(ED_JWS, &jwks).unwrap();
        assert_eq!(v.payload, b"Example of Ed25519 signing");
        // One bit of the signature changed.
        let bad = ED_JWS.replace("MuM0KAg", "MuM0KAw");
        assert!(verify(&bad, &jwks).unwrap_err().contains("does not verify"));
    }

    #[test]
    fn es256_matches_rfc_7515() {
        let v = verify(ES_JWS, &es_jwks()).unwrap();
        assert_eq!(v.claims().unwrap()["iss"], "joe");
        let bad = ES_JWS.replace("NU1Q", "NU1A");
        assert!(verify(&bad, &es_jwks()).is_err());
        // An EdDSA key set does not verify an ES256 token, nor the other way round.
        let ed = json!({"keys": [rfc_key().public_jwk()]});
        assert!(verify(ES_JWS, &ed).unwrap_err().contains("no ES256 key"));
        assert!(
            verify(ED_JWS, &es_jwks())
                .unwrap_err()
                .contains("no EdDSA key")
        );
    }

    #[test]
    fn jwts_round_trip_and_the_kid_picks_the_key() {
        let k = rfc_key();
        let other = EdKey::from_seed(&[7; 32]);
        let t = k.sign_jwt(&json!({"sub": "hangar:env:local", "exp": 1}));
        let both = json!({"keys": [other.public_jwk(), k.public_jwk()]});
        let v = verify(&t, &both).unwrap();
        assert_eq!(v.header["kid"], k.kid());
        assert_eq!(v.claims().unwrap()["sub"], "hangar:env:local");
        let only_other = json!({"keys": [other.public_jwk()]});
        assert!(verify(&t, &only_other).unwrap_err().contains("kid"));
        // Signed by another key under this key's kid: the signature fails.
        let mut forged = other.clone();
        forged.kid = k.kid.clone();
        let f = forged.sign_jwt(&json!({"sub": "x"}));
        assert!(verify(&f, &both).unwrap_err().contains("does not verify"));
    }

    #[test]
    fn malformed_tokens_and_algorithms_are_refused() {
        let jwks = json!({"keys": [rfc_key().public_jwk()]});
        for (t, want) in [
            ("a.b", "three"),
            ("a.b.c.d", "three"),
            ("!!.e30.AA", "base64url"),
            ("e30.e30.AA", "no algorithm"),
            // {"alg":"none"} and {"alg":"HS256"}
            ("eyJhbGciOiJub25lIn0.e30.", "only EdDSA and ES256"),
            ("eyJhbGciOiJIUzI1NiJ9.e30.AA", "only EdDSA and ES256"),
        ] {
            let e = verify(t, &jwks).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
        // A key whose own alg disagrees with its type is never used.
        let lying = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": X, "alg": "ES256"}]});
        assert!(verify(ED_JWS, &lying).is_err());
    }
}
