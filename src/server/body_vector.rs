//! A vector in a request body (`vector`, `vectors` of a search; `vectors`
//! of an upsert): a JSON array of numbers, or a string holding the vector's
//! little-endian 4-byte floats in base64 (standard alphabet, padded), as a
//! client packs it straight from its array (Python:
//! `base64.b64encode(q.astype("<f4").tobytes())`). A packed vector is read
//! without parsing a number a value: for a batch of 1,000 queries of 384
//! dimensions that parsing took about 10 ms of the tokio worker
//! (docs/benchmarks.md, "Packed query vectors"). Either form gives the same
//! `f32` values; their checks (length, finite) are the route's and the
//! index's.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// One vector of a request body, as `f32`: a number beyond the `f32` range
/// becomes an infinity (which the index refuses), as `x as f32` would.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyVector(pub Vec<f32>);

impl<'de> Deserialize<'de> for BodyVector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BodyVectorVisitor)
    }
}

/// `values` packed as a client sends them: base64 (standard alphabet,
/// padded) of their little-endian 4-byte floats. What [`BodyVector`] reads
/// back as the same values.
pub fn pack(values: &[f32]) -> String {
    let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    STANDARD.encode(bytes)
}

struct BodyVectorVisitor;

impl<'de> Visitor<'de> for BodyVectorVisitor {
    type Value = BodyVector;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of numbers, or a base64 string of little-endian 4-byte floats")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BodyVector, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        // Read as f64 and narrowed: a number past the f32 range is valid
        // JSON, and the index names it (`non_finite_value`), where an f32
        // read would call it malformed.
        while let Some(x) = seq.next_element::<f64>()? {
            values.push(x as f32);
        }
        Ok(BodyVector(values))
    }

    fn visit_str<E: de::Error>(self, packed: &str) -> Result<BodyVector, E> {
        let bytes = STANDARD
            .decode(packed)
            .map_err(|e| E::custom(format_args!("a packed vector is not base64: {e}")))?;
        let (floats, rest) = bytes.as_chunks::<4>();
        if !rest.is_empty() {
            return Err(E::custom(format_args!(
                "a packed vector of {} bytes is not a whole number of 4-byte floats",
                bytes.len()
            )));
        }
        Ok(BodyVector(
            floats.iter().map(|b| f32::from_le_bytes(*b)).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<BodyVector, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    fn packed(values: &[f32]) -> String {
        format!("\"{}\"", pack(values))
    }

    #[test]
    fn numbers_and_packed_floats_give_the_same_vector() {
        let values = [0.1f32, -2.5, 3e-8, 0.0, 1.0e30, 7.0];
        let numbers = serde_json::to_string(&values).unwrap();
        assert_eq!(parse(&numbers).unwrap().0, values);
        assert_eq!(parse(&packed(&values)).unwrap().0, values);
        // Integers and numbers past the f32 range read as `x as f32` does.
        assert_eq!(
            parse("[1, -2, 1e39]").unwrap().0,
            [1.0, -2.0, f32::INFINITY]
        );
        // Any bit pattern is carried, a NaN included: the index refuses it.
        assert!(parse(&packed(&[f32::NAN])).unwrap().0[0].is_nan());
    }

    #[test]
    fn a_malformed_packed_vector_is_named() {
        let not_base64 = parse("\"1,2,3,4\"").unwrap_err();
        assert!(not_base64.contains("not base64"), "{not_base64}");
        // Five bytes: one float and one byte over.
        let ragged = parse(&format!("\"{}\"", STANDARD.encode([0u8; 5]))).unwrap_err();
        assert!(ragged.contains("5 bytes"), "{ragged}");
        let wrong_type = parse("{\"x\": 1}").unwrap_err();
        assert!(wrong_type.contains("base64 string"), "{wrong_type}");
    }
}
