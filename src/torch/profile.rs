//! A device profile: the roofs `peaks --engine torch --json FILE` wrote, kept and shared, so that
//! `estimate --engine torch --profile FILE` predicts a step's time on a device this machine does
//! not have (or at another thread count); and the profiles shipped with memscope (`profiles/`),
//! by name. A profile for another device kind, or without products of the estimate's dtype, is
//! refused; one from another PyTorch version or thread count predicts, labelled so.

use super::peaks::TorchPeaks;
use anyhow::{bail, Context};

/// The profiles shipped with memscope, by name: each a `peaks --engine torch --json` file
/// measured on the machine its name says.
const SHIPPED: &[(&str, &str)] = &[
    (
        "epyc-zen5-2t",
        include_str!("../../profiles/epyc-zen5-2t.json"),
    ),
    ("xeon-2t", include_str!("../../profiles/xeon-2t.json")),
];

/// A profile, and where it came from (the shipped name or the file).
#[derive(Clone, Debug)]
pub struct Profile {
    pub peaks: TorchPeaks,
    pub source: String,
}

/// `--profile NAME|FILE`: a shipped profile by name, else a file `peaks --engine torch --json`
/// wrote. Errors name the file and the field.
pub fn load(arg: &str) -> anyhow::Result<Profile> {
    if let Some((name, text)) = SHIPPED.iter().find(|(n, _)| *n == arg) {
        let peaks = parse(text, &format!("the shipped profile {name}"))?;
        return Ok(Profile {
            peaks,
            source: format!("the shipped profile {name}"),
        });
    }
    let path = std::path::Path::new(arg);
    if !path.exists() {
        bail!(
            "--profile {arg}: no such file and no shipped profile of that name; give a file `memscope peaks --engine torch --json FILE` wrote, or one of: {}",
            shipped_list()
        );
    }
    let text = crate::capped::read_capped_string(path, 16 << 20, "--profile")
        .with_context(|| format!("--profile {arg}"))?;
    Ok(Profile {
        peaks: parse(&text, &format!("--profile {arg}"))?,
        source: format!("the profile {arg}"),
    })
}

/// The shipped profiles, each with what it was measured on.
pub fn shipped_list() -> String {
    SHIPPED
        .iter()
        .map(
            |(name, text)| match serde_json::from_str::<TorchPeaks>(text) {
                Ok(p) => format!(
                    "{name} ({} {}, {} threads, PyTorch {})",
                    p.device, p.device_name, p.threads, p.torch
                ),
                Err(_) => (*name).to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// A profile's text: every field of a peaks file, each rate plausible.
fn parse(text: &str, origin: &str) -> anyhow::Result<TorchPeaks> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let p: TorchPeaks = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        anyhow::anyhow!(
            "{origin}: not a profile `peaks --engine torch --json` wrote: field `{field}`: {}",
            e.inner()
        )
    })?;
    if let Some(field) = p.implausible_field() {
        bail!("{origin}: field `{field}` is not a plausible rate (each lies between 1e-6 and 1e12, its median finite and not negative); measure the device again with `memscope peaks --engine torch --json FILE`");
    }
    if p.device != "cpu" && !p.device.starts_with("cuda") {
        bail!(
            "{origin}: field `device` is \"{}\"; a profile is of cpu or cuda:N",
            p.device
        );
    }
    Ok(p)
}

impl Profile {
    /// Refuses a profile that cannot time this estimate: another device kind than `device`'s
    /// (`cpu`, `cuda:N`), or no products of `dtype` (f32, bf16, f16).
    pub fn check_for(&self, device: &str, dtype: &str) -> anyhow::Result<()> {
        let kind = |d: &str| if d.starts_with("cuda") { "cuda" } else { "cpu" };
        let p = &self.peaks;
        if kind(&p.device) != kind(device) {
            bail!(
                "--profile: {} was measured on {} ({}), this estimate is for --device {device}; give a profile of a {} device, or --device {}",
                self.source,
                p.device,
                p.device_name,
                kind(device),
                kind(&p.device)
            );
        }
        if !p.matmul.iter().any(|r| r.name == dtype) {
            let mut have: Vec<&str> = p.matmul.iter().map(|r| r.name.as_str()).collect();
            have.dedup();
            bail!(
                "--profile: {} holds no {dtype} products (field `matmul` has {}); estimate --dtype {} with it, or measure {dtype} on that device",
                self.source,
                have.join(", "),
                have.first().copied().unwrap_or("f32")
            );
        }
        Ok(())
    }

    /// What differs from this estimate but still predicts, each stated: PyTorch's version
    /// (`torch`, the trace's), and on the CPU the thread count.
    pub fn differences(&self, torch: &str, threads: usize) -> Vec<String> {
        let p = &self.peaks;
        let mut out = Vec::new();
        if !torch.is_empty() && p.torch != torch {
            out.push(format!(
                "measured with PyTorch {}, traced here with {torch}: kernels and their rates may differ between versions",
                p.torch
            ));
        }
        if p.device == "cpu" && p.threads != threads {
            out.push(format!(
                "measured at {} threads, this estimate is for --threads {threads}",
                p.threads
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_reads() {
        for (name, _) in SHIPPED {
            let p = load(name).unwrap();
            assert!(!p.peaks.matmul.is_empty(), "{name}");
        }
    }

    #[test]
    fn a_profile_edited_to_nonsense_names_the_field() {
        let text = SHIPPED[0]
            .1
            .replace("\"triad_gbs\": {", "\"triad_gbs\": {\"x\": 1, ");
        // An unknown key is ignored; a rate of the wrong type is not.
        assert!(parse(&text, "f").is_ok());
        let v: serde_json::Value = serde_json::from_str(SHIPPED[0].1).unwrap();
        let mut bad = v.clone();
        bad["triad_gbs"]["best"] = serde_json::json!("fast");
        let e = parse(&bad.to_string(), "f").unwrap_err().to_string();
        assert!(e.contains("`triad_gbs.best`"), "{e}");
        let mut zero = v;
        zero["copy_gbs"]["best"] = serde_json::json!(0.0);
        let e = parse(&zero.to_string(), "f").unwrap_err().to_string();
        assert!(e.contains("`copy_gbs`"), "{e}");
        let cut = &SHIPPED[0].1[..SHIPPED[0].1.len() / 2];
        assert!(parse(cut, "f").is_err());
    }

    #[test]
    fn another_device_kind_or_dtype_is_refused_and_a_version_labelled() {
        let p = load(SHIPPED[0].0).unwrap();
        assert!(p.check_for("cpu", "f32").is_ok());
        let e = p.check_for("cuda:0", "f32").unwrap_err().to_string();
        assert!(e.contains("--device cpu"), "{e}");
        let e = p.check_for("cpu", "f16").unwrap_err().to_string();
        assert!(e.contains("no f16 products"), "{e}");
        let said = p.differences("0.0.1", p.peaks.threads + 1);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(p
            .differences(&p.peaks.torch.clone(), p.peaks.threads)
            .is_empty());
    }
}
