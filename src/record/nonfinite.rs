//! Losses that are not finite numbers (a diverged run: `--lr 1e30`, a NaN in the user's loop)
//! have one encoding in every file memscope writes: JSON has no NaN or infinity, so they are the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"` (what JavaScript and Python's `float()` read
//! back). A Record holding them is still a Record; its warnings count them ([`warning`]).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};

/// The string a non-finite value is written as.
pub fn name(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

fn parse(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" => Some(f64::NAN),
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// The warning a Record carries when `losses` holds non-finite values; none when all are finite.
pub fn warning(losses: &[f64]) -> Option<String> {
    let bad: Vec<usize> = (0..losses.len())
        .filter(|&i| !losses[i].is_finite())
        .collect();
    let first = *bad.first()?;
    Some(format!(
        "{} of {} losses are not finite numbers (the first, entry {first}, is {}): the run \
         diverged or its loss overflowed; they are written as the strings \"NaN\" / \
         \"Infinity\" / \"-Infinity\"",
        bad.len(),
        losses.len(),
        name(losses[first])
    ))
}

/// One loss as a Record writes it, for the contract's schema (`contract.rs`): a number, or the
/// name of a value that is not finite (`null` is read too, as NaN, from older files).
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used
pub enum LossValue {
    Finite(f64),
    NotFinite(NotFiniteName),
    Older(()),
}

/// The names `vec` writes for values that are not finite.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // only its schema is used
pub enum NotFiniteName {
    NaN,
    Infinity,
    #[serde(rename = "-Infinity")]
    NegativeInfinity,
}

/// `#[serde(with = "nonfinite::vec")]` on a `Vec<f64>`: finite values as numbers, the others as
/// strings; reads numbers, those strings, and `null` (an older file's NaN) as NaN.
pub mod vec {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for &x in v {
            if x.is_finite() {
                seq.serialize_element(&x)?;
            } else {
                seq.serialize_element(name(x))?;
            }
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        d.deserialize_seq(Losses)
    }

    struct Losses;

    impl<'de> Visitor<'de> for Losses {
        type Value = Vec<f64>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(
                "an array of numbers (\"NaN\", \"Infinity\" or \"-Infinity\" where not finite)",
            )
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f64>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(v) = seq.next_element::<Loss>()? {
                out.push(v.0);
            }
            Ok(out)
        }
    }

    struct Loss(f64);

    impl<'de> serde::Deserialize<'de> for Loss {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Loss, D::Error> {
            d.deserialize_any(OneLoss)
        }
    }

    struct OneLoss;

    impl<'de> Visitor<'de> for OneLoss {
        type Value = Loss;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number, or \"NaN\", \"Infinity\" or \"-Infinity\"")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Loss, E> {
            Ok(Loss(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Loss, E> {
            Ok(Loss(v as f64))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Loss, E> {
            Ok(Loss(v as f64))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Loss, E> {
            Ok(Loss(f64::NAN))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Loss, E> {
            parse(v).map(Loss).ok_or_else(|| {
                E::custom(format!(
                    "loss \"{v}\": expected a number, or \"NaN\", \"Infinity\" or \"-Infinity\""
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct L {
        #[serde(with = "super::vec")]
        loss: Vec<f64>,
    }

    #[test]
    fn non_finite_losses_round_trip_as_strings() {
        let l = L {
            loss: vec![1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 2.0],
        };
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(text, r#"{"loss":[1.5,"NaN","Infinity","-Infinity",2.0]}"#);
        let back: L = serde_json::from_str(&text).unwrap();
        assert_eq!(back.loss[0], 1.5);
        assert!(back.loss[1].is_nan());
        assert_eq!(back.loss[2], f64::INFINITY);
        assert_eq!(back.loss[3], f64::NEG_INFINITY);
        let old: L = serde_json::from_str(r#"{"loss":[null, 3]}"#).unwrap();
        assert!(old.loss[0].is_nan() && old.loss[1] == 3.0);
        let bad = serde_json::from_str::<L>(r#"{"loss":["big"]}"#)
            .err()
            .unwrap();
        assert!(bad.to_string().contains("\"big\""), "{bad}");
    }

    #[test]
    fn the_warning_counts_and_names_the_first() {
        assert_eq!(super::warning(&[1.0, 2.0]), None);
        let w = super::warning(&[1.0, f64::INFINITY, f64::NAN]).unwrap();
        assert!(
            w.starts_with("2 of 3 losses") && w.contains("entry 1, is Infinity"),
            "{w}"
        );
    }
}
